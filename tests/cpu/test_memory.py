"""The kept-scratch controls: the limit (API and environment), stats, and their refusals.

What runs on a GPU (kept buffers, graphs taking them over, empty_cache freeing them) is in
tests/gpu/test_reliability.py; here the library answers without touching a device.
"""

import os
import subprocess
import sys

import pytest

from pycutlass_rt import _memory, errors


def stats_in_fresh_process(env_value):
    env = dict(os.environ)
    env.pop("PYCUTLASS_RT_SCRATCH_LIMIT", None)
    if env_value is not None:
        env["PYCUTLASS_RT_SCRATCH_LIMIT"] = env_value
    code = "from pycutlass_rt import _memory; print(_memory.memory_stats(0)['limit'])"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.parametrize(
    "value, limit",
    [
        (None, 1 << 30),
        ("0", 0),
        ("1048576", 1 << 20),
        ("256M", 256 << 20),
        ("256MiB", 256 << 20),
        ("2g", 2 << 30),
        ("64KB", 64 << 10),
        ("lots", 1 << 30),  # not a size: the default
        ("12X", 1 << 30),
    ],
)
def test_the_environment_sets_the_limit(value, limit):
    assert stats_in_fresh_process(value) == limit


def test_set_scratch_limit_is_what_stats_report():
    before = _memory.memory_stats(0)["limit"]
    try:
        _memory.set_scratch_limit(123 << 20)
        assert _memory.memory_stats(0)["limit"] == 123 << 20
        _memory.set_scratch_limit(0)
        assert _memory.memory_stats(0)["limit"] == 0
    finally:
        _memory.set_scratch_limit(before)


@pytest.mark.parametrize("bad", [-1, -(2**70)])
def test_a_negative_limit_is_refused(bad):
    with pytest.raises(errors.InvalidArgumentError, match="scratch limit"):
        _memory.set_scratch_limit(bad)


@pytest.mark.parametrize("bad", [1.5, "1G", True, None])
def test_a_limit_that_is_not_an_int_is_refused(bad):
    with pytest.raises(TypeError, match="nbytes"):
        _memory.set_scratch_limit(bad)


def test_stats_of_an_unused_device_hold_nothing():
    s = _memory.memory_stats(3)
    assert (s["kept"], s["graphs"], s["pool_reserved"], s["pool_used"], s["kept_streams"]) == (
        0,
        0,
        0,
        0,
        0,
    )


@pytest.mark.parametrize("device", [-1, 64, 2**31 - 1])
def test_stats_of_a_device_out_of_range_are_refused(device):
    with pytest.raises(errors.InvalidArgumentError, match="out of range"):
        _memory.memory_stats(device)


def test_empty_cache_without_a_gpu_says_why(has_gpu):
    if has_gpu:
        pytest.skip("this host has a GPU: tests/gpu covers empty_cache there")
    with pytest.raises(errors.Error):
        _memory.empty_cache()


def test_an_allocator_is_handed_over_whole_and_taken_back():
    """set_allocator: stats say the scratch is lent while one is set; alloc without
    release (or the reverse) is refused, leaving the one set; None, None: the pool again."""
    import pycutlass_rt as pcr

    lent = []
    pcr.set_allocator(lambda n, dev, stream: lent.append(n) or 0, lambda *a: None)
    try:
        assert _memory.memory_stats(0)["lent"] is True
        with pytest.raises(errors.InvalidArgumentError, match="come together"):
            pcr.set_allocator(lambda n, dev, stream: 0)
        assert _memory.memory_stats(0)["lent"] is True
    finally:
        pcr.set_allocator()
    assert _memory.memory_stats(0)["lent"] is False and lent == []  # nothing ran


def test_the_callbacks_reach_the_python_functions_and_failures_return_null(recwarn):
    """What the library calls (the ctypes callbacks it was handed), called as it would:
    an address back, 0 and a raising allocator as NULL (with a warning), release called
    with what was lent."""
    import ctypes

    import pycutlass_rt as pcr

    released = []

    def alloc(n, dev, stream):
        if n > 1000:
            raise MemoryError("no room")
        return 0x7000 + n if n else 0

    pcr.set_allocator(alloc, lambda *a: released.append(a))
    try:
        lend, take_back = _memory._Lent.callbacks[-1]
        assert lend(64, 0, None, None) == 0x7000 + 64
        assert lend(0, 0, None, None) is None and lend(4096, 0, None, None) is None
        assert "no room" in str(recwarn.pop(RuntimeWarning).message)
        take_back(ctypes.c_void_p(0x7040), 64, 0, ctypes.c_void_p(5), None)
        assert released == [(0x7040, 64, 0, 5)]
    finally:
        pcr.set_allocator()


def test_pycutlass_rt_torch_lends_torch_caching_allocator_unless_told(monkeypatch):
    """Importing pycutlass_rt.torch hands the library torch's caching allocator when the
    library loads (here: a fresh process); PYCUTLASS_RT_TORCH_ALLOCATOR=0 keeps the pool."""
    pytest.importorskip("torch")
    code = (
        "import pycutlass_rt.torch, pycutlass_rt as p; print(p.memory_stats(0)['lent']);"
        "pycutlass_rt.torch.use_caching_allocator(False); print(p.memory_stats(0)['lent'])"
    )
    for value, first in ((None, "True"), ("0", "False")):
        env = dict(os.environ)
        env.pop("PYCUTLASS_RT_TORCH_ALLOCATOR", None)
        if value is not None:
            env["PYCUTLASS_RT_TORCH_ALLOCATOR"] = value
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.split() == [first, "False"], out.stderr


def test_the_c_abi_refuses_half_an_allocator():
    from pycutlass_rt import _abi, _lib

    lib = _lib.load()
    alloc = _abi.AllocFn(lambda n, dev, stream, ctx: None)
    assert lib.pcr_set_allocator(alloc, _abi.ReleaseFn(), None) == errors.ERR_INVALID_ARGUMENT
    assert "come together" in lib.last_error()
    assert lib.pcr_set_allocator(_abi.AllocFn(), _abi.ReleaseFn(), None) == 0
