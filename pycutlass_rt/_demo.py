"""``python -m pycutlass_rt demo``: GEMMs on the GPU, checked, and timed next to cuBLAS.

Each framework found is used: numpy (host arrays, staged through the GPU), torch and
cupy (device tensors, timed against ``torch.mm`` / ``cupy.matmul``). None of them is
required by the package, so each is imported here only if present; references are
computed in float64 in the arrays' own framework.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import statistics
import sys
import time

from . import _info
from ._explain import explain
from ._gemm import gemm
from ._version import __version__
from .errors import LibraryError

#: what to install when no array framework is importable
NEEDS = "demo: needs numpy, torch or cupy to make arrays; install one, e.g. pip install numpy"
#: output rows compared against the float64 reference (keeps the reference quick)
ROWS = 256


def _optional(name: str):
    """The module ``name``, or None when it is not installed (or unusable)."""
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - absent, or broken: the demo goes without it
        return None


def _installed(name: str) -> bool:
    """Whether ``name`` can be found, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError, AttributeError):  # e.g. blocked in sys.modules
        return False


def _check(name: str, xp, got64, ref64, finite: bool, tol: float) -> bool:
    """Prints and returns whether ``got64`` is finite and within ``tol`` of ``ref64``.

    Args:
        name: what is compared, for the printed line.
        xp: the array module of both arrays (numpy, torch or cupy: each has ``linalg.norm``).
        got64: the result, as float64.
        ref64: the float64 reference.
        finite: whether the result (before conversion) is all finite.
        tol: largest relative (Frobenius) error accepted.
    """
    err = float(xp.linalg.norm(got64 - ref64)) / max(float(xp.linalg.norm(ref64)), 1e-30)
    ok = finite and err <= tol
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
    return statistics.median(ta), statistics.median(tb)


def _numpy(np) -> bool:
    rng = np.random.default_rng(0)
    m, n, k = 512, 384, 256
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    d = np.full((m, n), np.nan, np.float16)
    print(f"numpy float16 {m}x{n}x{k} (staged through the GPU):")
    print(f"  kernel: {explain(a, b, None, d).kernel}")
    gemm(a, b, None, d)
    return _check(
        "vs numpy",
        np,
        d.astype(np.float64),
        a.astype(np.float64) @ b.astype(np.float64),
        bool(np.isfinite(d).all()),
        2e-3,
    )


def _torch(torch, size: int) -> bool:
    ok = True
    flop = 2.0 * size**3
    for dtype in (torch.float16, torch.bfloat16):
        a = torch.rand(size, size, device="cuda", dtype=dtype) - 0.5
        b = torch.rand(size, size, device="cuda", dtype=dtype) - 0.5
        d = torch.empty(size, size, device="cuda", dtype=dtype)
        ref = torch.empty_like(d)  # cuBLAS's output, for timing
        print(f"torch {str(dtype).split('.')[-1]} {size}^3:")
        print(f"  kernel: {explain(a, b, None, d).kernel}")
        gemm(a, b, None, d)
        ok &= _check(
            f"vs torch (fp64, {ROWS} rows)",
            torch,
            d[:ROWS].double(),
            a[:ROWS].double() @ b.double(),
            bool(torch.isfinite(d).all()),
            1e-2,
        )
        t_pcr, t_torch = _time_pair(
            functools.partial(gemm, a, b, None, d),
            functools.partial(torch.mm, a, b, out=ref),
            torch.cuda.synchronize,
        )
        print(
            f"  pycutlass_rt {flop / t_pcr / 1e12:7.1f} TFLOP/s   torch.mm (cuBLAS) "
            f"{flop / t_torch / 1e12:7.1f} TFLOP/s   ratio {t_torch / t_pcr:.2f}x"
        )
    return ok


def _cupy(cp, size: int) -> bool:
    a = cp.random.uniform(-1, 1, (size, size)).astype(cp.float16)
    b = cp.random.uniform(-1, 1, (size, size)).astype(cp.float16)
    d = cp.empty((size, size), cp.float16)
    print(f"cupy float16 {size}^3:")
    gemm(a, b, None, d)
    ok = _check(
        f"vs cupy (fp64, {ROWS} rows)",
        cp,
        d[:ROWS].astype(cp.float64),
        a[:ROWS].astype(cp.float64) @ b.astype(cp.float64),
        bool(cp.isfinite(d).all()),
        1e-2,
    )
    ref = cp.empty_like(d)
    t_pcr, t_cp = _time_pair(
        lambda: gemm(a, b, None, d),
        lambda: cp.matmul(a, b, out=ref),
        cp.cuda.runtime.deviceSynchronize,
    )
    print(
        f"  pycutlass_rt {2.0 * size**3 / t_pcr / 1e12:7.1f} TFLOP/s   cupy.matmul "
        f"{2.0 * size**3 / t_cp / 1e12:7.1f} TFLOP/s"
    )
    return ok


def _usable_torch():
    torch = _optional("torch")
    return torch if torch is not None and torch.cuda.is_available() else None


def _usable_cupy():
    cp = _optional("cupy")
    if cp is None:
        return None
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no usable GPU for cupy
        return None
    return cp


def main(size: int) -> int:
    """Runs the demo with ``size``^3 torch/cupy problems; the exit status."""
    try:
        info = _info.info()
    except LibraryError as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1
    np = _optional("numpy")
    if np is None and not (_installed("torch") or _installed("cupy")):
        print(NEEDS, file=sys.stderr)
        return 1
    if not info["devices"]:
        print(
            "demo: needs an NVIDIA GPU with its driver; none is usable here:\n  "
            f"{info['device_error']}",
            file=sys.stderr,
        )
        return 1
    dev = info["devices"][0]
    print(f"pycutlass_rt {__version__} on {dev['name']} (compute {dev['cc']})")
    runs = [(_numpy, np, ()), (_torch, _usable_torch(), (size,)), (_cupy, _usable_cupy(), (size,))]
    results = [fn(mod, *args) for fn, mod, args in runs if mod is not None]
    if not results:
        print(
            "demo: numpy is absent and neither torch nor cupy sees the GPU: nothing ran; "
            "install numpy (pip install numpy) or a CUDA build of torch or cupy",
            file=sys.stderr,
        )
        return 1
    ok = all(results)
    print("demo: " + ("all results match" if ok else "MISMATCH"))
    return 0 if ok else 1
