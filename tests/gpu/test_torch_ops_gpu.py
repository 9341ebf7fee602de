"""pycutlass_rt.torch on the GPU: the operators against torch references, opcheck,
gradcheck in float64, training against nn.Linear, torch.compile(fullgraph=True), and
mode="reduce-overhead" CUDA graphs with several sizes (split-K included) and dynamic shapes.

Tests of a dtype, layout or epilogue ask the build first (helpers.require) and skip,
saying what is missing.
"""

import pytest
from helpers import (
    hf_mlp,
    matrix,
    reference,
    reference_linear,
    require,
    runnable_kernels,
    torch_activations,
)

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")
pt = pytest.importorskip("pycutlass_rt.torch")

ops = torch.ops.pycutlass_rt
F = torch.nn.functional
BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
TOL = {F16: 2e-3, BF16: 1.6e-2, F32: 1e-5, F64: 1e-12}
TORCH_ACT = torch_activations()
ACTS = tuple(TORCH_ACT)
#: opcheck's schema check compares tensors with allclose, which has no float8 kernel
NO_SCHEMA = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def close(got, want, tol, what=""):
    assert not torch.isnan(got).any(), f"{what}: NaN (unwritten) elements"
    want = want.double()
    err = ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.0e}"


def linear_reference(x, w, bias=None, act=None):
    y = x.double() @ w.double().t()
    if bias is not None:
        y = y + bias.double()
    return TORCH_ACT[act](y)


def requires(dtype, *layouts, epilogue="linear", out=None):
    for layout in layouts:
        require(dtype, out=out, layout=layout, epilogue=epilogue)


# ---- results against torch references ------------------------------------------------------


@pytest.mark.parametrize("dtype", [BF16, F16, F32, F64])
@pytest.mark.parametrize("layout", ["tn", "tt", "nt", "nn"])
@pytest.mark.parametrize("mnk", [(200, 136, 264), (1, 4096, 4096), (77, 1000, 520)])
def test_mm(dtype, layout, mnk):
    requires(dtype, layout)
    m, n, k = mnk
    a, b = matrix(m, k, layout[0], dtype), matrix(k, n, layout[1], dtype)
    close(pt.mm(a, b), reference(a, b), TOL[dtype], f"{layout} {mnk}")
    close(ops.mm(a, b), reference(a, b), TOL[dtype])


def test_mm_out_and_float32_output():
    requires(BF16, "tt", out=F32)
    a, b = matrix(96, 264, "t", BF16), matrix(264, 520, "t", BF16)
    out = torch.full((96, 520), float("nan"), device="cuda", dtype=F32)
    assert pt.mm(a, b, out=out) is out
    close(out, reference(a, b), 1e-5)
    with pytest.raises(RuntimeError, match="out must be 96x520"):
        pt.mm(a, b, out=out[:, :500])


def test_mm_strided_operands_are_copied():
    """A view that is neither row- nor column-major (a step) is made contiguous first."""
    requires(BF16, "tt")
    a = matrix(64, 512, "t", BF16)[:, ::2]
    b = matrix(256, 128, "t", BF16)
    close(pt.mm(a, b), reference(a, b), TOL[BF16])


@pytest.mark.parametrize("how", ["legacy", "fp32_precision"])
def test_mm_tf32_follows_torchs_setting(how, monkeypatch):
    # torch >= 2.9's fp32_precision, once set, makes reading allow_tf32 raise: the op must
    # read the setting that way (it crashed on every float32 call before)
    requires("tfloat32", "tt", out=F32)
    a, b = matrix(256, 512, "t", F32), matrix(512, 384, "t", F32)
    if how == "fp32_precision":
        if not hasattr(torch.backends, "fp32_precision"):
            pytest.skip(f"torch {torch.__version__} has no fp32_precision (2.9 and later)")
        monkeypatch.setattr(torch.backends, "fp32_precision", "tf32")
    else:
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    close(pt.mm(a, b), reference(a, b), 2e-3)


@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xshape", [(200, 264), (3, 37, 264), (264,)])
def test_linear(dtype, act, bias, xshape):
    requires(dtype, "tn", epilogue="biasact" if bias or act else "linear")
    x = (torch.rand(xshape, device="cuda") * 2 - 1).to(dtype)
    w = matrix(520, 264, "t", dtype)
    b = (torch.rand(520, device="cuda") - 0.5).to(dtype) if bias else None
    y = ops.linear(x, w, b, act)
    assert y.shape == (*xshape[:-1], 520) and y.dtype == dtype
    close(y, linear_reference(x, w, b, act), TOL[dtype], f"{act} bias={bias}")
    close(pt.linear(x, w, b, act), linear_reference(x, w, b, act), TOL[dtype])


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("act", ACTS)
def test_linear_without_a_fused_kernel(dtype, act):
    """float32 and float64 run fused where the build holds their bias/activation tiles
    (the default build does); a build without them takes the bias as C and runs the
    activation after. Fused or not, the results are the same."""
    requires(dtype, "tn")
    x, w = matrix(100, 96, "t", dtype), matrix(72, 96, "t", dtype)
    b = torch.rand(72, device="cuda", dtype=dtype)
    close(ops.linear(x, w, b, act), linear_reference(x, w, b, act), TOL[dtype], str(act))


@pytest.mark.parametrize("scales", ["tensor", "rows_cols"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_scaled_mm_fp8(dtype, scales, bias):
    require(dtype, out=BF16, layout="tn", epilogue="scaled")
    m, n, k = 200, 256, 512
    dt = getattr(torch, dtype)
    a = (torch.rand(m, k, device="cuda") * 2 - 1).to(dt)
    w = (torch.rand(n, k, device="cuda") * 2 - 1).to(dt)
    if scales == "tensor":
        sa, sw = torch.tensor(2.0, device="cuda"), torch.tensor(0.25, device="cuda")
    else:
        sa, sw = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    b = (torch.rand(n, device="cuda") - 0.5).to(BF16) if bias else None
    y = pt.scaled_mm(a, w.t(), sa, sw, b, BF16)
    want = (a.double() * sa.double()) @ (w.double() * sw.double().reshape(-1, 1)).t()
    if bias:
        want = want + b.double()
    assert y.dtype == BF16
    close(y, want, TOL[BF16], f"{dtype} {scales}")


def test_scaled_mm_int8():
    require("int8", out=BF16, layout="tn", epilogue="scaled")
    a = torch.randint(-127, 128, (96, 256), device="cuda", dtype=torch.int8)
    w = torch.randint(-127, 128, (128, 256), device="cuda", dtype=torch.int8)
    sa, sw = torch.rand(96, 1, device="cuda") * 1e-2, torch.rand(1, 128, device="cuda") * 1e-2
    y = pt.scaled_mm(a, w.t(), sa, sw)
    want = (a.double() @ w.double().t()) * sa.double() * sw.double()
    close(y, want, TOL[BF16])


def grouped_kernel(layout):
    if not any(
        k.layout == layout and k.dtype_a == "bfloat16" for k in runnable_kernels(grouped=True)
    ):
        pytest.skip(f"no bf16 {layout} grouped kernel of this build runs here")


def moe_case(tokens=1000, k=512, n=256, experts=8, layout="tn"):
    x = matrix(tokens, k, "t", BF16)
    if layout == "tn":  # (E, N, K) Linear weights, transposed: column-major experts
        w = (torch.rand(experts, n, k, device="cuda") * 2 - 1).to(BF16).transpose(1, 2)
    else:
        w = (torch.rand(experts, k, n, device="cuda") * 2 - 1).to(BF16)
    return x, w


def routing(tokens, experts, seed):
    g = torch.Generator().manual_seed(seed)
    cuts = torch.sort(torch.randint(0, tokens + 1, (experts - 1,), generator=g)).values
    ends = torch.cat([cuts, torch.tensor([tokens])])
    return ends.to(torch.int32).cuda()


def grouped_reference(x, w, offs):
    out, start = torch.zeros(x.shape[0], w.shape[2], dtype=F64, device="cuda"), 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end].double() @ w[e].double()
        start = end
    return out


@pytest.mark.parametrize("layout", ["tn", "tt"])
def test_grouped_mm(layout):
    grouped_kernel(layout)
    x, w = moe_case(layout=layout)
    offs = torch.tensor([100, 100, 400, 420, 700, 800, 990, 1000], device="cuda", dtype=torch.int32)
    y = pt.grouped_mm(x, w, offs)
    close(y, grouped_reference(x, w, offs), TOL[BF16])
    close(pt.grouped_mm(x, w, offs.long()), grouped_reference(x, w, offs), TOL[BF16])


def test_grouped_mm_gradient_of_x():
    grouped_kernel("tn")
    grouped_kernel("tt")
    x, w = moe_case(tokens=300, k=128, n=64, experts=4)
    offs = torch.tensor([50, 50, 200, 260], device="cuda", dtype=torch.int32)  # 260.. uncovered
    x.requires_grad_()
    y = pt.grouped_mm(x, w, offs)
    g = matrix(300, 64, "t", BF16)
    y.backward(g)
    want = torch.zeros(300, 128, dtype=F64, device="cuda")
    for e, (s, t) in enumerate([(0, 50), (50, 50), (50, 200), (200, 260)]):
        want[s:t] = g[s:t].double() @ w[e].double().t()
    close(x.grad, want, TOL[BF16])


# ---- opcheck ---------------------------------------------------------------------------------


def test_opcheck_mm():
    requires(BF16, "tt", "tn", "nt")
    a, b = matrix(64, 96, "t", BF16), matrix(96, 80, "t", BF16)
    pt_args = (a.clone().requires_grad_(), b.clone().requires_grad_())
    torch.library.opcheck(ops.mm.default, pt_args)
    torch.library.opcheck(ops._grad_mm.default, pt_args)
    torch.library.opcheck(
        ops.mm.out, (a, b), {"out": torch.empty(64, 80, device="cuda", dtype=BF16)}
    )


@pytest.mark.parametrize("act", ACTS)
def test_opcheck_linear(act):
    requires(BF16, "tn", epilogue="biasact")  # forward; backward: tt and nt
    requires(BF16, "tt", "nt")
    x = matrix(96, 64, "t", BF16).reshape(2, 48, 64).requires_grad_()
    w = matrix(72, 64, "t", BF16).requires_grad_()
    b = torch.rand(72, device="cuda", dtype=BF16).requires_grad_()
    torch.library.opcheck(ops.linear.default, (x, w, b, act))
    torch.library.opcheck(ops.linear.default, (x.detach(), w.detach(), None, act))


def test_opcheck_scaled_mm():
    require("float8_e4m3fn", out=BF16, layout="tn", epilogue="scaled")
    a = torch.randn(64, 128, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(96, 128, device="cuda").to(torch.float8_e4m3fn)
    sa, sw = torch.rand(64, 1, device="cuda"), torch.rand(1, 96, device="cuda")
    torch.library.opcheck(
        ops.scaled_mm.default, (a, w.t(), sa, sw, None, BF16), test_utils=NO_SCHEMA
    )


def test_opcheck_scaled_mm_int8():
    require("int8", out=BF16, layout="tn", epilogue="scaled")
    a = torch.randint(-127, 128, (64, 128), device="cuda", dtype=torch.int8)
    w = torch.randint(-127, 128, (96, 128), device="cuda", dtype=torch.int8)
    sa, sw = torch.rand(64, 1, device="cuda"), torch.rand(1, 96, device="cuda")
    torch.library.opcheck(ops.scaled_mm.default, (a, w.t(), sa, sw, None, BF16))


def test_opcheck_grouped_mm():
    grouped_kernel("tn")
    grouped_kernel("tt")
    x, w = moe_case(tokens=200, k=128, n=64, experts=4)
    offs = torch.tensor([20, 20, 150, 200], device="cuda", dtype=torch.int32)
    torch.library.opcheck(ops.grouped_mm.default, (x.requires_grad_(), w, offs))


# ---- autograd ---------------------------------------------------------------------------------


def f64(*shape):
    return (torch.rand(shape, device="cuda", dtype=F64) * 2 - 1).requires_grad_()


def test_gradcheck_mm_float64():
    requires(F64, "tt")  # the forward; the backward's layouts fall back to torch if missing
    assert torch.autograd.gradcheck(ops.mm, (f64(6, 10), f64(10, 5)))
    assert torch.autograd.gradgradcheck(ops.mm, (f64(4, 6), f64(6, 3)))


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("how", ["op", "linear"])
def test_gradcheck_linear_float64(act, how):
    """op: the operator's backward (pre-activation recomputed); linear: the Python function
    (pre-activation kept)."""
    requires(F64, "tn")
    fn = ops.linear if how == "op" else pt.linear
    torch.manual_seed(0)
    x, w, b = f64(2, 3, 8), f64(5, 8), f64(5)
    assert torch.autograd.gradcheck(lambda x, w, b: fn(x, w, b, act), (x, w, b))
    assert torch.autograd.gradcheck(lambda x, w: fn(x, w, None, act), (f64(4, 8), w))


class Spy:
    """Counts pycutlass_rt.gemm calls made by the operators (and can refuse some)."""

    def __init__(self, monkeypatch, refuse=None):
        self.calls, self.refuse, self.real = [], refuse, pt._cuda._gemm
        monkeypatch.setattr(pt._cuda, "_gemm", self)
        monkeypatch.setattr(pt._cuda, "_TORCH_MM", set())

    def __call__(self, a, b, c, d, *args, **kwargs):
        layout = "".join("t" if t.stride(1) == 1 else "n" for t in (a, b))
        if self.refuse and self.refuse(layout):
            raise pcr.UnsupportedError(f"refused {layout} (test)")
        self.calls.append(layout)
        return self.real(a, b, c, d, *args, **kwargs)


@pytest.mark.parametrize("act", [None, "relu", "gelu"])
def test_backward_runs_on_the_librarys_kernels(monkeypatch, act):
    requires(BF16, "tn", epilogue="biasact")  # forward; backward: tt and nt
    requires(BF16, "tt", "nt")
    spy = Spy(monkeypatch)
    x = matrix(128, 256, "t", BF16).requires_grad_()
    w = matrix(192, 256, "t", BF16).requires_grad_()
    b = torch.rand(192, device="cuda", dtype=BF16).requires_grad_()
    y = pt.linear(x, w, b, act)
    g = matrix(128, 192, "t", BF16)
    y.backward(g)
    # forward tn, grad_x = grad @ w (tt), grad_w = grad.T @ x (nt); no torch fallback
    assert spy.calls == ["tn", "tt", "nt"] and not pt._cuda._TORCH_MM
    z = linear_reference(x.detach(), w.detach(), b.detach()).requires_grad_()
    gz = torch.autograd.grad(TORCH_ACT[act](z), z, g.double())[0] if act else g.double()
    close(x.grad, gz @ w.detach().double(), TOL[BF16], "grad_x")
    close(w.grad, gz.t() @ x.detach().double(), TOL[BF16], "grad_w")
    close(b.grad, gz.sum(0), TOL[BF16], "grad_bias")


def test_backward_falls_back_to_torch_without_a_kernel(monkeypatch, caplog):
    """A backward GEMM of a layout the build lacks (the kernel list has no bf16 nt GEMM)
    runs on torch.mm, decided from the list before any library call, and logged once."""
    requires(BF16, "tn", "tt")
    lacking = [k for k in pcr.kernels() if not (k.dtype_a == "bfloat16" and k.layout == "nt")]
    monkeypatch.setattr(pt._fallback, "_kernel_list", lambda: lacking)
    monkeypatch.setattr(pt._fallback, "_COVERED", {})
    spy = Spy(monkeypatch)
    x = matrix(64, 128, "t", BF16).requires_grad_()
    w = matrix(96, 128, "t", BF16).requires_grad_()
    g = matrix(64, 96, "t", BF16)
    with caplog.at_level("WARNING", logger="pycutlass_rt"):
        pt.linear(x, w).backward(g)
        pt.linear(x, w).backward(g)
    assert spy.calls == ["tn", "tt", "tn", "tt"]  # grad_w (nt) never reached the library
    assert ("_grad_mm", "bfloat16", "nt") in pt._cuda._TORCH_MM
    assert sum("no bfloat16 nt" in r.getMessage() for r in caplog.records) == 1
    close(w.grad, 2 * g.double().t() @ x.detach().double(), TOL[BF16], "grad_w on torch")


def test_a_refusal_is_raised_for_that_call_and_the_next_call_runs(monkeypatch):
    """The build holds the layout, but the library refuses one call (a pinned kernel, an
    oversized batch): that call raises, nothing is remembered, the next call runs."""
    requires(BF16, "tn", "tt", "nt")
    refuse = [True]
    spy = Spy(monkeypatch, refuse=lambda layout: layout == "nt" and refuse[0])
    x = matrix(64, 128, "t", BF16).requires_grad_()
    w = matrix(96, 128, "t", BF16).requires_grad_()
    g = matrix(64, 96, "t", BF16)
    with pytest.raises(pcr.UnsupportedError, match="refused nt"):
        pt.linear(x, w).backward(g)
    assert not pt._cuda._TORCH_MM
    refuse[0] = False
    w.grad = x.grad = None
    pt.linear(x, w).backward(g)
    assert spy.calls[-3:] == ["tn", "tt", "nt"]
    close(w.grad, g.double().t() @ x.detach().double(), TOL[BF16], "grad_w")


# ---- training ---------------------------------------------------------------------------------


def train(make, act, dtype, steps=12):
    """Full-batch SGD towards a teacher's outputs (a task the model can learn, so the loss
    falls in bfloat16 too): the loss after each step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(make(256, 512, act), make(512, 64, None)).to("cuda", dtype)
    torch.manual_seed(1)
    x = torch.randn(128, 256, device="cuda")
    y = torch.tanh(x @ torch.randn(256, 64, device="cuda") / 16)
    x = x.to(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    losses = []
    for _ in range(steps):
        loss = F.mse_loss(model(x).float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("dtype, rtol", [(F32, 1e-4), (BF16, 2e-2)])
@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_mlp_trains_to_nn_linears_loss_curve(dtype, rtol, act):
    requires(dtype, "tt", "nt")  # the backward
    requires(dtype, "tn", epilogue="linear" if dtype == F32 else "biasact")
    ours = train(lambda i, o, act: pt.Linear(i, o, activation=act), act, dtype)
    ref = train(reference_linear, act, dtype)
    assert ours[-1] < ours[0], ours
    torch.testing.assert_close(ours, ref, rtol=rtol, atol=0)


# ---- torch.compile ----------------------------------------------------------------------------


def blocks(hidden=512, inter=1024):
    torch.manual_seed(0)
    ours = hf_mlp(hidden, inter, fused=True).to("cuda", BF16)
    ref = hf_mlp(hidden, inter, fused=False).to("cuda", BF16)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


@pytest.mark.parametrize("dynamic", [False, True])
def test_hf_mlp_block_under_compile_fullgraph(dynamic):
    requires(BF16, "tn", epilogue="biasact")  # forward; backward: tt and nt
    requires(BF16, "tt", "nt")
    torch._dynamo.reset()
    ours, ref = blocks()
    compiled = torch.compile(ours, fullgraph=True, dynamic=dynamic)
    for m in (7, 64, 129):
        x = matrix(2 * m, 512, "t", BF16).reshape(2, m, 512)
        with torch.no_grad():
            got, eager = compiled(x), ours(x)
        close(got, eager.double(), 5e-3, f"compiled vs eager, m={m}")
        close(got, ref(x).detach().double(), TOL[BF16] * 2, f"vs nn.Linear, m={m}")
        # training: forward and backward through the compiled block
        xg = x.clone().requires_grad_()
        compiled(xg).float().square().mean().backward()
        grad_x = xg.grad
        xe = x.clone().requires_grad_()
        ours.zero_grad()
        ours(xe).float().square().mean().backward()
        close(grad_x, xe.grad.double(), 2e-2, f"grad compiled vs eager, m={m}")


#: (M, N, K): decode and odd sizes, and large-K ones that pick split-K / stream-K kernels
SHAPES = [(1, 4096, 4096), (16, 1024, 512), (77, 1000, 520), (256, 4096, 4096), (24, 520, 32768)]


def fresh(shape, dtype=BF16):
    return (torch.rand(shape, device="cuda") * 2 - 1).to(dtype)


def compile_ro(fn, dynamic, mode="reduce-overhead"):
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    return torch.compile(fn, mode=mode, dynamic=dynamic, fullgraph=True), counters


def assert_graphed(counters):
    skips = counters["inductor"].get("cudagraph_skips", 0)
    assert skips == 0, "inductor skipped CUDA graphs for this function"


@pytest.mark.parametrize("dynamic", [False, True])
def test_reduce_overhead_linear(dynamic):
    """Each size is captured (no warm-up needed by the library) and replayed; every replay
    follows its new inputs, and large-K problems run split-K / stream-K kernels inside."""
    requires(BF16, "tn", epilogue="biasact")
    f, counters = compile_ro(lambda x, w, b: pt.linear(x, w, b, "gelu"), dynamic)
    picked = {}
    for m, n, k in SHAPES:
        w, b = fresh((n, k)), fresh((n,))
        d = torch.empty(m, n, device="cuda", dtype=BF16)
        picked[(m, n, k)] = pcr.explain(fresh((m, k)), w.t(), None, d, bias=b, activation="gelu")
        picked[(m, n, k)] = picked[(m, n, k)].kernel
        for _ in range(4):  # warm-up, record, replays
            x = fresh((m, k))
            y = f(x, w, b)
            close(y, linear_reference(x, w, b, "gelu"), TOL[BF16], f"{(m, n, k)}")
    assert_graphed(counters)
    split = [k for k in picked.values() if k and pcr._kernels.by_name(k).split != "none"]
    if not split:
        pytest.skip(f"captured, but selection picked no split-K/stream-K kernel here: {picked}")


@pytest.mark.parametrize("dynamic", [False, True])
def test_reduce_overhead_mm(dynamic):
    requires(BF16, "tt")
    f, counters = compile_ro(lambda a, b: pt.mm(a, b), dynamic)
    for m, n, k in SHAPES:
        b = fresh((k, n))
        for _ in range(4):
            a = fresh((m, k))
            close(f(a, b), reference(a, b), TOL[BF16], f"{(m, n, k)}")
    assert_graphed(counters)


def test_reduce_overhead_scaled_mm():
    require("float8_e4m3fn", out=BF16, layout="tn", epilogue="scaled")
    f, counters = compile_ro(lambda a, b, sa, sb: pt.scaled_mm(a, b, sa, sb), dynamic=True)
    for m, n, k in [(16, 1024, 512), (256, 4096, 4096)]:
        w = fresh((n, k), torch.float8_e4m3fn)
        sw = torch.rand(1, n, device="cuda") + 0.5
        for _ in range(4):
            a, sa = fresh((m, k), torch.float8_e4m3fn), torch.rand(m, 1, device="cuda") + 0.5
            want = (a.double() * sa.double()) @ (w.double() * sw.double().t()).t()
            close(f(a, w.t(), sa, sw), want, TOL[BF16], f"{(m, n, k)}")
    assert_graphed(counters)


def test_reduce_overhead_grouped_mm_follows_new_routings():
    """offs is read on the GPU: replays of one captured graph follow each new routing."""
    grouped_kernel("tn")
    f, counters = compile_ro(lambda x, w, offs: pt.grouped_mm(x, w, offs), dynamic=False)
    x, w = moe_case()
    for seed in range(5):
        offs = routing(1000, 8, seed)
        x.copy_(fresh(x.shape))
        close(f(x, w, offs), grouped_reference(x, w, offs), TOL[BF16], f"routing {seed}")
    assert_graphed(counters)


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_compiled_mlp_block_cuda_graphs(mode):
    requires(BF16, "tn", epilogue="biasact")
    ours, ref = blocks()
    f, counters = compile_ro(ours, dynamic=False, mode=mode)
    with torch.no_grad():
        for m in (1, 16, 256):
            for _ in range(3):
                x = fresh((m, 512))
                close(f(x), ref(x).double(), TOL[BF16] * 2, f"{mode} m={m}")
    assert_graphed(counters)


# ---- conv2d -----------------------------------------------------------------------------------

CL = torch.channels_last


def conv_kernel(op, dtype=F16, epilogue="linear"):
    """Skips unless the build holds a kernel of the convolution pass ``op`` ("fprop",
    "dgrad", "wgrad") for ``dtype`` that runs here, with ``epilogue`` or one computing it."""
    require(dtype, epilogue=epilogue, op=op)


def conv_tensors(n=4, c=32, h=15, w=13, k=64, r=3, s=3, groups=1, dtype=F16, seed=0):
    """x (N, C, H, W), w (K, C/groups, R, S) and a bias, channels_last, on the GPU."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(n, c, h, w, generator=g).to(dtype).cuda().contiguous(memory_format=CL)
    wt = torch.randn(k, c // groups, r, s, generator=g) / (c // groups * r * s) ** 0.5
    wt = wt.to(dtype).cuda().contiguous(memory_format=CL)
    b = (torch.rand(k, generator=g) - 0.5).to(dtype).cuda()
    return x, wt, b


def conv_reference(x, w, b, act=None, **geo):
    """act(F.conv2d) in float64 on the CPU."""
    bias = None if b is None else b.double().cpu()
    return TORCH_ACT[act](F.conv2d(x.double().cpu(), w.double().cpu(), bias, **geo)).cuda()


class ConvSpy:
    """Records the library's conv calls the operators make (fprop, dgrad, wgrad)."""

    def __init__(self, monkeypatch):
        self.calls = []
        monkeypatch.setattr(pt._cuda, "_TORCH_CONV", set())
        for op in ("", "_dgrad", "_wgrad"):
            name = f"_pcr_conv2d{op}"
            monkeypatch.setattr(
                pt._cuda, name, self.wrap(op[1:] or "fprop", getattr(pt._cuda, name))
            )

    def wrap(self, op, real):
        def call(*args, **kwargs):
            self.calls.append(op)
            return real(*args, **kwargs)

        return call


#: geometries tests/gpu/test_conv_gpu.py runs on the library's kernels directly
GEOMETRIES = [
    dict(stride=1, padding=1),
    dict(stride=2, padding=1),
    dict(stride=(1, 2), padding=(0, 2)),
    dict(stride=1, padding=2, dilation=2),
]


@pytest.mark.parametrize("act", [None, "relu", "gelu"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("geo", GEOMETRIES, ids=["3x3", "stride2", "pairs", "dilated"])
def test_conv2d(monkeypatch, geo, bias, act):
    conv_kernel("fprop", F16, epilogue="biasact" if bias or act else "linear")
    spy = ConvSpy(monkeypatch)
    x, w, b = conv_tensors()
    b = b if bias else None
    y = pt.conv2d(x, w, b, activation=act, **geo)
    want = conv_reference(x, w, b, act, **geo)
    assert y.shape == want.shape and y.dtype == F16 and y.is_contiguous(memory_format=CL)
    close(y, want, TOL[F16], f"{geo} {act} bias={bias}")
    assert spy.calls == ["fprop"] and not pt._cuda._TORCH_CONV
    # NCHW inputs are made channels_last first: the same result
    y2 = ops.conv2d(
        x.contiguous(),
        w.contiguous(),
        b,
        geo.get("stride", 1),
        geo["padding"],
        geo.get("dilation", 1),
        1,
        act,
    )
    close(y2, want, TOL[F16], "NCHW inputs")


@pytest.mark.parametrize("act", [None, "relu", "silu"])
@pytest.mark.parametrize("geo", GEOMETRIES[:2], ids=["3x3", "stride2"])
def test_conv2d_backward_runs_on_the_librarys_kernels(monkeypatch, geo, act):
    conv_kernel("fprop", F16, epilogue="biasact")
    conv_kernel("dgrad", F16)
    conv_kernel("wgrad", F16)
    spy = ConvSpy(monkeypatch)
    x, w, b = (t.requires_grad_() for t in conv_tensors())
    y = pt.conv2d(x, w, b, activation=act, **geo)
    g = torch.randn(y.shape, device="cuda").to(F16).contiguous(memory_format=CL)
    y.backward(g)
    # one attempt per pass (silu: the forward without it, torch's silu kept for backward)
    assert spy.calls == ["fprop", "dgrad", "wgrad"]
    if geo["stride"] == 1:  # some dgrad kernels take unit strides only (sm90a): torch's then
        assert not pt._cuda._TORCH_CONV
    x64, w64, b64 = (t.detach().double().cpu().requires_grad_() for t in (x, w, b))
    z = TORCH_ACT[act](F.conv2d(x64, w64, b64, **geo))
    want = torch.autograd.grad(z, (x64, w64, b64), g.double().cpu())
    for name, got, ref in zip(("grad_x", "grad_w", "grad_bias"), (x.grad, w.grad, b.grad), want):
        close(got, ref.cuda(), TOL[F16] * 2, name)  # fp16 gradients of fp16 activations


def test_conv2d_float32_follows_cudnns_tf32_setting(monkeypatch):
    """TF32 kernels where torch allows TF32 convolutions; IEEE float32: the GEMM's 3xTF32
    kernels on the unfolded input where the build has them, else torch's."""
    monkeypatch.setattr(pt._cuda, "_TORCH_CONV", set())
    x, w, b = conv_tensors(dtype=F32)
    want = conv_reference(x, w, b, "relu", padding=1)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    close(pt.conv2d(x, w, b, padding=1, activation="relu"), want, TOL[F32], "ieee")
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    close(pt.conv2d(x, w, b, padding=1, activation="relu"), want, 2e-3, "tf32")


def test_conv2d_groups_fall_back_to_torch(monkeypatch, caplog):
    """A grouped convolution with a bias has no kernel or GEMM form in the build: torch's
    convolution runs it, decided from the kernel list before any library call and logged
    once (its gradients run where the library has a form for them, else on torch too)."""
    conv_kernel("fprop", F16)
    x, w, b = conv_tensors(groups=2)
    spy = ConvSpy(monkeypatch)
    x.requires_grad_()
    w.requires_grad_()
    with caplog.at_level("WARNING", logger="pycutlass_rt"):
        for _ in range(2):
            y = pt.conv2d(x, w, b, padding=1, groups=2, activation="relu")
            ref = conv_reference(x.detach(), w.detach(), b, "relu", padding=1, groups=2)
            close(y, ref, TOL[F16])
            assert y.is_contiguous(memory_format=CL)
    assert "fprop" not in spy.calls  # never tried on the library
    assert ("conv2d", "float16", "nhwc grouped bias") in pt._cuda._TORCH_CONV
    assert sum("grouped bias" in r.getMessage() for r in caplog.records) == 1
    y.backward(torch.ones_like(y))
    x64, w64 = (t.detach().double().cpu().requires_grad_() for t in (x, w))
    F.relu(F.conv2d(x64, w64, b.double().cpu(), padding=1, groups=2)).sum().backward()
    # fp16 gradients, torch's or the library's grouped GEMM forms' (4e-3 on the H200)
    close(x.grad, x64.grad.cuda(), 1e-2, "grad_x")
    close(w.grad, w64.grad.cuda(), 1e-2, "grad_w")


@pytest.mark.parametrize("act", [None, "relu"])
def test_opcheck_conv2d(act):
    conv_kernel("fprop", F16, epilogue="biasact")
    conv_kernel("dgrad", F16)
    conv_kernel("wgrad", F16)
    x, w, b = (t.requires_grad_() for t in conv_tensors(n=2, h=9, w=7))
    geo = ([1, 1], [1, 1], [1, 1], 1)
    torch.library.opcheck(ops.conv2d.default, (x, w, b, *geo, act))
    dy = torch.randn(2, 64, 9, 7, device="cuda").to(F16).contiguous(memory_format=CL)
    torch.library.opcheck(ops._conv2d_dgrad.default, (dy, w.detach(), list(x.shape), *geo))
    torch.library.opcheck(ops._conv2d_wgrad.default, (dy, x.detach(), list(w.shape), *geo))


def conv_block(x, w1, b1, w2):
    """Two convolutions with fused epilogues and a residual, as a ResNet block."""
    y = pt.conv2d(x, w1, b1, padding=1, activation="relu")
    return pt.conv2d(y, w2, None, padding=1) + x


@pytest.mark.parametrize("dynamic", [False, True])
def test_conv2d_under_compile_fullgraph(dynamic):
    """torch.compile(fullgraph=True) traces pt.conv2d without a graph break (a break
    raises), forward and backward, over several image sizes."""
    conv_kernel("fprop", F16, epilogue="biasact")
    torch._dynamo.reset()
    _, w1, b1 = conv_tensors(c=32, k=32, seed=1)
    _, w2, _ = conv_tensors(c=32, k=32, seed=2)
    compiled = torch.compile(conv_block, fullgraph=True, dynamic=dynamic)
    for n, h, wd in ((2, 14, 14), (4, 15, 13), (3, 28, 20)):
        x, _, _ = conv_tensors(n=n, h=h, w=wd, c=32, k=32, seed=n)
        with torch.no_grad():
            got, eager = compiled(x, w1, b1, w2), conv_block(x, w1, b1, w2)
        assert got.shape == eager.shape
        close(got, eager.double(), 5e-3, f"compiled vs eager, {(n, h, wd)}")
        ref = (
            conv_reference(conv_reference(x, w1, b1, "relu", padding=1).half(), w2, None, padding=1)
            + x.double()
        )
        close(got, ref, TOL[F16] * 2, f"vs torch, {(n, h, wd)}")
        xg = x.clone().requires_grad_()
        compiled(xg, w1, b1, w2).float().square().mean().backward()
        xe = x.clone().requires_grad_()
        conv_block(xe, w1, b1, w2).float().square().mean().backward()
        close(xg.grad, xe.grad.double(), 2e-2, f"grad compiled vs eager, {(n, h, wd)}")


def test_reduce_overhead_conv2d():
    """mode="reduce-overhead" captures the convolution in its CUDA graphs; replays follow
    new inputs."""
    conv_kernel("fprop", F16, epilogue="biasact")
    f, counters = compile_ro(
        lambda x, w, b: pt.conv2d(x, w, b, stride=2, padding=1, activation="relu"), False
    )
    _, w, b = conv_tensors()
    for seed in range(4):  # warm-up, record, replays
        x, _, _ = conv_tensors(seed=seed + 10)
        close(f(x, w, b), conv_reference(x, w, b, "relu", stride=2, padding=1), TOL[F16])
    assert_graphed(counters)
