"""The second outputs of the ``_aux_`` kernels: the pre-activation ``aux = alpha * a @ b +
beta * c + bias`` beside ``d = act(aux)``, and ``amax = max |d|``, from one kernel, against
a float64 reference (aux, d) and d itself (amax: exactly the largest |d| it holds).

Every aux kernel of the build that runs here is forced by name through activations, each
bias axis and beta in {0, nonzero}; selection, batches, plans, graph capture, K = 0,
staged and split outputs, host arrays and the refusals (misaligned d, scales) are
checked on the chosen kernel.
"""

import pytest
from helpers import check, matrix, reference, runnable_kernels, torch_dtype

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")
AUX = [k.name for k in runnable_kernels() if k.epilogue == "aux"]
needs_aux = pytest.mark.skipif(
    not any(k.dtype_d == "bfloat16" for k in map(pcr._kernels.by_name, AUX)),
    reason="no bf16 aux kernel of this build runs here",
)


def nan_like(d):
    return torch.full_like(d, float("nan"))


def linear_operands(m, n, k, dtype=torch.bfloat16, batch=None):
    """x (M, K) and w.t() (K, N, column-major: tn), d and aux (M, N) of NaN; batched: a
    (L, M, K) x and (L, M, N) outputs against one weight."""
    x = (
        matrix(m, k, "t", dtype)
        if batch is None
        else torch.stack([matrix(m, k, "t", dtype)] * batch)
    )
    w = matrix(n, k, "t", dtype)
    shape = (m, n) if batch is None else (batch, m, n)
    d = torch.full(shape, float("nan"), device="cuda", dtype=dtype)
    return x, w.t(), d, nan_like(d)


@pytest.mark.skipif(not AUX, reason="no aux kernel of this build runs here")
@pytest.mark.parametrize("name", AUX)
def test_aux_kernel_stores_the_pre_activation(name):
    k = pcr._kernels.by_name(name)
    dt = torch_dtype(k.dtype_d)
    tm, tn, tk = k.tile
    shapes = [(tm + 8, 2 * tn + 8, 3 * tk + 8), (5 * tm, 3 * tn, 2 * tk)]
    cases = [
        (act, bias_kind, beta)
        for act in ("gelu", "silu", ("clamp", -0.5, 0.75), None)
        for bias_kind in ("col", "row", None)
        for beta in (0.0, 0.5)
    ]
    for i, (act, bias_kind, beta) in enumerate(cases):
        m, n, kk = shapes[i % 2]
        x, wt, d, aux = linear_operands(m, n, kk, dt)
        c = matrix(m, n, "t", dt)
        bias = {
            "col": (torch.rand(n, device="cuda") * 4 - 2).to(dt),
            "row": (torch.rand(m, 1, device="cuda") * 4 - 2).to(dt),
            None: None,
        }[bias_kind]
        alpha = 1.0 if i % 3 else -0.75
        cc = c if beta else None
        pcr.gemm(x, wt, cc, d, alpha, beta, bias=bias, activation=act, kernel=name, aux=aux)
        what = f"{name} {m}x{n}x{kk} act={act} bias={bias_kind} beta={beta}"
        check(aux, reference(x, wt, cc, alpha, beta, bias), f"{what}: aux")
        check(d, reference(x, wt, cc, alpha, beta, bias, act), f"{what}: d")


@needs_aux
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (77, 1000, 520), (2048, 4096, 1024)])
def test_selection_takes_an_aux_kernel(m, n, k):
    """A Linear's forward keeping the pre-activation for backward: one kernel writes both,
    and explain says so."""
    x, wt, d, aux = linear_operands(m, n, k)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    pcr.gemm(x, wt, None, d, bias=bias, activation="gelu", aux=aux)
    check(aux, reference(x, wt, None, 1.0, 0.0, bias), f"{m}x{n}x{k} aux")
    check(d, reference(x, wt, None, 1.0, 0.0, bias, "gelu"), f"{m}x{n}x{k} d")
    ex = pcr.explain(x, wt, None, d, bias=bias, activation="gelu", aux=aux)
    assert "_aux_" in ex.kernel, ex.kernel
    assert any("pre-activation stored to aux" in note for note in ex.notes), ex.notes


@needs_aux
def test_a_batch_plans_and_graphs_write_aux():
    x, wt, d, aux = linear_operands(96, 264, 128, batch=3)
    bias = torch.randn(264, device="cuda").to(torch.bfloat16)
    want_aux = reference(x, wt, None, 1.0, 0.0, bias)
    pcr.gemm(x, wt, None, d, bias=bias, activation="silu", aux=aux)
    check(aux, want_aux, "batch aux")
    check(d, reference(x, wt, None, 1.0, 0.0, bias, "silu"), "batch d")

    x, wt, d, aux = linear_operands(200, 512, 256)
    bias2 = torch.randn(512, device="cuda").to(torch.bfloat16)
    plan = pcr.Gemm(x, wt, None, d, bias=bias2, activation="relu", aux=aux)
    assert "_aux_" in plan.kernel
    plan.run()
    check(aux, reference(x, wt, None, 1.0, 0.0, bias2), "plan.run aux")
    aux2, d2 = nan_like(aux), nan_like(d)
    plan(x, wt, None, d2, bias=bias2, aux=aux2)
    check(aux2, reference(x, wt, None, 1.0, 0.0, bias2), "plan(new tensors) aux")
    check(d2, reference(x, wt, None, 1.0, 0.0, bias2, "relu"), "plan(new tensors) d")

    graph = torch.cuda.CUDAGraph()
    d.fill_(float("nan")), aux.fill_(float("nan"))
    with torch.cuda.graph(graph):
        pcr.gemm(x, wt, None, d, bias=bias2, activation="relu", aux=aux)
    x.copy_(matrix(200, 256, "t"))
    graph.replay()
    torch.cuda.synchronize()
    check(aux, reference(x, wt, None, 1.0, 0.0, bias2), "graph replay aux")
    check(d, reference(x, wt, None, 1.0, 0.0, bias2, "relu"), "graph replay d")


@needs_aux
def test_k_zero_writes_aux_too():
    """K = 0: no GEMM runs; aux = beta * c + bias and d = act(aux) all the same."""
    x, wt, d, aux = linear_operands(64, 128, 0)
    c = matrix(64, 128, "t")
    bias = torch.randn(128, device="cuda").to(torch.bfloat16)
    pcr.gemm(x, wt, c, d, 1.0, 0.5, bias=bias, activation="gelu", aux=aux)
    z = 0.5 * c.double() + bias.double()
    check(aux, z, "K = 0 aux")
    check(d, torch.nn.functional.gelu(z), "K = 0 d")


@needs_aux
def test_what_aux_cannot_take_is_refused():
    x, wt, d, aux = linear_operands(64, 128, 64)
    with pytest.raises(pcr.UnsupportedError, match="aux needs d and aux 16-byte aligned"):
        pcr.gemm(x, wt[:, :127], None, d[:, :127], activation="gelu", aux=aux[:, :127])
    with pytest.raises(pcr.OverlapError, match="aux overlaps d"):
        pcr.gemm(x, wt, None, d, activation="gelu", aux=d)
    with pytest.raises(pcr.UnsupportedError, match="aux must have d's layout"):
        pcr.gemm(x, wt, None, d, activation="gelu", aux=aux.t().contiguous().t())
    assert torch.isnan(aux).all()  # nothing ran


def scalar_like(d):
    """An amax destination on d's device, holding garbage the call must overwrite."""
    return torch.full((), 12345.0, device=d.device)


def assert_amax(amax, d, what):
    """amax is exactly max |d| (d's own values: the kernel reduces what it stores)."""
    want = d.float().abs().max().item() if d.numel() else 0.0
    assert amax.item() == want, f"{what}: amax {amax.item()} != max |d| {want}"


@pytest.mark.skipif(not AUX, reason="no aux kernel of this build runs here")
@pytest.mark.parametrize("name", AUX)
def test_aux_kernel_reduces_amax(name):
    """Partial tiles, a batch (one maximum over all), with and without aux, each bias
    axis; the largest |d| is sometimes negative."""
    k = pcr._kernels.by_name(name)
    dt = torch_dtype(k.dtype_d)
    tm, tn, tk = k.tile
    for i, (act, keep_aux, batch) in enumerate(
        [("gelu", True, None), (None, False, None), ("silu", False, 2), ("tanh", True, 3)]
    ):
        m, n, kk = (tm + 8, 2 * tn + 8, 3 * tk + 8) if i % 2 else (5 * tm, 3 * tn, 2 * tk)
        x, wt, d, aux = linear_operands(m, n, kk, dt, batch)
        x[..., 0, :] *= -3  # the first row's outputs the largest, of either sign
        bias = (torch.rand(n, device="cuda") - 0.5).to(dt) if i % 3 else None
        amax = scalar_like(d)
        z = aux if keep_aux else None
        pcr.gemm(x, wt, None, d, bias=bias, activation=act, kernel=name, aux=z, amax=amax)
        what = f"{name} {m}x{n}x{kk} batch={batch} act={act} aux={keep_aux}"
        check(d, reference(x, wt, None, 1.0, 0.0, bias, act), f"{what}: d")
        assert_amax(amax, d, what)


@needs_aux
def test_amax_on_every_path():
    """Selection (explain says so), plans, a graph replayed on new inputs (amax starts over
    each time), K = 0 and an empty d (no kernel), a staged d (its padding columns, where
    sigmoid(0) = 0.5, must not count), a split one, host arrays, and NaN."""
    x, wt, d, _ = linear_operands(300, 1024, 512)
    amax = scalar_like(d)
    pcr.gemm(x, wt, None, d, activation="gelu", amax=amax)
    check(d, reference(x, wt, None, 1.0, 0.0, None, "gelu"), "selected: d")
    assert_amax(amax, d, "selected")
    ex = pcr.explain(x, wt, None, d, activation="gelu", amax=amax)
    assert "_aux_" in ex.kernel, ex.kernel
    assert any("max |d| reduced into amax" in note for note in ex.notes), ex.notes

    plan = pcr.Gemm(x, wt, None, d, amax=amax)
    amax.fill_(-1.0)
    plan.run()
    assert_amax(amax, d, "plan.run")
    d2, amax2 = nan_like(d), scalar_like(d)
    plan(x * 2, wt, None, d2, amax=amax2)
    assert_amax(amax2, d2, "plan(new tensors)")

    pcr.gemm(x, wt, None, d, activation="relu", amax=amax)  # selected before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        pcr.gemm(x, wt, None, d, activation="relu", amax=amax)
    for scale in (4.0, 0.25):  # the second replay's maximum is smaller
        x.copy_(matrix(300, 512, "t") * scale)
        graph.replay()
        torch.cuda.synchronize()
        check(d, reference(x, wt, None, 1.0, 0.0, None, "relu"), f"replay x{scale}: d")
        assert_amax(amax, d, f"replay x{scale}")

    x0, wt0, d0, _ = linear_operands(64, 128, 0)
    c = matrix(64, 128, "t")
    pcr.gemm(x0, wt0, c, d0, 1.0, -3.0, activation="tanh", amax=amax)
    assert_amax(amax, d0, "K = 0")
    xe, wte, de, _ = linear_operands(0, 128, 64)
    pcr.gemm(xe, wte, None, de, amax=amax)
    assert amax.item() == 0.0, "empty d: amax 0"

    for m, n, k in [(50, 1001, 256), (8, 8201, 1024)]:  # staged; then split (B >= 16 MB)
        x = torch.ones(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(n, k, device="cuda", dtype=torch.bfloat16)
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        pcr.gemm(x, w.t(), None, d, -1.0 / k, activation="sigmoid", amax=amax)
        check(d, torch.full((m, n), 1 / (1 + 2.718281828459045), device="cuda").double(), "odd N")
        assert_amax(amax, d, f"{m}x{n}x{k} (odd N)")

    np = pytest.importorskip("numpy")
    a, b = np.full((4, 8), -1.5, np.float16), np.ones((16, 8), np.float16).T  # tn
    dh, ah = np.zeros((4, 16), np.float16), np.zeros((), np.float32)
    if any(kk.epilogue == "aux" and kk.dtype_d == "float16" for kk in runnable_kernels()):
        pcr.gemm(a, b, None, dh, amax=ah)
        assert ah == 12.0, f"host arrays: amax {ah}"

    x, wt, d, _ = linear_operands(128, 256, 128)
    x[5, 7] = float("nan")
    pcr.gemm(x, wt, None, d, amax=amax)
    assert torch.isnan(amax).item(), "a NaN in d makes amax NaN"
