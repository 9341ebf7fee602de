"""benchmarks/figures.py: each figure drawn from the data kept in git, parsed back, and what
it plots checked against figures computed here from the same CSV rows (read with csv and
gzip alone, not through the module under test) and against ``heuristics/fit.py --check``."""

import csv
import gzip
import io
import math
import os
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from benchmarks import figures, report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SVG = "{http://www.w3.org/2000/svg}"
PEER = "peer:cublas"
#: an sdist ships no heuristics/data/ (pyproject.toml); a checkout must hold the sweeps
pytestmark = pytest.mark.skipif(
    not os.path.isdir(figures.EVAL) and not os.path.exists(os.path.join(ROOT, ".git")),
    reason="an sdist: heuristics/data/ is not shipped",
)


def raw_sweep(name):
    """{(m, n, k): (peer us, {kernel: us})} of a held-out sweep, alignment fallbacks
    (``_a1``, which neither the fit nor the selection's calibration consider) left out;
    and the set of builds (``library``) that wrote its rows."""
    path = os.path.join(figures.EVAL, name)
    with gzip.open(path, "rb") as f:
        rows = list(csv.DictReader(io.StringIO(f.read().decode("utf-8"), newline="")))
    peers, kernels = {}, {}
    for r in rows:
        key = (int(r["m"]), int(r["n"]), int(r["k"]))
        if r["kernel"] == PEER:
            peers[key] = float(r["median_us"])
        elif not r["kernel"].endswith("_a1"):
            kernels.setdefault(key, {})[r["kernel"]] = float(r["median_us"])
    timed = {key: (us, kernels[key]) for key, us in peers.items()}
    return timed, {r["library"] for r in rows}, {r["gpu"] for r in rows}


def gmean(values):
    values = list(values)
    return math.exp(sum(map(math.log, values)) / len(values))


def m_group(m):
    return next(label for label, lo, hi in figures.M_GROUPS if lo <= m <= hi)


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """{file name: parsed SVG root} of every figure, rendered into a temporary folder."""
    out = tmp_path_factory.mktemp("figures")
    paths = figures.render_all(str(out))
    assert sorted(os.path.basename(p) for p in paths) == sorted(figures.FIGURES)
    return {os.path.basename(p): ET.parse(p).getroot() for p in paths}


@pytest.fixture(scope="module")
def raw():
    return {dtype: raw_sweep(name) for dtype, name, _ in figures.HELDOUT}


def texts(root):
    return [t.text or "" for t in root.iter(SVG + "text")]


def axis_of(g):
    """y(value) of the log axis drawn in ``g``, from its tick labels (drawn 4 px below
    their grid line) and checked against the 1.0 reference line."""
    ticks = [
        (float(t.get("data-value")), float(t.get("y")) - 4)
        for t in g.iter(SVG + "text")
        if t.get("class") == "tick"
    ]
    assert len(ticks) >= 3
    (v1, y1), (v2, y2) = ticks[0], ticks[-1]

    def y(v):
        return y1 + (math.log(v) - math.log(v1)) * (y2 - y1) / (math.log(v2) - math.log(v1))

    ref = [e for e in g.iter(SVG + "line") if e.get("class") == "ref"]
    assert len(ref) == 1 and abs(float(ref[0].get("y1")) - y(1.0)) < 0.05
    return y


# ---- speed against cuBLAS, by M --------------------------------------------------------------


def test_bars_are_the_geomeans_of_the_recorded_rows(drawn, raw):
    root = drawn["speed_vs_cublas_by_m.svg"]
    bars = [e for e in root.iter(SVG + "rect") if e.get("class") == "bar"]
    expected = {}  # (dtype, group) -> [(peer us, best us)]
    for dtype, (timed, _, _) in raw.items():
        for (m, _, _), (peer, times) in timed.items():
            expected.setdefault((dtype, m_group(m)), []).append((peer, min(times.values())))
    # one bar per M range and dtype that the peer timed: int8 has none at M <= 16
    assert len(bars) == len(expected) == 4 * 5 - 1
    assert ("int8", "M 1-16") not in expected
    for bar in bars:
        cell = expected[(bar.get("data-dtype"), bar.get("data-group"))]
        assert int(bar.get("data-shapes")) == len(cell)
        best = gmean(peer / us for peer, us in cell)
        assert float(bar.get("data-best")) == pytest.approx(best, abs=6e-5)
        # the chosen kernel is one the sweep timed: never faster than the sweep's best
        assert float(bar.get("data-value")) <= float(bar.get("data-best")) + 1e-4


def test_bar_geometry_draws_the_values_on_the_axis(drawn):
    root = drawn["speed_vs_cublas_by_m.svg"]
    g = next(e for e in root.iter(SVG + "g") if any(c.get("class") == "bar" for c in e))
    y = axis_of(g)
    bars = [e for e in g if e.get("class") == "bar"]
    best = [e for e in g if e.get("class") == "best"]
    assert len(best) == len(bars)
    for bar, tick in zip(bars, best):
        value = float(bar.get("data-value"))
        top, height = float(bar.get("y")), float(bar.get("height"))
        ends = sorted([top, top + height])
        # bars start at the 1.0 line and end at their value (above the line: faster)
        assert ends == pytest.approx(sorted([y(1.0), y(value)]), abs=0.06)
        assert float(tick.get("y1")) == pytest.approx(y(float(bar.get("data-best"))), abs=0.06)
        assert float(tick.get("x1")) >= float(bar.get("x")) - 0.02


def test_overall_figures_are_fit_checks(drawn, raw):
    """The bars' shapes-weighted geomean per dtype is what ``fit.py --check`` reports for
    the shipped table's choice, and the legend prints it."""
    sys.path.insert(0, ROOT)
    from heuristics import fit
    from pycutlass_rt import _table

    table = _table.read(figures.TABLE)
    root = drawn["speed_vs_cublas_by_m.svg"]
    bars = [e for e in root.iter(SVG + "rect") if e.get("class") == "bar"]
    legend = {
        e.get("data-dtype"): e.text for e in root.iter(SVG + "text") if e.get("class") == "legend"
    }
    for dtype, name, peer in figures.HELDOUT:
        samples, _, _ = fit.read_samples([os.path.join(figures.EVAL, name)])
        vs_peer = fit.check(table, samples)["sm90"]["vs peer"]
        mine = [b for b in bars if b.get("data-dtype") == dtype]
        n = sum(int(b.get("data-shapes")) for b in mine)
        overall = math.exp(
            sum(int(b.get("data-shapes")) * math.log(float(b.get("data-value"))) for b in mine) / n
        )
        assert n == vs_peer["samples"] == len(raw[dtype][0])
        assert overall == pytest.approx(vs_peer["chosen"], abs=2e-4)
        assert f"{dtype} vs {peer}: {n} shapes, {vs_peer['chosen']:.3f}×" in legend[dtype]


def test_speed_figures_name_source_gpu_and_date(drawn, raw):
    builds = set().union(*(b for _, b, _ in raw.values()))
    gpus = set().union(*(g for _, _, g in raw.values()))
    assert builds <= set(figures.SWEEP_DATES)  # every build's rows have a recorded date
    dates = sorted({figures.SWEEP_DATES[b] for b in builds})
    for name in ("speed_vs_cublas_by_m.svg", "speed_vs_cublas_per_shape.svg"):
        words = " ".join(texts(drawn[name]))
        assert gpus == {"NVIDIA H200"} and "NVIDIA H200 (132 SMs)" in words
        assert f"swept {dates[0]} to {dates[-1]}" in words and "undated" not in words
        assert "heuristics/data/eval/" in words and "table_v1.json" in words
    labels = [
        e.text
        for e in drawn["speed_vs_cublas_by_m.svg"].iter(SVG + "text")
        if e.get("class") == "group"
    ]
    assert labels == [label for label, _, _ in figures.M_GROUPS]


# ---- every shape -----------------------------------------------------------------------------


def test_one_dot_per_timed_shape_at_a_recorded_time(drawn, raw):
    root = drawn["speed_vs_cublas_per_shape.svg"]
    panels = [e for e in root.iter(SVG + "g") if e.get("class") == "panel"]
    assert [p.get("data-dtype") for p in panels] == [d for d, _, _ in figures.HELDOUT]
    bars = {
        (b.get("data-dtype"), b.get("data-group")): float(b.get("data-value"))
        for b in drawn["speed_vs_cublas_by_m.svg"].iter(SVG + "rect")
        if b.get("class") == "bar"
    }
    for panel in panels:
        dtype = panel.get("data-dtype")
        timed = raw[dtype][0]
        dots = [e for e in panel.iter(SVG + "circle") if e.get("class") == "shape"]
        keys = [(int(d.get("data-m")), int(d.get("data-n")), int(d.get("data-k"))) for d in dots]
        assert sorted(keys) == sorted(timed) and len(set(keys)) == len(keys)
        y = axis_of(panel)
        groups = {}
        for dot, key in zip(dots, keys):
            value = float(dot.get("data-value"))
            peer, times = timed[key]
            # the chosen kernel's time is one of the shape's recorded kernel times
            assert min(abs(peer / us / value - 1) for us in times.values()) < 2e-4
            assert float(dot.get("cy")) == pytest.approx(y(value), abs=0.06)
            groups.setdefault(m_group(key[0]), []).append(value)
        # the per-shape figure and the grouped one agree
        for group, values in groups.items():
            assert gmean(values) == pytest.approx(bars[(dtype, group)], abs=2e-4)
        title = next(e.text for e in panel.iter(SVG + "text") if e.get("class") == "panel-title")
        below = sum(float(d.get("data-value")) < 0.85 for d in dots)
        assert title.endswith(f", {below} < 0.85×")


# ---- the GPU x feature grid ------------------------------------------------------------------


def name_features(name):
    """The grid's features of a kernel, read off its name (the catalogue's names encode
    every parameter) rather than its record."""
    words = name.split("_")
    conv = words[1] in ("fprop", "dgrad", "wgrad")
    a = words[2] if conv else words[1]
    block = any(w.startswith("blk") for w in words)
    gemm = not conv
    return [
        gemm and a in ("f16", "bf16"),
        gemm and a in ("tf32", "f32"),
        gemm and a == "f64",
        gemm and a == "s8",
        gemm and a in ("e4m3", "e5m2") and not block,
        block,
        "biasact" in words,
        "grouped" in words,
        conv,
    ]


def test_grid_counts_the_catalogue(drawn):
    sys.path.insert(0, os.path.join(ROOT, "native"))
    import catalog

    names = [k.name for k in catalog.catalogue()]
    cells = [
        e for e in drawn["gpu_feature_grid.svg"].iter(SVG + "rect") if e.get("class") == "cell"
    ]
    assert len(cells) == len(figures.GPUS) * len(figures.FEATURES)
    families = {
        90: ["sm90", "sm80", "sm75"],
        89: ["sm89", "sm80", "sm75"],
        80: ["sm80", "sm75"],
        100: ["sm100", "sm80", "sm75"],
        75: ["sm75"],
        70: ["sm70"],
    }
    for i, (gpus, cc, ran, _) in enumerate(figures.GPUS):
        row = cells[i * len(figures.FEATURES) : (i + 1) * len(figures.FEATURES)]
        mine = [n for n in names if n.split("_")[0] in families[cc]]
        counts = [sum(col) for col in zip(*map(name_features, mine))]
        assert [int(c.get("data-kernels")) for c in row] == counts
        assert {c.get("data-gpu") for c in row} == {gpus}
        for c, n in zip(row, counts):
            assert c.get("data-status") == ("none" if not n else "ran" if ran else "compiled")
    by = {(c.get("data-gpu"), c.get("data-feature")): int(c.get("data-kernels")) for c in cells}
    # what the docs say, per family: fp8 needs sm89 or later, block scales sm90a/sm100a,
    # grouped kernels and convolutions the sm80 family or later; sm70/sm75 are dtype-only
    assert by[("A100, A10, A30, RTX 30xx", "fp8")] == 0 < by[("L4, L40S, RTX 40xx", "fp8")]
    assert by[("L4, L40S, RTX 40xx", "fp8 block-scaled")] == 0
    assert by[("B200, GB200", "fp8 block-scaled")] > 0 and by[("H200", "grouped, MoE")] > 0
    assert by[("V100", "int8")] == by[("T4, RTX 20xx", "convolutions")] == 0


def test_grid_rows_follow_the_readme_gpu_table(drawn):
    """GPUS is the README's GPU table: a row ran on a GPU exactly where the README says
    "ran here"."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    start = lines.index("| GPU | kernel families | status |") + 2
    table = {}  # each GPU the README's table names -> its status cell
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        for gpu in re.split(r"[,/]", cells[0]):
            table[gpu.strip()] = cells[-1]
    for gpus, _, ran, _ in figures.GPUS:
        for gpu in gpus.split(","):
            assert table[gpu.strip()].startswith("ran here") == ran, gpu
    words = texts(drawn["gpu_feature_grid.svg"])
    assert [t for t in words if t in {g for g, _, _, _ in figures.GPUS}] == [
        g for g, _, _, _ in figures.GPUS
    ]
    assert sum(w.startswith("ran") for w in words) == sum(r for _, _, r, _ in figures.GPUS)


# ---- the report's hook -----------------------------------------------------------------------


def test_report_draws_the_same_bytes(tmp_path, drawn, capsys):
    assert report.main(["--figures", str(tmp_path / "a")]) == 0
    assert figures.main(["--out", str(tmp_path / "b")]) == 0
    printed = capsys.readouterr().out.split()
    assert len(printed) == 2 * len(figures.FIGURES)
    for name in figures.FIGURES:
        a = (tmp_path / "a" / name).read_bytes()
        assert a == (tmp_path / "b" / name).read_bytes()  # deterministic
        assert ET.fromstring(a).tag == SVG + "svg"
