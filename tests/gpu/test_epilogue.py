"""Fused epilogues: d = act(alpha * a @ b + beta * c + bias), against a float64 reference.

Every bias/activation kernel of the build that runs here is forced by name through each
activation, each bias axis and beta in {0, nonzero}; selection, plans, graph capture,
K = 0 and the transposed (column-major d) orientation are checked on the chosen kernel.
"""

import pytest
from helpers import (
    canonical_layout,
    check,
    math_of,
    matrix,
    parametrized_activations,
    reference,
    require,
    runnable_kernels,
    tolerance,
    torch_activations,
    torch_dtype,
)

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")
F = torch.nn.functional
#: None, then every name the library takes, then names with parameters
ACTIVATIONS = (*torch_activations(), *parametrized_activations())
FUSED = [k.name for k in runnable_kernels() if k.epilogue == "biasact" and k.dtype_d != "int32"]
#: int8 -> int32: computed in int32, exactly (relu and clamp to integer bounds)
FUSED_INT32 = [
    k.name for k in runnable_kernels() if k.epilogue == "biasact" and k.dtype_d == "int32"
]


def operands(m, n, k, layout, dtype, out=None):
    a = matrix(m, k, layout[0], dtype)
    b = matrix(k, n, layout[1], dtype)
    c = matrix(m, n, "t", out or dtype)
    return a, b, c


def bias_for(kind, m, n, dtype):
    if kind == "col":  # one value per column of d: a linear layer's bias
        return (torch.rand(n, device="cuda") * 4 - 2).to(dtype)
    if kind == "row":
        return (torch.rand(m, 1, device="cuda") * 4 - 2).to(dtype)
    return None


@pytest.mark.skipif(not FUSED, reason="no fused-epilogue kernel of this build runs here")
@pytest.mark.parametrize("name", FUSED)
def test_fused_kernel(name):
    k = pcr._kernels.by_name(name)
    in_dt, dt = torch_dtype(k.dtype_a), torch_dtype(k.dtype_d)  # fp32 out of 16-bit too
    tm, tn, tk = k.tile
    # a partial tile at each edge (by an odd amount where the kernel takes any alignment),
    # and a problem of several waves
    edge = 3 if k.align[0] == 1 else 8
    shapes = [(tm + edge, 2 * tn + 8, 3 * tk + edge), (5 * tm, 7 * tn, 2 * tk)]
    cases = [
        (act, bias, beta)
        for act in ACTIVATIONS
        for bias in ("col", "row", None)
        for beta in (0.0, 0.5)
    ]
    for i, (act, bias_kind, beta) in enumerate(cases):
        if act is None and bias_kind is None:
            continue  # the plain epilogue: test_kernels covers it
        m, n, kk = shapes[i % 2]
        a, b, c = operands(m, n, kk, k.layout, in_dt, dt)
        bias = bias_for(bias_kind, m, n, dt)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
        alpha = 1.0 if i % 3 else -0.75
        pcr.gemm(
            a,
            b,
            c if beta else None,
            d,
            alpha,
            beta,
            bias=bias,
            activation=act,
            math=math_of(k),
            kernel=name,
        )
        check(
            d,
            reference(a, b, c, alpha, beta, bias, act),
            f"{name} {m}x{n}x{kk} act={act} bias={bias_kind} beta={beta}",
            tolerance(k, dt),
        )


@pytest.mark.skipif(not FUSED_INT32, reason="no int8 -> int32 fused kernel of this build runs here")
@pytest.mark.parametrize("name", FUSED_INT32)
def test_int32_fused_kernel_is_exact(name):
    """int8 -> int32 with a bias (per column, per row), relu or clamp, and beta * c: equal
    to an int64 reference, with c and the bias near 2^28, where float epilogue arithmetic
    would round the low bits off."""
    k = pcr._kernels.by_name(name)
    tm, tn, tk = k.tile
    shapes = [(tm + 8, 2 * tn + 8, 3 * tk + 16), (5 * tm, 7 * tn, 2 * tk)]
    big = 1 << 28
    cases = [
        (act, bias_kind, beta)
        for act in (None, "relu", ("clamp", -(1 << 27), 1 << 27))
        for bias_kind in ("col", "row", None)
        for beta in (0, 1, -2)
    ]
    for i, (act, bias_kind, beta) in enumerate(cases):
        if act is None and bias_kind is None:
            continue  # the plain epilogue: test_kernels covers it
        m, n, kk = shapes[i % 2]
        a, b = matrix(m, kk, "t", torch.int8), matrix(kk, n, "n", torch.int8)
        c = torch.randint(-big, big, (m, n), device="cuda", dtype=torch.int32)
        shape = {"col": (n,), "row": (m, 1), None: None}[bias_kind]
        bias = shape and torch.randint(-big, big, shape, device="cuda", dtype=torch.int32)
        alpha = 1 if i % 3 else -3
        d = torch.full((m, n), -123456789, device="cuda", dtype=torch.int32)
        pcr.gemm(a, b, c if beta else None, d, alpha, beta, bias=bias, activation=act, kernel=name)
        want = alpha * (a.cpu().long() @ b.cpu().long()) + beta * c.cpu().long()
        if bias is not None:
            want += bias.cpu().long()
        if act == "relu":
            want = want.clamp_min(0)
        elif act is not None:
            want = want.clamp(act[1], act[2])
        what = f"{name} {m}x{n}x{kk} act={act} bias={bias_kind} beta={beta}"
        wrong = (d.cpu().long() != want).sum().item()
        assert wrong == 0, f"{what}: {wrong} elements differ"


def test_fp32_gemm_with_relu_is_fused():
    """CUTLASS's Python interface's own example, an fp32 GEMM with a ReLU (row-major a and
    b): selection takes a fused kernel, at fp32's accuracy."""
    require(torch.float32, layout="tt", epilogue="biasact")
    a, b = matrix(300, 520, "t", torch.float32), matrix(520, 260, "t", torch.float32)
    d = torch.full((300, 260), float("nan"), device="cuda", dtype=torch.float32)
    pcr.gemm(a, b, None, d, activation="relu")
    check(d, reference(a, b, None, 1.0, 0.0, None, "relu"), "fp32 relu", 1e-5)
    assert "biasact" in pcr.explain(a, b, None, d, activation="relu").kernel


def fused_available(layout="tn", dtype="bfloat16"):
    return any(k.layout == layout and k.dtype_d == dtype for k in map(pcr._kernels.by_name, FUSED))


needs_fused = pytest.mark.skipif(not fused_available(), reason="no bf16 tn fused kernel here")


@needs_fused
@pytest.mark.parametrize(
    "m,n,k", [(1, 4096, 4096), (16, 1024, 512), (1000, 3000, 520), (4096, 4096, 4096)]
)
def test_selection_picks_a_fused_kernel(m, n, k):
    x = matrix(m, k, "t")
    w = matrix(n, k, "t")  # a Linear's weight: x @ w.t() is a tn problem
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.gemm(x, w.t(), None, d, bias=bias, activation="gelu")
    check(d, reference(x, w.t(), None, 1.0, 0.0, bias, "gelu"), f"selected {m}x{n}x{k}")
    ex = pcr.explain(x, w.t(), None, d, bias=bias, activation="gelu")
    assert "biasact" in ex.kernel and any("fused epilogue" in note for note in ex.notes)
    # matches torch's own fused-by-convention path
    want = F.gelu(F.linear(x.float(), w.float(), bias.float())).to(torch.bfloat16)
    assert ((d.float() - want.float()).norm() / want.float().norm()).item() < 1.6e-2


@needs_fused
def test_transposed_output_flips_the_bias_axis():
    """A column-major d runs as d^T = b^T a^T: a per-column bias becomes per-row there."""
    require(torch.bfloat16, layout=canonical_layout("t", "t", "n"), epilogue="biasact")
    m, n, k = 300, 200, 136
    a, b, _ = operands(m, n, k, "tt", torch.bfloat16)
    for kind in ("col", "row"):
        bias = bias_for(kind, m, n, torch.bfloat16)
        d = torch.full((n, m), float("nan"), device="cuda", dtype=torch.bfloat16).t()
        pcr.gemm(a, b, None, d, bias=bias, activation="silu")
        check(d, reference(a, b, None, 1.0, 0.0, bias, "silu"), f"column-major d, bias {kind}")


@needs_fused
def test_k_zero_applies_bias_and_activation():
    m, n = 70, 90
    a = matrix(m, 0, "t")
    b = matrix(0, n, "t")
    c = matrix(m, n, "t")
    bias = bias_for("col", m, n, torch.bfloat16)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.gemm(a, b, c, d, 1.0, 2.0, bias=bias, activation="relu")
    check(d, F.relu(2.0 * c.double() + bias.double()), "K = 0")


@needs_fused
def test_plan_and_graph_capture_with_bias():
    m, n, k = 256, 1024, 512
    x, w = matrix(m, k, "t"), matrix(n, k, "t")
    bias = bias_for("col", m, n, torch.bfloat16)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    plan = pcr.Gemm(x, w.t(), None, d, bias=bias, activation="gelu_tanh")
    assert "biasact" in plan.kernel
    plan.run()
    want = reference(x, w.t(), None, 1.0, 0.0, bias, "gelu_tanh")
    check(d, want, "plan")
    bias2 = bias_for("col", m, n, torch.bfloat16)
    plan(x, w.t(), None, d, bias=bias2)
    check(d, reference(x, w.t(), None, 1.0, 0.0, bias2, "gelu_tanh"), "plan on a new bias")
    with pytest.raises(pcr.InvalidArgumentError, match="another problem"):
        plan(x, w.t(), None, d)  # the plan has a bias: a call without one is another problem
    # capture: gemm and the plan, replayed after the inputs change
    g = torch.cuda.CUDAGraph()
    d2 = torch.empty_like(d)
    pcr.gemm(x, w.t(), None, d2, bias=bias, activation="relu")  # warm: select outside capture
    with torch.cuda.graph(g):
        pcr.gemm(x, w.t(), None, d2, bias=bias, activation="relu")
        plan.run()
    x.copy_(matrix(m, k, "t"))
    d.fill_(float("nan"))
    d2.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check(d2, reference(x, w.t(), None, 1.0, 0.0, bias, "relu"), "graph replay of gemm")
    check(d, reference(x, w.t(), None, 1.0, 0.0, bias, "gelu_tanh"), "graph replay of plan")


@needs_fused
def test_misaligned_bias_takes_an_any_alignment_kernel():
    m, n, k = 64, 200, 64
    x, w = matrix(m, k, "t"), matrix(n, k, "t")
    store = torch.randn(n + 1, device="cuda").to(torch.bfloat16)
    bias = store[1:]  # 2-byte aligned
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.gemm(x, w.t(), None, d, bias=bias, activation="relu")
    check(d, reference(x, w.t(), None, 1.0, 0.0, bias, "relu"), "misaligned bias")
    name = pcr.explain(x, w.t(), None, d, bias=bias, activation="relu").kernel
    assert name.endswith("_a1"), name


def test_combinations_without_a_fused_kernel_are_refused():
    """A dtype whose kernels here have no fused epilogue (int8 or float64 in a build
    filtered without theirs): the error says so and lists what has one; nothing runs
    unfused."""
    fused = {k.dtype_a for k in pcr.kernels() if k.epilogue == "biasact"}
    plain = [
        k
        for k in runnable_kernels()
        if k.dtype_a in ("int8", "float64") and k.dtype_a not in fused and k.layout == "tn"
    ]
    if not plain:
        pytest.skip("every int8 and float64 kernel here has a fused twin, or there are none")
    dt, out = torch_dtype(plain[0].dtype_a), torch_dtype(plain[0].dtype_d)
    a, b = matrix(64, 64, "t", dt, integer=True), matrix(64, 64, "n", dt, integer=True)
    d = torch.zeros(64, 64, device="cuda", dtype=out)
    bias = torch.zeros(64, device="cuda", dtype=out)
    with pytest.raises(pcr.UnsupportedError, match="fused bias/activation epilogue"):
        pcr.gemm(a, b, None, d, bias=bias)
    with pytest.raises(pcr.UnsupportedError, match="fused bias/activation epilogue"):
        pcr.gemm(a, b, None, d, activation="relu")
    assert torch.count_nonzero(d) == 0


@needs_fused
def test_a_plan_runs_with_its_activations_parameters():
    """The parameters travel per call (pcr_extras): a plan keeps those it was built with,
    for its bound tensors and for new ones."""
    act = ("clamp", -0.5, 0.75)
    x, w = matrix(64, 256, "t"), matrix(128, 256, "t")
    d = torch.full((64, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
    plan = pcr.Gemm(x, w.t(), None, d, activation=act)
    plan.run()
    check(d, reference(x, w.t(), None, 1.0, 0.0, None, act), "plan.run clamp")
    x2, d2 = matrix(64, 256, "t"), torch.empty_like(d)
    plan(x2, w.t(), None, d2)
    check(d2, reference(x2, w.t(), None, 1.0, 0.0, None, act), "plan(new tensors) clamp")
    assert "clamp(-0.5, 0.75)" in " ".join(pcr.explain(x, w.t(), None, d, activation=act).notes)
