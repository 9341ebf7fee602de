"""The library's own ranking of new problems (pcr_selector_enable): once a device's first
selection has gone through Python and no tuned cache has a say there, the library ranks
each new problem itself, with the same pcr_rank, and takes the kernel Python would."""

import random
import time

import pytest
from helpers import require

import pycutlass_rt as pcr
from pycutlass_rt import _call

torch = pytest.importorskip("torch")
BF16 = torch.bfloat16


pytestmark = pytest.mark.usefixtures("cache_dir")  # an empty tuned cache (conftest.py)


def operands(m, n, k):
    """(a, b, c, d) of a bf16 tn problem, c None."""
    a = torch.randn(m, k, device="cuda", dtype=BF16)
    b = torch.randn(n, k, device="cuda", dtype=BF16).t()
    return a, b, None, torch.empty(m, n, device="cuda", dtype=BF16)


def shapes(count, seed=3):
    rng = random.Random(seed)
    return [
        (rng.randrange(1, 5000), 8 * rng.randrange(1, 1500), 8 * rng.randrange(1, 1500))
        for _ in range(count)
    ]


def test_new_problems_take_the_kernel_python_ranks_first_without_asking_it(monkeypatch):
    require("bfloat16", layout="tn")
    pcr.gemm(*operands(64, 64, 64))  # the device's first selection: Python's, then handed over
    asked = []
    monkeypatch.setattr(_call, "remember_problem", lambda lib, judged: asked.append(judged))
    for m, n, k in shapes(60):
        a, b, _, d = operands(m, n, k)
        pcr.gemm(a, b, None, d)
        took = pcr.Gemm(a, b, None, d).kernel  # a plan takes the remembered choice
        assert took == pcr.explain(a, b, None, d).kernel, (m, n, k)  # Python's ranking
        want = a.float() @ b.float()
        assert torch.allclose(d.float(), want, rtol=2e-2, atol=2e-2 * k**0.5)
    assert not asked, "a new problem went through Python"


def test_a_tuned_cache_keeps_selection_in_python(monkeypatch):
    require("bfloat16", layout="tn")
    pcr.tune([(48, 256, 256)], repeats=3)  # writes this device's cache, clears the memo
    asked = []
    real = _call.remember_problem
    monkeypatch.setattr(
        _call, "remember_problem", lambda lib, judged: asked.append(judged) or real(lib, judged)
    )
    for m, n, k in shapes(3, seed=5):
        pcr.gemm(*operands(m, n, k))
    assert len(asked) == 3


def test_a_new_shape_costs_microseconds_of_host_time():
    """Host time of the first call of a new shape against a repeated one (the memo hit)."""
    require("bfloat16", layout="tn")
    pcr.gemm(*operands(64, 64, 64))
    sets = [operands(m, n, k) for m, n, k in shapes(200, seed=11)]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for ops in sets:
        pcr.gemm(*ops)
    first = (time.perf_counter() - t0) / len(sets)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for ops in sets:
        pcr.gemm(*ops)
    again = (time.perf_counter() - t0) / len(sets)
    torch.cuda.synchronize()
    print(f"host us per call: new shape {first * 1e6:.1f}, memo hit {again * 1e6:.1f}")
    assert first - again < 100e-6  # Python's ranking took ~450 us
