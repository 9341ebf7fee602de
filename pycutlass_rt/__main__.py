"""Command line: ``python -m pycutlass_rt [--version] info | doctor | demo | kernels |
explain MxNxK | tune MxNxK ...`` (``info``, ``doctor``, ``kernels``, ``explain`` and
``tune`` take ``--json``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from . import _info, _tune
from ._dtypes import dtype_name
from ._explain import explain
from ._kernels import kernels
from ._version import __version__
from .errors import DTypeError, Error, LibraryError


def _info_or_none(cmd: str):
    try:
        return _info.info()
    except LibraryError as e:
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


def _dtype_args(p) -> None:
    """--dtype, --out-dtype and --layout, as tune and explain take them."""
    p.add_argument(
        "--dtype",
        default="bfloat16",
        type=_dtype_name,
        help="A's and B's dtype: float16, bfloat16, float32, tfloat32 (float32 tensors with "
        "math='tf32'), float64, int8, float8_e4m3fn, float8_e5m2 (short: f16, bf16, e4m3...)",
    )
    p.add_argument(
        "--out-dtype",
        type=_dtype_name,
        help="D's dtype (default: the first the input takes, e.g. "
        "int32 for int8, bfloat16 for fp8)",
    )
    p.add_argument("--layout", default="tn", help="A then B: t row-major, n column-major")


def _dtype_name(text: str) -> str:
    """A dtype as torch spells it, from that spelling or a kernel name's word ("bf16")."""
    try:
        return dtype_name(text)
    except DTypeError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _shape(text: str) -> tuple:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"shape {text!r}: write MxNxK, e.g. 16x4096x4096"
        ) from None
    return m, n, k


def cmd_kernels(args) -> int:
    """The build's kernels, optionally filtered by wildcards on their names."""
    import fnmatch

    try:
        every = kernels()
    except LibraryError as e:
        print(f"kernels: {e}", file=sys.stderr)
        return 1
    picked = [k for k in every if not args.filter or fnmatch.fnmatchcase(k.name, args.filter)]
    if args.json:
        print(json.dumps([dataclasses.asdict(k) for k in picked], indent=1))
    else:
        print("\n".join(k.name for k in picked))
        print(f"{len(picked)} of {len(every)} kernels", file=sys.stderr)
    return 0


def cmd_explain(args) -> int:
    """Which kernel gemm() takes for an MxNxK problem of these dtypes on this GPU, and why:
    the operands are made with torch or cupy (as tune() makes them), nothing is launched."""
    try:
        spec = _tune.spec_of(args.shape, args.dtype, args.out_dtype, args.layout)
        bk = _tune.backend()
        a = bk.operand(spec.m, spec.k, spec.layout[0], spec.tensor_dtype, fill=False)
        b = bk.operand(spec.k, spec.n, spec.layout[1], spec.tensor_dtype, fill=False)
        d = bk.operand(spec.m, spec.n, "t", spec.out_dtype, fill=False)
        e = explain(a, b, None, d, math=spec.math)
    except Error as err:
        print(f"explain: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(e.as_dict(), indent=2, default=str))
    else:
        print(e)
    return 0


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
        result = _tune.tune(
            args.shapes,
            dtype=args.dtype,
            out_dtype=args.out_dtype,
            layout=args.layout,
            device=args.device,
            cache=not args.no_cache,
            strict=args.strict,
            progress=None if args.json else _progress,
        )
    except Error as e:
        print(f"tune: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, default=str))
    else:
        print(result)
    return 0


def _progress(done: int, total: int, what: str) -> None:
    """tune's progress, one line per problem on stderr."""
    print(f"tune: [{done}/{total}] {what}", file=sys.stderr, flush=True)


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
    ap.add_argument("--version", action="version", version=f"pycutlass_rt {__version__}")
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
    p = sub.add_parser("kernels", help="the kernels of this build (names are identities)")
    p.add_argument("filter", nargs="?", help="wildcards on names, e.g. 'sm90_e4m3*'")
    p.add_argument("--json", action="store_true", help="every field of each kernel")
    p.set_defaults(fn=cmd_kernels)
    p = sub.add_parser(
        "explain",
        help="which kernel gemm() takes for MxNxK on this GPU, why, and why not the others",
    )
    p.add_argument("shape", type=_shape, metavar="MxNxK")
    _dtype_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(fn=cmd_explain)
    p = sub.add_parser(
        "tune",
        help="time every candidate kernel for shapes on this GPU and "
        "cache the fastest (pycutlass_rt.tune)",
    )
    p.add_argument("shapes", nargs="+", type=_shape, metavar="MxNxK")
    _dtype_args(p)
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--json", action="store_true", help="machine-readable output, no progress")
    p.add_argument("--strict", action="store_true", help="pin the kernels (see tune())")
    p.add_argument("--no-cache", action="store_true", help="measure only, write nothing")
    p.set_defaults(fn=cmd_tune)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
