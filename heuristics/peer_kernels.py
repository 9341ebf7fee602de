#!/usr/bin/env python3
"""The peer's kernels where the build's best trails it.

Reads sweeps with peer rows (``sweep.py --peer``), takes the shapes where even the
fastest kernel it timed runs below ``--below`` times the peer's speed, and records which
kernels torch's cuBLAS call launches there (torch's profiler): their names carry cuBLAS's
tile, cluster and schedule, which is what the catalogue may lack on those shapes::

    # the fit part's peer rows, in a file of their own (no kernel matches "none")
    python heuristics/sweep.py --corpus-fit 2015 --seed 2 --peer --kernels none \\
        --layouts tn --dtypes bfloat16 --out build/sweeps/h200_bf16_tn_fit_peer.csv
    python heuristics/peer_kernels.py heuristics/data/sweeps/h200_bf16_tn_corpus_fit.csv.gz \\
        build/sweeps/h200_bf16_tn_fit_peer.csv --below 0.95 --out build/sweeps/peer_kernels.csv

Kernels chosen for the catalogue this way come from the fit part's shapes; the held-out
part (heuristics/data/eval/) then judges them, so read it here only to see, not to choose.
Sweeps are read plain or packed (datafiles.py).

Internal API relied on: ``pycutlass_rt._tune`` (``backend``, ``spec_of``,
``make_operands``: the sweep's own operand copies, so that the peer is profiled on what
sweep.py timed it on).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # a source checkout: import pycutlass_rt and heuristics from it

from heuristics import datafiles  # noqa: E402
from heuristics.sweep import PEER  # noqa: E402

COLUMNS = ["dtype", "dtype_d", "layout", "m", "n", "k", "ratio", "best", "best_us", "peer_us"]


def lagging(rows, below: float) -> list[dict]:
    """Per shape of ``rows`` (a sweep's CSV rows) with a peer row: the fastest kernel, its
    time, the peer's and ``ratio`` (peer time / best time: below 1, the peer is faster),
    for the shapes whose ratio is below ``below``, slowest first.

    >>> rows = [dict(dtype="bfloat16", dtype_d="bfloat16", layout="tn", m="8", n="64",
    ...              k="64", kernel=k, median_us=us) for k, us in
    ...         [("sm90_a", "4.0"), ("sm90_b", "5.0"), (PEER, "3.0")]]
    >>> [(r["best"], r["ratio"]) for r in lagging(rows, 0.95)]
    [('sm90_a', 0.75)]
    >>> lagging(rows, 0.7)
    []
    """
    shapes: dict = {}
    for r in rows:
        key = tuple(r[c] for c in COLUMNS[:6])
        shapes.setdefault(key, {})[r["kernel"]] = float(r["median_us"])
    out = []
    for key, times in shapes.items():
        peer = times.pop(PEER, None)
        if peer is None or not times:
            continue
        best = min(times, key=times.get)
        ratio = round(peer / times[best], 4)
        if ratio < below:
            out.append(dict(zip(COLUMNS, (*key, ratio, best, times[best], peer))))
    return sorted(out, key=lambda r: r["ratio"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweeps", nargs="+", help="sweep CSVs, peer rows among them (--peer)")
    ap.add_argument("--below", type=float, default=0.95, help="ratio to the peer (0.95)")
    ap.add_argument("--limit", type=int, default=40, help="at most this many shapes")
    ap.add_argument("--out", required=True, help="CSV: the shape, the ratio, the peer's kernels")
    args = ap.parse_args(argv)

    rows = []
    for path in args.sweeps:
        rows += list(csv.DictReader(datafiles.open_text(path)))
    picked = lagging(rows, args.below)[: args.limit]
    if not picked:
        raise SystemExit(f"{' '.join(args.sweeps)}: no shape with a peer row below {args.below}x")

    import torch

    from heuristics.profiling import launches
    from heuristics.sweep import peer_call
    from pycutlass_rt import _tune

    bk = _tune.backend()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, [*COLUMNS, "peer_kernels"])
        writer.writeheader()
        for r in picked:
            spec = _tune.spec_of(
                tuple(int(r[x]) for x in "mnk"), r["dtype"], r["dtype_d"], r["layout"]
            )
            ops = _tune.make_operands(bk, spec)
            r["peer_kernels"] = launches(torch, peer_call(bk, ops, spec), width=None)
            writer.writerow(r)
            print(f"{r['m']}x{r['n']}x{r['k']} {r['ratio']:.2f}x: {r['peer_kernels']}")
            del ops
    return 0


if __name__ == "__main__":
    sys.exit(main())
