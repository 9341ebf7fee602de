"""python -m pycutlass_rt info / demo / tune, without a GPU."""
import json
import subprocess
import sys

import pytest

import pycutlass_rt as pcr


def run(*args):
    return subprocess.run([sys.executable, "-m", "pycutlass_rt", *args], capture_output=True,
                          text=True, timeout=300)


def test_info_json():
    r = run("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["abi"] == pcr._lib.ABI_VERSION and info["kernels"] and info["build"]["catalog"]["families"]
    assert sum(len(v) for v in info["kernels"].values()) == info["build"]["kernels"]


def test_info_text():
    r = run("info")
    assert r.returncode == 0 and "pycutlass_rt" in r.stdout and "kernels" in r.stdout


def test_demo_without_gpu_says_what_is_missing(has_gpu):
    if has_gpu:
        pytest.skip("GPU present: demo runs for real (tests/gpu)")
    r = run("demo")
    assert r.returncode != 0 and "needs an NVIDIA GPU" in r.stderr


def test_tune_without_gpu_says_what_is_missing(has_gpu):
    if has_gpu:
        pytest.skip("GPU present: tune runs for real (tests/gpu)")
    r = run("tune", "16x4096x4096", "1x8x8")
    assert r.returncode == 1 and "needs an NVIDIA GPU" in r.stderr


def test_tune_rejects_a_malformed_shape():
    r = run("tune", "16x4096")
    assert r.returncode == 2 and "write MxNxK" in r.stderr


def test_bench_points_to_the_checkout_tool():
    r = run("bench", "--quick")
    assert r.returncode == 2 and r.stdout == ""
    assert "python -m benchmarks" in r.stderr and r.stderr.count("\n") == 1
