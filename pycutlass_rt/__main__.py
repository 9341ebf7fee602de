"""Command line: ``python -m pycutlass_rt info [--json] | demo | tune MxNxK ...``."""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

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
    print(f"pycutlass_rt {info['version']}  (ABI {info['abi']}, CUTLASS {build['cutlass']}, "
          f"built with CUDA {build['catalog'].get('cuda')})")
    print(f"library:  {info['library']}")
    print(f"driver:   {info['driver_version'] or 'none found'}   "
          f"runtime (static): {info['runtime_version']}")
    if info["devices"]:
        for dev in info["devices"]:
            print(f"device {dev['index']}: {dev['name']}  compute {dev['cc']}, "
                  f"{dev['sm_count']} SMs, {dev['kernels_runnable']} kernels run here")
    else:
        print(f"devices:  none ({info['device_error']})")
    fams = build["catalog"].get("families", {})
    for fam, names in info["kernels"].items():
        sass = " ".join(f"sm_{t}" for t in fams.get(fam, []))
        print(f"{fam}: {len(names)} kernels  (SASS {sass})")
    for note in build["catalog"].get("skipped", []):
        print(f"skipped at build time: {note}")
    return 0


def _check(name: str, got: np.ndarray, ref: np.ndarray, tol: float) -> bool:
    err = float(np.linalg.norm(got.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))
    ok = bool(np.isfinite(got).all()) and err <= tol
    print(f"  {name}: relative error {err:.2e} ({'ok' if ok else 'FAIL'}, tolerance {tol:.0e})")
    return ok


def _time_pair(run_a, run_b, sync, reps=20):
    """Median seconds of two callables, interleaved (A B A B ...)."""
    for _ in range(3):
        run_a(), run_b()
    sync()
    ta, tb = [], []
    for _ in range(reps):
        for fn, acc in ((run_a, ta), (run_b, tb)):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            acc.append(time.perf_counter() - t0)
    return float(np.median(ta)), float(np.median(tb))


def cmd_demo(args) -> int:
    info = _info_or_none("demo")
    if info is None:
        return 1
    if not info["devices"]:
        print("demo: needs an NVIDIA GPU with its driver; none is usable here:\n  "
              f"{info['device_error']}", file=sys.stderr)
        return 1
    dev = info["devices"][0]
    print(f"pycutlass_rt {pcr.__version__} on {dev['name']} (compute {dev['cc']})")
    ok = True
    rng = np.random.default_rng(0)

    m, n, k = 512, 384, 256
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    d = np.full((m, n), np.nan, np.float16)
    print(f"numpy float16 {m}x{n}x{k} (staged through the GPU):")
    print(f"  kernel: {pcr.explain(a, b, None, d).kernel}")
    pcr.gemm(a, b, None, d)
    ok &= _check("vs numpy", d, a.astype(np.float64) @ b.astype(np.float64), 2e-3)

    try:
        import torch
        has_torch = torch.cuda.is_available()
    except ImportError:
        has_torch = False
    if has_torch:
        size = args.size
        flop = 2.0 * size ** 3
        for dtype in (torch.float16, torch.bfloat16):
            a = torch.rand(size, size, device="cuda", dtype=dtype) - 0.5
            b = torch.rand(size, size, device="cuda", dtype=dtype) - 0.5
            d = torch.empty(size, size, device="cuda", dtype=dtype)
            ref = torch.empty_like(d)  # cuBLAS's output, for timing
            print(f"torch {str(dtype).split('.')[-1]} {size}^3:")
            print(f"  kernel: {pcr.explain(a, b, None, d).kernel}")
            pcr.gemm(a, b, None, d)
            rows = slice(0, 256)  # a band of rows keeps the numpy reference quick
            ok &= _check("vs numpy (fp64, 256 rows)", d[rows].float().cpu().numpy(),
                         a[rows].double().cpu().numpy() @ b.double().cpu().numpy(), 1e-2)
            t_pcr, t_torch = _time_pair(lambda: pcr.gemm(a, b, None, d),
                                        lambda: torch.mm(a, b, out=ref), torch.cuda.synchronize)
            print(f"  pycutlass_rt {flop / t_pcr / 1e12:7.1f} TFLOP/s   torch.mm (cuBLAS) "
                  f"{flop / t_torch / 1e12:7.1f} TFLOP/s   ratio {t_torch / t_pcr:.2f}x")
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        has_cupy = True
    except Exception:  # noqa: BLE001 - cupy absent or unusable
        has_cupy = False
    if has_cupy:
        size = args.size
        a = cupy.random.uniform(-1, 1, (size, size)).astype(cupy.float16)
        b = cupy.random.uniform(-1, 1, (size, size)).astype(cupy.float16)
        d = cupy.empty((size, size), cupy.float16)
        print(f"cupy float16 {size}^3:")
        pcr.gemm(a, b, None, d)
        ref = cupy.empty_like(d)
        ok &= _check("vs numpy (fp64, 256 rows)", cupy.asnumpy(d[:256]),
                     cupy.asnumpy(a[:256]).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64),
                     1e-2)
        t_pcr, t_cp = _time_pair(lambda: pcr.gemm(a, b, None, d), lambda: cupy.matmul(a, b, out=ref),
                                 cupy.cuda.runtime.deviceSynchronize)
        print(f"  pycutlass_rt {2.0 * size ** 3 / t_pcr / 1e12:7.1f} TFLOP/s   cupy.matmul "
              f"{2.0 * size ** 3 / t_cp / 1e12:7.1f} TFLOP/s")
    print("demo: " + ("all results match" if ok else "MISMATCH"))
    return 0 if ok else 1


def _shape(text: str) -> tuple:
    try:
        m, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: write MxNxK, e.g. 16x4096x4096") \
            from None
    return m, n, k


def cmd_tune(args) -> int:
    info = _info_or_none("tune")
    if info is None:
        return 1
    if not info["devices"]:
        print(f"tune: needs an NVIDIA GPU; none is usable here ({info['device_error']})",
              file=sys.stderr)
        return 1
    try:
        result = pcr.tune(args.shapes, dtype=args.dtype, out_dtype=args.out_dtype,
                          layout=args.layout, device=args.device, cache=not args.no_cache,
                          strict=args.strict)
    except pcr.Error as e:
        print(f"tune: {e}", file=sys.stderr)
        return 1
    print(result)
    return 0


#: the benchmark suite left the package: it runs from a source checkout
BENCH_MOVED = ("python -m pycutlass_rt bench: the benchmark suite is not part of the package; "
               "from a source checkout run `python -m benchmarks` (benchmarks/README.md)")


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
    p = sub.add_parser("demo", help="run GEMMs on the GPU, check them, time them next to cuBLAS")
    p.add_argument("--size", type=int, default=4096, help="square size for torch/cupy runs")
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("tune", help="time every candidate kernel for shapes on this GPU and "
                       "cache the fastest (pycutlass_rt.tune)")
    p.add_argument("shapes", nargs="+", type=_shape, metavar="MxNxK")
    p.add_argument("--dtype", default="bfloat16", choices=list(_tune.OUTPUTS),
                   help="A's and B's dtype (tfloat32: float32 tensors with math='tf32')")
    p.add_argument("--out-dtype", help="D's dtype (default: the first the input takes, e.g. "
                                       "int32 for int8, bfloat16 for fp8)")
    p.add_argument("--layout", default="tn", help="A then B: t row-major, n column-major")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--strict", action="store_true", help="pin the kernels (see tune())")
    p.add_argument("--no-cache", action="store_true", help="measure only, write nothing")
    p.set_defaults(fn=cmd_tune)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
