"""The library's selector: every new problem is ranked inside the library, Python is asked
once per device for its say (the table and the tuned entries), and the kernel a launch
takes is the one explain() ranks first."""

import random
import time

import pytest
from helpers import require

import pycutlass_rt as pcr
from pycutlass_rt import _cache, _select

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


def counting_provider(monkeypatch):
    """How often the library asked Python for a device's say."""
    asked = []
    real = _cache.tuned_for
    monkeypatch.setattr(_cache, "tuned_for", lambda lib, dev: asked.append(dev) or real(lib, dev))
    return asked


def test_new_problems_take_the_kernel_explain_ranks_first(monkeypatch):
    require("bfloat16", layout="tn")
    asked = counting_provider(monkeypatch)
    _cache.reset()  # the library asks for the device's say again
    seen = []
    with _select.watching(lambda problem, ranked, stale: seen.append(ranked[0][0].name)):
        for m, n, k in shapes(60):
            a, b, _, d = operands(m, n, k)
            pcr.gemm(a, b, None, d)
            took = pcr.Gemm(a, b, None, d).kernel  # a plan takes the same choice
            assert took == pcr.explain(a, b, None, d).kernel == seen[-1], (m, n, k)
            want = a.float() @ b.float()
            assert torch.allclose(d.float(), want, rtol=2e-2, atol=2e-2 * k**0.5)
    assert len(seen) == 60 and asked == [torch.cuda.current_device()]


def test_a_tuned_entry_leads_inside_the_library(monkeypatch):
    require("bfloat16", layout="tn")
    (t,) = pcr.tune([(48, 256, 256)], repeats=3)  # writes this device's cache, re-asked
    asked = counting_provider(monkeypatch)
    a, b, _, d = operands(48, 256, 256)
    plan = pcr.Gemm(a, b, None, d)
    assert plan.kernel == t.kernel and pcr.explain(a, b, None, d).reason.startswith("tuned")
    for m, n, k in shapes(3, seed=5):  # untuned shapes: the table's choice, no new question
        pcr.gemm(*operands(m, n, k))
    assert len(asked) <= 1


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
    assert first - again < 100e-6  # one call into the library, no Python
