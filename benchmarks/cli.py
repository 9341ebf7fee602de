"""``python -m benchmarks``: arguments, the environment checks, then the suite.

Internal API relied on: ``pycutlass_rt._backends.load`` (the framework adapter that makes
the tensors and times them, the one ``tune()`` uses).
"""

from __future__ import annotations

import argparse
import signal
import sys

from . import shapes

GROUP_NAMES = {g.title: key for key, g in shapes.GROUPS.items()}


def parse_group(text: str) -> list:
    """``B``, ``b``, ``decode`` or ``A,B`` -> group keys; ArgumentTypeError if unknown."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key = part.upper() if part.upper() in shapes.GROUPS else GROUP_NAMES.get(part.lower())
        if key is None:
            raise argparse.ArgumentTypeError(
                f"unknown group {part!r}; choose from "
                + ", ".join(f"{k} ({g.title})" for k, g in shapes.GROUPS.items())
            )
        out.append(key)
    return out


def parse_dtypes(text: str) -> list:
    try:
        return [shapes.parse_dtype(p) for p in text.split(",") if p.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--group",
        "-g",
        action="append",
        type=parse_group,
        default=[],
        help="shape group A-N (or its name: square, decode, prefill, awkward, layouts, "
        "epilogue, host, regret, batched, grouped, heldout, heldout-regret, "
        "heldout-epilogue, heldout-epilogue-regret); repeat or comma-separate; default all",
    )
    p.add_argument(
        "--dtype",
        action="append",
        type=parse_dtypes,
        default=[],
        help=f"{', '.join(shapes.DTYPES)}; repeat or comma-separate; default "
        "every dtype (those not in this build are listed as such)",
    )
    p.add_argument("--out", help="results folder (default ./bench-results/<gpu>-<date>)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions: a smoke run")
    p.add_argument(
        "--sample",
        type=int,
        metavar="N",
        help="at most N shapes per group and dtype, evenly spaced through its list",
    )
    p.add_argument(
        "--hot",
        action="store_true",
        help="the hot variant: one operand set reused by every call, so inputs "
        "stay in L2 where they fit (default: sets rotated over 2x L2)",
    )
    p.add_argument(
        "--no-cutlass",
        action="store_true",
        help="skip the CUTLASS Python interface (its kernels compile for minutes)",
    )
    p.add_argument(
        "--framework",
        choices=("torch", "cupy"),
        help="make tensors and time with this framework (default: torch if it "
        "sees a GPU, else cupy)",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="list the cases (and why some are skipped) without running",
    )


def selection(args):
    """(group keys, dtype labels or None) from parsed arguments, de-duplicated in order."""
    groups = list(dict.fromkeys(k for ks in args.group for k in ks)) or list(shapes.GROUPS)
    dtypes = list(dict.fromkeys(d for ds in args.dtype for d in ds)) or None
    return groups, dtypes


def _fail(msg: str) -> int:
    print(f"bench: {msg}", file=sys.stderr)
    return 1


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks`` (and ``python benchmarks/run.py``)."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="The benchmark suite (benchmarks/README.md, groups A-J): pycutlass_rt "
        "next to cuBLAS and the CUTLASS Python interface.",
    )
    add_arguments(p)
    return p


def main(argv=None) -> int:
    """Parses ``argv`` (default ``sys.argv[1:]``) and runs the benchmark; the exit status."""
    return run(parser().parse_args(argv))


def run(args) -> int:
    """Runs the benchmark for parsed ``args``; the exit status."""
    import pycutlass_rt as pcr

    groups, dtypes = selection(args)
    try:
        info = pcr.info()
        available = shapes.available_dtypes(pcr.kernels())
    except pcr.LibraryError as e:
        return _fail(str(e))
    case_list = shapes.cases(groups, dtypes, available, args.sample)
    if args.list:
        for c in case_list:
            print(
                f"{c.group} {shapes.GROUPS[c.group].title:8s} {c.dtype:5s} {c.label}"
                + (f"   [skipped: {c.skip}]" if c.skip else "")
            )
        print(
            f"{len(case_list)} cases, {sum(c.skip is None for c in case_list)} to run; "
            f"dtypes in this build: {', '.join(available) or 'none'}"
        )
        return 0
    if not case_list:
        return _fail("no case matches the groups and dtypes given")
    if not info["devices"]:
        why = " ".join(str(info["device_error"]).split())
        return _fail(f"needs an NVIDIA GPU, and none is usable here ({why})")
    from pycutlass_rt import _backends

    from . import suite
    from .timing import Settings

    fw, why = _backends.load(args.framework)
    if fw is None:
        return _fail(f"needs torch or cupy with CUDA to make tensors and time them ({why})")
    signal.signal(signal.SIGTERM, _interrupt)  # `timeout` and job schedulers: keep the results
    settings = Settings.make(args.quick, args.hot)
    try:
        result, path = suite.run(
            pcr,
            info,
            fw,
            case_list,
            settings=settings,
            out_dir=args.out,
            use_cutlass=not args.no_cutlass,
            command=" ".join(sys.argv),
        )
    except KeyboardInterrupt:
        print("bench: interrupted; partial results were written", file=sys.stderr)
        return 130
    suite.print_summary(result, path)
    return 0
