"""The library's selector: host time to rank a problem it has not seen, without a GPU.

``python -m benchmarks.selection [--problems 3000] [--seed 3]`` ranks random bf16 tn GEMM
problems of an H200 (compute 9.0, 132 SMs) through ``pcr_select_rank`` (one ctypes call,
the operands judged without a GPU: the ranking a launch makes, minus CUTLASS's
``can_implement`` on real operands) and prints microseconds per problem: the table the
package ships, and the model alone. A launch ranks a problem once per thread; repeats of
it cost a hash look-up.

``python -m benchmarks.selection --first-load 21`` times instead what a process's first
kernel choice pays for the table, in that many fresh interpreters (each after importing
the package and listing the build's kernels), as ``_select.build_table`` does it: reading
the shipped table (``_table.table``), resolving it against the kernels (``_table.resolve``
less the library's copy), and handing it over (``pcr_ranker_create``'s copy and
``pcr_selector_set``); it prints the median, least and most milliseconds of each.

Internal API relied on (it times the library's own ranking, which no public call exposes
alone): ``pycutlass_rt._lib.load`` (the library and its ``pcr_select_rank``),
``pycutlass_rt._select.build_table`` (the shipped table's ranker),
``pycutlass_rt._table`` (``table``, ``resolve`` and ``Resolved``, which build it) and
``pycutlass_rt._abi`` (the Problem and Ranked records and their enums).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import random
import statistics
import subprocess
import sys
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


#: one fresh process's first load of the table, as _select.build_table makes it (the
#: library's copy, in Resolved's pcr_ranker_create, counted as handing it over)
FIRST_LOAD = """
import json, time
import pycutlass_rt
from pycutlass_rt import _lib, _table
lib, every, copy = _lib.load(), pycutlass_rt.kernels(), []
init = _table.Resolved.__init__
def timed(self, *args):
    t = time.perf_counter()
    init(self, *args)
    copy.append(time.perf_counter() - t)
_table.Resolved.__init__ = timed
t0 = time.perf_counter()
rules = _table.table()
t1 = time.perf_counter()
resolved = _table.resolve(rules, every)
t2 = time.perf_counter()
lib.check(lib.pcr_selector_set(resolved.ranker))
t3 = time.perf_counter()
ms = {"read": t1 - t0, "resolve": t2 - t1 - copy[0], "hand-over": copy[0] + t3 - t2}
print(json.dumps({**{k: 1e3 * v for k, v in ms.items()}, "total": 1e3 * (t3 - t0)}))
"""


def first_load(processes: int) -> dict:
    """{part: [ms per process]} of FIRST_LOAD over ``processes`` fresh interpreters."""
    runs = []
    for _ in range(processes):
        out = subprocess.run(
            [sys.executable, "-c", FIRST_LOAD], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout.splitlines()[-1]))
    return {part: [r[part] for r in runs] for part in runs[0]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument(
        "--first-load",
        type=int,
        metavar="PROCESSES",
        help="time the table's first load in this many fresh processes instead",
    )
    args = ap.parse_args(argv)
    if args.first_load:
        parts = first_load(args.first_load)
        print(f"the table's first load, {args.first_load} fresh processes, ms:")
        for part, ms in parts.items():
            print(
                f"  {part:<10} median {statistics.median(ms):6.2f}  "
                f"least {min(ms):6.2f}  most {max(ms):6.2f}"
            )
        return 0
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
