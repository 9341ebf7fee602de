"""The command line: list the catalogue, or emit what a build compiles.

CMake runs ``python -m catalog --emit DIR ...`` from native/ when it configures (the
arguments are the build's knobs, empty where unset); ``--list`` and ``--json`` print the
records a filter and archs select, without a compiler. The knobs are described in the
package's docstring.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from . import __doc__ as PACKAGE_DOC
from .archs import parse_archs, plan, toolkit
from .generate import emit
from .listing import catalogue, select_kernels
from .units import estimate_minutes, unit_jobs, unit_size


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _memory_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 16.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m catalog", description=PACKAGE_DOC.split("\n")[0])
    ap.add_argument("--archs", default=os.environ.get("PYCUTLASS_RT_ARCHS", "default"))
    ap.add_argument(
        "--kernels",
        default=os.environ.get("PYCUTLASS_RT_KERNELS"),
        help="kernel filter (default: the core tier for --emit, all for --list)",
    )
    ap.add_argument("--list", action="store_true", help="print kernel names, one per line")
    ap.add_argument("--json", action="store_true", help="print the selected records as JSON")
    ap.add_argument("--emit", metavar="DIR", help="write sources, registry and kernels.cmake")
    ap.add_argument("--nvcc", help="nvcc to ask which archs it can build")
    ap.add_argument(
        "--unit-size",
        default=os.environ.get("PYCUTLASS_RT_UNIT_SIZE"),
        help="kernels per translation unit: auto (default) or a number",
    )
    args = ap.parse_args(argv)

    if not args.kernels:
        args.kernels = "all" if args.list and not args.emit else "default"
    kernels = select_kernels(catalogue(), args.kernels)
    archs = parse_archs(args.archs)
    codes, cuda = toolkit(args.nvcc) if args.emit else (None, None)
    per_family, notes = plan(archs, codes, cuda)
    kernels = [k for k in kernels if k.family in per_family]
    per_family = {f: t for f, t in per_family.items() if any(k.family == f for k in kernels)}

    if args.list:
        print("\n".join(k.name for k in kernels))
    if args.json:
        print(json.dumps([dict(dataclasses.asdict(k), name=k.name) for k in kernels], indent=1))
    if args.emit:
        for n in notes:
            print(f"pycutlass_rt: {n}", file=sys.stderr)
        build = {
            "archs_requested": archs,
            "families": per_family,
            "skipped": notes,
            "kernel_filter": args.kernels,
            "cuda": "{}.{}".format(*cuda) if cuda else None,
        }
        cores = int(os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or os.cpu_count() or 1)
        size = build["unit_size"] = unit_size(args.unit_size, len(kernels), cores)
        jobs = unit_jobs(size, cores, _memory_gb())
        count = len(emit(args.emit, kernels, per_family, build, size, jobs))
        _, minutes = estimate_minutes(kernels, per_family, min(cores, jobs), size)
        took = f"{minutes:.0f} min" if minutes >= 2 else f"{minutes * 60:.0f} s"
        print(
            f"pycutlass_rt: {_count(len(kernels), 'kernel')} for "
            + ", ".join(f"{f} ({' '.join(t)})" for f, t in per_family.items())
            + f" in {_count(count, 'translation unit')} of up to {size}, {jobs} at once; "
            f"about {took} "
            f"on {cores} cores (progress: ninja's [n/N], which pip shows with -v)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
