"""pycutlass_rt.torch lends the library torch's caching allocator: eager calls' scratch
shows in torch's statistics and nothing is kept per stream; captured graphs still own
theirs; results are those of the library's own pool."""

import pytest
from helpers import matrix, reference, runnable_kernels

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")
pt = pytest.importorskip("pycutlass_rt.torch")
BF16 = torch.bfloat16


def streamk_kernel():
    """A bf16 tn stream-K kernel of this build that runs here: its workspace is scratch."""
    for k in runnable_kernels():
        if k.split == "streamk" and (k.dtype_a, k.dtype_d, k.layout) == (
            "bfloat16",
            "bfloat16",
            "tn",
        ):
            return k.name
    pytest.skip("no bf16 tn stream-K kernel of this build runs here")


def operands(m=96, n=4096, k=4096):
    return (
        matrix(m, k, "t", BF16),
        matrix(k, n, "n", BF16),
        torch.empty(m, n, device="cuda", dtype=BF16),
    )


@pytest.fixture
def lent():
    pt.use_caching_allocator()
    pcr.empty_cache()
    yield
    pt.use_caching_allocator()


def allocations():
    return torch.cuda.memory_stats()["allocation.all.allocated"]


def test_eager_scratch_comes_from_torch_and_nothing_is_kept(lent):
    kernel = streamk_kernel()
    a, b, d = operands()
    assert pcr.memory_stats(0)["lent"]
    before = allocations()
    for _ in range(3):
        pcr.gemm(a, b, None, d, kernel=kernel)
    torch.cuda.synchronize()
    assert allocations() >= before + 3  # one workspace per call, from torch's cache
    assert pcr.memory_stats(0)["kept"] == 0
    torch.testing.assert_close(d.double(), reference(a, b), rtol=2e-2, atol=2e-2 * 64)


def test_staged_operands_come_from_torch_too(lent):
    a = torch.randn(127, 4098, device="cuda", dtype=BF16)[:, :4097]  # no 16-byte rows
    b = torch.randn(4097, 1000, device="cuda", dtype=BF16)
    d = torch.empty(127, 1000, device="cuda", dtype=BF16)
    if not any("aligned scratch" in note for note in pcr.explain(a, b, None, d).notes):
        pytest.skip("an any-alignment kernel runs this problem unstaged")
    before = allocations()
    pcr.gemm(a, b, None, d)
    torch.cuda.synchronize()
    assert allocations() > before and pcr.memory_stats(0)["kept"] == 0
    torch.testing.assert_close(d.double(), reference(a, b), rtol=2e-2, atol=2e-2 * 64)


def test_a_captured_graph_owns_its_scratch_and_replays(lent):
    kernel = streamk_kernel()
    a, b, d = operands()
    pcr.gemm(a, b, None, d, kernel=kernel)  # warm-up, as torch's recipe does
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        pcr.gemm(a, b, None, d, kernel=kernel)
    d.zero_()
    a.copy_(torch.randn_like(a))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(d.double(), reference(a, b), rtol=2e-2, atol=2e-2 * 64)


def test_the_pool_again_keeps_buffers(lent):
    kernel = streamk_kernel()
    a, b, d = operands()
    pt.use_caching_allocator(False)
    assert not pcr.memory_stats(0)["lent"]
    pcr.gemm(a, b, None, d, kernel=kernel)
    torch.cuda.synchronize()
    assert pcr.memory_stats(0)["kept"] > 0
