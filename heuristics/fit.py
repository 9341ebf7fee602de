#!/usr/bin/env python3
"""Fit: raw sweep CSVs -> the shipped kernel-choice table; --check: a table's regret.

    python heuristics/fit.py heuristics/sweeps/h200_*.csv --base heuristics/table_v1.json \\
        --out heuristics/table_v1.json
    python heuristics/fit.py heuristics/sweeps/h200_*.csv --check heuristics/table_v1.json

A sample is one swept problem (GPU, dtypes, layout, M, N, K) with the time of every
candidate kernel. Kernels are compared as configurations: the name with dtypes and
layouts replaced by ``*`` (``sm90_*_128x256x64_c2x1_coop_a8``), so one rule serves every
dtype and layout. Per arch family, a small decision tree over M, N and K bounds is grown
greedily: a cell's configurations are ranked by the geometric mean of their time relative
to the best at each sample; a cell is split at the M, N or K bound that most reduces the
regret (time of the cell's first configuration over the best) while that cuts the geomean
regret by at least MIN_GAIN (0.2%). The leaves, left (<= bound) before right, become the
family's rules, read first-match by pycutlass_rt/_select.py: max_m/max_n/max_k bounds,
kernel-name patterns best first, and in ``source`` the sweep files (path@sha256 prefix)
they came from. Rules belong to the device's preferred family (sm90 from H100/H200 sweeps)
and may name kernels of every family that runs there: an H200 sweep of sm80 kernels
competes with the sm90 ones. Alignment-fallback kernels (``_a1``) are never a rule's
choice: they serve the problems nothing else accepts.

--check reports, per family, the geomean of best/chosen and the share of samples within
5% of the best, for the table, for the analytic model alone, and for the choice in effect
when the sweep ran (its rank 0).
"""
from __future__ import annotations

import argparse
import collections
import csv
import functools
import hashlib
import json
import math
import os
import re
import sys
import types
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from pycutlass_rt import _select  # noqa: E402  (pure Python: loads no library)
from pycutlass_rt._kernels import KernelInfo  # noqa: E402

REQUIRED = ("m", "n", "k", "kernel", "median_us")
TABLE_FORMAT = 1  # what _select.TABLE_FORMATS reads
MAX_DEPTH = 8
MIN_GAIN = 0.002  # a split must cut its cell's geomean regret by at least 0.2%
MIN_SHAPES = 2    # distinct shapes on each side of a split
WITHIN = 1.05     # "close to the best" in --check

_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}
_SCHEDULES = {"coop": "cooperative", "pingpong": "pingpong", "1sm": "1sm", "2sm": "2sm"}
_SPLITS = {"streamk": "stream_k", "splitk": "split_k"}
_NAME = re.compile(r"^sm(?P<family>\d+)_(?P<a>[a-z0-9]+)_(?P<b>[a-z0-9]+)_(?P<acc>[a-z0-9]+)_"
                   r"(?P<d>[a-z0-9]+)_(?P<layout>[tn]{2})_(?P<tile>\d+x\d+x\d+)_(?P<rest>.+)_"
                   r"a(?P<align>\d+)$")


def config_of(kernel: str) -> str:
    """sm90_bf16_bf16_f32_bf16_tn_128x256x64_c2x1_coop_a8 -> sm90_*_128x256x64_c2x1_coop_a8."""
    m = _NAME.match(kernel)
    if not m:
        raise ValueError(f"not a kernel name: {kernel!r}")
    return f"sm{m['family']}_*_{m['tile']}_{m['rest']}_a{m['align']}"


def kernel_info(name: str, index: int = 0) -> KernelInfo:
    """A KernelInfo decoded from a kernel name (for the model, without the library)."""
    m = _NAME.match(name)
    if not m:
        raise ValueError(f"not a kernel name: {name!r}")
    rest = m["rest"].split("_")
    x, y = (int(v) for v in rest[0][1:].split("x"))
    split = next((_SPLITS[t] for t in rest if t in _SPLITS), "none")
    if rest[0].startswith("c"):  # CUTLASS 3.x: cluster and schedule
        cluster, warps, stages, schedule = (x, y, 1), (0, 0, 0), 0, _SCHEDULES[rest[1]]
    else:  # CUTLASS 2.x: warps and stages
        stages = int(rest[1][1:])
        cluster, warps = (1, 1, 1), (x, y, 1)
        schedule = "pipelined" if stages == 2 else "multistage"
    align = int(m["align"])
    return KernelInfo(index, name, int(m["family"]), _DTYPES[m["a"]], _DTYPES[m["b"]],
                      _DTYPES[m["acc"]], _DTYPES[m["d"]], m["layout"],
                      tuple(int(v) for v in m["tile"].split("x")), cluster, warps, stages,
                      schedule, "linear", split, (align, align, align), "swapab" in rest)


# ---- reading sweeps -----------------------------------------------------------------------

@dataclass
class Sample:
    """One swept problem: every candidate's time, and where the numbers came from."""

    family: int
    m: int
    n: int
    k: int
    source: str  # path@sha256-prefix of the sweep file
    sm_count: int
    cc: int
    times: dict = field(default_factory=dict)  # kernel name -> us
    order: list = field(default_factory=list)  # kernel names in the sweep's selection order

    @property
    def shape(self) -> tuple:
        return (self.m, self.n, self.k)

    @property
    def best(self) -> float:
        return min(self.times.values())

    @functools.cached_property
    def by_config(self) -> dict:
        """Configuration -> its fastest time here (read after every row is in)."""
        out: dict = {}
        for name, us in self.times.items():
            config = config_of(name)
            out[config] = min(us, out.get(config, us))
        return out

    def time_of(self, config: str) -> float | None:
        return self.by_config.get(config)


def file_label(path: str, digest: str) -> str:
    """heuristics/sweeps/h200_bf16.csv@1a2b3c4d5e6f7a8b (relative to the repository)."""
    full = os.path.abspath(path)
    rel = os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else path
    return f"{rel}@{digest[:16]}"


def read_samples(paths: list[str]) -> tuple[list[Sample], list[dict], int]:
    """(samples, sources, rows skipped: alignment fallbacks, families foreign to the GPU)."""
    samples: dict = {}
    sources, skipped = [], 0
    for path in paths:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        label = file_label(path, digest)
        rows = 0
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise SystemExit(f"{path}: missing columns {missing}")
            for i, row in enumerate(reader):
                family = int(_NAME.match(row["kernel"])["family"]) if _NAME.match(row["kernel"]) \
                    else None
                if family is None:
                    raise SystemExit(f"{path}: row {i + 2}: not a kernel name: {row['kernel']!r}")
                cc = int(row.get("cc") or family)
                if family not in _select.families_for(cc) or row["kernel"].endswith("_a1"):
                    skipped += 1
                    continue
                family = _select.families_for(cc)[0]  # the rules' family on this GPU
                key = (label, row.get("gpu"), row.get("dtype"), row.get("dtype_d"),
                       row.get("layout") or row["kernel"].split("_")[5], family,
                       int(row["m"]), int(row["n"]), int(row["k"]))
                s = samples.get(key)
                if s is None:
                    s = samples[key] = Sample(family, key[6], key[7], key[8], label,
                                              int(row.get("sm_count") or 132), cc)
                s.times[row["kernel"]] = float(row["median_us"])
                s.order.append((int(row.get("rank") or i), row["kernel"]))
                rows += 1
        sources.append({"file": label.rsplit("@", 1)[0], "sha256": digest, "rows": rows})
    for s in samples.values():
        s.order = [name for _, name in sorted(s.order)]
    return list(samples.values()), sources, skipped


# ---- fitting ------------------------------------------------------------------------------

def rank_configs(samples: list[Sample]) -> list[tuple[str, float]]:
    """Configurations best first by the geomean of time / best over the samples they ran."""
    logs = collections.defaultdict(list)
    for s in samples:
        best = s.best
        for config, us in s.by_config.items():
            logs[config].append(math.log(us / best))
    scored = [(sum(v) / len(v), -len(v), c) for c, v in logs.items()]
    return [(c, math.exp(mean)) for mean, _, c in sorted(scored)]


def chosen_time(s: Sample, prefer: list[str]) -> float:
    """The time of the first preferred configuration that ran this sample."""
    for config in prefer:
        us = s.time_of(config)
        if us is not None:
            return us
    return s.times[s.order[0]]


def regret(samples: list[Sample], prefer: list[str]) -> float:
    """Sum of log(chosen / best): 0 when every sample gets its best."""
    return sum(math.log(chosen_time(s, prefer) / s.best) for s in samples)


def cell_cost(samples: list[Sample]) -> float:
    return regret(samples, [c for c, _ in rank_configs(samples)])


def best_split(samples: list[Sample]):
    """(cost, dimension, bound) of the split that leaves the least regret, or None."""
    best = None
    for dim in ("m", "n", "k"):
        values = sorted({getattr(s, dim) for s in samples})
        for bound in values[:-1]:
            left = [s for s in samples if getattr(s, dim) <= bound]
            right = [s for s in samples if getattr(s, dim) > bound]
            if min(len({s.shape for s in left}), len({s.shape for s in right})) < MIN_SHAPES:
                continue
            cost = cell_cost(left) + cell_cost(right)
            if best is None or cost < best[0] - 1e-12:
                best = (cost, dim, bound)
    return best


def grow(samples: list[Sample], bounds: dict, depth: int = 0) -> list[dict]:
    """The rules for one cell: itself as a leaf, or its left then its right leaves."""
    split = best_split(samples) if depth < MAX_DEPTH else None
    if split and cell_cost(samples) - split[0] >= len(samples) * math.log(1 + MIN_GAIN):
        _, dim, bound = split
        left_bounds = {**bounds, f"max_{dim}": min(bound, bounds.get(f"max_{dim}", bound))}
        return (grow([s for s in samples if getattr(s, dim) <= bound], left_bounds, depth + 1)
                + grow([s for s in samples if getattr(s, dim) > bound], bounds, depth + 1))
    ranked = rank_configs(samples)
    prefer = [c for c, _ in ranked]
    return [{**{b: bounds[b] for b in ("max_m", "max_n", "max_k") if b in bounds},
             "prefer": prefer,
             "geomean_vs_best": [round(g, 4) for _, g in ranked],
             "regret": round(math.exp(regret(samples, prefer) / len(samples)), 4),
             "shapes": len({s.shape for s in samples}),
             "source": sorted({s.source for s in samples})}]


def is_hand_rule(rule: dict) -> bool:
    """A rule written by a person (its source says ``hand: why``), not fitted."""
    return any(str(src).startswith("hand:") for src in rule.get("source", []))


def fit(samples: list[Sample], sources: list[dict], base: dict | None = None) -> dict:
    """The table: fitted rules for the families the samples cover, ``base``'s for the rest.

    ``base``'s hand rules stay first in their family: they cover what sweeps do not see
    (e.g. launch-bound sizes, where host cost matters more than device time).
    """
    by_family = collections.defaultdict(list)
    for s in samples:
        by_family[f"sm{s.family}"].append(s)
    families = dict((base or {}).get("families", {}))
    families.update({fam: [r for r in families.get(fam, []) if is_hand_rule(r)] + grow(ss, {})
                     for fam, ss in sorted(by_family.items())})
    fitted = ", ".join(sorted(by_family)) or "none"
    return {"format": TABLE_FORMAT,
            "about": f"Families {fitted} fitted by heuristics/fit.py from the sweeps in "
                     "'sources' (each rule names its own); others as in the base table. "
                     "Rules are read first-match: max_m/max_n/max_k bounds, kernel-name "
                     "patterns best first; unnamed candidates follow in analytic-model order.",
            "sources": sources,
            "families": dict(sorted(families.items()))}


# ---- checking -----------------------------------------------------------------------------

def _model_choice(s: Sample, rules: dict) -> float:
    cands = [kernel_info(name, i) for i, name in enumerate(sorted(s.times))]
    problem = types.SimpleNamespace(m=s.m, n=s.n, k=s.k, sm_count=s.sm_count, cc=s.cc)
    order = _select.families_for(s.cc)
    return s.times[_select.rank(problem, cands, order, rules).ranked[0][0].name]


SELECTORS = {
    "table": lambda s, table: _model_choice(s, table),
    "model only": lambda s, table: _model_choice(s, {"families": {}}),
    "when swept": lambda s, table: s.times[s.order[0]],
}


def check(table: dict, samples: list[Sample]) -> dict:
    """{family: {selector: {"geomean": best/chosen, "within_5pct": %, "worst": [...]}}}."""
    by_family = collections.defaultdict(list)
    for s in samples:
        by_family[f"sm{s.family}"].append(s)
    report = {}
    for fam, ss in sorted(by_family.items()):
        report[fam] = {}
        for name, pick in SELECTORS.items():
            ratios = [(s.best / pick(s, table), s) for s in ss]
            close = sum(r >= 1 / WITHIN for r, _ in ratios)
            worst = sorted(ratios, key=lambda r: r[0])[:3]
            report[fam][name] = {
                "samples": len(ss),
                "geomean": round(math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios)), 4),
                "within_5pct": round(100.0 * close / len(ratios), 1),
                "worst": [f"{s.m}x{s.n}x{s.k} {r:.3f}" for r, s in worst]}
    return report


def format_report(report: dict) -> str:
    lines = []
    for fam, selectors in report.items():
        for name, r in selectors.items():
            lines.append(f"{fam:6} {name:11} best/chosen geomean {r['geomean']:.3f}, "
                         f"{r['within_5pct']:5.1f}% within 5% of {r['samples']} samples; "
                         f"worst {', '.join(r['worst'])}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+", help="raw sweep files written by heuristics/sweep.py")
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", help="table to write (JSON); its regret is reported")
    what.add_argument("--check", metavar="TABLE", help="report TABLE's regret; write nothing")
    ap.add_argument("--base", help="table whose families the sweeps do not cover are kept")
    args = ap.parse_args(argv)
    samples, sources, skipped = read_samples(args.csv)
    if not samples:
        raise SystemExit("no usable rows in the sweep files")
    if skipped:
        print(f"skipped {skipped} rows (alignment-fallback kernels, or families that do not "
              "run on their GPU)", file=sys.stderr)
    if args.check:
        with open(args.check) as f:
            table = json.load(f)
    else:
        base = None
        if args.base:
            with open(args.base) as f:
                base = json.load(f)
        table = fit(samples, sources, base)
        with open(args.out, "w") as f:
            json.dump(table, f, indent=1)
            f.write("\n")
        print(f"{args.out}: {sum(len(r) for r in table['families'].values())} rules from "
              f"{len(samples)} samples", file=sys.stderr)
    print(format_report(check(table, samples)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
