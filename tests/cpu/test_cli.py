"""python -m pycutlass_rt info / demo / tune, without a GPU (and without numpy)."""

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

import pytest

import pycutlass_rt as pcr


def run(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "pycutlass_rt", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_info_json():
    r = run("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert (
        info["abi"] == pcr._lib.ABI_VERSION
        and info["kernels"]
        and info["build"]["catalog"]["families"]
    )
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


# --- without numpy: a sitecustomize makes ``import numpy`` fail in the child ----------------


@pytest.fixture
def no_numpy(tmp_path):
    """Environment for a child Python in which ``import numpy`` raises ImportError."""
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['numpy'] = None\n")
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path)
    probe = subprocess.run([sys.executable, "-c", "import numpy"], env=env, capture_output=True)
    assert probe.returncode != 0  # numpy is really out of reach
    return env


def test_runtime_works_without_numpy(no_numpy):
    code = (
        "import sys, pycutlass_rt as pcr\n"
        "names = [k.name for k in pcr.kernels()]\n"
        "assert names and sys.modules['numpy'] is None  # never imported\n"
        "print(len(names), pcr.info()['build']['kernels'])\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], env=no_numpy, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    count, built = r.stdout.split()
    assert count == built
    r = run("info", env=no_numpy)
    assert r.returncode == 0, r.stderr
    assert "pycutlass_rt" in r.stdout and "kernels" in r.stdout


def test_demo_without_numpy_says_what_to_install(no_numpy):
    if any(importlib.util.find_spec(m) for m in ("torch", "cupy")):
        pytest.skip("torch or cupy is installed: demo would check with it")
    r = run("demo", env=no_numpy)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "pip install" in r.stderr and "numpy" in r.stderr


def test_info_names_the_framework_versions():
    info = json.loads(run("info", "--json").stdout)
    assert info["frameworks"]["numpy"] == importlib.metadata.version("numpy")
    assert "frameworks: " in run("info").stdout


def test_doctor_without_gpu_exits_1_with_the_reason(has_gpu, monkeypatch):
    if has_gpu:
        pytest.skip("GPU present: doctor checks GEMMs for real (tests/gpu)")
    env = {**os.environ, "PYCUTLASS_RT_PDL": "0"}
    r = run("doctor", "--json", env=env)
    assert r.returncode == 1 and r.stderr.startswith("doctor: no usable GPU"), r.stderr
    report = json.loads(r.stdout)
    assert report["problems"][0].startswith("no usable GPU")
    assert report["environment"]["PYCUTLASS_RT_PDL"] == "0"
    assert report["frameworks"]["numpy"]["dlpack"].startswith("__dlpack__")
    assert report["tune_cache"]["directory"]
    assert report["jax_handler"]["built"] is True  # every build has it
    text = run("doctor")
    assert text.returncode == 1 and "PROBLEM: no usable GPU" in text.stdout


def test_version():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"pycutlass_rt {pcr.__version__}"
    try:  # an installed package's metadata carries the same version (one source)
        installed = importlib.metadata.version("pycutlass_rt")
    except importlib.metadata.PackageNotFoundError:
        return  # a source tree run without installing
    assert installed == pcr.__version__


def test_kernels_lists_the_build_and_filters_by_name():
    every = [k.name for k in pcr.kernels()]
    r = run("kernels")
    assert r.returncode == 0 and r.stdout.split() == every
    assert f"{len(every)} of {len(every)} kernels" in r.stderr
    pattern = every[0].split("_")[0] + "_*"
    picked = json.loads(run("kernels", pattern, "--json").stdout)
    assert picked and all(k["name"].startswith(pattern[:-1]) for k in picked)
    assert {"name", "family", "dtype_a", "tile", "epilogue", "index"} <= set(picked[0])
    assert [k["name"] for k in picked] == [n for n in every if n.startswith(pattern[:-1])]


def test_explain_takes_a_shape_and_dtype_names_either_way(has_gpu):
    if has_gpu:
        pytest.skip("GPU present: explain runs for real (tests/gpu)")
    r = run("explain", "16x4096x4096", "--dtype", "bf16")
    assert r.returncode == 1 and r.stderr.startswith("explain: "), r.stderr
    bad = run("explain", "16x4096x4096", "--dtype", "bfloat17")
    assert bad.returncode == 2 and "one of float16" in bad.stderr


def test_tune_json_without_gpu_fails_cleanly(has_gpu):
    if has_gpu:
        pytest.skip("GPU present: tune runs for real (tests/gpu)")
    r = run("tune", "16x4096x4096", "--dtype", "e4m3", "--json")
    assert r.returncode == 1 and "needs an NVIDIA GPU" in r.stderr and r.stdout == ""


def test_the_log_switch_names_each_new_problems_kernel(monkeypatch):
    """PYCUTLASS_RT_LOG=info: each problem the library ranks for a launch logs its kernel and
    why, through the selector's observer (what the library calls it with, built here), and a
    tuned entry that could not run it says so; logging off, the observer does nothing."""
    import ctypes

    from pycutlass_rt import _abi, _lib, _log, _select

    lib = _lib.load()
    every = pcr.kernels()
    kern, stale = every[0], every[-1]
    p = _abi.Problem(m=7, n=8, k=9, dtype_a=1, dtype_b=1, dtype_d=1, device=-1, cc=90)
    ranked = (_abi.Ranked * 1)(
        _abi.Ranked(candidate=kern.index, reason=_abi.RankReason.RANK_MODEL, us=3.0)
    )
    records = []
    monkeypatch.setattr(_log.LOGGER, "level", _log.LOGGER.level)
    monkeypatch.setattr(_log.LOGGER, "info", lambda fmt, *a: records.append(fmt % a))
    _log.configure("0")
    _select._observed(ctypes.pointer(p), ranked, 1, -1, None)
    assert records == []
    _log.configure("info")
    try:
        assert _log.choices_logged() and _select._selector.lib is lib
        _select._observed(ctypes.pointer(p), ranked, 1, stale.index, None)
        assert records[0].startswith("7x8x9 float16 -> float16")
        assert kern.name in records[0] and "analytic model (~3 us)" in records[0]
        assert stale.name in records[1] and "tuned cache entry not used" in records[1]
    finally:
        _log.configure("0")
    assert not _log.choices_logged()
