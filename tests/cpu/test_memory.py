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
