#!/usr/bin/env python3
"""Sweep: time every candidate kernel of the build over a shape grid on this GPU.

Writes raw CSV, one row per (shape, dtype, layout, kernel), for heuristics/fit.py::

    python heuristics/sweep.py --grid decode prefill square --dtypes bfloat16 \\
        --out heuristics/sweeps/h200_bf16.csv

Candidates are the kernels the C side accepts for the problem (pycutlass_rt.explain's
ranked list), each forced with ``kernel=``. Timing: CUDA events around back-to-back
calls after a warm-up, median of several repetitions, random data.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import os
import statistics
import sys

try:
    from pycutlass_rt.bench.shapes import AWKWARD, DECODE, NK_PAIRS, PREFILL, SQUARE  # noqa: F401
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pycutlass_rt.bench.shapes import AWKWARD, DECODE, NK_PAIRS, PREFILL, SQUARE  # noqa: F401

#: the shape lists of BENCHMARKS.md groups B, C, A and D (one copy, in pycutlass_rt.bench)
GRIDS = {"decode": DECODE, "prefill": PREFILL, "square": SQUARE, "awkward": AWKWARD}
COLUMNS = ["gpu", "sm_count", "library", "dtype", "dtype_d", "layout", "m", "n", "k",
           "kernel", "median_us", "tflops"]


def shapes(grids: list[str]) -> list[tuple[int, int, int]]:
    out = []
    for g in grids:
        out += [s for s in GRIDS[g] if s not in out]
    return out


def time_us(torch, fn, reps: int) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000 / reps)
    return statistics.median(samples)


def operand(torch, rows, cols, layout, dtype):
    """rows x cols, row-major for 't', column-major for 'n'; random in [-1, 1)."""
    shape = (rows, cols) if layout == "t" else (cols, rows)
    x = (torch.rand(shape, device="cuda") * 2 - 1).to(dtype)
    return x if layout == "t" else x.t()


def main(argv=None) -> int:
    import torch

    import pycutlass_rt as pcr

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--grid", nargs="+", default=["decode", "prefill", "square"],
                    choices=sorted(GRIDS))
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16"])
    ap.add_argument("--layouts", nargs="+", default=["tn", "tt"])
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)

    lib_path = pcr._lib.load().path
    with open(lib_path, "rb") as f:
        library = hashlib.sha256(f.read()).hexdigest()[:16]
    gpu = torch.cuda.get_device_name()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    grid = shapes(args.grid)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        for dtype_name in args.dtypes:
            dt = getattr(torch, dtype_name)
            for layout in args.layouts:
                for i, (m, n, k) in enumerate(grid):
                    a = operand(torch, m, k, layout[0], dt)
                    b = operand(torch, k, n, layout[1], dt)
                    d = torch.empty(m, n, device="cuda", dtype=dt)
                    for name, _ in pcr.explain(a, b, None, d).ranked:
                        us = time_us(torch, lambda: pcr.gemm(a, b, None, d, kernel=name), args.reps)
                        writer.writerow({"gpu": gpu, "sm_count": sms, "library": library,
                                         "dtype": dtype_name, "dtype_d": dtype_name,
                                         "layout": layout, "m": m, "n": n, "k": k,
                                         "kernel": name, "median_us": f"{us:.3f}",
                                         "tflops": f"{2.0 * m * n * k / us / 1e6:.2f}"})
                    f.flush()
                    print(f"\r{dtype_name} {layout} {i + 1}/{len(grid)} {m}x{n}x{k}",
                          end="", file=sys.stderr)
                    del a, b, d
    print(file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
