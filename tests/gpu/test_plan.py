"""Bound plans (pycutlass_rt.Gemm): runs, rebinding, graph capture, stream-K, misuse."""

import numpy as np
import pytest
from helpers import matrix, require

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")
BF16 = torch.bfloat16


def ref(a, b, c=None, alpha=1.0, beta=0.0):
    r = alpha * (a.double() @ b.double())
    return r + beta * c.double() if c is not None and beta else r


def close(d, r, what, tol=1.6e-2):
    torch.cuda.synchronize()
    assert not torch.isnan(d).any(), f"{what}: NaN in output"
    err = ((d.double() - r).norm() / r.norm().clamp_min(1e-30)).item()
    assert err <= tol, f"{what}: relative error {err:.2e}"


def streamk_kernels():
    try:
        names = [
            k.name
            for k in pcr.kernels()
            if k.split == "streamk"
            and k.dtype_a == "bfloat16"
            and k.dtype_d == "bfloat16"
            and k.layout == "tn"
        ]
    except pcr.Error:
        return []
    return names


@pytest.mark.parametrize(
    "m,n,k", [(64, 64, 64), (256, 4096, 4096), (127, 1000, 4097), (1, 4096, 8192)]
)
def test_run_matches_gemm_and_reference(m, n, k):
    a, b = matrix(m, k, "t", BF16), matrix(k, n, "n", BF16)
    c = matrix(m, n, "t", BF16)
    d, d_ref = (torch.full((m, n), float("nan"), device="cuda", dtype=BF16) for _ in range(2))
    plan = pcr.Gemm(a, b, c, d, 0.5, 2.0)
    assert plan.kernel == pcr.explain(a, b, c, d, 0.5, 2.0).kernel
    plan.run()
    pcr.gemm(a, b, c, d_ref, 0.5, 2.0)
    torch.cuda.synchronize()
    assert torch.equal(d, d_ref), "a plan and gemm must launch the same kernel the same way"
    close(d, ref(a, b, c, 0.5, 2.0), f"plan {m}x{n}x{k}")


def test_call_with_other_tensors_and_back():
    require(BF16, layout="tt")
    m, n, k = 200, 136, 264
    a, b = matrix(m, k, "t", BF16), matrix(k, n, "t", BF16)
    d = torch.empty(m, n, device="cuda", dtype=BF16)
    plan = pcr.Gemm(a, b, None, d)
    a2, b2 = matrix(m, k, "t", BF16), matrix(k, n, "t", BF16)
    d2 = torch.empty_like(d)
    assert plan(a2, b2, None, d2) is d2
    close(d2, ref(a2, b2), "plan(other tensors)")
    d.fill_(float("nan"))
    plan.run()  # the bound tensors again, after the parameters were rebuilt for others
    close(d, ref(a, b), "run after call")


def test_other_problem_is_refused():
    require(BF16, layout="tt")
    a, b = matrix(128, 64, "t", BF16), matrix(64, 32, "t", BF16)
    d = torch.empty(128, 32, device="cuda", dtype=BF16)
    plan = pcr.Gemm(a, b, None, d)
    with pytest.raises(pcr.InvalidArgumentError, match="another problem"):
        plan(matrix(128, 72, "t", BF16), matrix(72, 32, "t", BF16), None, d)
    with pytest.raises(pcr.InvalidArgumentError, match="another problem"):
        plan(a, matrix(64, 32, "n", BF16), None, d)  # other layout of b


def test_host_arrays_are_refused():
    require(torch.float16)  # known dtypes, so the host check is reached
    a = np.ones((8, 8), np.float16)
    with pytest.raises(pcr.InvalidArgumentError, match="GPU tensors"):
        pcr.Gemm(a, a, None, np.empty((8, 8), np.float16))


def test_closed_plan_fails_cleanly():
    require(BF16, layout="tt")
    a = matrix(64, 64, "t", BF16)
    plan = pcr.Gemm(a, a, None, torch.empty_like(a))
    plan.close()
    with pytest.raises(pcr.InvalidArgumentError):
        plan.run()
    plan.close()  # twice is harmless


@pytest.mark.parametrize("use_plan", [True, False], ids=["plan", "gemm"])
def test_graph_capture_replays_new_inputs(use_plan):
    m, n, k = 96, 4096, 4096  # few tiles: stream-K where the build has it
    a, b = matrix(m, k, "t", BF16), matrix(k, n, "n", BF16)
    c = matrix(m, n, "t", BF16)
    d = torch.empty(m, n, device="cuda", dtype=BF16)
    plan = pcr.Gemm(a, b, c, d, 1.0, 1.0) if use_plan else None
    if not use_plan:
        pcr.gemm(a, b, c, d, 1.0, 1.0)  # selection and workspace outside capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run() if use_plan else pcr.gemm(a, b, c, d, 1.0, 1.0)
    for _ in range(3):
        a.copy_(matrix(m, k, "t", BF16))
        d.fill_(float("nan"))
        g.replay()
        close(d, ref(a, b, c, 1.0, 1.0), "graph replay")


def test_explicit_and_side_streams():
    require(BF16, layout="tt")
    a, b = matrix(512, 256, "t", BF16), matrix(256, 384, "t", BF16)
    d = torch.empty(512, 384, device="cuda", dtype=BF16)
    plan = pcr.Gemm(a, b, None, d)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        d.fill_(float("nan"))
        plan.run()  # torch's current stream: s, ordered after the fill
    s.synchronize()
    close(d, ref(a, b), "current stream")
    d.fill_(float("nan"))
    torch.cuda.synchronize()
    plan.run(stream=s)
    s.synchronize()
    close(d, ref(a, b), "explicit stream")


@pytest.mark.parametrize("name", streamk_kernels())
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (64, 1024, 14336), (300, 520, 8200)])
def test_stream_k_plan_is_deterministic(name, m, n, k):
    a, b = matrix(m, k, "t", BF16), matrix(k, n, "n", BF16)
    d1, d2 = (torch.empty(m, n, device="cuda", dtype=BF16) for _ in range(2))
    plan = pcr.Gemm(a, b, None, d1, kernel=name)
    plan.run()
    plan(a, b, None, d2)
    for _ in range(3):
        plan.run()
    torch.cuda.synchronize()
    assert torch.equal(d1, d2), f"{name}: stream-K fix-up must be deterministic"
    close(d1, ref(a, b), name)


def test_a_plan_is_a_context_manager_that_closes():
    a, b = matrix(64, 128, "t", BF16), matrix(128, 96, "n", BF16)
    d = torch.empty(64, 96, device="cuda", dtype=BF16)
    with pcr.Gemm(a, b, None, d) as plan:
        plan.run()
        close(d, ref(a, b), "plan in a with block")
    with pytest.raises(pcr.InvalidArgumentError, match="closed"):
        plan.run(stream=torch.cuda.current_stream())
