"""Results: summaries per group and dtype, JSON, the printed table and one PNG per group;
``python -m benchmarks.report --figures DIR`` draws the figures of the data kept in git
(benchmarks/figures.py: held-out sweeps against cuBLAS, the GPU x feature grid) as SVG.

Every ratio is a throughput ratio, ours over the peer's: > 1 means pycutlass_rt is faster
(for group G: its call costs less host time; for group H: the chosen kernel's speed over
the best kernel's, at most 1).
"""

from __future__ import annotations

import json
import math
import os

from .shapes import GROUPS

#: within this factor of the best kernel counts as a good choice (group H)
REGRET_SLACK = 1.05
REGRET_KEY = "best/chosen"


def geomean(values) -> float | None:
    """Geometric mean of positive finite values; None when there are none."""
    logs = [math.log(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def _ratios(record) -> dict:
    """The ratios a record contributes to the summary, by comparison key."""
    if record.get("status") != "ok":
        return {}
    if record["group"] in GROUPS and GROUPS[record["group"]].kind == "regret":
        r = record.get("best_over_chosen")
        return {REGRET_KEY: r} if r else {}
    return {k: v for k, v in (record.get("ratio") or {}).items() if v}


def summarize(records) -> list:
    """One row per (group, dtype, comparison): shapes, geomean and the worst shape.

    Rows also count the group's skipped and failed cases and result mismatches. For
    group H the row adds the fraction of shapes whose chosen kernel is within 5% of the
    best kernel.
    """
    order, bucket, counts = [], {}, {}
    for rec in records:
        gd = (rec["group"], rec["dtype"])
        c = counts.setdefault(gd, {"skipped": 0, "errors": 0, "mismatches": 0, "ok": 0})
        status = rec.get("status")
        c["skipped" if status == "skipped" else "errors" if status == "error" else "ok"] += 1
        if status == "ok" and rec.get("check") and rec["check"].get("ok") is False:
            c["mismatches"] += 1
        for key, ratio in _ratios(rec).items():
            if (gd, key) not in bucket:
                order.append((gd, key))
                bucket[(gd, key)] = []
            bucket[(gd, key)].append((ratio, rec["label"]))
    rows = []
    for gd, key in order:
        vals = bucket[(gd, key)]
        worst = min(vals)
        row = {
            "group": gd[0],
            "dtype": gd[1],
            "vs": key,
            "shapes": len(vals),
            "geomean": geomean(v for v, _ in vals),
            "worst": {"ratio": worst[0], "label": worst[1]},
            **counts[gd],
        }
        if key == REGRET_KEY:
            row["within_5pct"] = sum(v >= 1 / REGRET_SLACK for v, _ in vals) / len(vals)
        rows.append(row)
    # groups with nothing measured still get a row, so skipped dtypes stay visible
    seen = {(r["group"], r["dtype"]) for r in rows}
    for gd, c in counts.items():
        if gd not in seen:
            rows.append(
                {
                    "group": gd[0],
                    "dtype": gd[1],
                    "vs": None,
                    "shapes": 0,
                    "geomean": None,
                    "worst": None,
                    **c,
                }
            )
    rank = {g: i for i, g in enumerate(GROUPS)}
    rows.sort(key=lambda r: (rank.get(r["group"], 99), r["group"]))
    return rows


def skip_reasons(records) -> dict:
    """``{reason: [(group, dtype), ...]}`` over the skipped records."""
    out = {}
    for rec in records:
        if rec.get("status") == "skipped":
            where = out.setdefault(rec.get("reason", "?"), [])
            if (rec["group"], rec["dtype"]) not in where:
                where.append((rec["group"], rec["dtype"]))
    return out


def _fmt_ratio(v) -> str:
    return "-" if v is None else f"{v:.3f}x"


def format_table(rows, records=()) -> str:
    """The printed summary: one line per row of :func:`summarize`, then skip reasons."""
    head = ["group", "dtype", "vs", "shapes", "geomean", "worst", "worst shape", "notes"]
    lines = []
    for r in rows:
        g = GROUPS.get(r["group"])
        notes = []
        for key in ("skipped", "errors", "mismatches"):
            if r.get(key):
                notes.append(f"{r[key]} {key}")
        if "within_5pct" in r:
            notes.insert(0, f"{r['within_5pct']:.0%} within 5% of best")
        worst = r.get("worst") or {}
        lines.append(
            [
                f"{r['group']} {g.title if g else ''}".strip(),
                r["dtype"],
                r["vs"] or "-",
                str(r["shapes"]),
                _fmt_ratio(r["geomean"]),
                _fmt_ratio(worst.get("ratio")),
                worst.get("label", "-"),
                ", ".join(notes),
            ]
        )
    widths = [max(len(x) for x in col) for col in zip(head, *lines)] if lines else map(len, head)
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    out += ["  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in lines]
    reasons = skip_reasons(records)
    for reason, where in reasons.items():
        out.append(f"skipped ({', '.join(f'{g} {d}' for g, d in where)}): {reason}")
    out.append(
        "ratios: throughput ours / peer (> 1: pycutlass_rt faster); G: host time per "
        "call; H: chosen kernel vs the best kernel of the build"
    )
    return "\n".join(out)


def _clean(x):
    """JSON-safe: non-finite floats become None (json would write NaN, which is not JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def write_json(path: str, result: dict) -> str:
    """Writes ``result`` (atomically: a partial run never leaves a truncated file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(_clean(result), f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)
    return path


def read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def plot_groups(result: dict, out_dir: str) -> dict:
    """One PNG per group measured: ``{group: path}``, or ``{"error": why}`` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001 - absent (ImportError) or broken
        return {"error": f"matplotlib not available ({type(e).__name__}: {e}): no plots"}
    paths = {}
    records = [r for r in result.get("records", []) if r.get("status") == "ok"]
    gpu = result.get("machine", {}).get("gpu", "")
    for key, group in GROUPS.items():
        recs = [r for r in records if r["group"] == key]
        if not recs:
            continue
        path = os.path.join(out_dir, f"group_{key}_{group.title}.png")
        try:
            fig = _plot(plt, group, recs, gpu)
            fig.savefig(path, dpi=110)
            plt.close(fig)
            paths[key] = path
        except Exception as e:  # noqa: BLE001 - a plot never costs the results
            paths[key] = f"plot failed: {type(e).__name__}: {e}"
    return paths


def _labels(recs):
    multi = len({r["dtype"] for r in recs}) > 1
    return [f"{r['dtype']} {r['label']}" if multi else r["label"] for r in recs]


def _bars(ax, labels, series: dict, ylabel: str):
    width = 0.8 / max(len(series), 1)
    xs = range(len(labels))
    for j, (name, vals) in enumerate(series.items()):
        ax.bar(
            [x + (j - (len(series) - 1) / 2) * width for x in xs],
            [v if v is not None else 0 for v in vals],
            width,
            label=name,
        )
    ax.set_xticks(list(xs), labels, rotation=90, fontsize=7)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, loc="best")


def _plot(plt, group, recs, gpu):
    labels = _labels(recs)
    width = max(7.0, 0.3 * len(labels) + 2)
    if group.kind == "host":
        names = list(dict.fromkeys(n for r in recs for n in r.get("host_us", {})))
        fig, ax = plt.subplots(figsize=(width, 4.5))
        series = {n: [r["host_us"].get(n, {}).get("median_us") for r in recs] for n in names}
        _bars(ax, labels, series, "host time per call (us)")
        vals = [v for vs in series.values() for v in vs if v]
        if vals and max(vals) > 50 * min(vals):  # the CUTLASS interface's ~1 ms next to ~3 us
            ax.set_yscale("log")
        ax.set_title(f"Group {group.key} ({group.title}): host time per call, {gpu}")
        fig.tight_layout()
        return fig
    if group.kind == "regret":
        fig, ax = plt.subplots(figsize=(width, 5.5))
        ax.bar(range(len(labels)), [r.get("best_over_chosen") or 0 for r in recs])
        ax.axhline(1 / REGRET_SLACK, color="gray", linestyle="--", linewidth=0.8)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_ylabel("chosen kernel speed / best kernel speed")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"Group {group.key} ({group.title}): kernel choice, {gpu}")
        fig.tight_layout()
        return fig
    names = list(dict.fromkeys(n for r in recs for n in r.get("tflops", {})))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 8), sharex=True)
    _bars(top, labels, {n: [r["tflops"].get(n) for r in recs] for n in names}, "TFLOP/s")
    top.set_title(f"Group {group.key} ({group.title}) on {gpu}")
    peers = list(dict.fromkeys(p for r in recs for p in (r.get("ratio") or {})))
    _bars(
        bottom,
        labels,
        {f"vs {p}": [(r.get("ratio") or {}).get(p) for r in recs] for p in peers},
        "throughput ratio (ours / peer)",
    )
    bottom.axhline(1.0, color="gray", linewidth=0.8)
    fig.tight_layout()
    return fig


def write_figures(out_dir: str) -> list:
    """Draws the figures of the recorded measurements (benchmarks/figures.py) into ``out_dir``.

    Args:
        out_dir: the folder to write the SVG files to (docs/figures for the docs' copies).

    Returns:
        the paths written.
    """
    from . import figures  # reads the sweeps, the table and the catalogue: only when asked

    return figures.render_all(out_dir)


def main(argv=None) -> int:
    """``python -m benchmarks.report --figures DIR``; the exit status."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__)
    ap.add_argument("--figures", metavar="DIR", required=True, help="write the SVG figures here")
    for path in write_figures(ap.parse_args(argv).figures):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
