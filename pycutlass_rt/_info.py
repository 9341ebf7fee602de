"""info(): the library, driver, runtime, devices, frameworks and kernels of this process.

Also what ``python -m pycutlass_rt info`` prints and ``doctor`` starts from.
"""

from __future__ import annotations

import ctypes
import json
from typing import Any

from . import _lib
from ._abi import Status
from ._kernels import kernels
from ._version import __version__

#: framework module -> the distributions to read its version from
FRAMEWORK_DISTRIBUTIONS = {
    "torch": ("torch",),
    "cupy": ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x"),
    "jax": ("jax",),
    "numba": ("numba",),
    "numpy": ("numpy",),
}


def framework_versions() -> dict[str, str | None]:
    """Installed version of each framework pycutlass_rt reads (None: not installed), from
    package metadata: nothing is imported."""
    import contextlib
    import importlib.metadata  # costs a few ms: not at the package's import

    out: dict[str, str | None] = {}
    for module, dists in FRAMEWORK_DISTRIBUTIONS.items():
        out[module] = None
        for dist in dists:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                out[module] = importlib.metadata.version(dist)
                break
    return out


def info() -> dict[str, Any]:
    """Library, driver, runtime, devices and the kernels built per arch family.

    Example:
        >>> import pycutlass_rt as pcr
        >>> {"abi", "build", "devices", "frameworks", "kernels"} <= set(pcr.info())
        True
    """
    lib = _lib.load()
    drv, rt, count = ctypes.c_int32(), ctypes.c_int32(), ctypes.c_int32()
    lib.pcr_driver_version(ctypes.byref(drv))
    lib.pcr_runtime_version(ctypes.byref(rt))
    devices, device_error = [], None
    st = lib.pcr_device_count(ctypes.byref(count))
    if st:
        device_error = str(lib.error(st))
    else:
        _lib.note_cuda_used()
    for i in range(count.value if not st else 0):
        name = ctypes.create_string_buffer(256)
        cc, sms = ctypes.c_int32(), ctypes.c_int32()
        lib.check(lib.pcr_device_name(i, name, 256))
        lib.check(lib.pcr_device_cc(i, ctypes.byref(cc), ctypes.byref(sms)))
        runnable = 0
        for k in kernels():
            runs = ctypes.c_int32()
            if lib.pcr_kernel_runs_on(k.index, i, ctypes.byref(runs)) == Status.OK and runs.value:
                runnable += 1
        devices.append(
            {
                "index": i,
                "name": name.value.decode(),
                "cc": f"{cc.value // 10}.{cc.value % 10}",
                "sm_count": sms.value,
                "kernels_runnable": runnable,
            }
        )
    per_family: dict = {}
    for k in kernels():
        per_family.setdefault(f"sm{k.family}", []).append(k.name)
    ver = lambda v: f"{v // 1000}.{(v % 1000) // 10}" if v else None  # noqa: E731
    return {
        "abi": lib.pcr_abi_version(),
        "build": json.loads(lib.pcr_build_info().decode()),
        "devices": devices,
        "device_error": device_error,
        "driver_version": ver(drv.value),
        "frameworks": framework_versions(),
        "kernels": per_family,
        "library": lib.path,
        "runtime_version": ver(rt.value),
        "version": __version__,
    }
