"""The benchmark suite (benchmarks/) without a GPU: shape groups, dtype filtering,
timing arithmetic, summaries, JSON, the CLI, the cuda-python shim, and whole cases run
through numpy stand-ins for the GPU framework and for pycutlass_rt."""

import argparse
import dataclasses
import io
import json
import math
import os
import subprocess
import sys
import time
import types

import numpy as np
import pytest

import pycutlass_rt as pcr
from benchmarks import cli, conv, device, measure, peers, progress, report, shapes, suite, timing
from pycutlass_rt._kernels import KernelInfo

# --- shape groups ------------------------------------------------------------------------


def mnk(group):
    return [(s["m"], s["n"], s["k"]) for s in shapes.GROUPS[group].shapes]


def test_groups_follow_the_benchmark_readme():
    g = shapes.GROUPS
    assert list(g) == list("ABCDEFGHIJKLMN")  # I and J: issue 5's batched and grouped measures
    assert mnk("A") == [(s, s, s) for s in (1024, 2048, 4096, 8192)]
    # fp32: issue 4's accurate mode, reported against torch in IEEE mode
    assert g["A"].dtypes == ("bf16", "fp16", "tf32", "fp32", "fp8", "int8")
    pairs = [(4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192), (28672, 8192), (8192, 28672)]
    assert shapes.NK_PAIRS == pairs
    assert len(mnk("B")) == 7 * 6 and {m for m, _, _ in mnk("B")} == {1, 8, 16, 32, 64, 128, 256}
    assert {(n, k) for _, n, k in mnk("B")} == set(pairs)
    assert len(mnk("C")) == 3 * 6 and {m for m, _, _ in mnk("C")} == {512, 2048, 8192}
    # fp16 beside bf16 wherever issue 3 sets a target (A-E), and in the regret group
    assert g["B"].dtypes == g["C"].dtypes == g["H"].dtypes == ("bf16", "fp16", "fp8")
    assert g["D"].dtypes == g["E"].dtypes == ("bf16", "fp16")
    assert mnk("D") == [
        (127, 1000, 4097),
        (8191, 8191, 8191),
        (4096, 1, 4096),
        (4096, 4096, 16),
        (4096, 4096, 64),
        (256, 256, 65536),
        (4, 51866, 1280),
        (300, 50257, 768),
    ]
    e = g["E"].shapes
    assert [s.get("layout") for s in e[:4]] == ["nn", "nt", "tn", "tt"]
    assert e[4]["pad"] > 0 and all(s["m"] == s["n"] == s["k"] == 4096 for s in e)
    f = [shapes.Case("F", "bf16", **s) for s in g["F"].shapes]
    f_shapes = [(4096, 4096, 4096)] + [(2048, n, k) for n, k in pairs]
    assert sorted({(c.m, c.n, c.k) for c in f}) == sorted(f_shapes)
    assert sorted(c.beta for c in f if c.epilogue == "linear") == [0.0] * 7 + [1.0] * 7
    assert {c.epilogue for c in f} == {
        "linear",
        "bias_relu",
        "bias_gelu",
        "bias_silu",
        "bias_gelu_aux",
    }
    assert mnk("G") == [(64, 64, 64), (256, 4096, 4096)]
    assert mnk("H") == mnk("B") + mnk("C") + mnk("D")
    assert all(x.kind == "compare" for k, x in g.items() if k in "ABCDEF")
    assert (g["G"].kind, g["H"].kind) == ("host", "regret")


def test_sweep_grids_are_the_benchmark_lists():
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(root, "heuristics"))
    import sweep

    assert sweep.NK_PAIRS == shapes.NK_PAIRS
    assert sweep.shapes(["decode"]) == shapes.grid("B") == shapes.DECODE
    assert sweep.shapes(["awkward"]) == shapes.grid("D")


def test_conv_layer_sets_are_well_formed():
    """benchmarks/conv.py's layers: the six sets, each shape once under a name of its own,
    every output at least 1x1; the stems, patch embeddings and groups as the models have them."""
    assert list(conv.SETS) == ["resnet50", "unet", "vit", "resnext50", "mobilenetv2", "convnext_t"]
    for name, layers in conv.SETS.items():
        assert len(layers) >= 3, name
        assert len({x.name for x in layers}) == len({x[1:] for x in layers}) == len(layers)
        for x in layers:
            assert min(x.out_hw()) > 0 and x.c % x.groups == x.k % x.groups == 0, x
            assert x.flops() > 0 and x.shapes()[2][2:] == x.out_hw()
    assert conv.RESNET50[0].out_hw() == (112, 112) and conv.RESNET50[-1].out_hw() == (7, 7)
    assert [x.out_hw() for x in conv.VIT] == [(14, 14), (16, 16), (27, 27)]
    assert conv.UNET[0].c == conv.UNET[-1].k == 4  # SD's latent channels
    assert {x.groups for x in conv.RESNEXT50} == {32} and conv.RESNEXT50[-1].out_hw() == (7, 7)
    assert [x.c // x.groups for x in conv.RESNEXT50[::2]] == [4, 8, 16, 32]  # 32x4d
    for layers, r in ((conv.MOBILENETV2, 3), (conv.CONVNEXT_T, 7)):  # depthwise, "same" padding
        assert all(x.groups == x.c == x.k and x.r == x.s == r for x in layers)
        assert all(x.out_hw() == (-(-x.h // x.stride),) * 2 for x in layers)
        assert {x.n for x in layers} == {32, 1} and len(layers) % 2 == 0
    assert conv.MOBILENETV2[-1].out_hw() == conv.CONVNEXT_T[-1].out_hw() == (7, 7)
    assert conv.parser().parse_args(["--quick", "--passes", "dgrad"]).dtypes == list(conv.DTYPES)


def kern(dtype_a, dtype_d, i=0):
    return KernelInfo(
        i,
        f"k{i}",
        90,
        dtype_a,
        dtype_a,
        "float32",
        dtype_d,
        "tn",
        (128, 128, 64),
        (1, 1, 1),
        (0, 0, 0),
        0,
        "coop",
        "linear",
        "none",
        (8, 8, 8),
    )


def test_available_dtypes_follow_the_kernels():
    assert shapes.available_dtypes([]) == []
    assert shapes.available_dtypes([kern("bfloat16", "float32")]) == []  # no bf16 -> bf16
    assert shapes.available_dtypes(
        [
            kern("bfloat16", "bfloat16"),
            kern("float16", "float16"),
            kern("float8_e4m3fn", "bfloat16"),
            kern("int8", "int32"),
        ]
    ) == ["bf16", "fp16", "fp8", "int8"]
    assert shapes.available_dtypes([kern("tfloat32", "float32")]) == ["tf32"]
    # the loaded build: every label it reports has a kernel, every kernel's pair a label
    built = shapes.available_dtypes(pcr.kernels())
    pairs = {(k.dtype_a, k.dtype_d) for k in pcr.kernels()}
    for label, spec in shapes.DTYPES.items():
        assert (label in built) == any((a, spec.lib_d) in pairs for a in spec.lib_a)


def test_cases_keep_rows_outside_the_build_with_a_reason():
    cs = shapes.cases(["A"], None, ["bf16", "fp16"])
    assert len(cs) == 6 * 4
    run_ = [c for c in cs if c.skip is None]
    assert {c.dtype for c in run_} == {"bf16", "fp16"} and len(run_) == 8
    assert all(
        "not in this build" in c.skip for c in cs if c.dtype in ("tf32", "fp32", "fp8", "int8")
    )
    # the tensor-core kernels of fp32, tf32, fp8 and int8 (and torch's peers) take K-major B
    assert {c.layout for c in cs if c.dtype in ("tf32", "fp32", "fp8", "int8")} == {"tn"}
    f = shapes.cases(["F"], ["bf16"], ["bf16"])
    assert all(c.skip is None for c in f) and len(f) == 14 + 4 * 7  # + the aux rows
    assert {shapes.bias_activation(c.epilogue) for c in f} == {None, "relu", "gelu", "silu"}
    assert shapes.cases(["F"], ["fp16"], ["fp16"]) == []  # F has no fp16 rows
    assert len(shapes.cases(available=["bf16"])) == sum(
        len(g.shapes) * len(g.dtypes) for g in shapes.GROUPS.values()
    )


def test_batched_and_grouped_groups():
    """I: L in {8, 64} x A/C shapes against torch.bmm; J: skewed MoE routing."""
    i = [shapes.Case("I", "bf16", **s) for s in shapes.GROUPS["I"].shapes]
    assert {c.batch for c in i} == {8, 64} and all(c.layout == "tt" for c in i)
    assert i[0].flops == 2.0 * 1024**3 * 8 and i[0].label == "1024x1024x1024 tt L=8"
    j = [shapes.Case("J", "bf16", **s) for s in shapes.GROUPS["J"].shapes]
    assert {c.experts for c in j} == {16, 64} and shapes.GROUPS["J"].kind == "grouped"
    for e in (16, 64):
        rows = shapes.expert_rows(8192, e)
        assert sum(rows) == 8192 and rows[0] > 4 * rows[e // 2] and rows[-1] == 0
    assert measure.set_bytes(j[0]) == (8192 * 4096 + 16 * 4096 * 4096 + 8192 * 4096) * 2


def test_case_labels_and_dtype_names():
    assert shapes.Case("E", "bf16", 4096, 4096, 4096, pad=64).label == "4096x4096x4096 tn ld+64"
    assert shapes.Case("F", "bf16", 8, 8, 8, beta=1.0).label == "8x8x8 tn beta=1"
    assert shapes.parse_dtype("BFloat16") == "bf16" and shapes.parse_dtype("half") == "fp16"
    with pytest.raises(ValueError, match="unknown dtype"):
        shapes.parse_dtype("fp4")
    assert shapes.DTYPES["fp8"].title == "fp8->bfloat16"


# --- timing arithmetic -------------------------------------------------------------------


def test_graph_replay_is_chosen_for_launch_bound_problems():
    est = lambda m, n, k: timing.estimated_us(m, n, k, 2, 2)  # noqa: E731
    assert timing.use_graph(est(1024, 1024, 1024)) and timing.use_graph(est(64, 64, 64))
    assert timing.use_graph(est(1, 4096, 4096))  # decode: 32 MiB of weights, ~9 us
    assert not timing.use_graph(est(4096, 4096, 4096))
    assert not timing.use_graph(est(8192, 8192, 8192))
    assert not timing.use_graph(est(1, 28672, 8192))  # 470 MB of weights


def test_operand_sets_span_twice_the_l2():
    s = timing.Settings()
    l2 = 60 << 20
    assert timing.set_count(1 << 30, l2, s) == 2  # never fewer than two
    assert timing.set_count(32 << 20, l2, s) == 4
    assert timing.set_count(24 << 10, l2, s) == s.max_sets
    hot = timing.Settings.make(quick=True, hot=True)
    assert hot.hot and hot.repeats == timing.Settings.make(quick=True).repeats
    assert timing.set_count(32 << 20, l2, hot) == timing.set_count(1 << 30, l2, hot) == 1
    case = shapes.Case("B", "bf16", 1, 4096, 4096)
    assert measure.set_bytes(case) == (4096 + 4096 * 4096 + 4096) * 2
    padded = shapes.Case("E", "bf16", 8, 8, 8, layout="tn", pad=4)
    assert measure.set_bytes(padded) == (8 * 12 + 8 * 12 + 8 * 12) * 2


def test_calls_per_sample():
    s = timing.Settings()
    assert timing.calls_for(1400.0, s, graph=False) == s.min_calls  # 8192^3: >= 20 calls
    assert timing.calls_for(5.0, s, graph=True) == 400
    assert timing.calls_for(0.01, s, graph=True) == s.max_graph_calls
    q = timing.Settings.make(quick=True)
    assert q.repeats < s.repeats and q.host_calls < s.host_calls and q.min_calls >= 20


def test_ratios_need_like_for_like_timing():
    assert timing.comparable("graph", "graph", graph=True)
    assert timing.comparable("events", "events", graph=True)
    assert not timing.comparable("events", "graph", graph=True)  # ours would pay launches
    assert not timing.comparable("graph", "events", graph=True)
    assert timing.comparable("events", "graph", graph=False)  # replay only hides host time
    assert not timing.comparable("graph", "events", graph=False)


def test_stats_percentiles():
    st = timing.Stats.of(list(range(1, 12)), method="graph", calls=7)
    assert (st.median_us, st.p10_us, st.p90_us, st.samples) == (6.0, 2.0, 10.0, 11)
    assert st.as_dict()["method"] == "graph"


# --- summaries and JSON --------------------------------------------------------------------


def rec(group, dtype, label, status="ok", ok=True, **kw):
    r = {"group": group, "dtype": dtype, "label": label, "status": status, "check": {"ok": ok}}
    r.update(kw)
    return r


def test_summary_geomean_and_worst_shape():
    records = [
        rec("B", "bf16", "s1", ratio={"cublas": 2.0, "cutlass": 4.0}),
        rec("B", "bf16", "s2", ratio={"cublas": 0.5}),
        rec("B", "bf16", "s3", ok=False, ratio={"cublas": 1.0}),
        rec("B", "bf16", "s4", status="error", ratio={"cublas": 100.0}),
        rec("B", "fp8", "s1", status="skipped", reason="not in this build"),
        rec("H", "bf16", "h1", best_over_chosen=1.0),
        rec("H", "bf16", "h2", best_over_chosen=0.96),
        rec("H", "bf16", "h3", best_over_chosen=0.5),
        rec("A", "bf16", "a1", ratio={"cublas": 1.1}),
    ]
    rows = report.summarize(records)
    assert [(r["group"], r["dtype"], r["vs"]) for r in rows] == [
        ("A", "bf16", "cublas"),
        ("B", "bf16", "cublas"),
        ("B", "bf16", "cutlass"),
        ("B", "fp8", None),
        ("H", "bf16", report.REGRET_KEY),
    ]
    b = rows[1]
    assert b["shapes"] == 3 and math.isclose(b["geomean"], 1.0)
    assert b["worst"] == {"ratio": 0.5, "label": "s2"}
    assert (b["errors"], b["mismatches"], b["ok"]) == (1, 1, 3)
    assert rows[2]["shapes"] == 1 and rows[2]["geomean"] == 4.0
    assert rows[3]["skipped"] == 1 and rows[3]["geomean"] is None
    h = rows[4]
    assert math.isclose(h["geomean"], (1.0 * 0.96 * 0.5) ** (1 / 3))
    assert math.isclose(h["within_5pct"], 2 / 3) and h["worst"]["label"] == "h3"
    table = report.format_table(rows, records)
    assert "67% within 5% of best" in table and "s2" in table
    assert "skipped (B fp8): not in this build" in table


def test_geomean_ignores_what_is_not_a_ratio():
    assert report.geomean([]) is None
    assert report.geomean([None, float("nan"), 0.0, -1.0]) is None
    assert math.isclose(report.geomean([1, 4, None]), 2.0)


def test_json_round_trip(tmp_path):
    records = [
        rec("A", "bf16", "a", ratio={"cublas": 1.5}),
        rec("A", "bf16", "b", ratio={"x": float("nan")}),
    ]
    result = {"machine": {"gpu": "X"}, "records": records, "summary": [], "inf": float("inf")}
    path = report.write_json(str(tmp_path / "bench.json"), result)
    text = open(path).read()
    assert "NaN" not in text and "Infinity" not in text
    back = report.read_json(path)
    assert back["records"][0]["ratio"]["cublas"] == 1.5
    assert back["records"][1]["ratio"]["x"] is None and back["inf"] is None
    assert not (tmp_path / "bench.json.tmp").exists()


def test_plots_say_why_when_matplotlib_is_absent(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    out = report.plot_groups(
        {"records": [rec("A", "bf16", "a", ratio={"cublas": 1.0})]}, str(tmp_path)
    )
    assert "matplotlib not available" in out["error"]


def test_smi_csv_parsing():
    text = (
        "clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], "
        "temperature.gpu\n1980 MHz, 3201 MHz, 512.30 W, 45\n"
    )
    rows = device.parse_smi_csv(text)
    assert rows == [
        {
            "clocks.current.sm [MHz]": "1980 MHz",
            "clocks.current.memory [MHz]": "3201 MHz",
            "power.draw [W]": "512.30 W",
            "temperature.gpu": "45",
        }
    ]
    assert device.parse_smi_csv("") == []


def test_default_out_dir():
    import datetime

    path = suite.default_out("NVIDIA H200 (SXM)", datetime.date(2026, 11, 29))
    assert path == "bench-results/nvidia-h200-sxm-2026-11-29".replace("/", __import__("os").sep)


# --- progress ------------------------------------------------------------------------------


def test_progress_line_and_eta():
    now = [0.0]
    out = io.StringIO()
    p = progress.Progress(4, stream=out, clock=lambda: now[0])
    p.show("B decode bf16 1x4096x4096 tn")
    now[0] = 30.0
    p.step()
    p.show("next")
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[--------------------] 0/4 B decode") and "ETA" not in lines[0]
    assert "1/4 next  30s, ETA 1m30s" in lines[1] and lines[2].endswith("1/4 done  30s, ETA 1m30s")
    assert progress.format_seconds(3700) == "1h01m"


# --- command line --------------------------------------------------------------------------


def parse(*argv):
    ap = argparse.ArgumentParser()
    cli.add_arguments(ap)
    return ap.parse_args(list(argv))


def test_cli_arguments():
    groups, dtypes = cli.selection(parse())
    assert groups == list("ABCDEFGHIJKLMN") and dtypes is None
    args = parse(
        "--group",
        "b",
        "-g",
        "decode,H",
        "--dtype",
        "bfloat16",
        "--dtype",
        "fp8,bf16",
        "--out",
        "x",
        "--quick",
        "--no-cutlass",
    )
    assert cli.selection(args) == (["B", "H"], ["bf16", "fp8"])
    assert args.quick and args.no_cutlass and args.out == "x"
    assert not args.hot and parse("--hot").hot
    with pytest.raises(SystemExit):
        parse("--group", "Z")
    with pytest.raises(SystemExit):
        parse("--dtype", "fp4")


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bench_cli(*args, **kw):
    """``python -m benchmarks ...`` run from the checkout, as benchmarks/README.md says."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        **kw,
    )


def test_bench_without_a_gpu_exits_1_with_one_line(has_gpu):
    if has_gpu:
        pytest.skip("GPU present: the benchmark would run for real")
    r = bench_cli("--quick", "-g", "A")
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("bench: needs an NVIDIA GPU") and r.stderr.count("\n") == 1
    assert r.stdout == ""


def test_bench_list_needs_no_gpu():
    r = bench_cli("--list", "-g", "A,F")
    assert r.returncode == 0, r.stderr
    built = shapes.available_dtypes(pcr.kernels())
    for label in ("fp8", "int8", "tf32", "fp32"):
        row = f"A square   {label:<5} 1024x1024x1024 tn"
        assert row in r.stdout
        assert (f"{row}   [skipped: not in this build" in r.stdout) == (label not in built)
    assert "F epilogue bf16  2048x8192x28672 tn bias_silu\n" in r.stdout  # runnable now
    assert r.stdout.strip().splitlines()[-1].startswith(f"{24 + 2 * 42} cases")  # F: bf16, int8


def test_script_runs_the_same_command_line():
    """``python benchmarks/run.py`` is ``python -m benchmarks``, from any working folder."""
    script = os.path.join(ROOT, "benchmarks", "run.py")
    r = subprocess.run(
        [sys.executable, script, "--list", "-g", "G"],
        cwd=os.path.dirname(ROOT),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == bench_cli("--list", "-g", "G").stdout


def test_the_runtime_package_never_imports_the_benchmarks():
    for here, _, names in os.walk(os.path.join(ROOT, "pycutlass_rt")):  # subpackages too
        for name in sorted(n for n in names if n.endswith(".py")):
            with open(os.path.join(here, name)) as f:
                text = f.read()
            assert "import benchmarks" not in text and "from benchmarks" not in text, name


def test_the_wheel_ships_the_runtime_only():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        build = tomllib.load(f)["tool"]["scikit-build"]
    assert build["wheel"]["packages"] == ["pycutlass_rt"]
    assert "benchmarks/*/" in build["sdist"]["exclude"]  # result folders, should one appear


# --- the CUTLASS Python interface: shim and failure handling -------------------------------


@pytest.fixture
def fake_cuda_bindings(monkeypatch):
    """A cuda-python 13 layout: cuda.bindings.{driver,runtime,nvrtc}, no cuda.cuda."""
    for name in list(sys.modules):
        if name == "cuda" or name.startswith("cuda."):
            monkeypatch.delitem(sys.modules, name)
    cuda = types.ModuleType("cuda")
    cuda.__path__ = []
    bindings = types.ModuleType("cuda.bindings")
    bindings.__path__ = []
    bindings.__version__ = "13.0.1"
    driver = types.ModuleType("cuda.bindings.driver")
    driver.CUresult = object()
    driver.CUlaunchAttributeID = object()
    runtime = types.ModuleType("cuda.bindings.runtime")
    runtime.cudaError_t = object()
    nvrtc = types.ModuleType("cuda.bindings.nvrtc")
    for mod in (cuda, bindings, driver, runtime, nvrtc):
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    cuda.bindings = bindings
    bindings.driver, bindings.runtime, bindings.nvrtc = driver, runtime, nvrtc
    return types.SimpleNamespace(cuda=cuda, driver=driver, runtime=runtime, nvrtc=nvrtc)


def test_cuda_shim_aliases_the_old_module_names(fake_cuda_bindings):
    f = fake_cuda_bindings
    assert "13.0.1" in peers.install_cuda_shim()
    import importlib

    assert importlib.import_module("cuda.cuda").CUresult is f.driver.CUresult
    assert importlib.import_module("cuda.cudart").cudaError_t is f.runtime.cudaError_t
    from cuda import cudart  # noqa: F401 - attribute access on the package works too

    assert f.cuda.__version__ == "13.0.1"
    assert sys.modules["cuda.cuda"].CUstreamAttrID is f.driver.CUlaunchAttributeID
    with pytest.raises(AttributeError):
        sys.modules["cuda.cuda"].cuNoSuchFunction  # noqa: B018
    assert peers.install_cuda_shim() == "native"  # idempotent: now the names exist


def test_cutlass_peer_without_cuda_python_is_reported(monkeypatch):
    monkeypatch.setattr(
        peers,
        "install_cuda_shim",
        lambda: (_ for _ in ()).throw(ImportError("No module named 'cuda'")),
    )
    p = peers.CutlassPython()
    try:
        assert p.error and "No module named 'cuda'" in p.error
        info = p.info()
        assert info["available"] is False and "cuda" in info["reason"]
        with pytest.raises(peers.Unsupported):
            p.make(shapes.Case("A", "bf16", 64, 64, 64), None)
    finally:
        p.close()


def test_cutlass_plan_keys_follow_alignment():
    assert [peers._alignment(x) for x in (4096, 4097, 1000, 2, 1)] == [8, 1, 8, 2, 1]
    key = peers.CutlassPython._key
    assert key(None, shapes.Case("D", "bf16", 127, 1000, 4097)) == ("bf16", "tn", 1, 1, 8)
    assert key(None, shapes.Case("D", "bf16", 4096, 1, 4096)) == ("bf16", "tn", 8, 8, 1)
    assert key(None, shapes.Case("E", "bf16", 4096, 4096, 4096, "nt")) == ("bf16", "nt", 8, 8, 8)


# --- whole cases through numpy stand-ins ---------------------------------------------------


class NumpyFw:
    """A CPU stand-in for _backends.Torch: numpy arrays, wall-clock 'events', eager 'graphs'."""

    name = "torch"  # so that blas_peer() picks TorchBlas, driven through self.torch below

    def __init__(self):
        self.captures = 0
        self.torch = types.SimpleNamespace(
            mm=lambda a, b, out: np.matmul(a, b, out=out),
            addmm=lambda c, a, b, beta, out: np.add(a @ b, beta * c, out=out),
            _scaled_mm=lambda a, b, sa, sb, out_dtype, out: np.multiply(a @ b, sa * sb, out=out),
        )
        self.rng = np.random.default_rng(0)

    def operand(self, rows, cols, layout, dtype, pad=0, fill=True):
        outer, inner = (rows, cols) if layout == "t" else (cols, rows)
        dt = np.float32 if dtype in ("bfloat16", "float8_e4m3fn") else np.dtype(dtype)
        x = self.rng.uniform(-1, 1, (outer, inner + pad)).astype(dt)[:, :inner]
        return x if layout == "t" else x.T

    def sync(self):
        pass

    @staticmethod
    def ones(rows, cols):
        return np.ones((rows, cols), np.float32)

    @staticmethod
    def poison(x):
        x.fill(np.nan)

    def free_bytes(self):
        return 1 << 34

    def event(self):
        return [0.0]

    def record(self, e):
        e[0] = time.perf_counter()

    def elapsed_ms(self, s, e):
        return (e[0] - s[0]) * 1e3

    def capture(self, fn):
        self.captures += 1
        fn()
        return fn

    def stream_handle(self):
        return 0

    def reference(self, a, b, c=None, alpha=1.0, beta=0.0, bias=None, activation=None):
        ref = alpha * (a.astype(np.float64) @ b.astype(np.float64))
        if c is not None and beta:
            ref = ref + beta * c
        if bias is not None:
            ref = ref + bias
        return np.maximum(ref, 0) if activation == "relu" else ref  # the tests' one activation

    def rel_err(self, got, ref):
        return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))

    def is_finite(self, x):
        return bool(np.isfinite(x).all())

    def device_info(self):
        return {
            "name": "Fake GPU",
            "sm_count": 2,
            "cc": "9.0",
            "l2_bytes": 1 << 16,
            "memory_bytes": 1 << 30,
        }

    def free_memory(self):
        pass

    def memory_gib(self):
        return {"free": 16.0, "framework": 0.0, "other": 0.0}

    def versions(self):
        return {"torch": "fake"}


def fake_pcr(kernels=("k_best", "k_slow"), slow=(), wrong=(), plan=True, scales=None):
    """pycutlass_rt as numpy: forced kernels in ``slow`` sleep, those in ``wrong`` add 1;
    ``scales`` (a list) records the (scale_a, scale_b) of each call, which apply."""

    def gemm(
        a, b, c, d, alpha=1.0, beta=0.0, *, stream=None, kernel=None, scale_a=None, scale_b=None
    ):
        if kernel in slow:
            time.sleep(2e-4)
        if scales is not None:
            scales.append((scale_a, scale_b))
        for s in (scale_a, scale_b):
            alpha = alpha * (1.0 if s is None else float(s.item()))
        r = alpha * (a @ b) + (1.0 if kernel in wrong else 0.0)
        np.add(r, beta * c, out=d) if beta else np.copyto(d, r)
        return d

    def explain(a, b, c=None, d=None, alpha=1.0, beta=0.0, *, kernel=None, **epilogue):
        ranked = [(k, "rule") for k in kernels]
        return types.SimpleNamespace(kernel=kernels[0], ranked=ranked, reason="rule")

    class Gemm:
        def __init__(self, a, b, c=None, d=None, alpha=1.0, beta=0.0, *, kernel=None):
            self.ops, self.kernel = (a, b, c, d), kernels[0]

        def run(self, stream=None):
            gemm(*self.ops)

        def __call__(self, a, b, c, d, *, stream=None):
            return gemm(a, b, c, d)

    mod = types.SimpleNamespace(gemm=gemm, explain=explain, __version__="0.0-fake")
    if plan:
        mod.Gemm = Gemm
    return mod


class BrokenPeer:
    name, via, graphable, always_graph, error, drain = "cutlass", "broken", True, True, None, None

    def make(self, case, fw, bias=None):
        if case.pad:
            raise peers.Unsupported("padded leading dimensions")

        def fn(a, b, c, d):
            raise RuntimeError("CUDA Error: boom")

        return fn

    def info(self):
        return {"available": True}


SMALL = timing.Settings(
    repeats=3, target_ms=0.1, host_calls=4, host_repeats=2, warmup=1, max_sets=3
)


def bench(pcr_mod, peer_list=None):
    fw = NumpyFw()
    return measure.Bench(
        fw,
        pcr_mod,
        peer_list if peer_list is not None else [peers.TorchBlas()],
        SMALL,
        1 << 16,
        lambda: 1 << 34,
    )


def test_compare_case_records_times_ratios_and_check():
    b = bench(fake_pcr(), [peers.TorchBlas(), BrokenPeer()])
    r = b.run(shapes.Case("A", "bf16", 64, 48, 32, layout="nt"))
    assert r["status"] == "ok" and r["kernel"] == "k_best" and r["operand_sets"] == 3
    assert r["gpu_gib"] == {"free": 16.0, "framework": 0.0, "other": 0.0}  # before the case
    assert r["check"]["ok"] and r["check"]["rel_err"] < 1e-6 and r["check"]["peer_rel_err"] < 1e-6
    assert set(r["device_us"]) == {"pycutlass_rt", "cublas"} and r["method"] == "graph"
    dev = r["device_us"]
    assert math.isclose(
        r["ratio"]["cublas"], dev["cublas"]["median_us"] / dev["pycutlass_rt"]["median_us"]
    )
    assert r["tflops"]["pycutlass_rt"] > 0 and set(r["host_us"]) == {"pycutlass_rt", "cublas"}
    assert "boom" in r["peer_errors"]["cutlass"]  # a failing peer is recorded, not fatal
    padded = b.run(shapes.Case("E", "bf16", 16, 16, 16, pad=8, beta=1.0))
    assert padded["status"] == "ok" and padded["check"]["ok"]
    assert padded["peer_skipped"]["cutlass"] == "padded leading dimensions"


class CapturingFw(NumpyFw):
    """Knows when it is capturing, as CUDA does."""

    capturing = False

    def capture(self, fn):
        self.capturing = True
        try:
            return super().capture(fn)
        finally:
            self.capturing = False


def test_hot_variant_reuses_one_operand_set():
    b = bench(fake_pcr())
    b.settings = dataclasses.replace(SMALL, hot=True)
    r = b.run(shapes.Case("A", "bf16", 64, 48, 32, layout="nt"))
    assert r["status"] == "ok" and r["operand_sets"] == 1 and r["check"]["ok"]
    assert r["ratio"]["cublas"] > 0


def test_a_peer_that_cannot_be_captured_makes_everyone_use_events():
    fw = CapturingFw()

    def blas(i):  # cupy's cuBLAS refuses to be called during stream capture
        if fw.capturing:
            raise NotImplementedError("calling cuBLAS API during stream capture")

    cs = [
        timing.Contestant("ours", lambda i: None),
        timing.Contestant("blas", blas),
        timing.Contestant("cutlass", lambda i: None, always_graph=True),
    ]
    dev = timing.device_times(fw, cs, 2, SMALL, graph=True)
    assert {n: s.method for n, s in dev.items()} == {
        "ours": "events",
        "blas": "events",
        "cutlass": "graph",
    }
    assert "cuBLAS" in cs[1].errors["graph"]
    dev = timing.device_times(fw, cs[:1] + cs[2:], 2, SMALL, graph=False)
    assert (dev["ours"].method, dev["cutlass"].method) == ("events", "graph")


class FakePeer:
    graphable, error, drain = True, None, None

    def __init__(self, name, fw, refuse_capture=False, always_graph=False):
        self.name, self.via, self.fw = name, name, fw
        self.refuse, self.always_graph = refuse_capture, always_graph

    def make(self, case, fw, bias=None):
        def fn(a, b, c, d):
            if self.refuse and self.fw.capturing:
                raise NotImplementedError("no capture")
            np.matmul(a, b, out=d)

        return fn


def test_ratios_of_unlike_timings_are_left_out():
    fw = CapturingFw()
    b = measure.Bench(
        fw,
        fake_pcr(),
        [FakePeer("cublas", fw, refuse_capture=True), FakePeer("cutlass", fw, always_graph=True)],
        SMALL,
        1 << 16,
        lambda: 1 << 34,
    )
    r = b.run(shapes.Case("A", "bf16", 32, 32, 32))
    assert r["status"] == "ok" and r["method"] == "graph"
    assert set(r["ratio"]) == {"cublas"} and "not comparable" in r["ratio_skipped"]["cutlass"]
    assert "no capture" in r["peer_errors"]["cublas"]


def test_a_wrong_result_is_flagged_not_fatal():
    b = bench(fake_pcr(kernels=("k_wrong",), wrong=("k_wrong",)))
    b._ours = lambda case, kernel=None: (  # noqa: E731
        lambda a, b_, c, d: b.pcr.gemm(a, b_, c, d, kernel="k_wrong")
    )
    r = b.run(shapes.Case("A", "bf16", 32, 32, 32))
    assert r["status"] == "ok" and r["check"]["ok"] is False and "ratio" in r


def test_a_failing_call_of_ours_is_an_error_record():
    mod = fake_pcr()
    mod.gemm = lambda *a, **k: (_ for _ in ()).throw(ValueError("bad strides"))
    r = bench(mod).run(shapes.Case("A", "bf16", 32, 32, 32))
    assert r["status"] == "error" and "bad strides" in r["reason"]


def test_host_case_times_every_way_to_call():
    r = bench(fake_pcr()).run(shapes.Case("G", "bf16", 32, 32, 32))
    assert r["status"] == "ok" and r["plan_kernel"] == "k_best"
    assert set(r["host_us"]) == {
        "pcr.gemm",
        "torch.mm(out=)",
        "plan.run()",
        "plan(a, b, c, d)",
        "graph replay: pcr.gemm",
        "graph replay: cublas",
        "graph replay: plan.run()",
    }
    assert set(r["ratio"]) == {"cublas", "cublas|plan.run()", "cublas|graph"}
    no_plan = bench(fake_pcr(plan=False)).run(shapes.Case("G", "bf16", 32, 32, 32))
    assert no_plan["plan"] == "not available" and "plan.run()" not in no_plan["host_us"]


def test_regret_case_finds_the_best_kernel():
    r = bench(fake_pcr(kernels=("k_chosen", "k_fast"), slow=("k_chosen",))).run(
        shapes.Case("H", "bf16", 32, 32, 32)
    )
    assert r["status"] == "ok" and r["chosen"] == "k_chosen" and r["best"] == "k_fast"
    assert 0 < r["best_over_chosen"] < 1 and set(r["kernels"]) == {"k_chosen", "k_fast"}
    assert all(c["ok"] for c in r["kernel_checks"].values())


def test_group_n_judges_the_fused_choice_with_the_timed_calls_arguments():
    """N: M's fused cases measured as H. explain() and every forced kernel see the bias and
    activation of the timed call, so the candidates are the fused kernels."""
    assert (
        shapes.GROUPS["N"].kind == "regret"
        and shapes.GROUPS["N"].shapes == shapes.GROUPS["M"].shapes
    )
    seen = []
    mod = fake_pcr(kernels=("k_chosen", "k_fast"), slow=("k_chosen",))
    gemm, explain = mod.gemm, mod.explain

    def fused_gemm(a, b, c, d, alpha=1.0, beta=0.0, *, bias=None, activation=None, **kw):
        seen.append(("gemm", activation, bias is not None))
        gemm(a, b, c, d, alpha, beta, **kw)
        np.maximum(d + bias, 0, out=d)  # bias_relu
        return d

    def fused_explain(*args, **kw):
        seen.append(("explain", kw.get("activation"), kw.get("bias") is not None))
        return explain(*args, **kw)

    mod.gemm, mod.explain = fused_gemm, fused_explain
    r = bench(mod).run(shapes.Case("N", "bf16", 32, 48, 64, epilogue="bias_relu"))
    assert r["status"] == "ok" and (r["chosen"], r["best"]) == ("k_chosen", "k_fast"), r
    assert all(c["ok"] for c in r["kernel_checks"].values()), r["kernel_checks"]
    assert set(seen) == {("explain", "relu", True), ("gemm", "relu", True)}


def test_quantized_cases_give_both_sides_the_same_scales():
    seen = []
    b = bench(fake_pcr(scales=seen))
    r = b.run(shapes.Case("B", "fp8", 16, 64, 64))
    assert r["status"] == "ok" and r["check"]["ok"] and r["check"]["peer_rel_err"] < 1e-6
    assert {(float(sa.item()), float(sb.item())) for sa, sb in seen} == {(2.0, 0.5)}
    h = bench(fake_pcr(kernels=("k1", "k2"), scales=seen)).run(shapes.Case("H", "fp8", 16, 64, 64))
    assert h["status"] == "ok" and all(c["ok"] for c in h["kernel_checks"].values())
    assert all(sa is not None and sb is not None for sa, sb in seen)
    # a side that dropped a scale would be off by 2x: the check sees it
    dropped = fake_pcr()
    gemm = dropped.gemm
    dropped.gemm = lambda *args, scale_b=None, **kw: gemm(*args, **kw)
    bad = bench(dropped).run(shapes.Case("B", "fp8", 16, 64, 64))
    assert not bad["check"]["ok"]


def test_suite_writes_json_and_prints_a_summary(tmp_path, monkeypatch):
    monkeypatch.setattr(device, "nvidia_smi", lambda *a: {"raw": "", "gpus": []})
    mod = fake_pcr(kernels=("k_chosen", "k_fast"), slow=("k_chosen",))
    info = {"library": "fake.so", "abi": 1, "build": {}, "driver_version": "13.0"}
    cases = [
        shapes.Case("A", "bf16", 32, 32, 32, "tt"),
        shapes.Case("A", "fp8", 32, 32, 32, skip="not in this build"),
        shapes.Case("G", "bf16", 16, 16, 16),
        shapes.Case("H", "bf16", 32, 32, 32),
    ]
    err = io.StringIO()
    result, path = suite.run(
        mod,
        info,
        NumpyFw(),
        cases,
        settings=SMALL,
        out_dir=str(tmp_path),
        use_cutlass=False,
        command="test",
        stream=err,
    )
    back = report.read_json(path)
    assert [r["status"] for r in back["records"]] == ["ok", "skipped", "ok", "ok"]
    assert back["machine"]["gpu"] == "Fake GPU" and back["plan"] == "available"
    assert back["peers"]["cutlass"]["reason"] == "--no-cutlass"
    assert back["versions"]["pycutlass_rt"] == "0.0-fake" and back["versions"]["torch"] == "fake"
    h = next(r for r in back["summary"] if r["group"] == "H")
    assert h["within_5pct"] == 0.0 and h["worst"]["label"] == "32x32x32 tn"
    assert "4/4" in err.getvalue()
    out = io.StringIO()
    suite.print_summary(back, path, file=out)
    text = out.getvalue()
    assert "A square" in text and "best/chosen" in text and "peer cutlass: not run" in text
    assert json.loads(open(path).read())["command"] == "test"


def test_a_run_cut_short_keeps_the_cases_done(tmp_path, monkeypatch):
    """A kill between cases (timeout's SIGTERM becomes KeyboardInterrupt) loses nothing run."""
    monkeypatch.setattr(device, "nvidia_smi", lambda *a: {"raw": "", "gpus": []})
    mod = fake_pcr(kernels=("k_chosen", "k_fast"), slow=("k_chosen",))
    info = {"library": "fake.so", "abi": 1, "build": {}, "driver_version": "13.0"}
    cases = [shapes.Case("A", "bf16", 32, 32, 32, "tt"), shapes.Case("A", "bf16", 64, 64, 64, "tt")]
    real_run = suite.Bench.run
    calls = []

    def run_then_die(self, case):
        if calls:
            raise KeyboardInterrupt
        calls.append(case)
        return real_run(self, case)

    monkeypatch.setattr(suite.Bench, "run", run_then_die)
    with pytest.raises(KeyboardInterrupt):
        suite.run(
            mod,
            info,
            NumpyFw(),
            cases,
            settings=SMALL,
            out_dir=str(tmp_path),
            use_cutlass=False,
            command="test",
            stream=io.StringIO(),
        )
    back = report.read_json(str(tmp_path / "bench.json"))
    assert back["interrupted"] and [r["label"] for r in back["records"]] == ["32x32x32 tt"]
    assert back["summary"]


def test_sample_keeps_evenly_spaced_shapes_of_each_group():
    """--sample N: at most N shapes per group and dtype, the same ones every run, spread
    through the list (the held-out group is ordered by model family)."""
    every = shapes.cases(["K"], ["bf16"], ("bf16",))
    some = shapes.cases(["K"], ["bf16"], ("bf16",), sample=10)
    assert len(some) == 10 and some == shapes.cases(["K"], ["bf16"], ("bf16",), sample=10)
    step = len(every) // 10
    assert [c.label for c in some][:2] == [every[0].label, every[step].label]
    assert len({c.label for c in some}) == 10
    assert len(shapes.cases(["A"], ["bf16"], ("bf16",), sample=100)) == len(shapes.SQUARE)


def test_group_l_judges_the_choice_on_the_held_out_shapes():
    """L: H's measurement (every candidate forced) over K's shapes, never the fit grid."""
    assert shapes.GROUPS["L"].kind == "regret" and shapes.GROUPS["L"].title == "heldout-regret"
    assert shapes.GROUPS["L"].shapes == shapes.GROUPS["K"].shapes


def test_the_selection_benchmark_ranks_every_problem(capsys):
    """benchmarks.selection times the library's ranking on the CPU: each problem ranks
    (some kernel takes it) and it reports both the table's and the model's cost."""
    import ctypes

    from benchmarks import selection
    from pycutlass_rt import _lib
    from pycutlass_rt._abi import Ranked

    if not any(k.family == 90 and k.dtype_a == "bfloat16" for k in pcr.kernels()):
        pytest.skip("no sm90 bf16 kernel in this build")
    lib = _lib.load()
    out, count = (Ranked * 8)(), ctypes.c_int32()
    for p in selection.problems(20, seed=1):
        lib.check(lib.pcr_select_rank(ctypes.byref(p), None, 0, out, 8, ctypes.byref(count)))
        assert count.value >= 1
    assert selection.main(["--problems", "20"]) == 0
    text = capsys.readouterr().out
    assert "shipped table:" in text and "model alone:" in text
    assert selection.main(["--first-load", "1"]) == 0  # a fresh process's first load
    text = capsys.readouterr().out
    assert all(f"  {part} " in text for part in ("read", "resolve", "hand-over", "total"))


def test_quantized_parts_name_the_pieces_of_ours():
    """--parts: a W8A8 layer's two launches, and every linear dense block-scaled kernel of
    the build (the names the library holds), none of them a peer with a ratio."""
    from benchmarks import quantized

    names = [c.name for c in quantized.parts(None, "w8a8_int8", [])]
    assert names == [quantized.PART + "quantize", quantized.PART + "gemm"]
    assert quantized.parts(None, "moe_fp8", []) == []
    want = [
        k.name
        for k in pcr.kernels()
        if "_blk" in k.name
        and "_grouped" not in k.name
        and k.epilogue == "linear"
        and k.scale_m == "groups"
    ]
    got = [c.name.removeprefix(quantized.PART) for c in quantized.parts(None, "block_fp8", [])]
    assert got == want
