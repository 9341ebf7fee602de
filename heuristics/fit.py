#!/usr/bin/env python3
"""Fit: raw sweep CSVs -> the shipped kernel-choice table (heuristics/table_v1.json).

For each arch family and each M bucket, the kernel configurations swept there are ranked
by the geometric mean, over the bucket's shapes, of their time relative to the best
configuration at that shape; the table rule lists them best first. Every rule records the
sweep files (name and sha256) and the number of shapes it came from, so each entry can
be traced back::

    python heuristics/fit.py heuristics/sweeps/h200_*.csv --out heuristics/table_v1.json

A configuration is a kernel name with its dtypes and layouts replaced by ``*``
(``sm90_*_128x256x64_c2x1_coop_a8``), so one rule serves every dtype and layout.
"""
from __future__ import annotations

import argparse
import collections
import csv
import hashlib
import json
import math
import os
import re
import sys

#: upper bounds of the M buckets (canonical M, after orienting D row-major); None = rest
M_BUCKETS = (16, 64, 128, 256, None)
REQUIRED = ("m", "n", "k", "kernel", "median_us")


def config_of(kernel: str) -> str:
    """sm90_bf16_bf16_f32_bf16_tn_128x256x64_c2x1_coop_a8 -> sm90_*_128x256x64_c2x1_coop_a8."""
    m = re.match(r"^(sm\d+)_[a-z0-9]+_[a-z0-9]+_[a-z0-9]+_[a-z0-9]+_[tn]{2}_(.+)$", kernel)
    if not m:
        raise ValueError(f"not a kernel name: {kernel!r}")
    return f"{m.group(1)}_*_{m.group(2)}"


def read_rows(paths: list[str]) -> tuple[list[dict], list[dict]]:
    rows, sources = [], []
    for path in paths:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise SystemExit(f"{path}: missing columns {missing}")
            for row in reader:
                rows.append({"m": int(row["m"]), "n": int(row["n"]), "k": int(row["k"]),
                             "kernel": row["kernel"], "us": float(row["median_us"]),
                             "extra": {k: v for k, v in row.items() if k not in REQUIRED}})
        sources.append({"file": os.path.basename(path), "sha256": digest})
    return rows, sources


def bucket_of(m: int) -> int | None:
    for bound in M_BUCKETS:
        if bound is None or m <= bound:
            return bound
    return None


def fit(rows: list[dict], sources: list[dict]) -> dict:
    """The table: per family, one rule per M bucket that the sweeps cover."""
    by_family = collections.defaultdict(list)
    for r in rows:
        by_family[r["kernel"].split("_", 1)[0]].append(r)
    families = {}
    for family, frows in sorted(by_family.items()):
        def shape_key(r):  # a shape within one dtype/layout variant
            return (r["m"], r["n"], r["k"], "_".join(r["kernel"].split("_")[1:6]))

        best = {}
        for r in frows:
            key = shape_key(r)
            best[key] = min(best.get(key, math.inf), r["us"])
        scores = collections.defaultdict(lambda: collections.defaultdict(list))
        shapes = collections.defaultdict(set)
        for r in frows:
            b = bucket_of(r["m"])
            scores[b][config_of(r["kernel"])].append(math.log(r["us"] / best[shape_key(r)]))
            shapes[b].add((r["m"], r["n"], r["k"]))
        rules = []
        bounds = [b for b in M_BUCKETS if b in scores]
        for b in bounds:
            ranked = sorted(scores[b].items(), key=lambda kv: (sum(kv[1]) / len(kv[1]), kv[0]))
            rule = {"prefer": [cfg for cfg, _ in ranked],
                    "geomean_vs_best": [round(math.exp(sum(v) / len(v)), 4) for _, v in ranked],
                    "shapes": len(shapes[b]), "source": sources}
            if b is not None:
                rule = {"max_m": b, **rule}
            rules.append(rule)
        if rules and "max_m" in rules[-1]:
            rules.append({"prefer": rules[-1]["prefer"], "source": sources,
                          "note": "no sweep covers larger M: reuses the largest bucket"})
        families[family] = rules
    return {"format": 1,
            "about": "Fitted by heuristics/fit.py from the sweeps named in each rule's source.",
            "families": families}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+", help="raw sweep files written by heuristics/sweep.py")
    ap.add_argument("--out", required=True, help="table to write (JSON)")
    args = ap.parse_args(argv)
    rows, sources = read_rows(args.csv)
    if not rows:
        raise SystemExit("no rows in the sweep files")
    table = fit(rows, sources)
    with open(args.out, "w") as f:
        json.dump(table, f, indent=1)
        f.write("\n")
    print(f"{args.out}: {sum(len(r) for r in table['families'].values())} rules from "
          f"{len(rows)} measurements", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
