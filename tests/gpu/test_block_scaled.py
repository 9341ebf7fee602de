"""Block-scaled fp8 GEMMs (DeepSeek-V3's recipe) and pcr.quantize on the GPU, against a
float64 reference that dequantizes block by block; every _blk kernel of the build forced
by name, odd shapes and partial blocks, the layouts checkpoints and torch use."""

import math

import pytest
from helpers import math_of, runnable_kernels, tolerance

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")

E4M3 = torch.float8_e4m3fn
OUT = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def blk_kernels():
    return runnable_kernels(block_scaled=True)


def has_blk(kinds, out, fused=False):
    """Whether a block-scaled kernel of this build that runs here takes grids of ``kinds``
    ((a's, b's) after orienting d row-major) into ``out``, with a fused epilogue if asked."""
    return any(
        (k.scale_m, k.scale_n) == kinds and k.dtype_d == out and (k.epilogue != "linear") == fused
        for k in blk_kernels()
    )


def grids(m, n, k, kinds=("groups", "blocks"), seed=0):
    """fp8 x (m x k), w (n x k) and their scales (positive, spread over two decades) in the
    layouts checkpoints store: a's grid K-major, the weight's (n/128, k/128) row-major."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    kb = -(-k // 128)
    x = (torch.rand(m, k, device="cuda", generator=g) * 8 - 4).to(E4M3)
    w = (torch.rand(n, k, device="cuda", generator=g) * 8 - 4).to(E4M3)

    def grid(rows, kind):
        shape = (rows if kind == "groups" else -(-rows // 128), kb)
        return 10 ** (torch.rand(shape, device="cuda", generator=g) * 2 - 1)

    return x, w, grid(m, kinds[0]), grid(n, kinds[1])


def reference(x, w, sx, sw, kinds=("groups", "blocks")):
    """sum over K-blocks of (x's block @ w's block.T) times the two blocks' scales, fp64."""
    m, k = x.shape
    n = w.shape[0]
    out = torch.zeros(m, n, dtype=torch.float64, device=x.device)
    xd, wd = x.double(), w.double()
    for kb in range(-(-k // 128)):
        ks = slice(kb * 128, (kb + 1) * 128)
        part = xd[:, ks] @ wd[:, ks].t()
        ra = sx[:, kb].double()
        rb = sw[:, kb].double()
        if kinds[0] == "blocks":
            ra = ra.repeat_interleave(128)[:m]
        if kinds[1] == "blocks":
            rb = rb.repeat_interleave(128)[:n]
        out += part * ra[:, None] * rb[None, :]
    return out


def close(got, ref, dtype, floor=0.0):
    """Relatively close in norm: the output's rounding, or ``floor`` where coarser (fp8
    MMAs' accumulation)."""
    err = ((got.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    tol = max({torch.bfloat16: 1.6e-2, torch.float16: 2e-3, torch.float32: 2e-5}[dtype], floor)
    assert err < tol, f"relative error {err:.2e} (tolerance {tol:.0e})"


SHAPES = [
    (1, 256, 512),
    (7, 384, 1000),
    (16, 7168, 2048),
    (129, 1536, 7168),
    (300, 640, 1000),
    (1024, 4096, 7168),
    (2048, 129, 256),
]


@pytest.mark.parametrize("kern", blk_kernels(), ids=lambda k: k.name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_block_scaled_kernel_against_the_blockwise_reference(kern, shape):
    m, n, k = shape
    kinds = (kern.scale_m, kern.scale_n)
    x, w, sx, sw = grids(m, n, k, kinds)
    out = OUT[kern.dtype_d]
    y = torch.full((m, n), float("nan"), device="cuda", dtype=out)
    pcr.gemm(x, w.t(), None, y, scale_a=sx, scale_b=sw.t(), kernel=kern.name)
    close(y, reference(x, w, sx, sw, kinds), out)


@pytest.mark.skipif(not blk_kernels(), reason="no block-scaled kernel in this build runs here")
def test_selection_layouts_and_the_fused_epilogue():
    """Chosen kernels; a's grid K-major, M-major (quantize's), padded; the weight's grid
    as stored transposed; a bias and GELU fused; a plan and a CUDA graph."""
    m, n, k = 200, 1024, 896
    x, w, sx, sw = grids(m, n, k)
    ref = reference(x, w, sx, sw)
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for a_grid in (sx, sx.t().contiguous().t(), torch.empty(m + 5, 7, device="cuda")[:m, :7]):
        if a_grid.data_ptr() != sx.data_ptr() and a_grid.shape == sx.shape:
            a_grid.copy_(sx)
        pcr.gemm(x, w.t(), None, y, scale_a=a_grid, scale_b=sw.t())
        close(y, ref, torch.bfloat16)
    e = pcr.explain(x, w.t(), None, y, scale_a=sx, scale_b=sw.t())
    assert "_blkgb" in e.kernel and any("block scales" in n for n in e.notes), str(e)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    fused = dict(bias=bias, activation="gelu", scale_a=sx, scale_b=sw.t())
    if has_blk(("groups", "blocks"), "bfloat16", fused=True):
        pcr.gemm(x, w.t(), None, y, **fused)
        close(y, torch.nn.functional.gelu(ref + bias.double()), torch.bfloat16)
    else:  # a build without the _biasact twins says so
        with pytest.raises(pcr.UnsupportedError, match="no kernel in this build"):
            pcr.gemm(x, w.t(), None, y, **fused)
    plan = pcr.Gemm(x, w.t(), None, y, scale_a=sx, scale_b=sw.t())
    y.zero_()
    plan.run()
    close(y, ref, torch.bfloat16)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        pcr.gemm(x, w.t(), None, y, scale_a=sx, scale_b=sw.t())
    with torch.cuda.graph(g, stream=s):
        pcr.gemm(x, w.t(), None, y, scale_a=sx, scale_b=sw.t())
    y.zero_()
    g.replay()
    torch.cuda.synchronize()
    close(y, ref, torch.bfloat16)


@pytest.mark.skipif(not blk_kernels(), reason="no block-scaled kernel in this build runs here")
def test_column_major_d_and_a_misaligned_k():
    m, n, k = 96, 512, 1000  # K not a multiple of 16: staged
    x, w, sx, sw = grids(m, n, k)
    yt = torch.empty(n, m, device="cuda", dtype=torch.bfloat16).t()  # column-major d
    # a column-major d turns the problem around: its grids become (blocks, groups)
    if has_blk(("blocks", "groups"), "bfloat16"):
        pcr.gemm(x, w.t(), None, yt, scale_a=sx, scale_b=sw.t())
        close(yt, reference(x, w, sx, sw), torch.bfloat16)
    else:  # "bg" kernels are outside the default build
        with pytest.raises(pcr.UnsupportedError, match="block scales"):
            pcr.gemm(x, w.t(), None, yt, scale_a=sx, scale_b=sw.t())


@pytest.mark.skipif(not blk_kernels(), reason="no block-scaled kernel in this build runs here")
def test_matches_torch_scaled_mm_where_torch_runs_the_recipe():
    m, n, k = 512, 1024, 2048
    x, w, sx, sw = grids(m, n, k)
    sx_mm = sx.t().contiguous().t()  # torch wants the (M, K/128) grid M-major
    try:
        want = torch._scaled_mm(x, w.t(), sx_mm, sw.t(), out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch._scaled_mm does not run this recipe here: {str(e)[:120]}")
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    pcr.gemm(x, w.t(), None, y, scale_a=sx_mm, scale_b=sw.t())
    close(y, want.double(), torch.bfloat16)


# ---- quantize ----------------------------------------------------------------------------


def dequant_ref(x, gran, qmax):
    """torch's own: scales from max |x| per region, then q = x / s rounded and clamped."""
    xf = x.float()
    m, k = xf.shape
    if gran == "tensor":
        amax = xf.abs().max().reshape(1, 1).expand(m, k)
    elif gran == "token":
        amax = xf.abs().amax(1, keepdim=True).expand(m, k)
    elif gran == "group":
        pad = (-k) % 128
        g = torch.nn.functional.pad(xf.abs(), (0, pad)).reshape(m, -1, 128).amax(2)
        amax = g.repeat_interleave(128, 1)[:, :k]
    else:
        pm, pk = (-m) % 128, (-k) % 128
        p = torch.nn.functional.pad(xf.abs(), (0, pk, 0, pm))
        b = p.reshape(p.shape[0] // 128, 128, p.shape[1] // 128, 128).amax((1, 3))
        amax = b.repeat_interleave(128, 0).repeat_interleave(128, 1)[:m, :k]
    return amax.clamp_min(1e-10) / qmax


def assert_quantized(x, dtype, gran):
    """pcr.quantize(x) against dequant_ref's scales and torch's rounding, bit for bit."""
    shape = x.shape
    q, s = pcr.quantize(x, dtype, gran)
    qmax = 448.0 if dtype == "float8_e4m3fn" else 127.0
    scale = dequant_ref(x, gran, qmax)
    if gran == "group":
        assert s.shape == (shape[0], -(-shape[1] // 128)) and s.stride(0) == 1
    expand = {
        "tensor": lambda: s.reshape(1, 1).expand(shape),
        "token": lambda: s.expand(shape),
        "group": lambda: s.repeat_interleave(128, 1)[:, : shape[1]],
        "block": lambda: s.repeat_interleave(128, 0).repeat_interleave(128, 1)[
            : shape[0], : shape[1]
        ],
    }[gran]()
    torch.testing.assert_close(expand, scale, rtol=1e-6, atol=0)
    want = (x.float() / expand).clamp(-qmax, qmax)
    want = want.to(torch.float8_e4m3fn) if dtype == "float8_e4m3fn" else want.round().to(torch.int8)
    assert q.dtype == want.dtype and torch.equal(q.view(torch.uint8), want.view(torch.uint8))


#: rows x K: a warp's row in 1, 2, 4 or 8 vectors a thread (240, 520, 1000, 2048), the
#: CTA's in 2, 4 or 8 (2304, 7168, 16384), longer rows read twice (16392), odd tails (7, 1000)
QUANTIZE_SHAPES = [
    (1, 7),
    (64, 240),
    (300, 1000),
    (1000, 520),
    (129, 2048),
    (33, 2304),
    (4096, 7168),
    (5, 16384),
    (3, 16392),
    (129, 128),
]


@pytest.mark.parametrize("gran", ["tensor", "token", "group", "block"])
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "int8"])
@pytest.mark.parametrize("shape", QUANTIZE_SHAPES)
def test_quantize_matches_the_rounding_of_each_element(gran, dtype, shape):
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16) * 3
    x[0, 0] = 0  # zeros and an all-zero group stay exact
    assert_quantized(x, dtype, gran)


@pytest.mark.parametrize("gran", ["tensor", "token", "group"])
@pytest.mark.parametrize("xdtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(77, 1000), (9, 7168)])
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "offset"])
def test_quantize_other_input_dtypes_and_unaligned_rows(gran, xdtype, shape, aligned):
    """float16 and float32 x; x one element off 16 bytes (scalar loads) gives the same."""
    m, k = shape
    base = torch.randn(m, k + 8, device="cuda", dtype=xdtype) * 3  # rows 16-byte aligned
    x = base[:, :k] if aligned else base[:, 1 : k + 1]
    assert_quantized(x, "float8_e4m3fn", gran)


def test_static_scales_and_n_d_inputs():
    x = torch.randn(2, 50, 300, device="cuda", dtype=torch.float16)
    q, s = pcr.quantize(x, granularity="token")
    assert q.shape == x.shape and s.shape == (2, 50, 1)
    q2, s2 = pcr.quantize(x, granularity="token", scale=s)
    assert torch.equal(q.view(torch.uint8), q2.view(torch.uint8)) and s2 is s
    q3, _ = pcr.quantize(x, granularity="tensor", scale=0.5)
    want = (x.float() / 0.5).clamp(-448, 448).to(E4M3)
    assert torch.equal(q3.view(torch.uint8), want.view(torch.uint8))


def test_quantize_then_gemm_is_a_linear_layer_in_fp8():
    m, n, k = 256, 2048, 7168
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k)
    if not any(kk.scale_m == "groups" for kk in blk_kernels()):
        pytest.skip("no block-scaled kernel in this build runs here")
    qx, sx = pcr.quantize(x)
    qw, sw = pcr.quantize(w, granularity="block")
    y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    pcr.gemm(qx, qw.t(), None, y, scale_a=sx, scale_b=sw.t())
    ref = x.double() @ w.double().t()
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err < 0.06, f"fp8 linear layer relative error {err:.3f}"  # e4m3's 3-bit mantissa


def test_quantize_replays_in_a_cuda_graph():
    x = torch.randn(4096, 7168, device="cuda", dtype=torch.bfloat16)
    q, s = pcr.quantize(x)
    g = torch.cuda.CUDAGraph()
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st), torch.cuda.graph(g, stream=st):
        pcr.quantize(x, out=q, scale_out=s)
    x.mul_(2)
    g.replay()
    torch.cuda.synchronize()
    q2, s2 = pcr.quantize(x)
    assert torch.equal(q.view(torch.uint8), q2.view(torch.uint8)) and torch.equal(s, s2)


@pytest.mark.parametrize("granularity", ["token", "group"])
def test_quantize_between_gemms_reads_the_producer_and_feeds_the_consumer(granularity):
    """Layers as served: a GEMM writes the activations, quantize reads them and the next fp8
    GEMM reads its output, each the stream's next kernel (the GEMMs programmatic dependents
    on Hopper). Eager and in a CUDA graph, the chain is bitwise the result of the same
    steps run one at a time with the GPU idle between."""
    m = k = 1024
    if granularity == "token":
        if not any(
            kk.epilogue == "scaled" and kk.dtype_a == "float8_e4m3fn" for kk in runnable_kernels()
        ):
            pytest.skip("no fp8 kernel with per-row and per-column scales runs here")
    elif not any(kk.scale_m == "groups" for kk in blk_kernels()):
        pytest.skip("no block-scaled kernel in this build runs here")
    gen = torch.Generator(device="cuda").manual_seed(3)
    layers = []
    for _ in range(4):
        w = torch.randn(k, k, device="cuda", generator=gen) / math.sqrt(k)
        if granularity == "token":
            qw, sw = pcr.quantize(w.to(torch.bfloat16), E4M3, "token")
            layers.append((qw.t(), sw.reshape(1, k)))
        else:
            qw, sw = pcr.quantize(w.to(torch.bfloat16), E4M3, "block")
            layers.append((qw.t(), sw.t()))
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    hs = [torch.empty(m, k, device="cuda", dtype=torch.bfloat16) for _ in layers]

    def chain(step=lambda: None):
        h = x
        for (qw, sw), out in zip(layers, hs):
            q, s = pcr.quantize(h, E4M3, granularity)
            step()
            pcr.gemm(q, qw, None, out, scale_a=s, scale_b=sw)
            step()
            h = out
        return [t.clone() for t in hs]

    want = chain(torch.cuda.synchronize)
    assert all(torch.isfinite(t).all() for t in want)
    for t in hs:
        t.zero_()
    assert all(torch.equal(a, b) for a, b in zip(chain(), want))  # eager, back to back
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(st):
        chain()  # the pool's allocations before capture
        with torch.cuda.graph(g, stream=st):
            chain()
    torch.cuda.current_stream().wait_stream(st)
    for t in hs:
        t.zero_()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(hs, want))


# ---- quantized outputs: amax before scale_d, fp8 d saturating ----------------------------


def out_scale_kernels(dtype_d=None):
    return [
        k
        for k in runnable_kernels(block_scaled=None)
        if k.out_scale and k.dtype_a == "float8_e4m3fn" and dtype_d in (None, k.dtype_d)
    ]


@pytest.mark.parametrize("kern", out_scale_kernels(), ids=lambda k: k.name)
def test_amax_and_scale_d_on_every_quantized_epilogue(kern):
    m, n, k = 200, 384, 1024
    kinds = (kern.scale_m, kern.scale_n)
    if kern.scale_m != "none":
        x, w, sx, sw = grids(m, n, k, kinds)
        ref = reference(x, w, sx, sw, kinds)
        scales = dict(scale_a=sx, scale_b=sw.t())
    else:
        x = (torch.rand(m, k, device="cuda") * 8 - 4).to(E4M3)
        w = (torch.rand(n, k, device="cuda") * 8 - 4).to(E4M3)
        sx = torch.full((1,), 0.5, device="cuda")
        sw = torch.full((1,), 0.25, device="cuda")
        ref = (x.double() @ w.double().t()) * 0.125
        scales = dict(scale_a=sx, scale_b=sw)
    out = getattr(torch, kern.dtype_d)
    y = torch.empty(m, n, device="cuda", dtype=out)
    amax = torch.full((), float("nan"), device="cuda")
    inv = 1.0 / ref.abs().max().item() * 400  # results spread up to +-400
    scale_d = torch.tensor([inv], device="cuda")
    pcr.gemm(
        x,
        w.t(),
        None,
        y,
        amax=amax,
        scale_d=scale_d,
        math=math_of(kern),
        kernel=kern.name,
        **scales,
    )
    # amax of the fp32 result before scale_d: as exact as the fp8 MMAs' accumulation
    rtol = tolerance(kern, torch.float32)
    torch.testing.assert_close(amax.double(), ref.abs().max(), rtol=rtol, atol=0)
    want = ref * inv
    if out in (torch.float8_e4m3fn, torch.float8_e5m2):
        # one rounding of the fp32 result: within a unit in the last place (3 bits), past
        # what the fp8 MMAs' accumulation leaves (relative to the largest result)
        fp8_rounding(y.double(), want, rtol * want.abs().max().item())
        assert y.double().abs().max() <= 448
    else:
        close(y, want, out, tolerance(kern, torch.float32))


def fp8_rounding(got, want, accumulation):
    """``got`` is ``want`` rounded once to e4m3: within one unit in the last place (2^-3
    relative, 2^-9 absolute among subnormals), plus ``accumulation`` (absolute)."""
    bad = (got - want).abs() > want.abs() * 2**-3 + 2**-9 + accumulation
    where = bad.nonzero()[:5].tolist()
    assert not bad.any(), (
        f"{int(bad.sum())} elements off by more than one e4m3 unit, e.g. "
        + ", ".join(
            f"{tuple(i)}: {got[tuple(i)].item():g} for {want[tuple(i)].item():g}" for i in where
        )
    )


def int8_out_scale_kernels():
    return [
        k
        for k in runnable_kernels()
        if k.out_scale and k.dtype_a == "int8" and k.dtype_d in ("bfloat16", "float16")
    ]


@pytest.mark.parametrize("kern", int8_out_scale_kernels(), ids=lambda k: k.name)
def test_amax_and_scale_d_on_int8_dequantizing_epilogues(kern):
    """W8A8 int8 with per-token and per-channel scales: every family's dequantizing
    epilogue (the sm80 family's too) reduces max |result| into amax before scale_d."""
    m, n, k = 200, 384, 1024
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randint(-127, 128, (m, k), device="cuda", generator=g, dtype=torch.int8)
    w = torch.randint(-127, 128, (n, k), device="cuda", generator=g, dtype=torch.int8)
    sx = torch.rand(m, device="cuda", generator=g) * 1e-3 + 1e-4
    sw = torch.rand(n, device="cuda", generator=g) * 1e-3 + 1e-4
    ref = (x.double() @ w.double().t()) * sx.double()[:, None] * sw.double()[None, :]
    out = getattr(torch, kern.dtype_d)
    y = torch.empty(m, n, device="cuda", dtype=out)
    amax = torch.full((), float("nan"), device="cuda")
    scale_d = torch.tensor([0.5], device="cuda")
    pcr.gemm(
        x, w.t(), None, y, scale_a=sx, scale_b=sw, amax=amax, scale_d=scale_d, kernel=kern.name
    )
    torch.testing.assert_close(amax.double(), ref.abs().max(), rtol=1e-5, atol=0)
    close(y, ref * 0.5, out)


@pytest.mark.skipif(not out_scale_kernels("float8_e4m3fn"), reason="no fp8-output kernel here")
def test_fp8_outputs_saturate_and_follow_an_fp8_recipe():
    """A delayed-scaling step: the next scale from amax, the output saturating at 448."""
    m, n, k = 256, 512, 512
    x = (torch.rand(m, k, device="cuda") * 8 - 4).to(E4M3)
    w = (torch.rand(n, k, device="cuda") * 8 - 4).to(E4M3)
    one = torch.ones(1, device="cuda")
    y = torch.empty(m, n, device="cuda", dtype=E4M3)
    amax = torch.empty((), device="cuda")
    big = torch.tensor([1000.0], device="cuda")  # far past e4m3's range
    pcr.gemm(x, w.t(), None, y, scale_a=one, scale_b=one, scale_d=big, amax=amax)
    ref = x.double() @ w.double().t()
    assert not torch.isnan(y.float()).any() and y.float().abs().max() == 448
    rtol = tolerance(out_scale_kernels("float8_e4m3fn")[0], torch.float32)  # fp8 MMAs' sums
    torch.testing.assert_close(amax.double(), ref.abs().max(), rtol=rtol, atol=0)
    scale_d = 448.0 / amax  # the next call's scale from this one's amax
    pcr.gemm(x, w.t(), None, y, scale_a=one, scale_b=one, scale_d=scale_d.reshape(1))
    want = ref * scale_d.double()
    fp8_rounding(y.double(), want, rtol * want.abs().max().item())
