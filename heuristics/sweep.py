#!/usr/bin/env python3
"""Sweep: time every candidate kernel of the build over a shape grid on this GPU.

Writes raw CSV, one row per (shape, dtype, layout, kernel), for heuristics/fit.py::

    python heuristics/sweep.py --grid decode prefill square --dtypes bfloat16 \\
        --out build/sweeps/h200_bf16.csv
    python heuristics/sweep.py --corpus-fit 300 --layouts tn --dtypes bfloat16 \\
        --out build/sweeps/h200_bf16_corpus_fit.csv   # real models' shapes, fit part
    python heuristics/sweep.py --corpus-heldout 300 --peer --layouts tn --dtypes bfloat16 \\
        --out build/sweeps/h200_bf16_heldout.csv      # for judging only (fit.py refuses it)
    # done: into the data folder, compressed (fit.py reads either)
    python heuristics/datafiles.py pack build/sweeps/h200_bf16.csv heuristics/data/sweeps/

The CSV is plain text, flushed after every shape, so that a sweep cut short resumes
(``--append``); datafiles.py packs a finished one into heuristics/data/ (``sweeps/`` to fit
on, ``eval/`` for the held-out part) and unpacks a packed one to append to.

Candidates are the kernels the C side accepts for the problem, in the selection order of
the table and model at sweep time (column ``rank``; the tuned cache is ignored), each
forced with ``kernel=``. Rows give M, N, K as computed (after orienting D row-major, so a
swept 4096x1x4096 is recorded as 1x4096x4096), which is what selection sees. Measuring is
pycutlass_rt.tune's: operand copies cycled past L2, back-to-back calls replayed from a
CUDA graph, median of repetitions, random data.

``--corpus-heldout`` sweeps the corpus's held-out part to *judge* a table: every
candidate's time on shapes no fit saw, so a selector's regret there is read off the rows
(``fit.py --check``) without fitting on them (``fit.py`` refuses held-out shapes).
``--peer`` adds, per shape, a row ``peer:cublas`` (rank -1): torch's cuBLAS call on the
same operand copies, timed the same way (``torch.mm(out=)``; ``torch._scaled_mm`` for
fp8, with the per-tensor scale tensors ``--scales tensor`` gives both; ``torch._int_mm``
for int8 -> int32). A shape the peer refuses (``_int_mm`` wants M > 16) gets no row. ``--append``
resumes a sweep: shapes the file already holds are skipped; with ``--kernels``, only the
matching kernels the file has not timed on a shape are timed (new kernels join a sweep).

Internal API relied on (measuring is the library's own, so that sweeps and ``tune()`` time
alike): ``pycutlass_rt._tune`` (operands in a problem's layout, the candidates the C side
accepts in selection order, graph-replayed timing), ``pycutlass_rt._lib.load`` and
``pycutlass_rt._cache.device_key`` (the device and build a row records), and
``pycutlass_rt._abi.ScaleKind`` (per-tensor scales).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import fnmatch
import itertools
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # a source checkout: import pycutlass_rt and heuristics from it

from heuristics import datafiles  # noqa: E402
from heuristics.grids import AWKWARD, DECODE, NK_PAIRS, PREFILL, SQUARE  # noqa: E402,F401
from pycutlass_rt._abi import ScaleKind  # noqa: E402

#: few output tiles against a long K, where split-K and stream-K kernels compete with the
#: data-parallel tiles (group D's 256x256x65536 among them)
LONG_K = [
    (128, 128, 65536),
    (256, 256, 16384),
    (256, 512, 65536),
    (512, 512, 32768),
    (128, 1024, 32768),
    (1024, 1024, 16384),
    (256, 1024, 8192),
    (384, 384, 24576),
]
#: the shape lists of the benchmark's groups B, C, A and D (one copy, in heuristics/grids.py;
#: benchmarks/README.md describes the groups)
GRIDS = {
    "decode": DECODE,
    "prefill": PREFILL,
    "square": SQUARE,
    "awkward": AWKWARD,
    "longk": LONG_K,
}
COLUMNS = [
    "gpu",
    "sm_count",
    "cc",
    "driver",
    "library",
    "dtype",
    "dtype_d",
    "layout",
    "m",
    "n",
    "k",
    "kernel",
    "rank",
    "median_us",
    "tflops",
]


def shapes(grids: list[str]) -> list[tuple[int, int, int]]:
    out = []
    for g in grids:
        out += [s for s in GRIDS[g] if s not in out]
    return out


def corpus_shapes(
    layout: str, sample: int | None, seed: int = 0, part: str = "fit"
) -> list[tuple[int, int, int]]:
    """One part of the corpus in ``layout`` (its unbatched rows, each (M, N, K) once), or
    ``sample`` of them drawn with ``seed``. Sweeps of the held-out part only judge a
    table fitted on the fit part (heuristics/README.md).

    >>> len(corpus_shapes("tn", 5))
    5
    """
    import random

    from heuristics import corpus

    rows = sorted({(s.m, s.n, s.k) for s in corpus.load(part, layout) if s.batch == 1})
    # drawn order, not sorted: a sweep cut short still spans every size
    return random.Random(seed).sample(rows, sample) if sample else rows


#: the row of torch's cuBLAS call in a ``--peer`` sweep (not a kernel: fit.py skips it)
PEER = "peer:cublas"
#: input dtypes that --scales dequantizes (torch._scaled_mm takes fp8 only)
SCALED = ("float8_e4m3fn", "float8_e5m2", "int8")


def peer_call(bk, ops, spec):
    """torch's call for ``spec`` on the same operand copies as the kernels, cycled alike:
    ``torch.mm(out=)``, ``torch._scaled_mm`` with the scale tensors (ones) for fp8, or
    ``torch._int_mm`` for int8 (int32 out)."""
    import torch

    if bk.name != "torch":
        raise SystemExit("--peer times torch's cuBLAS calls: it needs torch")
    turn = itertools.cycle(ops.sets)
    if spec.dtype.startswith("float8"):
        one = torch.ones((), dtype=torch.float32, device="cuda")
        sa, sb = ops.extras.get("scale_a", one), ops.extras.get("scale_b", one)

        def run():
            a, b, _, d = next(turn)
            torch._scaled_mm(a, b, sa.reshape(()), sb.reshape(()), out_dtype=d.dtype, out=d)
    elif spec.dtype == "int8":  # cuBLAS's int8 GEMM, int32 out (M > 16, K and N % 8)

        def run():
            a, b, _, d = next(turn)
            torch._int_mm(a, b, out=d)
    else:

        def run():
            a, b, _, d = next(turn)
            torch.mm(a, b, out=d)

    return run


def main(argv=None) -> int:
    import pycutlass_rt as pcr
    from pycutlass_rt import _cache, _tune

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--grid", nargs="+", default=["decode", "prefill", "square"], choices=sorted(GRIDS)
    )
    part = ap.add_mutually_exclusive_group()
    part.add_argument(
        "--corpus-fit",
        type=int,
        metavar="N",
        help="sweep N shapes drawn from the corpus's fit part in each layout (0: all of "
        "them) instead of --grid",
    )
    part.add_argument(
        "--corpus-heldout",
        type=int,
        metavar="N",
        help="the same from the held-out part, to judge a table (never to fit one)",
    )
    ap.add_argument("--seed", type=int, default=0, help="the corpus draw")
    ap.add_argument("--peer", action="store_true", help="also time torch's cuBLAS call")
    ap.add_argument(
        "--scales",
        choices=["none", "tensor"],
        default="none",
        help="tensor: fp8/int8 dequantized by per-tensor float32 scale tensors",
    )
    ap.add_argument("--dtypes", nargs="+", default=["bfloat16"])
    ap.add_argument(
        "--out-dtype",
        help="the output dtype (default: each input dtype's first "
        "in pycutlass_rt.tune's list, e.g. bfloat16 for float8_e4m3fn)",
    )
    ap.add_argument("--layouts", nargs="+", default=["tn", "tt"])
    ap.add_argument(
        "--reps",
        type=int,
        default=_tune.DEFAULT_REPEATS,
        help="timed graph replays per kernel (median kept)",
    )
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--max-m", type=int, help="only shapes with M <= this")
    ap.add_argument(
        "--kernels",
        help="time only candidates matching these ';'-separated "
        "name patterns (to add new kernels to an earlier sweep)",
    )
    ap.add_argument(
        "--append",
        action="store_true",
        help="add the rows to --out (an earlier sweep of the same columns)",
    )
    args = ap.parse_args(argv)
    if args.out.endswith(datafiles.GZ):
        raise SystemExit(
            f"{args.out}: a sweep is written as plain CSV (flushed per shape, so that one cut "
            "short resumes with --append); pack it when done: python heuristics/datafiles.py "
            "pack OUT.csv heuristics/data/sweeps/ (unpack a packed sweep to append to it)"
        )

    lib = pcr._lib.load()
    dev = _cache.device_key(lib, args.device, [k.name for k in pcr.kernels()])
    if dev is None:
        raise SystemExit(f"no CUDA device {args.device}: {lib.last_error()}")
    bk = _tune.backend()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    def grid_of(layout):
        if args.corpus_fit is not None:
            chosen = corpus_shapes(layout, args.corpus_fit or None, args.seed)
        elif args.corpus_heldout is not None:
            chosen = corpus_shapes(layout, args.corpus_heldout or None, args.seed, "heldout")
        else:
            chosen = shapes(args.grid)
        return [s for s in chosen if args.max_m is None or s[0] <= args.max_m]

    patterns = args.kernels.split(";") if args.kernels else ["*"]
    append = args.append and os.path.exists(args.out)
    # what the file holds: an appended sweep resumes where it stopped, and one of new
    # kernels (--kernels) times them on the shapes the file already has
    done, timed_before = set(), set()  # (dtype, layout, m, n, k); with the kernel's name
    if append:
        with open(args.out, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != COLUMNS:
                raise SystemExit(f"{args.out}: not a sweep with columns {COLUMNS}")
            for r in reader:
                shape = (r["dtype"], r["layout"], *(int(r[x]) for x in "mnk"))
                timed_before.add((shape, r["kernel"]))
                if not args.kernels:
                    done.add(shape)
    scales = (ScaleKind.SCALE_TENSOR,) * 2 if args.scales == "tensor" else None
    with open(args.out, "a" if append else "w", newline="") as f, bk.device(args.device):
        writer = csv.DictWriter(f, COLUMNS)
        if not append:
            writer.writeheader()
        for dtype, layout in itertools.product(args.dtypes, args.layouts):
            grid = grid_of(layout)
            for i, (m, n, k) in enumerate(grid):
                spec = _tune.spec_of(
                    (m, n, k), dtype, args.out_dtype or _tune.OUTPUTS[dtype][0], layout
                )
                if scales and dtype in SCALED:
                    spec = dataclasses.replace(spec, scales=scales)
                # a resumed sweep skips what it holds before allocating (N = 1 was
                # recorded as computed, M = 1)
                if (dtype, layout, m, n, k) in done or (
                    n == 1 and (dtype, layout, 1, m, k) in done
                ):
                    continue
                try:
                    ops = _tune.make_operands(bk, spec)
                except Exception as e:  # a shape whose operand copies do not fit: next one
                    if "out of memory" not in str(e).lower():
                        raise
                    print(f"\n{m}x{n}x{k}: skipped, operands do not fit: {e}", file=sys.stderr)
                    continue
                judged = _tune.describe(lib, ops)
                problem = judged.problem
                if (dtype, layout, problem.m, problem.n, problem.k) in done:
                    continue
                timed = [
                    (kern.name, rank) for rank, kern in enumerate(_tune.candidates(lib, judged))
                ]
                timed = [t for t in timed if any(fnmatch.fnmatchcase(t[0], p) for p in patterns)]
                if args.peer:
                    timed.append((PEER, -1))
                shape = (dtype, layout, problem.m, problem.n, problem.k)
                timed = [t for t in timed if (shape, t[0]) not in timed_before]
                for name, rank in timed:
                    run = peer_call(bk, ops, spec) if rank < 0 else ops.call(name)
                    try:
                        us = _tune.time_us(bk, run, args.reps)
                    except Exception as e:  # one kernel failing must not end the sweep
                        print(f"\n{m}x{n}x{k} {name}: {e}", file=sys.stderr)
                        continue
                    writer.writerow(
                        {
                            "gpu": dev["gpu"],
                            "sm_count": dev["sm_count"],
                            "cc": problem.cc,
                            "driver": dev["driver"],
                            "library": dev["build"],
                            "dtype": dtype,
                            "dtype_d": spec.out_dtype,
                            "layout": layout,
                            # as computed: selection sees the oriented problem
                            # (N = 1 runs as D^T = B^T A^T, M = 1)
                            "m": problem.m,
                            "n": problem.n,
                            "k": problem.k,
                            "kernel": name,
                            "rank": rank,
                            "median_us": f"{us:.3f}",
                            "tflops": f"{2.0 * m * n * k / us / 1e6:.2f}",
                        }
                    )
                f.flush()
                print(
                    f"\r{dtype} {layout} {i + 1}/{len(grid)} {m}x{n}x{k}", end="", file=sys.stderr
                )
                del ops
    print(file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
