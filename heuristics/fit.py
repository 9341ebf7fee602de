#!/usr/bin/env python3
"""Fit: raw sweep CSVs -> the shipped kernel-choice table; --check: a table's regret.

    python heuristics/fit.py heuristics/sweeps/h200_*.csv --base heuristics/table_v1.json \\
        --out heuristics/table_v1.json
    python heuristics/fit.py heuristics/sweeps/h200_*.csv --check heuristics/table_v1.json

A sample is one swept problem (GPU, dtypes, layout, M, N, K) with the time of every
candidate kernel. Kernels are compared as configurations: the name with dtypes and
layouts replaced by ``*`` (``sm90_*_128x256x64_c2x1_coop_a8``), so one entry serves every
dtype and layout. Per arch family the fit calibrates the analytic model of
pycutlass_rt/_model.py: for each configuration, the mean of log(measured / model time)
at each swept shape, over each M bucket (powers of 4) and over all samples (``calibration``
in the table, read by _table.py; _select.py uses the finest level that timed a candidate's configuration).
The calibration belongs to the device's preferred family (sm90 from H100/H200 sweeps) and
covers kernels of every family that runs there: an H200 sweep of sm80 kernels competes
with the sm90 ones. The family's hand rules (a ``source`` that starts with ``hand:``) stay
first; its other rules are dropped. Alignment-fallback kernels (``_a1``) are left out:
they serve the problems nothing else accepts.

--check reports, per family, the geomean of best/chosen and the share of samples within
5% of the best, for the table, for the table refitted without each sample's shape
("held out": how it does on shapes no sweep measured), for the analytic model alone, and
for the choice in effect when the sweep ran (its rank 0).
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

from pycutlass_rt import _model, _select, _table  # noqa: E402  (pure Python: loads no library)
from pycutlass_rt._abi import Epilogue, Schedule, Split  # noqa: E402
from pycutlass_rt._kernels import DTYPE_TOKENS, KernelInfo  # noqa: E402

REQUIRED = ("m", "n", "k", "kernel", "median_us")
TABLE_FORMAT = 2  # what _table.TABLE_FORMATS reads (2: with calibrations)
WITHIN = 1.05  # "close to the best" in --check

# the words of kernel names past the tile: KernelInfo holds them as they are
_SCHEDULES = {s.token for s in Schedule}
_SPLITS = {s.token for s in Split} - {Split.SPLIT_NONE.token}
_EPILOGUES = {e.token for e in Epilogue} - {Epilogue.EPI_LINEAR.token}
_NAME = re.compile(
    r"^sm(?P<family>\d+)_(?P<a>[a-z0-9]+)_(?P<b>[a-z0-9]+)_(?P<acc>[a-z0-9]+)_"
    r"(?P<d>[a-z0-9]+)_(?P<layout>[tn]{2})_(?P<tile>\d+x\d+x\d+)_(?P<rest>.+)_"
    r"a(?P<align>\d+)$"
)


config_of = _table.config_of  # a kernel name without dtypes and layouts


def kernel_info(name: str, index: int = 0) -> KernelInfo:
    """A KernelInfo decoded from a kernel name (for the model, without the library)."""
    m = _NAME.match(name)
    if not m:
        raise ValueError(f"not a kernel name: {name!r}")
    rest = m["rest"].split("_")
    x, y = (int(v) for v in rest[0][1:].split("x"))
    split = next((t for t in rest if t in _SPLITS), Split.SPLIT_NONE.token)
    epilogue = next((t for t in rest if t in _EPILOGUES), Epilogue.EPI_LINEAR.token)
    if rest[0].startswith("c"):  # CUTLASS 3.x: cluster and schedule
        if rest[1] not in _SCHEDULES:
            raise ValueError(f"{name!r}: unknown schedule {rest[1]!r}")
        cluster, warps, stages, schedule = (x, y, 1), (0, 0, 0), 0, rest[1]
    else:  # CUTLASS 2.x: warps and stages
        stages = int(rest[1][1:])
        cluster, warps = (1, 1, 1), (x, y, 1)
        schedule = (Schedule.SCHED_PIPELINED if stages == 2 else Schedule.SCHED_MULTISTAGE).token
    align = int(m["align"])
    return KernelInfo(
        index,
        name,
        int(m["family"]),
        DTYPE_TOKENS[m["a"]],
        DTYPE_TOKENS[m["b"]],
        DTYPE_TOKENS[m["acc"]],
        DTYPE_TOKENS[m["d"]],
        m["layout"],
        tuple(int(v) for v in m["tile"].split("x")),
        cluster,
        warps,
        stages,
        schedule,
        epilogue,
        split,
        (align, align, align),
        "swapab" in rest,
    )


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
    def residuals(self) -> dict:
        """Kernel name -> log(measured / model time), computed once (read after every row
        is in): "held out" recalibrates from the same samples for every swept shape."""
        return {name: math.log(us / model_us(self, name)) for name, us in self.times.items()}


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
                family = (
                    int(_NAME.match(row["kernel"])["family"])
                    if _NAME.match(row["kernel"])
                    else None
                )
                if family is None:
                    raise SystemExit(f"{path}: row {i + 2}: not a kernel name: {row['kernel']!r}")
                cc = int(row.get("cc") or family)
                if family not in _select.families_for(cc) or row["kernel"].endswith("_a1"):
                    skipped += 1
                    continue
                family = _select.families_for(cc)[0]  # the rules' family on this GPU
                key = (
                    label,
                    row.get("gpu"),
                    row.get("dtype"),
                    row.get("dtype_d"),
                    row.get("layout") or row["kernel"].split("_")[5],
                    family,
                    int(row["m"]),
                    int(row["n"]),
                    int(row["k"]),
                )
                s = samples.get(key)
                if s is None:
                    s = samples[key] = Sample(
                        family, key[6], key[7], key[8], label, int(row.get("sm_count") or 132), cc
                    )
                s.times[row["kernel"]] = float(row["median_us"])
                s.order.append((int(row.get("rank") or i), row["kernel"]))
                rows += 1
        sources.append({"file": label.rsplit("@", 1)[0], "sha256": digest, "rows": rows})
    for s in samples.values():
        s.order = [name for _, name in sorted(s.order)]
    return list(samples.values()), sources, skipped


# ---- fitting ------------------------------------------------------------------------------


def model_us(s: Sample, name: str) -> float:
    """The analytic model's time for kernel ``name`` on sample ``s``."""
    return _model.model_time(kernel_info(name), s.m, s.n, s.k, s.sm_count, s.cc)


def calibrate(samples: list[Sample]) -> dict:
    """One family's calibration: {"residuals": {level: {config: mean log(measured/model)}}}."""
    logs: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    for s in samples:
        keys = _table.bucket_keys(s.m, s.n, s.k)
        for name, r in s.residuals.items():
            for key in keys:
                logs[key][config_of(name)].append(r)
    return {
        "residuals": {
            key: {c: round(sum(v) / len(v), 4) for c, v in sorted(per.items())}
            for key, per in sorted(logs.items())
        },
        "samples": len(samples),
        "shapes": len({s.shape for s in samples}),
        "source": sorted({s.source for s in samples}),
    }


def by_family(samples: list[Sample]) -> dict:
    """{"sm90": its samples, ...}, families in name order."""
    out = collections.defaultdict(list)
    for s in samples:
        out[f"sm{s.family}"].append(s)
    return dict(sorted(out.items()))


def calibrations(samples: list[Sample]) -> dict:
    """{"sm90": calibrate(its samples), ...} for the families the samples cover."""
    return {fam: calibrate(ss) for fam, ss in by_family(samples).items()}


def is_hand_rule(rule: dict) -> bool:
    """A rule written by a person (its source says ``hand: why``), not fitted."""
    return any(str(src).startswith("hand:") for src in rule.get("source", []))


def fit(samples: list[Sample], sources: list[dict], base: dict | None = None) -> dict:
    """The table: calibrations for the families the samples cover, ``base``'s rules kept.

    In a calibrated family only ``base``'s hand rules stay (first): they cover what sweeps
    do not see (e.g. launch-bound sizes, where host cost matters more than device time).
    """
    cal = calibrations(samples)
    families = dict((base or {}).get("families", {}))
    families.update({fam: [r for r in families.get(fam, []) if is_hand_rule(r)] for fam in cal})
    calibrated = ", ".join(cal) or "none"
    return {
        "format": TABLE_FORMAT,
        "about": f"Families {calibrated} calibrated by heuristics/fit.py from the sweeps "
        "in 'sources' (each calibration names its own); rules as in the base "
        "table. Rules are read first-match (max_m/max_n/max_k bounds, kernel-name "
        "patterns best first); then calibrated model times (the model's estimate "
        "times exp(residual) at the finest level that measured the configuration: "
        "the shape, its M bucket, all samples); unnamed, unmeasured candidates "
        "follow in model order.",
        "sources": sources,
        "families": dict(sorted(families.items())),
        "calibration": {**(base or {}).get("calibration", {}), **cal},
    }


# ---- checking -----------------------------------------------------------------------------


def _model_choice(s: Sample, rules: dict) -> float:
    cands = [kernel_info(name, i) for i, name in enumerate(sorted(s.times))]
    problem = types.SimpleNamespace(m=s.m, n=s.n, k=s.k, sm_count=s.sm_count, cc=s.cc)
    order = _select.families_for(s.cc)
    return s.times[_select.rank(problem, cands, order, rules).ranked[0][0].name]


def _held_out(samples: list[Sample], table: dict) -> list[float]:
    """Each sample's pick by the table recalibrated without the sample's shape."""
    out = {}
    for shape in {s.shape for s in samples}:
        rest = [s for s in samples if s.shape != shape]
        t = {**table, "calibration": {**table.get("calibration", {}), **calibrations(rest)}}
        out.update({id(s): _model_choice(s, t) for s in samples if s.shape == shape})
    return [out[id(s)] for s in samples]


SELECTORS = {
    "table": lambda ss, table: [_model_choice(s, table) for s in ss],
    "held out": _held_out,
    "model only": lambda ss, table: [_model_choice(s, {"families": {}}) for s in ss],
    "when swept": lambda ss, table: [s.times[s.order[0]] for s in ss],
}


def check(table: dict, samples: list[Sample]) -> dict:
    """{family: {selector: {"geomean": best/chosen, "within_5pct": %, "worst": [...]}}}.

    "held out" is reported for families the table calibrates.
    """
    report = {}
    for fam, ss in by_family(samples).items():
        report[fam] = {}
        for name, pick in SELECTORS.items():
            if name == "held out" and fam not in table.get("calibration", {}):
                continue
            ratios = [(s.best / us, s) for s, us in zip(ss, pick(ss, table))]
            close = sum(r >= 1 / WITHIN for r, _ in ratios)
            worst = sorted(ratios, key=lambda r: r[0])[:3]
            report[fam][name] = {
                "samples": len(ss),
                "geomean": round(math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios)), 4),
                "within_5pct": round(100.0 * close / len(ratios), 1),
                "worst": [f"{s.m}x{s.n}x{s.k} {r:.3f}" for r, s in worst],
            }
    return report


def format_report(report: dict) -> str:
    lines = []
    for fam, selectors in report.items():
        for name, r in selectors.items():
            lines.append(
                f"{fam:6} {name:11} best/chosen geomean {r['geomean']:.3f}, "
                f"{r['within_5pct']:5.1f}% within 5% of {r['samples']} samples; "
                f"worst {', '.join(r['worst'])}"
            )
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
        print(
            f"skipped {skipped} rows (alignment-fallback kernels, or families that do not "
            "run on their GPU)",
            file=sys.stderr,
        )
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
        print(
            f"{args.out}: {', '.join(table['calibration'])} calibrated from {len(samples)} samples",
            file=sys.stderr,
        )
    print(format_report(check(table, samples)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
