"""pycutlass_rt.tune on the GPU: measuring, the cache selection reads, recording, strict mode."""

import pytest
from helpers import matrix, require

import pycutlass_rt as pcr
from pycutlass_rt import _cache, _tune

torch = pytest.importorskip("torch")
BF16 = torch.bfloat16


pytestmark = pytest.mark.usefixtures("cache_dir")  # an empty tuned cache (conftest.py)


def rel_err(d, a, b):
    torch.cuda.synchronize()
    r = a.double() @ b.double()
    return ((d.double() - r).norm() / r.norm()).item()


def test_tune_picks_the_fastest_and_selection_follows(cache_dir):
    result = _tune.tune([(16, 4096, 4096), (4096, 4096, 4096)], repeats=5)
    assert len(result) == 2 and result.cache_files[0].startswith(str(cache_dir))
    for t in result:
        assert t.kernel == min(t.timings, key=t.timings.get) and not t.failed, t.failed
        assert t.us > 0 and t.gain >= 1.0
    a, w = matrix(16, 4096, "t", BF16), matrix(4096, 4096, "t", BF16)
    d = torch.empty(16, 4096, device="cuda", dtype=BF16)
    e = pcr.explain(a, w.t(), None, d)
    assert e.kernel == result[0].kernel and "tuned on this device" in e.reason
    pcr.gemm(a, w.t(), None, d)
    assert rel_err(d, a, w.t()) < 1.6e-2


def test_graph_timing_excludes_host_overhead():
    """A small GEMM's kernel is shorter than a Python call: the graph sees the kernel."""
    a, w = matrix(16, 1024, "t", BF16), matrix(1024, 1024, "t", BF16)
    d = torch.empty(16, 1024, device="cuda", dtype=BF16)
    bk = _tune.backend()
    run = lambda: pcr.gemm(a, w.t(), None, d)  # noqa: E731
    assert _tune.time_us(bk, run, 5) < bk.loop_us(run, 100)


def test_recorded_problems_are_tuned_and_pinned():
    x, w = matrix(64, 4096, "t", BF16), matrix(1024, 4096, "t", BF16)
    y = torch.empty(64, 1024, device="cuda", dtype=BF16)
    c = matrix(64, 1024, "n", BF16)  # column-major C: copied into D first (c_mode 2)
    xs, ws = matrix(64, 4001, "t", BF16, offset=1), matrix(1024, 4001, "t", BF16, offset=1)

    def model():
        pcr.gemm(x, w.t(), None, y)
        pcr.gemm(x, w.t(), c, y, 1.0, 1.0)
        pcr.gemm(xs, ws.t(), None, y)  # misaligned: the alignment-fallback kernels
        pcr.gemm(x, w.t(), None, y)  # the same problem again: recorded once

    result = _tune.tune(model, strict=True, repeats=3)
    assert len(result) == 3 and all(t.pinned and t.kernel for t in result)
    assert all(not t.note for t in result), [t.note for t in result]  # rebuilt exactly
    e = pcr.explain(x, w.t(), c, y, 1.0, 1.0)
    assert "pinned" in e.reason and len(e.ranked) == 1


def test_strict_environment_refuses_a_device_without_cache(monkeypatch):
    monkeypatch.setenv(_cache.STRICT_ENV, "1")
    a = matrix(48, 512, "t", BF16)
    with pytest.raises(pcr.UnsupportedError, match="PYCUTLASS_RT_STRICT=1"):
        pcr.gemm(a, a.t(), None, torch.empty(48, 48, device="cuda", dtype=BF16))


def test_cupy_operands(monkeypatch):
    require("float16", layout="tn")
    pytest.importorskip("cupy")
    monkeypatch.setattr(_tune, "backend", _tune._Cupy)
    result = _tune.tune([(256, 1024, 512)], dtype="float16", repeats=3, cache=False)
    assert result[0].kernel
