"""pycutlass_rt::scaled_grouped_mm (the fp8 MoE layer's GEMM) without a GPU: its schema,
the fake implementation's shapes and dtypes (symbolic sizes included), the CPU
implementation against an independent float64 reference in every scale layout (DeepSeek-V3's
block-scale grids included) with a bias and each activation, the argument errors (the same from the fake, meta and CPU kernels),
the refused backward, and the CUDA implementation's call of pycutlass_rt.moe_gemm on an
emulated library. tests/gpu/test_torch_moe_gpu.py runs the CUDA kernels.
Skipped where torch is not installed (CI).
"""

import pytest
from helpers import torch_activations

torch = pytest.importorskip("torch")
pt = pytest.importorskip("pycutlass_rt.torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.library import opcheck  # noqa: E402

ops = torch.ops.pycutlass_rt
BF16, F32, F64, I32 = torch.bfloat16, torch.float32, torch.float64, torch.int32
E4M3 = torch.float8_e4m3fn
TORCH_ACT = torch_activations()
ACTS = tuple(TORCH_ACT)
#: opcheck's schema check compares tensors with allclose, which has no float8 kernel
NO_SCHEMA = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def test_schema_and_export():
    assert str(ops.scaled_grouped_mm.default._schema) == (
        "pycutlass_rt::scaled_grouped_mm(Tensor x, Tensor w, Tensor scale_x, Tensor scale_w, "
        "Tensor offs, Tensor? bias=None, ScalarType? out_dtype=None, str? activation=None) "
        "-> Tensor"
    )
    assert "scaled_grouped_mm" in pt.__all__
    assert pt.scaled_grouped_mm.__module__ == "pycutlass_rt.torch._api"


# ---- operands and the float64 reference -----------------------------------------------------


def layer(T, E, K, N, seed=0):
    """x (T, K) e4m3 and w (E, K, N) e4m3, K-major (an (E, N, K) stack transposed)."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(T, K, generator=g) * 4).to(E4M3)
    w = (torch.randn(E, N, K, generator=g) * 4).to(E4M3).transpose(1, 2)
    return x, w


#: scale_x forms: label -> (T) -> tensor
X_SCALES = {
    "tensor ()": lambda g, T: torch.rand((), generator=g) + 0.5,
    "tensor (1,)": lambda g, T: torch.rand(1, generator=g) + 0.5,
    "token (T,)": lambda g, T: torch.rand(T, generator=g) + 0.5,
    "token (T, 1)": lambda g, T: torch.rand(T, 1, generator=g) + 0.5,
}
#: scale_w forms: label -> (E, N) -> tensor
W_SCALES = {
    "tensor (1,)": lambda g, E, N: torch.rand(1, generator=g) / 8 + 1e-2,
    "expert (E,)": lambda g, E, N: torch.rand(E, generator=g) / 8 + 1e-2,
    "expert-channel (E, N)": lambda g, E, N: torch.rand(E, N, generator=g) / 8 + 1e-2,
}


def reference(x, w, sx, sw, offs, bias=None, act=None):
    """float64, written independently of the implementation: each row's expert gathered
    (expert_of_row), its dequantized weights broadcast per row (einsum); no expert: zero."""
    T, E, N = x.shape[0], w.shape[0], w.shape[2]
    ends = torch.as_tensor(offs).long().clamp(0, T)
    rows = torch.arange(T)
    expert = torch.searchsorted(ends, rows, right=True)  # first expert whose end > row
    covered = expert < E
    expert = expert.clamp(max=max(E - 1, 0))
    xd = x.double() * (sx.double().reshape(-1, 1) if sx.numel() > 1 else sx.double())
    swd = sw.double()
    if swd.numel() == 1:
        wd = w.double() * swd.reshape(())
    elif swd.dim() == 1:  # per expert
        wd = w.double() * swd[:, None, None]
    else:  # per expert and channel
        wd = w.double() * swd[:, None, :]
    y = torch.einsum("tk,tkn->tn", xd, wd[expert]) if E else torch.zeros(T, N, dtype=F64)
    if bias is not None:
        b = bias.double()
        y = y + (b if b.dim() == 1 else b[expert])
    y = TORCH_ACT[act](y)
    return torch.where(covered[:, None], y, torch.zeros((), dtype=F64))


def routing(T, E, seed, tail=0):
    """E end offsets over the first T - tail rows: sorted cuts, some experts empty."""
    g = torch.Generator().manual_seed(seed)
    cuts = torch.sort(torch.randint(0, T - tail + 1, (E - 1,), generator=g)).values
    cuts[: E // 3] = cuts[0]  # a run of empty experts
    return torch.cat([cuts, torch.tensor([T - tail])]).to(I32)


def cdiv(a, b):
    return -(-a // b)


def block_scales(T, E, K, N, seed, x_layout="m-major"):
    """DeepSeek-V3's block scales, spread over powers of two (a block given another's
    scale is off by 2x or more): x's grid (T, ceil(K/128)), M-major as pcr.quantize writes
    it (or row-major), and w's (E, ceil(K/128), ceil(N/128)) as a checkpoint's contiguous
    weight_scale_inv (E, ceil(N/128), ceil(K/128)) transposed."""
    g = torch.Generator().manual_seed(seed)
    kb, nb = cdiv(K, 128), cdiv(N, 128)
    pow2 = lambda *s: 2.0 ** torch.randint(-3, 3, s, generator=g).float()  # noqa: E731
    sx = pow2(kb, T).t() if x_layout == "m-major" else pow2(T, kb)
    sw = (pow2(E, nb, kb) / 16).transpose(1, 2)
    return sx, sw


def block_reference(x, w, sx, sw, offs, bias=None, act=None):
    """float64, block by block, written independently of the implementation: for each
    128-of-K slice i and 128-of-N slice j (the last ones partial), each row's
    (x[:, i] * sx[:, i]) @ w[expert][i, j] times sw[expert, i, j]; no expert: zero."""
    T, K = x.shape
    E, N = w.shape[0], w.shape[2]
    ends = torch.as_tensor(offs).long().clamp(0, T)
    expert = torch.searchsorted(ends, torch.arange(T), right=True)
    covered = expert < E
    expert = expert.clamp(max=max(E - 1, 0))
    y = torch.zeros(T, N, dtype=F64)
    for i in range(cdiv(K, 128)):
        ks = slice(128 * i, min(128 * (i + 1), K))
        xs = x[:, ks].double() * sx[:, i].double()[:, None]
        for j in range(cdiv(N, 128)):
            ns = slice(128 * j, min(128 * (j + 1), N))
            part = torch.einsum("tk,tkn->tn", xs, w[expert][:, ks, ns].double())
            y[:, ns] += part * sw[expert, i, j].double()[:, None]
    if bias is not None:
        b = bias.double()
        y = y + (b if b.dim() == 1 else b[expert])
    y = TORCH_ACT[act](y)
    return torch.where(covered[:, None], y, torch.zeros((), dtype=F64))


# ---- the CPU implementation against the reference -------------------------------------------


def bias_of(kind, g, E, N):
    """No bias, one shared by the experts (N,), or one per expert (E, N), in bfloat16."""
    shape = {None: None, "shared": (N,), "expert": (E, N)}[kind]
    return None if shape is None else torch.randn(shape, generator=g).to(BF16)


@pytest.mark.parametrize("xs", list(X_SCALES))
@pytest.mark.parametrize("ws", list(W_SCALES))
@pytest.mark.parametrize("bias", [None, "shared", "expert"])
def test_cpu_scale_layouts_and_bias(xs, ws, bias):
    T, E, K, N = 37, 5, 48, 24
    g = torch.Generator().manual_seed(7)
    x, w = layer(T, E, K, N, seed=1)
    sx, sw = X_SCALES[xs](g, T), W_SCALES[ws](g, E, N)
    offs = routing(T, E, seed=2, tail=4)  # rows 33.. no expert's
    b = bias_of(bias, g, E, N)
    y = pt.scaled_grouped_mm(x, w, sx, sw, offs, b)
    assert y.shape == (T, N) and y.dtype == BF16
    want = reference(x, w, sx, sw, offs, b)
    torch.testing.assert_close(y, want.to(BF16), rtol=1.6e-2, atol=1e-2)
    assert (y[T - 4 :] == 0).all(), "rows no expert covers are zeros (bias not added)"


@pytest.mark.parametrize("act", ACTS)
def test_cpu_activations(act):
    T, E, K, N = 40, 4, 32, 16
    g = torch.Generator().manual_seed(3)
    x, w = layer(T, E, K, N, seed=3)
    sx, sw = torch.rand(T, generator=g) + 0.5, torch.rand(E, N, generator=g) / 16 + 1e-2
    b = torch.randn(E, N, generator=g).to(BF16)
    offs = routing(T, E, seed=3, tail=3)
    y = pt.scaled_grouped_mm(x, w, sx, sw, offs, b, BF16, act)
    want = reference(x, w, sx, sw, offs, b, act)
    torch.testing.assert_close(y, want.to(BF16), rtol=1.6e-2, atol=1e-2)
    assert (y[T - 3 :] == 0).all()
    # "none" is no activation, as pcr.gemm's
    if act is None:
        torch.testing.assert_close(pt.scaled_grouped_mm(x, w, sx, sw, offs, b, None, "none"), y)


def test_cpu_int64_offsets_overlong_ends_and_no_rows():
    T, E, K, N = 12, 3, 16, 8
    x, w = layer(T, E, K, N, seed=4)
    sx, sw = torch.rand(T) + 0.5, torch.rand(E) / 8
    offs = torch.tensor([5, 5, 99])  # int64; the last end past T: clipped to T
    y = ops.scaled_grouped_mm(x, w, sx, sw, offs)
    want = reference(x, w, sx, sw, offs)
    torch.testing.assert_close(y, want.to(BF16), rtol=1.6e-2, atol=1e-2)
    assert not (y[5:] == 0).all(), "expert 2's rows are written"
    empty = ops.scaled_grouped_mm(x[:0], w, sx[:0], sw, torch.zeros(E, dtype=I32))
    assert empty.shape == (0, N) and empty.dtype == BF16


@pytest.mark.parametrize(
    "T, E, K, N",
    [
        (37, 5, 320, 200),  # partial last blocks of K and N
        (20, 3, 256, 384),  # whole blocks
        (9, 4, 130, 129),  # last blocks of 2 and 1 elements
        (1, 2, 384, 130),  # one token
    ],
)
@pytest.mark.parametrize("x_layout", ["m-major", "row-major"])
@pytest.mark.parametrize("bias", [None, "shared", "expert"])
def test_cpu_block_scales(T, E, K, N, x_layout, bias):
    x, w = layer(T, E, K, N, seed=T)
    sx, sw = block_scales(T, E, K, N, seed=K, x_layout=x_layout)
    tail = T // 5
    offs = routing(T, E, seed=N, tail=tail)
    g = torch.Generator().manual_seed(11)
    b = bias_of(bias, g, E, N)
    y = pt.scaled_grouped_mm(x, w, sx, sw, offs, b)
    assert y.shape == (T, N) and y.dtype == BF16
    want = block_reference(x, w, sx, sw, offs, b)
    torch.testing.assert_close(y, want.to(BF16), rtol=1.6e-2, atol=1e-2)
    assert (y[T - tail :] == 0).all(), "rows no expert covers are zeros (bias not added)"
    # the grids matter: one scale per token and per expert (each grid's mean) differs
    flat = reference(x, w, sx.mean(1), sw.mean((1, 2)), offs, b)
    assert not torch.allclose(y.double(), flat, rtol=0.1, atol=1.0)


@pytest.mark.parametrize("act", ACTS)
def test_cpu_block_scales_activations(act):
    T, E, K, N = 40, 4, 320, 200
    x, w = layer(T, E, K, N, seed=8)
    sx, sw = block_scales(T, E, K, N, seed=8)
    b = torch.randn(E, N, generator=torch.Generator().manual_seed(8)).to(BF16)
    offs = routing(T, E, seed=8, tail=3)
    y = ops.scaled_grouped_mm(x, w, sx, sw, offs, b, BF16, act)
    want = block_reference(x, w, sx, sw, offs, b, act)
    torch.testing.assert_close(y, want.to(BF16), rtol=1.6e-2, atol=1e-2)
    assert (y[T - 3 :] == 0).all()


def test_cpu_block_scales_one_k_block():
    """K <= 128: a (T, 1) scale_x beside a 3-D scale_w is x's grid (scale_w decides), the
    same scales as per token; w's grid (E, 1, ceil(N/128)) is then a per-channel scale
    repeated over each 128 of N."""
    T, E, K, N = 30, 3, 100, 300
    x, w = layer(T, E, K, N, seed=9)
    sx, sw = block_scales(T, E, K, N, seed=9)
    assert sx.shape == (T, 1) and sw.shape == (E, 1, 3)
    offs = routing(T, E, seed=9, tail=2)
    y = pt.scaled_grouped_mm(x, w, sx, sw, offs)
    torch.testing.assert_close(
        y, block_reference(x, w, sx, sw, offs).to(BF16), rtol=1.6e-2, atol=1e-2
    )
    per_channel = sw[:, 0].repeat_interleave(128, 1)[:, :N]  # (E, N)
    torch.testing.assert_close(y, pt.scaled_grouped_mm(x, w, sx, per_channel, offs))
    # a (1, 1, 1) scale_w stays one value (per tensor) beside any scale_x, a (T, 1) one
    # included: here not a grid's shape (1, 1, 3)
    one = torch.full((1, 1, 1), 0.05)
    x1, w1 = layer(T, 1, K, N, seed=10)
    offs1 = torch.tensor([T - 2], dtype=I32)
    for scale_x in (sx, sx[:, 0], sx[0, 0]):
        got = pt.scaled_grouped_mm(x1, w1, scale_x, one, offs1)
        want = reference(x1, w1, scale_x, one.reshape(1), offs1)
        torch.testing.assert_close(got, want.to(BF16), rtol=1.6e-2, atol=1e-2)


def test_opcheck():
    T, E, K, N = 20, 3, 32, 16
    x, w = layer(T, E, K, N, seed=5)
    sx, sw = torch.rand(T, 1), torch.rand(E, N) / 8
    b = torch.randn(N).to(BF16)
    offs = torch.tensor([6, 6, 17], dtype=I32)
    args = (x, w, sx, sw, offs, b, BF16, "gelu")
    opcheck(ops.scaled_grouped_mm.default, args, test_utils=NO_SCHEMA)
    opcheck(ops.scaled_grouped_mm.default, (x, w, sx, sw, offs), test_utils=NO_SCHEMA)
    x, w = layer(T, E, 320, 200, seed=5)
    gx, gw = block_scales(T, E, 320, 200, seed=5)
    opcheck(
        ops.scaled_grouped_mm.default,
        (x, w, gx, gw, offs, None, None, "silu"),
        test_utils=NO_SCHEMA,
    )


def test_no_backward():
    T, E, K, N = 8, 2, 16, 8
    x, w = layer(T, E, K, N)
    sw = (torch.rand(E, N) / 8).requires_grad_()
    y = pt.scaled_grouped_mm(x, w, torch.rand(T), sw, torch.tensor([3, 8], dtype=I32))
    with pytest.raises(NotImplementedError, match="scaled_grouped_mm has no backward"):
        y.float().sum().backward()


# ---- fake implementation: shapes, dtypes, symbolic sizes ------------------------------------


def fake_cuda(*specs):
    """Fake CUDA tensors (no GPU needed) of (shape, dtype) specs, and the mode they live in."""
    mode = FakeTensorMode()
    with mode:
        return mode, [torch.empty(s, dtype=d, device="cuda") for s, d in specs]


@pytest.mark.parametrize(
    "sx_shape, sw_shape, bias_shape",
    [
        ((), (1,), None),
        ((100,), (4, 32), (32,)),
        ((100, 1), (4,), (4, 32)),
        ((1,), (4, 32), None),
    ],
)
@pytest.mark.parametrize("out_dtype", [None, BF16])
def test_fake_shapes_and_dtype(sx_shape, sw_shape, bias_shape, out_dtype):
    specs = [((100, 64), E4M3), ((4, 64, 32), E4M3), (sx_shape, F32), (sw_shape, F32)]
    specs += [((4,), I32)] + ([(bias_shape, BF16)] if bias_shape else [])
    mode, (x, w, sx, sw, offs, *bias) = fake_cuda(*specs)
    with mode:
        y = ops.scaled_grouped_mm(x, w, sx, sw, offs, *(bias or [None]), out_dtype, "silu")
        z = pt.scaled_grouped_mm(x, w, sx, sw, offs)
    for t in (y, z):
        assert t.shape == (100, 32) and t.dtype == BF16 and t.device.type == "cuda"
        assert t.is_contiguous()


@pytest.mark.parametrize(
    "K, N, sx_shape, sw_shape, sx_strides, sw_strides",
    [
        (320, 200, (100, 3), (4, 3, 2), (1, 100), (6, 1, 3)),  # M-major x grid, packed w grid
        (320, 200, (100, 3), (4, 3, 2), (3, 1), (6, 2, 1)),  # other strides: shapes only
        (100, 300, (100, 1), (4, 1, 3), (1, 100), (3, 1, 1)),  # one K block
        (1024, 128, (100, 8), (4, 8, 1), (1, 100), (8, 1, 8)),  # one N block
    ],
)
@pytest.mark.parametrize("bias", [None, "expert"])
def test_fake_shapes_with_block_scales(K, N, sx_shape, sw_shape, sx_strides, sw_strides, bias):
    mode = FakeTensorMode()
    with mode:
        x = torch.empty(100, K, dtype=E4M3, device="cuda")
        w = torch.empty(4, N, K, dtype=E4M3, device="cuda").transpose(1, 2)
        sx = torch.empty_strided(sx_shape, sx_strides, dtype=F32, device="cuda")
        sw = torch.empty_strided(sw_shape, sw_strides, dtype=F32, device="cuda")
        offs = torch.empty(4, dtype=I32, device="cuda")
        b = None if bias is None else torch.empty(4, N, dtype=BF16, device="cuda")
        y = ops.scaled_grouped_mm(x, w, sx, sw, offs, b, None, "silu")
        z = pt.scaled_grouped_mm(x, w, sx, sw, offs)
    for t in (y, z):
        assert t.shape == (100, N) and t.dtype == BF16 and t.device.type == "cuda"
        assert t.is_contiguous()


def test_meta_tensors():
    m = lambda *s, dtype=E4M3: torch.empty(s, device="meta", dtype=dtype)  # noqa: E731
    y = ops.scaled_grouped_mm(
        m(9, 16), m(3, 16, 8), m(9, dtype=F32), m(3, 8, dtype=F32), m(3, dtype=I32)
    )
    assert y.shape == (9, 8) and y.dtype == BF16 and y.device.type == "meta"
    g = ops.scaled_grouped_mm(
        m(9, 320), m(3, 320, 200), m(9, 3, dtype=F32), m(3, 3, 2, dtype=F32), m(3, dtype=I32)
    )
    assert g.shape == (9, 200) and g.dtype == BF16 and g.device.type == "meta"


def test_dynamic_shapes_trace_once():
    """torch.compile(fullgraph=True, dynamic=True): the fake implementation's checks on
    symbolic T, E and N trace once for every size (no recompile, no graph break)."""

    def scales(i, T, E, K, N):
        return torch.rand(T) + 0.5, torch.rand(E, N) / 8

    shapes = [(13, 3, 32, 8), (29, 4, 32, 24), (50, 6, 32, 16)]
    assert_traces_once(shapes, scales, reference)


def assert_traces_once(shapes, scales, ref):
    """scaled_grouped_mm under torch.compile(fullgraph=True, dynamic=True) over (T, E, K, N)
    ``shapes``, with ``scales(i, T, E, K, N)``: traced once, equal to the eager op and
    within bf16 of ``ref`` (a float64 reference taking the op's arguments)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager")
    fn = pt.scaled_grouped_mm
    f = torch.compile(fn, backend=counter, fullgraph=True, dynamic=True)
    for i, (T, E, K, N) in enumerate(shapes):
        x, w = layer(T, E, K, N, seed=i)
        sx, sw = scales(i, T, E, K, N)
        b = torch.randn(E, N).to(BF16)
        offs = routing(T, E, seed=i, tail=2)
        got = f(x, w, sx, sw, offs, b, None, "relu")
        torch.testing.assert_close(got, fn(x, w, sx, sw, offs, b, None, "relu"))
        torch.testing.assert_close(
            got, ref(x, w, sx, sw, offs, b, "relu").to(BF16), rtol=1.6e-2, atol=1e-2
        )
    assert counter.frame_count == 1, "recompiled for a new size"


def test_dynamic_shapes_trace_once_with_block_scales():
    """The grid checks on symbolic T, E, K and N (ceil(K/128) and ceil(N/128) of symbolic
    sizes) trace once too."""

    def scales(i, T, E, K, N):
        return block_scales(T, E, K, N, seed=i)

    # sizes of 2 or more, none alike in the first call (duck sizing would tie them)
    shapes = [(13, 5, 320, 200), (29, 3, 512, 136), (50, 6, 200, 300)]
    assert_traces_once(shapes, scales, block_reference)


# ---- argument errors: the same from the fake, meta and CPU kernels --------------------------


#: a good call's arguments as (shape, dtype): T=9, E=3, K=16, N=8
GOOD = {
    "x": ((9, 16), E4M3),
    "w": ((3, 16, 8), E4M3),
    "scale_x": ((9,), F32),
    "scale_w": ((3, 8), F32),
    "offs": ((3,), I32),
    "bias": None,
}
#: and one with block-scale grids: T=9, E=3, K=320, N=200 (ceil(K/128) = 3, ceil(N/128) = 2)
GOOD_GRIDS = {
    "x": ((9, 320), E4M3),
    "w": ((3, 320, 200), E4M3),
    "scale_x": ((9, 3), F32),
    "scale_w": ((3, 3, 2), F32),
    "offs": ((3,), I32),
    "bias": None,
}


def args(make, base=GOOD, **change):
    """``base``'s arguments, with ``change`` as (shape, dtype)."""
    spec = dict(base)
    spec.update(change)
    return {k: None if v is None else make(*v[0], dtype=v[1]) for k, v in spec.items()}


BAD = [
    ("x bf16", {"x": ((9, 16), BF16)}, {}, RuntimeError, "both be float8_e4m3fn"),
    ("w e5m2", {"w": ((3, 16, 8), torch.float8_e5m2)}, {}, RuntimeError, "float8_e4m3fn"),
    ("x 3-D", {"x": ((2, 9, 16), E4M3)}, {}, RuntimeError, r"x \(T, K\), w \(E, K, N\)"),
    ("K", {"x": ((9, 15), E4M3)}, {}, RuntimeError, "x has K = 15"),
    ("offs count", {"offs": ((4,), I32)}, {}, RuntimeError, "one end offset per expert"),
    ("offs dtype", {"offs": ((3,), F32)}, {}, RuntimeError, "offs must be int32 or int64"),
    ("scale_x dtype", {"scale_x": ((9,), BF16)}, {}, RuntimeError, "scale_x must be float32"),
    ("scale_w dtype", {"scale_w": ((3, 8), F64)}, {}, RuntimeError, "scale_w must be float32"),
    ("scale_x shape", {"scale_x": ((10,), F32)}, {}, RuntimeError, "scale_x holds one value"),
    ("scale_x (1, T)", {"scale_x": ((1, 9), F32)}, {}, RuntimeError, "scale_x holds one value"),
    ("scale_w (N,)", {"scale_w": ((8,), F32)}, {}, RuntimeError, r"scale_w holds .* E = 3"),
    ("scale_w (E, N+1)", {"scale_w": ((3, 9), F32)}, {}, RuntimeError, "scale_w holds one"),
    ("scale_w (1, N)", {"scale_w": ((1, 8), F32)}, {}, RuntimeError, "scale_w holds one"),
    ("bias shape", {"bias": ((2, 8), BF16)}, {}, RuntimeError, r"bias must be \(N,\)"),
    ("bias dtype", {"bias": ((8,), F32)}, {}, RuntimeError, "bias must be torch.bfloat16"),
    ("out_dtype", {}, {"out_dtype": torch.float16}, RuntimeError, "out_dtype is one of"),
    ("activation", {}, {"activation": "softplus"}, ValueError, "activation must be None"),
]
#: with GOOD_GRIDS: a grid on one side only names both accepted pairs
PAIRS = (
    r"scales come as scale_x one value, \(T,\) or \(T, 1\) with scale_w one value, \(E,\) or "
    r"\(E, N\); or as block-scale grids, scale_x \(T, ceil\(K/128\)\) = \(9, 3\) with "
    r"scale_w \(E, ceil\(K/128\), ceil\(N/128\)\) = \(3, 3, 2\)"
)
W_GRID = r"scale_w as a block-scale grid is .* = \(3, 3, 2\) .*transpose\(1, 2\)\); got shape"
BAD_GRIDS = [
    ("x grid, w (E, N)", {"scale_w": ((3, 200), F32)}, "scale_x holds one value.*" + PAIRS),
    ("x grid, w (E,)", {"scale_w": ((3,), F32)}, "scale_x holds one value.*" + PAIRS),
    (
        "w grid, x (T,)",
        {"scale_x": ((9,), F32)},
        r"scale_w of shape \(3, 3, 2\) is a block-scale grid but scale_x of shape \(9,\) is not; "
        + PAIRS,
    ),
    (
        "w grid, x one value",
        {"scale_x": ((), F32)},
        r"scale_w of shape \(3, 3, 2\) is a block-scale grid but scale_x of shape \(\) is not; "
        + PAIRS,
    ),
    (
        "x grid Kb",
        {"scale_x": ((9, 2), F32)},
        r"scale_w is a block-scale grid, so scale_x must be x's.*got shape \(9, 2\): " + PAIRS,
    ),
    ("x grid T", {"scale_x": ((10, 3), F32)}, "so scale_x must be x's"),
    ("x grid transposed", {"scale_x": ((3, 9), F32)}, "so scale_x must be x's"),
    ("w grid Nb", {"scale_w": ((3, 3, 3), F32)}, W_GRID),
    ("w grid E", {"scale_w": ((2, 3, 2), F32)}, W_GRID),
    ("w grid (E, Nb, Kb)", {"scale_w": ((3, 2, 3), F32)}, W_GRID + r" \(3, 2, 3\)"),
    ("w grid 4-D", {"scale_w": ((3, 3, 2, 1), F32)}, "scale_w holds one value"),
    ("w grid dtype", {"scale_w": ((3, 3, 2), F64)}, "scale_w must be float32"),
    ("x grid dtype", {"scale_x": ((9, 3), BF16)}, "scale_x must be float32"),
]


def mode_and_maker(where):
    """The context and the tensor maker of one kernel: "fake" (FakeTensorMode, CUDA
    tensors), "meta" or "cpu" (zeros there, no autograd)."""
    if where == "fake":
        return FakeTensorMode(), lambda *s, dtype: torch.empty(s, device="cuda", dtype=dtype)
    device = "meta" if where == "meta" else "cpu"
    return torch.no_grad(), lambda *s, dtype: torch.zeros(s, device=device, dtype=dtype)


@pytest.mark.parametrize("where", ["fake", "meta", "cpu"])
@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_arguments_raise_the_same_error_everywhere(case, where):
    _, change, kwargs, error, match = case
    mode, make = mode_and_maker(where)
    if error is RuntimeError:  # torch-style: the message names the operator first
        match = f"^pycutlass_rt::scaled_grouped_mm: .*{match}"
    with mode:
        a = args(make, **change)
        with pytest.raises(error, match=match):
            ops.scaled_grouped_mm(**a, **kwargs)


@pytest.mark.parametrize("where", ["fake", "meta", "cpu"])
@pytest.mark.parametrize("case", BAD_GRIDS, ids=[c[0] for c in BAD_GRIDS])
def test_bad_block_scales_raise_the_same_error_everywhere(case, where):
    _, change, match = case
    mode, make = mode_and_maker(where)
    with mode:
        good = args(make, GOOD_GRIDS)
        assert ops.scaled_grouped_mm(**good).shape == (9, 200)
        with pytest.raises(RuntimeError, match=f"^pycutlass_rt::scaled_grouped_mm: .*{match}"):
            ops.scaled_grouped_mm(**args(make, GOOD_GRIDS, **change))


def test_devices_must_match():
    mode = FakeTensorMode()
    with mode:
        a = args(lambda *s, dtype: torch.empty(s, device="cuda", dtype=dtype))
        a["scale_w"] = torch.empty(3, 8, dtype=F32)  # on the CPU
        with pytest.raises(RuntimeError, match="scaled_grouped_mm: tensors on cuda:0 and cpu"):
            ops.scaled_grouped_mm(**a)


# ---- the CUDA implementation's moe_gemm call, on an emulated library ------------------------


class MoeGemm:
    """pycutlass_rt.moe_gemm as torch on the CPU, with the library's rules the operator
    depends on: x row-major, offsets E end offsets, and rows no expert covers left as
    they are (so the operator must hand it zeros)."""

    def __init__(self, monkeypatch):
        self.calls = []
        monkeypatch.setattr(pt._cuda, "_moe_gemm", self)

    def __call__(self, x, w, offsets, out, alpha=1.0, *, bias=None, activation=None, **kw):
        assert x.stride(1) == 1 and x.stride(0) >= x.shape[1], "x is not row-major"
        assert not any(t.requires_grad for t in (x, w)), "exported a tensor that needs grad"
        assert (out == 0).all(), "out must be zero-filled: moe_gemm leaves uncovered rows"
        self.calls.append(dict(kw, bias=bias, activation=activation, out=out))
        sa, sb = kw["scale_a"].double().reshape(-1, 1), kw["scale_b"]
        K, N = w.shape[1], w.shape[2]
        if sb.dim() == 3 and sb.numel() > 1:  # block-scale grids: x's any strides, w's packed
            kb = sb.shape[1]
            assert kb <= 1 or sb.stride(1) == 1, "w grid's K blocks not contiguous"
            assert sb.shape[2] <= 1 or sb.stride(2) == kb, "w grid's K blocks not contiguous"
            sa = kw["scale_a"].double().repeat_interleave(128, 1)[:, :K]
            sb = sb.double().repeat_interleave(128, 1)[:, :K].repeat_interleave(128, 2)[..., :N]
        start = 0
        for e, end in enumerate(offsets.tolist()):
            xd = x[start:end].double() * (sa[start:end] if sa.numel() > 1 else sa)
            if sb.dim() == 3 and sb.numel() > 1:
                s = sb[e]
            else:
                s = sb.double() if sb.numel() == 1 else sb.double()[e].reshape(1, -1)
            y = xd @ (w[e].double() * s)
            if bias is not None:
                y = y + bias.double().reshape(-1, out.shape[1])[e if bias.dim() == 2 else 0]
            out[start:end] = TORCH_ACT[activation](y).to(out.dtype)
            start = end
        return out


@pytest.mark.parametrize("act", [None, "none", "gelu"])
def test_cuda_impl_calls_moe_gemm(monkeypatch, act):
    lib = MoeGemm(monkeypatch)
    T, E, K, N = 14, 3, 32, 8
    x, w = layer(T, E, K, N, seed=6)
    xc = x.float().t().contiguous().t().to(E4M3)  # column-major: the operator copies it
    assert xc.stride(1) != 1
    sx, sw = torch.rand(T, 1), torch.rand(E, N) / 8
    b = torch.randn(E, N).to(BF16)
    offs = torch.tensor([4, 4, 11], dtype=I32)  # rows 11.. no expert's
    y = pt._cuda._scaled_grouped_mm_cuda(xc, w, sx, sw, offs, b, None, act)
    (call,) = lib.calls
    assert call["out"] is y and y.dtype == BF16 and y.shape == (T, N)
    assert call["scale_a"] is sx and call["scale_b"] is sw and call["bias"] is b
    assert call["activation"] == (None if act == "none" else act)
    torch.testing.assert_close(
        y, reference(x, w, sx, sw, offs, b, call["activation"]).to(BF16), rtol=1.6e-2, atol=1e-2
    )
    assert (y[11:] == 0).all()
    with pytest.raises(RuntimeError, match="scale_x holds one value"):
        pt._cuda._scaled_grouped_mm_cuda(x, w, sx[:5], sw, offs)
    assert len(lib.calls) == 1, "a bad call never reaches the library"


def test_cuda_impl_passes_block_scales_through(monkeypatch):
    """Grids reach moe_gemm as they are (x's M-major grid, w's transposed checkpoint
    grid: no copies); a w grid without its K blocks contiguous raises UnsupportedError
    naming the fix, before the library is called."""
    import pycutlass_rt as pcr

    lib = MoeGemm(monkeypatch)
    T, E, K, N = 14, 3, 320, 200
    x, w = layer(T, E, K, N, seed=12)
    sx, sw = block_scales(T, E, K, N, seed=12)
    assert sx.stride() == (1, T) and sw.stride() == (6, 1, 3)
    b = torch.randn(N).to(BF16)
    offs = torch.tensor([4, 4, 11], dtype=I32)
    y = pt._cuda._scaled_grouped_mm_cuda(x, w, sx, sw, offs, b, None, "silu")
    (call,) = lib.calls
    assert call["scale_a"] is sx and call["scale_b"] is sw and call["activation"] == "silu"
    want = block_reference(x, w, sx, sw, offs, b, "silu")
    torch.testing.assert_close(y, want.to(BF16), rtol=1.6e-2, atol=1e-2)
    assert (y[11:] == 0).all()
    # a requires_grad grid goes detached, still uncopied
    pt._cuda._scaled_grouped_mm_cuda(x, w, sx, sw.clone().requires_grad_(), offs)
    assert not lib.calls[-1]["scale_b"].requires_grad
    # size-1 dimensions' strides say nothing: (E, 1, Nb) and (E, Kb, 1) contiguous are packed
    for k, n in ((100, 200), (320, 100)):
        x1, w1 = layer(T, E, k, n, seed=13)
        sx1, sw1 = block_scales(T, E, k, n, seed=13)
        sw1 = sw1.contiguous()
        y1 = pt._cuda._scaled_grouped_mm_cuda(x1, w1, sx1, sw1, offs)
        assert lib.calls[-1]["scale_b"] is sw1
        want1 = block_reference(x1, w1, sx1, sw1, offs)
        torch.testing.assert_close(y1, want1.to(BF16), rtol=1.6e-2, atol=1e-2)
    calls = len(lib.calls)
    for bad in (sw.contiguous(), sw.transpose(0, 1).contiguous().transpose(0, 1)):
        with pytest.raises(pcr.UnsupportedError, match=r"weight_scale_inv\.transpose\(1, 2\)"):
            pt._cuda._scaled_grouped_mm_cuda(x, w, sx, bad, offs)
    assert len(lib.calls) == calls, "a refused grid never reaches the library"
