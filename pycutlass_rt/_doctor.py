"""``python -m pycutlass_rt doctor``: whether this machine can run the library, and why not.

It reports the library and its build, the driver against the static CUDA runtime, each GPU
against the build's kernels, the array frameworks present and how each hands tensors over
(DLPack's C exchange API, ``__dlpack__`` or ``__cuda_array_interface__``), the
``PYCUTLASS_RT_*`` and ``CUDA_VISIBLE_DEVICES`` settings in effect, the tune cache, and one
small GEMM per framework present, checked against a reference. Every problem found is a
line of ``problems``; the command exits 1 with the first one when there is any.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings

from . import _cache, _gemm, _info, _lib
from ._info import framework_versions
from ._kernels import kernels
from .errors import Error, UnsupportedError

#: framework module -> how it hands tensors over when its type offers nothing better (its
#: versions: _info.FRAMEWORK_DISTRIBUTIONS)
HANDS_OVER = {
    "torch": "__dlpack__",
    "cupy": "__dlpack__",
    "jax": "__dlpack__",
    "numba": "__cuda_array_interface__",
    "numpy": "__dlpack__ (host memory, staged through the GPU)",
}
ENV_PREFIXES = ("PYCUTLASS_RT_", "CUDA_VISIBLE_DEVICES")


def _version_tuple(text: str | None) -> tuple:
    return tuple(int(x) for x in text.split(".")) if text else ()


def _tensor_type(module: str, mod):
    """The framework's array type, for asking how it hands tensors over."""
    return {
        "torch": lambda: mod.Tensor,
        "cupy": lambda: mod.ndarray,
        "jax": lambda: type(mod.numpy.zeros(1)),
        "numba": lambda: importlib.import_module("numba.cuda.cudadrv.devicearray").DeviceNDArray,
        "numpy": lambda: mod.ndarray,
    }[module]()


def _dlpack_path(module: str, mod) -> str:
    try:
        tp = _tensor_type(module, mod)
    except Exception as e:  # noqa: BLE001 - a framework that fails here is reported as such
        return f"unknown ({type(e).__name__}: {e})"
    if hasattr(tp, "__dlpack_c_exchange_api__"):
        return "DLPack C exchange API (tensors and stream read in C)"
    return HANDS_OVER[module]


def _check_gemm(module: str, mod) -> str:
    """One 64x48x32 GEMM through the framework, checked against a float64 reference."""
    m, n, k = 64, 48, 32
    if module == "torch":
        if not mod.cuda.is_available():
            return "skipped: torch sees no CUDA device"
        a = mod.randn(m, k, device="cuda").half()
        b = mod.randn(k, n, device="cuda").half()
        d = mod.full((m, n), float("nan"), device="cuda", dtype=mod.float32)
        _gemm.gemm(a, b, None, d)
        mod.cuda.synchronize()
        ref, got = a.double() @ b.double(), d.double()
        err = float((got - ref).norm() / ref.norm())
    elif module in ("cupy", "numpy"):
        a = mod.random.uniform(-1, 1, (m, k)).astype(mod.float16)
        b = mod.random.uniform(-1, 1, (k, n)).astype(mod.float16)
        d = mod.full((m, n), mod.nan, mod.float32)
        _gemm.gemm(a, b, None, d)
        ref = a.astype(mod.float64) @ b.astype(mod.float64)
        err = float(mod.linalg.norm(d - ref) / mod.linalg.norm(ref))
    else:
        return "skipped: checked through torch, cupy and numpy only"
    return f"ok (relative error {err:.1e})" if err < 1e-3 else f"WRONG (relative error {err:.1e})"


def _cache_state(info: dict) -> dict:
    state = {"directory": _cache.cache_dir(), "strict": _cache.strict(), "devices": []}
    names = [k.name for k in kernels()]
    for dev in info["devices"]:
        key = _cache.device_key(_lib.load(), dev["index"], names)
        if key is None:
            continue
        path = _cache.path_for(key)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cf = _cache.read(path, key)
        why = "; ".join(str(w.message) for w in caught)
        state["devices"].append(
            {
                "device": dev["index"],
                "file": path,
                "state": why or ("absent" if cf is None else f"{len(cf.entries)} tuned entries"),
            }
        )
    return state


def diagnose() -> dict:
    """Everything ``doctor`` reports, as a dict; ``problems`` lists what is wrong."""
    report: dict = {"problems": []}
    problems = report["problems"]
    try:
        info = _info.info()
    except Error as e:
        problems.append(str(e))
        return report
    report.update(
        library=info["library"],
        abi=info["abi"],
        build=info["build"],
        driver=info["driver_version"],
        runtime=info["runtime_version"],
        devices=info["devices"],
        jax_handler=info["build"].get("jax_handler", {"built": False}),
    )
    if not info["devices"]:
        problems.append(f"no usable GPU: {info['device_error']}")
    if not report["jax_handler"]["built"] and framework_versions()["jax"]:
        problems.append(
            "jax is installed but this build has no JAX handler (configured with "
            "PYCUTLASS_RT_XLA_FFI_INCLUDE=OFF): pycutlass_rt.jax raises UnsupportedError"
        )
    if info["driver_version"] and _version_tuple(info["driver_version"]) < _version_tuple(
        info["runtime_version"]
    ):
        problems.append(
            f"the driver supports CUDA {info['driver_version']}, older than the runtime "
            f"{info['runtime_version']} this build links: update the driver"
        )
    for dev in info["devices"]:
        if not dev["kernels_runnable"]:
            problems.append(
                f"GPU {dev['index']} ({dev['name']}, compute {dev['cc']}) runs none of this "
                "build's kernels: rebuild with PYCUTLASS_RT_ARCHS=native"
            )
    report["environment"] = {
        k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)
    }
    frameworks = {}
    for module, version in framework_versions().items():
        entry = {"version": version}
        if version is not None and importlib.util.find_spec(module) is not None:
            try:
                mod = importlib.import_module(module)
            except Exception as e:  # noqa: BLE001 - a broken install is worth a line
                entry["error"] = f"{type(e).__name__}: {e}"
            else:
                entry["dlpack"] = _dlpack_path(module, mod)
                if info["devices"]:
                    try:
                        entry["gemm"] = _check_gemm(module, mod)
                    except UnsupportedError as e:  # a filtered build
                        entry["gemm"] = f"skipped: {str(e).splitlines()[0]}"
                    except Exception as e:  # noqa: BLE001 - every failure is reported
                        entry["gemm"] = f"FAILED ({type(e).__name__}: {e})"
                    if entry["gemm"].startswith(("WRONG", "FAILED")):
                        problems.append(f"{module}: the check GEMM {entry['gemm']}")
        frameworks[module] = entry
    report["frameworks"] = frameworks
    report["tune_cache"] = _cache_state(info)
    return report


def print_report(report: dict) -> None:
    """The report for a person, problems last."""
    if "library" in report:
        print(f"library:   {report['library']} (ABI {report['abi']})")
        print(f"driver:    CUDA {report['driver'] or 'none found'}; runtime {report['runtime']}")
        handler = report["jax_handler"]
        print(
            f"JAX:       handler built (XLA FFI API {handler.get('xla_ffi_api')}; pycutlass_rt.jax)"
            if handler["built"]
            else "JAX:       no handler in this build (PYCUTLASS_RT_XLA_FFI_INCLUDE=OFF)"
        )
        for dev in report["devices"]:
            print(
                f"GPU {dev['index']}:     {dev['name']}, compute {dev['cc']}, "
                f"{dev['kernels_runnable']} kernels of this build run here"
            )
        for name, entry in report["frameworks"].items():
            if entry["version"] is None:
                print(f"{name + ':':10s} not installed")
                continue
            how = entry.get("error") or entry.get("dlpack", "")
            print(f"{name + ':':10s} {entry['version']}, {how}")
            if "gemm" in entry:
                print(f"{'':10s} check GEMM: {entry['gemm']}")
        for k, v in report["environment"].items():
            print(f"env:       {k}={v}")
        cache = report["tune_cache"]
        print(f"tune cache: {cache['directory']}" + (" (strict)" if cache["strict"] else ""))
        for dev in cache["devices"]:
            print(f"  GPU {dev['device']}: {dev['file']}: {dev['state']}")
    for p in report["problems"]:
        print(f"PROBLEM: {p}")
    if not report["problems"]:
        print("no problems found")
