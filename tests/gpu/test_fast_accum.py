"""fp8 fast accumulation on the GPU: math="fast_accum" (torch._scaled_mm's
use_fast_accum=True) takes the build's FA kernels, which agree with the precise kernels
and with torch within fp8 accumulation error; without it no FA kernel runs."""

import pytest
from helpers import runnable_kernels

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")
E4M3 = torch.float8_e4m3fn


def fa_kernels():
    return [
        k
        for k in runnable_kernels()
        if k.schedule in ("coopfa", "pingpongfa")
        and (k.dtype_a, k.dtype_d) == ("float8_e4m3fn", "bfloat16")
    ]


@pytest.fixture
def fa():
    ks = fa_kernels()
    if not ks:
        pytest.skip("no e4m3 -> bf16 fast-accumulation kernel of this build runs here")
    return ks


def operands(m, n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.rand(m, k, device="cuda", generator=g) * 4 - 2).to(E4M3)
    w = (torch.rand(n, k, device="cuda", generator=g) * 4 - 2).to(E4M3)
    return a, w, torch.empty(m, n, device="cuda", dtype=torch.bfloat16)


def reference(a, w):
    return a.double() @ w.double().t()


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (127, 1000, 4096), (2048, 7168, 2048)])
def test_every_fa_kernel_against_float64(fa, shape):
    m, n, k = shape
    a, w, d = operands(m, n, k)
    ref = reference(a, w)
    scale = ref.abs().max().item()
    for kern in fa:
        if kern.epilogue != "linear":
            continue
        pcr.gemm(a, w.t(), None, d, math="fast_accum", kernel=kern.name)
        err = (d.double() - ref).abs().max().item() / scale
        assert err < 2e-2, (kern.name, shape, err)  # bf16 output, reduced-precision sums


def test_selection_takes_fa_kernels_only_when_allowed(fa):
    a, w, d = operands(512, 4096, 4096)
    fast = pcr.explain(a, w.t(), None, d, math="fast_accum")
    precise = pcr.explain(a, w.t(), None, d)
    assert "fa_" in fast.kernel and "fa_" not in precise.kernel
    assert any("fast_accum" in note for note in fast.notes)
    pcr.gemm(a, w.t(), None, d, math="fast_accum")
    fast_d = d.clone()
    pcr.gemm(a, w.t(), None, d)
    assert (fast_d.double() - d.double()).abs().max() <= 2e-2 * d.double().abs().max()


def test_torch_op_matches_torch_scaled_mm_with_fast_accumulation(fa):
    import pycutlass_rt.torch as pt

    a, w, _ = operands(256, 2048, 4096, seed=1)
    sa = torch.rand(256, 1, device="cuda") + 0.5
    sw = torch.rand(1, 2048, device="cuda") + 0.5
    ours = pt.scaled_mm(a, w.t(), sa, sw, out_dtype=torch.bfloat16, use_fast_accum=True)
    try:
        theirs = torch._scaled_mm(a, w.t(), sa, sw, out_dtype=torch.bfloat16, use_fast_accum=True)
    except RuntimeError as e:  # torch's own limits for this recipe on this GPU
        pytest.skip(f"torch._scaled_mm does not run it here: {e}")
    scale = theirs.double().abs().max()
    assert (ours.double() - theirs.double()).abs().max() <= 2e-2 * scale


def test_a_plan_keeps_its_math_and_replays_in_a_graph(fa):
    a, w, d = operands(64, 4096, 4096, seed=2)
    plan = pcr.Gemm(a, w.t(), None, d, math="fast_accum")
    assert plan.kernel in {k.name for k in fa}
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run()
    d.zero_()
    g.replay()
    torch.cuda.synchronize()
    ref = reference(a, w)
    assert (d.double() - ref).abs().max() <= 2e-2 * ref.abs().max()
