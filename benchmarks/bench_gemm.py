#!/usr/bin/env python3
"""Square-GEMM throughput and per-call host time: pycutlass_rt next to cuBLAS (torch).

Both sides run in one process, interleaved A B A B, on random data, with inputs rotated
over more than 2x L2 so no timing reads from cache (../shared/BENCHMARKS.md). Writes a
JSON record and a PNG plot::

    python benchmarks/bench_gemm.py --out results/ [--sizes 4096 8192] [--dtypes float16 bfloat16]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import time

import pycutlass_rt as pcr


def nvidia_smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.mem,power.draw,"
                               "temperature.gpu", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def device_times(torch, fns, sets, reps):
    """Median/p10/p90 ms per call for each fn, interleaved, events around `reps` calls."""
    out = {name: [] for name in fns}
    for _ in range(3):
        for fn in fns.values():
            for s in sets:
                fn(*s)
    torch.cuda.synchronize()
    for _ in range(7):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for i in range(reps):
                fn(*sets[i % len(sets)])
            end.record()
            end.synchronize()
            out[name].append(start.elapsed_time(end) / reps)
    return {name: {"median_ms": statistics.median(v), "p10_ms": min(v), "p90_ms": max(v)}
            for name, v in out.items()}


def host_times(torch, fns, reps=2000):
    """Median microseconds of host time per call (no synchronization inside the loop)."""
    out = {name: [] for name in fns}
    for _ in range(5):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            out[name].append((time.perf_counter() - t0) / reps * 1e6)
            torch.cuda.synchronize()
    return {name: statistics.median(v) for name, v in out.items()}


def main() -> int:
    import torch
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench_results")
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    l2 = 60 << 20
    record = {"machine": {"gpu": torch.cuda.get_device_name(), "host": platform.node(),
                          "torch": torch.__version__, "pycutlass_rt": pcr.__version__,
                          "cuda": torch.version.cuda, "smi_before": nvidia_smi()},
              "square": [], "host_us": {}}
    for dtype_name in args.dtypes:
        dt = getattr(torch, dtype_name)
        for n in args.sizes:
            per_set = 3 * n * n * 2
            count = max(2, -(-2 * l2 // per_set))
            sets = [((torch.rand(n, n, device="cuda") - 0.5).to(dt),
                     (torch.rand(n, n, device="cuda") - 0.5).to(dt),
                     torch.empty(n, n, device="cuda", dtype=dt)) for _ in range(count)]
            kernel = pcr.explain(*sets[0][:2], None, sets[0][2]).kernel
            t = device_times(torch, {
                "pycutlass_rt": lambda a, b, d: pcr.gemm(a, b, None, d),
                "torch.matmul": lambda a, b, d: torch.matmul(a, b, out=d)}, sets,
                reps=max(20, int(2e13 / (2 * n ** 3))))
            flop = 2.0 * n ** 3
            row = {"dtype": dtype_name, "m": n, "n": n, "k": n, "kernel": kernel,
                   "pcr_tflops": flop / t["pycutlass_rt"]["median_ms"] / 1e9,
                   "cublas_tflops": flop / t["torch.matmul"]["median_ms"] / 1e9, "times": t}
            row["ratio"] = row["pcr_tflops"] / row["cublas_tflops"]
            record["square"].append(row)
            print(f"{dtype_name:9s} {n:5d}^3  pycutlass_rt {row['pcr_tflops']:6.1f} TFLOP/s   "
                  f"cuBLAS {row['cublas_tflops']:6.1f} TFLOP/s   ratio {row['ratio']:.3f}   {kernel}")
            del sets
    a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    d = torch.empty(64, 64, device="cuda", dtype=torch.float16)
    h = host_times(torch, {"pcr.gemm": lambda: pcr.gemm(a, b, None, d),
                           "torch.mm(out=)": lambda: torch.mm(a, b, out=d)})
    record["host_us"] = {"shape": "64x64x64 float16", **h, "ratio": h["pcr.gemm"] / h["torch.mm(out=)"]}
    print(f"host time per call at 64^3: pcr.gemm {h['pcr.gemm']:.2f} us, torch.mm(out=) "
          f"{h['torch.mm(out=)']:.2f} us, ratio {record['host_us']['ratio']:.2f}")
    record["machine"]["smi_after"] = nvidia_smi()
    with open(os.path.join(args.out, "bench_gemm.json"), "w") as f:
        json.dump(record, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4))
        labels = [f"{r['dtype']}\n{r['m']}^3" for r in record["square"]]
        xs = range(len(labels))
        ax.bar([x - 0.2 for x in xs], [r["pcr_tflops"] for r in record["square"]], 0.4, label="pycutlass_rt")
        ax.bar([x + 0.2 for x in xs], [r["cublas_tflops"] for r in record["square"]], 0.4, label="cuBLAS (torch)")
        ax.set_xticks(list(xs), labels)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"Square GEMM on {record['machine']['gpu']}")
        ax.legend(loc="lower center")
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "bench_gemm.png"), dpi=120)
    except ImportError:
        print("matplotlib not installed: no plot")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
