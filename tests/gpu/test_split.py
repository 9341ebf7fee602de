"""Parallel split-K kernels: K slices run side by side into fp32 partials, summed in order.

Shapes here are chosen so that every kernel really splits (the model's slices
mirrors the C side's choice), including a K that is not a whole number of K tiles.
"""

import pytest
from helpers import empty, matrix, reference, runnable_kernels, tolerance, torch_dtype

import pycutlass_rt as pcr
from pycutlass_rt import _model

torch = pytest.importorskip("torch")

KERNELS = [k.name for k in runnable_kernels() if k.split == "splitk"]
#: 4 tiles x 32 slices; 25 slices of 41 alignment units each, a K that is not whole K tiles
#: (8200 for 8-element units, 16400 for fp8's 16); one tile row, 16 slices
SHAPES = ["256x256x16384", "200x136x1025align", "24x520x32768"]


def shape(kern, spec):
    m, n, k = spec.split("x")
    return int(m), int(n), (1025 * kern.align[0] if k == "1025align" else int(k))


def operands(kern, m, n, k, integer):
    in_dt, out_dt = torch_dtype(kern.dtype_a), torch_dtype(kern.dtype_d)
    return (
        matrix(m, k, kern.layout[0], in_dt, integer=integer),
        matrix(k, n, kern.layout[1], in_dt, integer=integer),
        matrix(m, n, "t", out_dt, integer=integer),
    )


@pytest.mark.skipif(not KERNELS, reason="no split-K kernel of this build runs on this GPU")
@pytest.mark.parametrize("spec", SHAPES)
@pytest.mark.parametrize("name", KERNELS)
def test_split_k_is_exact_and_deterministic(name, spec):
    kern = pcr._kernels.by_name(name)
    m, n, k = shape(kern, spec)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert _model.terms(kern, m, n, k, sms).slices > 1
    out_dt = torch_dtype(kern.dtype_d)
    # integers in [-4, 4]: every partial sum is exact in fp32, so D is the rounded reference
    a, b, c = operands(kern, m, n, k, True)
    d = empty(m, n, out_dt)
    pcr.gemm(a, b, c, d, 0.5, 2.0, kernel=name)
    want = reference(a, b, c, 0.5, 2.0).to(out_dt)
    assert torch.equal(d, want), f"{(d != want).sum().item()} elements differ"
    # random data: within tolerance, and the same bits on every run (slices summed in order)
    a, b, c = operands(kern, m, n, k, False)
    first = torch.empty((m, n), device="cuda", dtype=out_dt)
    pcr.gemm(a, b, c, first, 1.0, -1.0, kernel=name)
    ref = reference(a, b, c, 1.0, -1.0)
    err = ((first.double() - ref).norm() / ref.norm()).item()
    assert err <= tolerance(kern, out_dt), f"relative error {err:.2e}"
    again = torch.empty_like(first)
    pcr.gemm(a, b, c, again, 1.0, -1.0, kernel=name)
    assert torch.equal(first, again)


@pytest.mark.skipif(not KERNELS, reason="no split-K kernel of this build runs on this GPU")
@pytest.mark.parametrize("name", KERNELS)
def test_split_k_c_is_d_and_graph_replay(name):
    kern = pcr._kernels.by_name(name)
    m, n, k = shape(kern, SHAPES[0])
    a, b, d = operands(kern, m, n, k, True)
    want = reference(a, b, d, 1.0, 1.0).to(d.dtype)
    pcr.gemm(a, b, d, d, 1.0, 1.0, kernel=name)  # C is D: read and written by one thread
    assert torch.equal(d, want)
    # inside a CUDA graph: both launches (slices, sum) captured, the workspace reused
    out = torch.empty_like(d)
    pcr.gemm(a, b, None, out, kernel=name)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        pcr.gemm(a, b, None, out, kernel=name)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, reference(a, b).to(out.dtype))
