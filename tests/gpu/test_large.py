"""Problems past 2^31 elements: every kernel family and the staging copy index with 64 bits.

Rows on either side of the 2^31-element offset are checked against an fp64 reference: a
32-bit offset would wrap there and read (or write) another row.
"""

import pytest
from helpers import runnable_kernels

import pycutlass_rt as pcr
from pycutlass_rt._abi import Staged

torch = pytest.importorskip("torch")

M, N, K = 2**21 + 37, 1024, 1024  # a and d hold 2^31 + 37 * 1024 elements each


def one_per_family():
    """The first runnable bf16 tn kernel of each (family, split, alignment) kind."""
    return [
        k.name
        for k in runnable_kernels(
            lambda k: (
                k.family,
                k.split,
                k.swap_ab,
                k.align[0] == 1,
                k.dtype_a,
                k.dtype_d,
                k.layout,
            )
        )
        if (k.dtype_a, k.dtype_d, k.layout) == ("bfloat16", "bfloat16", "tn")
    ]


def rows_to_check(rows, ld):
    """Rows at the start, the end, and around the row that crosses 2^31 elements."""
    cross = 2**31 // ld
    return torch.tensor(
        sorted({0, 1, cross - 1, cross, cross + 1, rows - 2, rows - 1}), device="cuda"
    )


def check_rows(a, b, d, what):
    torch.cuda.synchronize()
    idx = torch.cat(
        [rows_to_check(a.shape[0], a.stride(0)), rows_to_check(d.shape[0], d.stride(0))]
    )
    want = a[idx].double() @ b.double()
    got = d[idx].double()
    err = ((got - want).norm() / want.norm()).item()
    assert err < 1.6e-2, f"{what}: relative error {err:.2e} on rows {idx.tolist()}"


@pytest.fixture(scope="module")
def operands():
    torch.manual_seed(0)
    a = torch.empty(M, K, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    b = torch.empty(N, K, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1).t()
    d = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    yield a, b, d
    del a, b, d
    torch.cuda.empty_cache()


@pytest.mark.parametrize("kernel", [None] + one_per_family())
def test_past_2_31_elements(operands, kernel):
    a, b, d = operands
    assert a.numel() > 2**31 and d.numel() > 2**31
    d.fill_(float("nan"))
    if kernel and "_splitk_" in kernel:  # its output tiles fill the GPU: split-K would not split
        with pytest.raises(pcr.UnsupportedError, match="a data-parallel kernel runs it"):
            pcr.gemm(a, b, None, d, kernel=kernel)
        return
    pcr.gemm(a, b, None, d, kernel=kernel)
    check_rows(a, b, d, kernel or pcr.explain(a, b, None, d).kernel)


def test_past_2_31_elements_staged(operands):
    """An odd K: a (past 2^31 elements) is copied into aligned scratch, a fast kernel runs."""
    _, b, _ = operands
    rows = 2**31 // (K - 1) + 37
    a = torch.empty(rows, K - 1, device="cuda", dtype=torch.bfloat16).uniform_(-1, 1)
    b = b[: K - 1]
    d = torch.empty(rows, N, device="cuda", dtype=torch.bfloat16).fill_(float("nan"))
    assert a.numel() > 2**31
    e = pcr.explain(a, b, None, d)
    assert e.problem["staged"] & Staged.STAGED_A, e
    pcr.gemm(a, b, None, d)
    check_rows(a, b, d, f"staged, {e.kernel}")
