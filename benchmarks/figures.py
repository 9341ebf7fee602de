"""Figures of the recorded measurements, as standalone SVG drawn with the standard library.

Three figures, each regenerated from data kept in git, never from numbers typed in::

    python -m benchmarks.figures --out docs/figures
    python -m benchmarks.report --figures docs/figures      # the same, through the report

- ``speed_vs_cublas_by_m.svg``: on the shape corpus's held-out part (shapes no fit of the
  selection table saw), the speed of the kernel the shipped table chooses against torch's
  cuBLAS call, geometric mean per M range and dtype, with the sweep's best kernel marked;
- ``speed_vs_cublas_per_shape.svg``: the same ratio for every held-out shape, against M;
- ``gpu_feature_grid.svg``: per GPU and feature, how many kernels of the catalogue serve
  it there, and whether that GPU ran the GPU suite or the kernels were compiled only.

The speed figures read the held-out sweeps of ``heuristics/data/eval/`` (one row per
kernel and shape, with a ``peer:cublas`` row: torch's call on the same operand copies,
timed the same way; heuristics/README.md) and rank each shape's kernels with the shipped
table through the library, as ``heuristics/fit.py --check`` does, so they hold for the
table and library they were drawn with, and ``fit.py --check``'s "vs cuBLAS" line gives
the same overall figures. The grid reads the catalogue (native/catalog) and asks the
library which arch families it selects from on each compute capability; which GPUs ran
the kernels is :data:`GPUS`, the README's GPU table.

Every figure needs a built library (``PYCUTLASS_RT_LIBRARY`` or a build of the checkout),
but no GPU. Internal API it relies on, as ``heuristics/fit.py`` does:
``pycutlass_rt._table`` (the table's file format) and ``pycutlass_rt._select.families_for``
(the arch families the library selects from on a compute capability). The SVG is written element by element (``xml.etree``), deterministically:
the same data and table give the same bytes.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVAL = os.path.join(ROOT, "heuristics", "data", "eval")
TABLE = os.path.join(ROOT, "heuristics", "table_v1.json")

#: the held-out sweeps drawn: (dtype label, file in heuristics/data/eval/, the peer call
#: its ``peer:cublas`` rows timed; heuristics/sweep.py's ``peer_call``)
HELDOUT = (
    ("bf16", "h200_bf16_tn_heldout.csv.gz", "torch.mm"),
    ("fp16", "h200_fp16_tn_heldout.csv.gz", "torch.mm"),
    ("fp8", "h200_fp8_tn_heldout.csv.gz", "torch._scaled_mm"),
    ("int8", "h200_int8_tn_heldout.csv.gz", "torch._int_mm"),
)
#: the date each build that swept rows into those files recorded them, keyed by the
#: ``library`` column (the build's digest): the sweeps hold no date, the commits that
#: added the rows do (a3bcf86 and 5034e9c, 2026-12-03; cc026a4, 2026-12-04: the 128x192
#: tile's rows). A build not listed is drawn as "undated", never given a guessed date.
SWEEP_DATES = {
    "ccbe420fe4acc32b": "2026-12-03",
    "3a022329350fb5e6": "2026-12-03",
    "8f429514b8ac8888": "2026-12-04",
}
#: the M ranges of the grouped figure: (label, lowest M, highest M). Decode-sized M up to
#: 16 (67-87 shapes a dtype), then four ranges of 38-63 shapes each: M is log-uniform in
#: the corpus, so powers-of-8-ish bounds keep every bar's geomean over dozens of shapes.
M_GROUPS = (
    ("M 1-16", 1, 16),
    ("M 17-128", 17, 128),
    ("M 129-1024", 129, 1024),
    ("M 1025-4096", 1025, 4096),
    ("M 4097-16384", 4097, 16384),
)
#: which GPUs ran the kernels: README.md's GPU table, by compute capability (the
#: selection's families follow from it). (GPUs, compute capability, ran there, what the
#: README says.) The H200 and H100 ran the GPU suite; the others are compiled only, though
#: the sm80, sm75, sm70 and sm89 templates also ran on the H200 from sm_90 SASS built for
#: the tests (docs/verification.md, "What ran on which GPU").
GPUS = (
    ("H200", 90, True, "ran: GPU suite, benchmarks"),
    ("H100", 90, True, "ran: most of the GPU suite"),
    ("A100, A10, A30, RTX 30xx", 80, False, "compiled only"),
    ("L4, L40S, RTX 40xx", 89, False, "compiled only"),
    ("B200, GB200", 100, False, "compiled only, SASS checked"),
    ("T4, RTX 20xx", 75, False, "compiled only"),
    ("V100", 70, False, "compiled only (+cu12 variant)"),
)


def _gemm(k) -> bool:
    return k.op == "gemm"


#: the grid's columns: (label lines, whether a catalogue record has the feature)
FEATURES = (
    (("fp16, bf16",), lambda k: _gemm(k) and k.a in ("f16", "bf16")),
    (("tf32, fp32",), lambda k: _gemm(k) and k.a in ("tf32", "f32")),
    (("fp64",), lambda k: _gemm(k) and k.a == "f64"),
    (("int8",), lambda k: _gemm(k) and k.a == "s8"),
    (("fp8",), lambda k: _gemm(k) and k.a in ("e4m3", "e5m2") and not k.block),
    (("fp8", "block-scaled"), lambda k: _gemm(k) and bool(k.block)),
    (("bias +", "activation"), lambda k: k.epilogue == "biasact"),
    (("grouped,", "MoE"), lambda k: k.grouped),
    (("convolutions",), lambda k: k.op in ("fprop", "dgrad", "wgrad")),
)

COLORS = {"bf16": "#4c72b0", "fp16": "#55a868", "fp8": "#c44e52", "int8": "#8172b2"}
RAN, COMPILED, NONE = "#a6d9a0", "#f5d38a", "#eeeeee"
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
#: candidate tick values of a ratio axis (log scale); those in the axis' range are drawn,
#: the coarse ones where the axis spans more than 4x (the fine ones would crowd)
RATIO_TICKS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)
COARSE_TICKS = (0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 3.0, 4.0)


# ---- the data -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ShapeSpeed:
    """One held-out shape timed against its peer: device times in microseconds."""

    dtype: str
    m: int
    n: int
    k: int
    peer_us: float
    chosen_us: float  # the kernel the shipped table ranks first
    best_us: float  # the fastest kernel the sweep timed
    chosen: str  # that kernel's name

    @property
    def ratio(self) -> float:
        """Throughput of the chosen kernel over the peer's (> 1: pycutlass_rt faster)."""
        return self.peer_us / self.chosen_us

    @property
    def best_ratio(self) -> float:
        """Throughput of the sweep's best kernel over the peer's."""
        return self.peer_us / self.best_us


@dataclasses.dataclass
class Sweep:
    """A held-out sweep's timed shapes and what its rows say about the machine."""

    dtype: str
    path: str
    peer: str
    shapes: list
    gpus: list  # the ``gpu`` column's values
    sm_counts: list
    dates: list  # SWEEP_DATES of its rows' builds ("undated <digest>" where unknown)


def geomean(values) -> float:
    """Geometric mean of positive values.

    Args:
        values: positive numbers (at least one).

    Returns:
        exp of the mean of their logarithms.
    """
    logs = [math.log(v) for v in values]
    return math.exp(sum(logs) / len(logs))


def _heuristics():
    """heuristics.fit and pycutlass_rt._table (the repository root on sys.path): the
    fitter's reading of a sweep and the library's ranking under a table."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from heuristics import fit
    from pycutlass_rt import _table

    return fit, _table


def read_sweep(dtype: str, path: str, peer: str, table: dict) -> Sweep:
    """Reads one held-out sweep and ranks each shape's kernels with ``table``.

    Samples are read by ``heuristics.fit.read_samples`` (alignment fallbacks and families
    foreign to the GPU left out, as the fit and ``--check`` leave them), and the chosen
    kernel is the first of ``fit.ranking``: the library's pcr_rank under ``table``.
    Shapes without a peer row (``torch._int_mm`` takes M > 16 only) are left out.

    Args:
        dtype: the label drawn (``bf16``).
        path: the sweep file (``.csv`` or ``.csv.gz``).
        peer: the peer call's name, as drawn.
        table: the selection table, as ``pycutlass_rt._table.read`` gives it.

    Returns:
        the sweep's timed shapes, ordered by (M, N, K), and its machine columns.
    """
    fit, _ = _heuristics()
    samples, _, _ = fit.read_samples([path])
    shapes = []
    for s in samples:
        if not s.peer_us:
            continue
        name = fit.ranking(s, table)[0][0].name
        shapes.append(ShapeSpeed(dtype, s.m, s.n, s.k, s.peer_us, s.times[name], s.best, name))
    shapes.sort(key=lambda x: (x.m, x.n, x.k))
    with fit.datafiles.open_text(path) as f:
        rows = list(csv.DictReader(f))
    builds = sorted({r["library"] for r in rows})
    return Sweep(
        dtype,
        path,
        peer,
        shapes,
        sorted({r["gpu"] for r in rows}),
        sorted({int(r["sm_count"]) for r in rows}),
        sorted({SWEEP_DATES.get(b, f"undated {b}") for b in builds}),
    )


def heldout_sweeps(folder: str = EVAL, table_path: str = TABLE) -> list:
    """Every sweep of :data:`HELDOUT` present in ``folder``, ranked by the table.

    Args:
        folder: where the packed held-out sweeps are (heuristics/data/eval/).
        table_path: the selection table (heuristics/table_v1.json).

    Returns:
        a :class:`Sweep` per file found, in :data:`HELDOUT`'s order.
    """
    _, _table = _heuristics()
    table = _table.read(table_path)
    out = []
    for dtype, name, peer in HELDOUT:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            out.append(read_sweep(dtype, path, peer, table))
    if not out:
        raise SystemExit(f"{folder}: none of the held-out sweeps ({HELDOUT[0][1]}, ...)")
    return out


def by_m_group(shapes) -> list:
    """The shapes of each :data:`M_GROUPS` range.

    Args:
        shapes: :class:`ShapeSpeed` records.

    Returns:
        one list per M range, in :data:`M_GROUPS`'s order (empty where none falls in it).
    """
    return [[s for s in shapes if lo <= s.m <= hi] for _, lo, hi in M_GROUPS]


def _headed(root, title: str, sweeps, note: str):
    """``root`` with a speed figure's heading: its title, where the sweeps came from, and
    how to read it."""
    _text(root, 20, 26, title, 15, font_weight="bold")
    _text(root, 20, 46, _provenance(sweeps), 10.5, fill="#444444")
    _text(root, 20, 62, note, 10.5, fill="#444444")
    return root


def _provenance(sweeps) -> str:
    """GPU, SM count, dates and files of the sweeps, for a figure's subtitle."""
    gpus = sorted({g for s in sweeps for g in s.gpus})
    sms = sorted({n for s in sweeps for n in s.sm_counts})
    dates = sorted({d for s in sweeps for d in s.dates})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    if any(d.startswith("undated") for d in dates):
        when = ", ".join(dates)
    files = ", ".join(os.path.basename(s.path).replace("_tn_heldout.csv.gz", "") for s in sweeps)
    return (
        f"{', '.join(gpus)} ({'/'.join(map(str, sms))} SMs), swept {when}; "
        f"heuristics/data/eval/{{{files}}}_tn_heldout.csv.gz"
    )


# ---- SVG ----------------------------------------------------------------------------------


def _num(x: float) -> str:
    """A coordinate: two decimals, no trailing zeros (short, deterministic files)."""
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _el(parent, tag: str, text: str | None = None, **attrs) -> ET.Element:
    """A child element; ``font_size`` becomes ``font-size`` (and so on), floats are
    written by :func:`_num`."""
    e = ET.SubElement(parent, tag)
    for key, value in attrs.items():
        if value is None:
            continue
        e.set(
            key.rstrip("_").replace("_", "-"),
            _num(value) if isinstance(value, float) else str(value),
        )
    if text is not None:
        e.text = text
    return e


def _svg(width: int, height: int, title: str) -> ET.Element:
    root = ET.Element(
        "svg",
        {
            "xmlns": "http://www.w3.org/2000/svg",
            "width": str(width),
            "height": str(height),
            "viewBox": f"0 0 {width} {height}",
            "font-family": FONT,
        },
    )
    _el(root, "title", title)
    _el(root, "rect", x=0, y=0, width=width, height=height, fill="white")
    return root


def _text(parent, x, y, text, size=11, anchor="start", **attrs) -> ET.Element:
    return _el(
        parent, "text", text, x=float(x), y=float(y), font_size=size, text_anchor=anchor, **attrs
    )


def _write(root: ET.Element, path: str) -> str:
    ET.indent(root)  # one element a line: readable diffs when a figure is regenerated
    data = ET.tostring(root, encoding="unicode")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(data + "\n")
    return path


def _ratio(t: float) -> str:
    """A tick's label: one decimal where that is exact (0.9, 1.0, 1.5), else two (1.25)."""
    return f"{t:.1f}" if round(t, 1) == t else f"{t:.2f}"


class LogAxis:
    """A vertical log-scale axis of ratios between ``lo`` and ``hi`` (pixels ``bottom``
    up to ``top``)."""

    def __init__(self, lo: float, hi: float, top: float, bottom: float):
        self.lo, self.hi, self.top, self.bottom = lo, hi, top, bottom

    @classmethod
    def around(cls, values, top: float, bottom: float) -> LogAxis:
        """An axis that holds ``values`` and 0.9-1.1 (the 1.0 line is never at an edge)."""
        return cls(min(min(values), 0.9) / 1.06, max(max(values), 1.1) * 1.06, top, bottom)

    def y(self, v: float) -> float:
        share = math.log(v / self.lo) / math.log(self.hi / self.lo)
        return self.bottom - share * (self.bottom - self.top)

    def ticks(self) -> list:
        ticks = COARSE_TICKS if self.hi / self.lo > 4 else RATIO_TICKS
        return [t for t in ticks if self.lo <= t <= self.hi]

    def draw(self, g, x0: float, x1: float, label: str | None = None) -> None:
        """Grid lines and tick labels from ``x0`` to ``x1``, the 1.0 reference line, and
        the axis label."""
        for t in self.ticks():
            y = self.y(t)
            if t != 1.0:
                _el(g, "line", x1=float(x0), y1=y, x2=float(x1), y2=y, stroke="#e3e3e3")
            _text(g, x0 - 6, y + 4, f"{_ratio(t)}×", 10, "end", class_="tick", data_value=f"{t:g}")
        y = self.y(1.0)
        _el(
            g,
            "line",
            x1=float(x0),
            y1=y,
            x2=float(x1),
            y2=y,
            stroke="#333333",
            stroke_width="1.2",
            stroke_dasharray="5 3",
            class_="ref",
            data_value="1",
        )
        _el(
            g,
            "line",
            x1=float(x0),
            y1=float(self.top),
            x2=float(x0),
            y2=float(self.bottom),
            stroke="#888888",
        )
        if label:
            cy = (self.top + self.bottom) / 2
            _text(
                g,
                x0 - 44,
                cy,
                label,
                11,
                "middle",
                transform=f"rotate(-90 {_num(x0 - 44)} {_num(cy)})",
            )


# ---- the figures --------------------------------------------------------------------------


def speed_by_m_svg(sweeps) -> ET.Element:
    """Bars: per M range and dtype, the geomean of peer time over the chosen kernel's.

    Each bar starts at the 1.0 line (log scale: above it pycutlass_rt is faster); a black
    tick marks the sweep's best kernel on the same shapes. Bars carry ``data-dtype``,
    ``data-group``, ``data-shapes``, ``data-value`` and ``data-best`` (the plotted
    geomeans).

    Args:
        sweeps: :func:`heldout_sweeps`' result.

    Returns:
        the SVG root element.
    """
    rows = (len(sweeps) + 1) // 2  # the legend's: two entries a row
    W, H = 960, 470 + 16 * rows
    left, right, top, bottom = 90, W - 20, 116 + 16 * rows, H - 62
    groups = [by_m_group(s.shapes) for s in sweeps]
    cells = [  # (group index, sweep index, shapes, chosen geomean, best geomean)
        (g, i, ss, geomean(x.ratio for x in ss), geomean(x.best_ratio for x in ss))
        for i, per in enumerate(groups)
        for g, ss in enumerate(per)
        if ss
    ]
    axis = LogAxis.around([v for c in cells for v in c[3:]], top, bottom)
    root = _headed(
        _svg(W, H, "pycutlass_rt against cuBLAS on held-out shapes, by M"),
        "pycutlass_rt's chosen kernel against cuBLAS on shapes no fit saw, by M",
        sweeps,
        "Geomean of peer time / ours per M range (> 1: pycutlass_rt faster); kernel chosen by "
        "heuristics/table_v1.json; tn; CUDA-graph replays, operands cycled past L2.",
    )
    # legend: one entry per dtype with its overall geomean, then the best kernel's tick
    for i, s in enumerate(sweeps):
        x, y = 20.0 + 440.0 * (i % 2), 74.0 + 16.0 * (i // 2)
        overall = geomean(v.ratio for v in s.shapes)
        label = f"{s.dtype} vs {s.peer}: {len(s.shapes)} shapes, {overall:.3f}× overall"
        _el(root, "rect", x=x, y=y, width=11, height=11, fill=COLORS[s.dtype])
        _text(root, x + 16, y + 10, label, 10.5, class_="legend", data_dtype=s.dtype)
    y = 74.0 + 16.0 * rows + 6
    _el(root, "line", x1=20.0, y1=y, x2=34.0, y2=y, stroke="black", stroke_width="2.5")
    best = "the sweep's best kernel on the same shapes (what a perfect choice would give)"
    _text(root, 40, y + 4, best, 10.5)
    g = _el(root, "g")
    axis.draw(g, left, right, "speed vs peer (log scale)")
    n_groups, n_bars = len(M_GROUPS), len(sweeps)
    gw = (right - left) / n_groups
    bw = min(28.0, (gw - 24) / n_bars)
    for gi, (label, _, _) in enumerate(M_GROUPS):
        cx = left + gw * (gi + 0.5)
        _text(g, cx, bottom + 18, label, 11, "middle", class_="group")
        counts = " · ".join(str(len(per[gi])) if per[gi] else "–" for per in groups)
        _text(g, cx, bottom + 33, f"shapes: {counts}", 9.5, "middle", fill="#555555")
    dtypes = " · ".join(s.dtype for s in sweeps)
    _text(
        g,
        left,
        bottom + 52,
        f"shapes: per dtype ({dtypes}); – where the peer timed none (torch._int_mm takes M > 16)",
        9.5,
        fill="#555555",
    )
    y1 = axis.y(1.0)
    for gi, si, ss, value, best in cells:
        x = left + gw * (gi + 0.5) + (si - n_bars / 2) * bw
        y = axis.y(value)
        bar = _el(
            g,
            "rect",
            x=x + 1,
            y=min(y, y1),
            width=bw - 2,
            height=abs(y1 - y),
            fill=COLORS[sweeps[si].dtype],
            class_="bar",
            data_dtype=sweeps[si].dtype,
            data_group=M_GROUPS[gi][0],
            data_shapes=len(ss),
            data_value=f"{value:.4f}",
            data_best=f"{best:.4f}",
        )
        _el(
            bar,
            "title",
            f"{sweeps[si].dtype}, {M_GROUPS[gi][0]}: {value:.3f}× "
            f"{sweeps[si].peer} over {len(ss)} shapes (best kernel {best:.3f}×)",
        )
        yb = axis.y(best)
        _el(
            g,
            "line",
            x1=x + 1,
            y1=yb,
            x2=x + bw - 1,
            y2=yb,
            stroke="black",
            stroke_width="2.5",
            class_="best",
            data_value=f"{best:.4f}",
        )
        ty = (min(y, yb) - 4) if value >= 1 else (max(y, yb) + 11)
        _text(g, x + bw / 2, ty, f"{value:.2f}", 8.5, "middle", class_="value")
    return root


def speed_per_shape_svg(sweeps) -> ET.Element:
    """Dots: each held-out shape's peer time over the chosen kernel's, against M; one
    panel per dtype. Dots carry ``data-m``, ``data-n``, ``data-k`` and ``data-value``.

    Args:
        sweeps: :func:`heldout_sweeps`' result.

    Returns:
        the SVG root element.
    """
    W, cols = 960, 2
    rows = (len(sweeps) + cols - 1) // cols
    ph, pw, head = 250, 360, 76
    H = head + rows * (ph + 58) + 10
    ratios = [x.ratio for s in sweeps for x in s.shapes]
    m_max = max(x.m for s in sweeps for x in s.shapes)
    m_hi = 4 ** math.ceil(math.log(max(m_max, 2), 4))  # the last M tick (ticks: powers of 4)
    root = _headed(
        _svg(W, H, "pycutlass_rt against cuBLAS, every held-out shape"),
        "pycutlass_rt's chosen kernel against cuBLAS, every held-out shape",
        sweeps,
        "One dot per shape (M×N×K, tn): peer time / ours (> 1: pycutlass_rt faster), both "
        "axes log scales; kernel chosen by heuristics/table_v1.json.",
    )
    for i, s in enumerate(sweeps):
        ox = 90 + (i % cols) * (pw + 110)
        oy = head + (i // cols) * (ph + 58) + 26
        axis = LogAxis.around(ratios, oy, oy + ph)  # one scale for every panel
        panel = _el(root, "g", class_="panel", data_dtype=s.dtype)
        below = sum(x.ratio < 0.85 for x in s.shapes)
        overall = geomean(x.ratio for x in s.shapes)
        label = f"{s.dtype} vs {s.peer}: {len(s.shapes)} shapes, {overall:.3f}×, {below} < 0.85×"
        _text(panel, ox, oy - 8, label, 11.5, font_weight="bold", class_="panel-title")
        axis.draw(panel, ox, ox + pw, "speed vs peer")

        def mx(m, ox=ox):
            return ox + math.log(m) / math.log(m_hi) * pw

        m = 1
        while m <= m_hi:
            y = float(oy + ph)
            _el(panel, "line", x1=mx(m), y1=y, x2=mx(m), y2=y + 4, stroke="#888888")
            _text(panel, mx(m), oy + ph + 16, f"{m}", 9.5, "middle")
            m *= 4
        _text(panel, ox + pw / 2, oy + ph + 31, "M (log scale)", 10.5, "middle")
        # the dots share their colour through the group: about 1000 of them, kept short
        dots = _el(panel, "g", fill=COLORS[s.dtype], fill_opacity="0.6")
        for x in s.shapes:
            _el(
                dots,
                "circle",
                cx=mx(x.m),
                cy=axis.y(x.ratio),
                r="2.4",
                class_="shape",
                data_m=x.m,
                data_n=x.n,
                data_k=x.k,
                data_value=f"{x.ratio:.4f}",
            )
    return root


def _catalogue():
    """The catalogue's records (native/ on sys.path)."""
    native = os.path.join(ROOT, "native")
    if native not in sys.path:
        sys.path.insert(0, native)
    import catalog

    return catalog.catalogue()


def families_for(cc: int) -> list:
    """The arch families the library selects kernels from on compute capability ``cc``
    (``["sm90", "sm80", "sm75"]`` for 9.0), as pcr_kernel_families reports them."""
    from pycutlass_rt import _select

    return [f"sm{f}" for f in _select.families_for(cc)]


def feature_grid(kernels=None) -> list:
    """Per row of :data:`GPUS`, per :data:`FEATURES` column, the number of catalogue
    kernels of the families selected there.

    Args:
        kernels: catalogue records (default: the whole catalogue).

    Returns:
        ``[(gpus, cc, ran, status, families, [count per feature]), ...]``.
    """
    kernels = _catalogue() if kernels is None else kernels
    out = []
    for gpus, cc, ran, status in GPUS:
        fams = families_for(cc)
        mine = [k for k in kernels if k.family in fams]
        out.append((gpus, cc, ran, status, fams, [sum(map(has, mine)) for _, has in FEATURES]))
    return out


def feature_grid_svg(grid=None, total: int | None = None) -> ET.Element:
    """The GPU × feature grid: cells hold kernel counts, coloured by whether that GPU ran
    the kernels. Cells carry ``data-gpu``, ``data-feature``, ``data-kernels`` and
    ``data-status`` (``ran``, ``compiled`` or ``none``).

    Args:
        grid: :func:`feature_grid`'s result (default: computed).
        total: the catalogue's kernel count, for the subtitle (default: counted).

    Returns:
        the SVG root element.
    """
    if grid is None or total is None:
        kernels = _catalogue()
        grid = feature_grid(kernels) if grid is None else grid
        total = len(kernels) if total is None else total
    left, cw, ch, top = 410, 80, 34, 134
    W = left + cw * len(FEATURES) + 20
    H = top + ch * len(grid) + 62
    root = _svg(W, H, "pycutlass_rt kernels per GPU and feature")
    title = "Kernels per GPU and feature: ran on that GPU, or compiled only"
    _text(root, 20, 26, title, 15, font_weight="bold")
    lines = (
        f"Each cell: kernels of the catalogue (native/catalog, {total} in all; a build holds "
        "those its kernel filter selects) in the arch families the library selects from on",
        "that compute capability. Which GPUs ran them: README.md's GPU table "
        "(benchmarks/figures.py, GPUS).",
    )
    for i, line in enumerate(lines):
        _text(root, 20, 46 + 15 * i, line, 10.5, fill="#444444")
    for x, fill, label in (
        (20, RAN, "this GPU ran the GPU suite (per-kernel exceptions: docs/verification.md)"),
        (480, COMPILED, "compiled only, not run on this GPU"),
        (730, NONE, "no kernels"),
    ):
        _el(root, "rect", x=float(x), y=80.0, width=14, height=12, fill=fill, stroke="#999999")
        _text(root, x + 19, 90, label, 10.5)
    _text(root, 20, top - 10, "GPU (cc: families)", 10.5, font_weight="bold")
    _text(root, 215, top - 10, "status", 10.5, font_weight="bold")
    for j, (lines, _) in enumerate(FEATURES):
        cx = left + cw * (j + 0.5)
        for li, line in enumerate(lines):
            y = top - 10 - 13 * (len(lines) - 1 - li)
            _text(root, cx, y, line, 10, "middle", font_weight="bold")
    for i, (gpus, cc, ran, status, fams, counts) in enumerate(grid):
        y = top + ch * i
        _text(root, 20, y + 15, gpus, 11.5, font_weight="bold", class_="gpu")
        _text(root, 20, y + 28, f"{cc // 10}.{cc % 10}: {', '.join(fams)}", 9.5, fill="#555555")
        _text(root, 215, y + 21, status, 10, fill="#333333", class_="status")
        for j, n in enumerate(counts):
            state = "none" if not n else "ran" if ran else "compiled"
            feature = " ".join(FEATURES[j][0])
            x = left + cw * j
            fill = {"ran": RAN, "compiled": COMPILED, "none": NONE}[state]
            cell = _el(
                root,
                "rect",
                x=float(x + 1),
                y=float(y + 1),
                width=cw - 2,
                height=ch - 2,
                fill=fill,
                class_="cell",
                data_gpu=gpus,
                data_feature=feature,
                data_kernels=n,
                data_status=state,
            )
            _el(cell, "title", f"{gpus}, {feature}: {n} kernels ({status})")
            text, color = (str(n), "#222222") if n else ("–", "#999999")
            _text(root, x + cw / 2, y + 21, text, 11, "middle", fill=color)
    notes = (
        "The sm80, sm75, sm70 and sm89 templates also ran on the H200 from sm_90 SASS built "
        "for the tests; sm100a SASS was inspected, never run (docs/verification.md).",
        "sm70 (V100) kernels need the CUDA 12 build (+cu12 variant); the H100 ran most of the "
        "GPU suite and the quantized-layer benchmarks (README.md).",
    )
    for i, note in enumerate(notes):
        _text(root, 20, H - 34 + 16 * i, note, 10, fill="#444444")
    return root


#: file name -> what draws it from (sweeps or None for the grid)
FIGURES = {
    "speed_vs_cublas_by_m.svg": speed_by_m_svg,
    "speed_vs_cublas_per_shape.svg": speed_per_shape_svg,
    "gpu_feature_grid.svg": None,
}


def render_all(out_dir: str, folder: str = EVAL, table_path: str = TABLE) -> list:
    """Writes every figure of :data:`FIGURES` into ``out_dir``.

    Args:
        out_dir: the folder to write (made if absent).
        folder: the held-out sweeps' folder.
        table_path: the selection table that chooses the kernels.

    Returns:
        the paths written.
    """
    sweeps = heldout_sweeps(folder, table_path)
    paths = []
    for name, draw in FIGURES.items():
        root = draw(sweeps) if draw else feature_grid_svg()
        paths.append(_write(root, os.path.join(out_dir, name)))
    return paths


def main(argv=None) -> int:
    """``python -m benchmarks.figures --out DIR``: regenerates the figures.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        the exit status.
    """
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.figures", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "figures"), help="folder to write")
    ap.add_argument("--eval", default=EVAL, help="folder of the held-out sweeps")
    ap.add_argument("--table", default=TABLE, help="the selection table that chooses")
    args = ap.parse_args(argv)
    for path in render_all(args.out, args.eval, args.table):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
