#!/usr/bin/env python3
"""Tier: which kernels the default build should hold, by measured coverage per compile-second.

    python heuristics/tier.py heuristics/data/sweeps/h200_bf16_tn_corpus_fit.csv.gz \\
        --judge heuristics/data/eval/h200_bf16_tn_heldout.csv.gz

Greedy over the kernels a sweep timed (one dtype and layout's candidates): start from
the kernels every build needs (``--keep``: the any-alignment fallbacks, and what the
catalogue marks core outside the sweep), then repeatedly add the kernel that raises the
geometric mean of (best time in the set / best time of all swept kernels) the most per
second of compile time (native/catalog/units.py's estimate for the default archs), until the
set reaches ``--target`` of the full set on the sweeps given (the fit part). ``--judge``
reports each step's figure on other sweeps too (the held-out part: never chosen on).
Figures are for the best kernel of the set; what the selector picks among them is
``fit.py --check``'s business.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "native")):
    if path not in sys.path:
        sys.path.insert(0, path)

import catalog  # noqa: E402

from heuristics import fit  # noqa: E402


def compile_seconds(names: list[str], archs: str = catalog.DEFAULT_ARCHS) -> dict:
    """Kernel name -> core-seconds to compile it for ``archs`` (catalog's estimate)."""
    known = {k.name: k for k in catalog.catalogue()}
    missing = [n for n in names if n not in known]
    if missing:
        raise SystemExit(f"{missing[0]}: not in the catalogue")
    per_family, _ = catalog.plan(catalog.parse_archs(archs), None, None)
    return {n: catalog.compile_seconds([known[n]], per_family) for n in names}


def coverage(samples: list, chosen: set) -> float:
    """Geomean over samples of (best time among ``chosen``) / (best time of all);
    0 if a sample has no chosen kernel."""
    logs = []
    for s in samples:
        have = [us for name, us in s.times.items() if name in chosen]
        if not have:
            return 0.0
        logs.append(math.log(s.best / min(have)))
    return math.exp(sum(logs) / len(logs))


def greedy(samples: list, costs: dict, keep: set, target: float) -> list:
    """[(kernel, its cost, coverage after adding it)], in the order added."""
    chosen, steps = set(keep), []
    pool = sorted(set(costs) - chosen)
    while pool:
        now = coverage(samples, chosen)
        if now >= target:
            break
        base = math.log(now) if now > 0 else -50.0  # no coverage yet: any kernel gains
        gain = {}
        for name in pool:
            after = coverage(samples, chosen | {name})
            gain[name] = (math.log(after) - base if after > 0 else 0.0) / costs[name]
        best = max(pool, key=lambda n: (gain[n], n))
        chosen.add(best)
        pool.remove(best)
        steps.append((best, costs[best], coverage(samples, chosen)))
    return steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+", help="sweeps to choose on (the corpus's fit part)")
    ap.add_argument("--judge", nargs="*", default=[], help="sweeps to report each step on")
    ap.add_argument("--keep", default="", help="';'-separated kernel names always held")
    ap.add_argument("--target", type=float, default=0.97, help="coverage to stop at")
    ap.add_argument("--archs", default=catalog.DEFAULT_ARCHS, help="archs the cost is for")
    args = ap.parse_args(argv)
    samples, _, _ = fit.read_samples(args.csv)
    judged = fit.read_samples(args.judge)[0] if args.judge else []
    names = sorted({n for s in samples for n in s.times})
    costs = compile_seconds(names, args.archs)
    keep = {n for n in args.keep.split(";") if n in costs}
    steps = greedy(samples, costs, keep, args.target)
    total = sum(costs[n] for n in keep)
    print(f"{len(samples)} samples, {len(names)} kernels swept; kept: {sorted(keep) or 'none'}")
    chosen = set(keep)
    for name, cost, cov in steps:
        chosen.add(name)
        total += cost
        judge = f"  judged {coverage(judged, chosen):.3f}" if judged else ""
        print(f"+ {name:60} {cost:5.0f} s  (total {total / 60:5.1f} min)  fit {cov:.3f}{judge}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
