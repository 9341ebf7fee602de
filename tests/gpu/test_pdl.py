"""Programmatic dependent launch: sm90a kernels start while the previous kernel drains.

Each GEMM of a chain reads what the one before it wrote and overwrites what that one read
(two buffers, used in turn), with no synchronization between launches: a kernel that
touched global memory before its grid dependency wait would read stale or NaN data, or
clobber its predecessor's inputs. Values stay small integers, so results are exact.
"""

import pytest
from helpers import empty, math_of, matrix, runnable_kernels, torch_dtype

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")

#: kernels launched as programmatic dependents (the sm90a family, grouped ones excepted)
KERNELS = [k.name for k in runnable_kernels() if k.family == 90]
STEPS = 8


def in_layout(x, layout):
    """The row-major matrix ``x`` with the same values, laid out as ``layout`` says."""
    return x if layout == "t" else x.t().contiguous().t()


def selection(rows, cols, dtype, layout):
    """A rows x cols 0/1 matrix with one 1 per row: ``selection @ b`` picks rows of b."""
    s = torch.zeros(rows, cols, device="cuda")
    s[torch.arange(rows), torch.randint(0, cols, (rows,))] = 1
    return in_layout(s.to(dtype), layout)


def shape_for(kern):
    if kern.split == "splitk":  # long enough for the slices to split
        return 256, 256, 16384
    return 272, 528, 320


def run_chain(launch, first, bufs):
    """``STEPS`` launches, each from the buffer the previous one wrote into the other."""
    bufs[0].copy_(first)
    for i in range(STEPS):
        launch(bufs[i % 2], bufs[(i + 1) % 2])
    return bufs[STEPS % 2]


@pytest.mark.skipif(not KERNELS, reason="no sm90a kernel of this build runs on this GPU")
@pytest.mark.parametrize("name", KERNELS)
def test_back_to_back_kernels_see_each_others_writes(name):
    kern = pcr._kernels.by_name(name)
    in_dt, out_dt = torch_dtype(kern.dtype_a), torch_dtype(kern.dtype_d)
    m, n, k = shape_for(kern)
    a = selection(m, k, in_dt, kern.layout[0])
    b = matrix(k, n, kern.layout[1], in_dt, integer=True)
    first = matrix(m, n, "t", out_dt, integer=True)
    step = a.double() @ b.double()
    if out_dt in (torch.float8_e4m3fn, torch.float8_e5m2):  # rounded (saturating) at each step
        top, want = torch.finfo(out_dt).max, first
        for _ in range(STEPS):
            want = (want.double() + step).clamp(-top, top).to(out_dt)
    else:
        want = (first.double() + STEPS * step).to(out_dt)
    bufs = [empty(m, n, out_dt) for _ in range(2)]

    def through_c(prev, out):  # C is the previous D; D is the previous C
        pcr.gemm(a, b, prev, out, 1.0, 1.0, math=math_of(kern), kernel=name)

    got = run_chain(through_c, first, bufs)
    torch.cuda.synchronize()
    assert torch.equal(got, want), f"{(got != want).sum().item()} elements differ (eager)"

    # the same chain captured in a CUDA graph (programmatic edges) and replayed
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        got = run_chain(through_c, first, bufs)
    for buf in bufs:
        buf.fill_(-7)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(got, want), f"{(got != want).sum().item()} elements differ (graph)"


SAME_TYPE = [
    n for n in KERNELS if pcr._kernels.by_name(n).dtype_a == pcr._kernels.by_name(n).dtype_d
]


@pytest.mark.skipif(not SAME_TYPE, reason="no sm90a kernel with D of A's dtype runs here")
@pytest.mark.parametrize("name", SAME_TYPE)
def test_previous_output_as_next_a(name):
    """The TMA loads of A wait too: each GEMM permutes the columns of the previous D."""
    kern = pcr._kernels.by_name(name)
    dt = torch_dtype(kern.dtype_a)
    side = 384
    perm = torch.randperm(side, device="cuda")
    p = in_layout(torch.eye(side, device="cuda")[perm].to(dt), kern.layout[1])
    first = matrix(side, side, "t", dt, integer=True)
    # a row-major D is A as it stands; a column-major A reads it transposed
    view = (lambda x: x) if kern.layout[0] == "t" else (lambda x: x.t())
    want = first.double()
    for _ in range(STEPS):
        want = view(want) @ p.double()
    bufs = [empty(side, side, dt) for _ in range(2)]
    got = run_chain(lambda prev, out: pcr.gemm(view(prev), p, None, out, kernel=name), first, bufs)
    torch.cuda.synchronize()
    assert torch.equal(got, want.to(dt)), f"{(got != want.to(dt)).sum().item()} elements differ"
