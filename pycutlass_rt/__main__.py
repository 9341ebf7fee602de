"""Command line: ``python -m pycutlass_rt info [--json] | demo | tune MxNxK ...``."""

from __future__ import annotations

import argparse
import json
import sys

import pycutlass_rt as pcr
from pycutlass_rt import _tune


def _info_or_none(cmd: str):
    try:
        return pcr.info()
    except pcr.LibraryError as e:
        print(f"{cmd}: {e}", file=sys.stderr)
        return None


def cmd_info(args) -> int:
    info = _info_or_none("info")
    if info is None:
        return 1
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    build = info["build"]
    print(
        f"pycutlass_rt {info['version']}  (ABI {info['abi']}, CUTLASS {build['cutlass']}, "
        f"built with CUDA {build['catalog'].get('cuda')})"
    )
    print(f"library:  {info['library']}")
    print(
        f"driver:   {info['driver_version'] or 'none found'}   "
        f"runtime (static): {info['runtime_version']}"
    )
    if info["devices"]:
        for dev in info["devices"]:
            print(
                f"device {dev['index']}: {dev['name']}  compute {dev['cc']}, "
                f"{dev['sm_count']} SMs, {dev['kernels_runnable']} kernels run here"
            )
    else:
        print(f"devices:  none ({info['device_error']})")
    fams = build["catalog"].get("families", {})
    for fam, names in info["kernels"].items():
        sass = " ".join(f"sm_{t}" for t in fams.get(fam, []))
        print(f"{fam}: {len(names)} kernels  (SASS {sass})")
    for note in build["catalog"].get("skipped", []):
        print(f"skipped at build time: {note}")
    present = [f"{k} {v}" for k, v in info["frameworks"].items() if v]
    print(f"frameworks: {', '.join(present) or 'none installed'}")
    return 0


def cmd_demo(args) -> int:
    from . import _demo  # numpy, torch, cupy: each only if present

    return _demo.main(args.size)


def _shape(text: str) -> tuple:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"shape {text!r}: write MxNxK, e.g. 16x4096x4096"
        ) from None
    return m, n, k


def cmd_tune(args) -> int:
    info = _info_or_none("tune")
    if info is None:
        return 1
    if not info["devices"]:
        print(
            f"tune: needs an NVIDIA GPU; none is usable here ({info['device_error']})",
            file=sys.stderr,
        )
        return 1
    try:
        result = pcr.tune(
            args.shapes,
            dtype=args.dtype,
            out_dtype=args.out_dtype,
            layout=args.layout,
            device=args.device,
            cache=not args.no_cache,
            strict=args.strict,
        )
    except pcr.Error as e:
        print(f"tune: {e}", file=sys.stderr)
        return 1
    print(result)
    return 0


def cmd_doctor(args) -> int:
    from . import _doctor

    report = _doctor.diagnose()
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _doctor.print_report(report)
    if report["problems"]:
        print(f"doctor: {report['problems'][0]}", file=sys.stderr)
        return 1
    return 0


#: the benchmark suite left the package: it runs from a source checkout
BENCH_MOVED = (
    "python -m pycutlass_rt bench: the benchmark suite is not part of the package; "
    "from a source checkout run `python -m benchmarks` (benchmarks/README.md)"
)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:
        print(BENCH_MOVED, file=sys.stderr)
        return 2
    ap = argparse.ArgumentParser(prog="python -m pycutlass_rt", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("info", help="driver, runtime, devices and the kernels of this build")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(fn=cmd_info)
    p = sub.add_parser(
        "doctor",
        help="whether this machine can run the library: driver, GPUs, frameworks, cache; "
        "exits 1 with the first problem",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(fn=cmd_doctor)
    p = sub.add_parser("demo", help="run GEMMs on the GPU, check them, time them next to cuBLAS")
    p.add_argument("--size", type=int, default=4096, help="square size for torch/cupy runs")
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser(
        "tune",
        help="time every candidate kernel for shapes on this GPU and "
        "cache the fastest (pycutlass_rt.tune)",
    )
    p.add_argument("shapes", nargs="+", type=_shape, metavar="MxNxK")
    p.add_argument(
        "--dtype",
        default="bfloat16",
        choices=list(_tune.OUTPUTS),
        help="A's and B's dtype (tfloat32: float32 tensors with math='tf32')",
    )
    p.add_argument(
        "--out-dtype",
        help="D's dtype (default: the first the input takes, e.g. "
        "int32 for int8, bfloat16 for fp8)",
    )
    p.add_argument("--layout", default="tn", help="A then B: t row-major, n column-major")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--strict", action="store_true", help="pin the kernels (see tune())")
    p.add_argument("--no-cache", action="store_true", help="measure only, write nothing")
    p.set_defaults(fn=cmd_tune)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
