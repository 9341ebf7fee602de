"""The library's selector: host time to rank a problem it has not seen, without a GPU.

``python -m benchmarks.selection [--problems 3000] [--seed 3]`` ranks random bf16 tn GEMM
problems of an H200 (compute 9.0, 132 SMs) through ``pcr_select_rank`` (one ctypes call,
the operands judged without a GPU: the ranking a launch makes, minus CUTLASS's
``can_implement`` on real operands) and prints microseconds per problem: the table the
package ships, and the model alone. A launch ranks a problem once per thread; repeats of
it cost a hash look-up.

Internal API relied on (it times the library's own ranking, which no public call exposes
alone): ``pycutlass_rt._lib.load`` (the library and its ``pcr_select_rank``),
``pycutlass_rt._select.build_table`` (the shipped table's ranker) and
``pycutlass_rt._abi`` (the Problem and Ranked records and their enums).
"""

from __future__ import annotations

import argparse
import ctypes
import random
import statistics
import time

from pycutlass_rt import _lib, _select
from pycutlass_rt._abi import Dtype, Layout, Problem, Ranked


def problems(count: int, seed: int) -> list:
    """``count`` random bf16 tn problems (M up to 5000; N, K multiples of 8 up to 12000)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        bf16 = Dtype.BF16
        out.append(
            Problem(
                m=rng.randrange(1, 5000),
                n=8 * rng.randrange(1, 1500),
                k=8 * rng.randrange(1, 1500),
                batch=1,
                dtype_a=bf16,
                dtype_b=bf16,
                dtype_d=bf16,
                layout_a=Layout.ROW_MAJOR,
                layout_b=Layout.COL_MAJOR,
                align_a=16,
                align_b=16,
                align_d=16,
                cc=90,
                sm_count=132,
                device=-1,
            )
        )
    return out


def per_problem_us(lib, items: list, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean µs of one pcr_select_rank call per problem."""
    out, count = (Ranked * 8)(), ctypes.c_int32()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for p in items:
            lib.check(lib.pcr_select_rank(ctypes.byref(p), None, 0, out, 8, ctypes.byref(count)))
        runs.append((time.perf_counter() - t0) / len(items) * 1e6)
    return statistics.median(runs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    lib = _lib.load()
    items = problems(args.problems, args.seed)
    shipped = _select.build_table().ranker  # the shipped table, in the library
    table = per_problem_us(lib, items)
    lib.check(lib.pcr_selector_set(None))
    try:
        model = per_problem_us(lib, items)
    finally:
        lib.check(lib.pcr_selector_set(shipped))
    print(f"{len(items)} new bf16 tn problems (H200 shape), one pcr_select_rank call each:")
    print(f"  shipped table: {table:.1f} us per problem")
    print(f"  model alone:   {model:.1f} us per problem")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
