"""Writing the build's files: the sources, units, registry and CMake fragment.

``emit`` writes what CMake compiles (``--emit``): a source per kernel, the units that
include them, registry.cpp and kernels.cmake (the sources, their gencode flags and how
many compile at once). A file whose text is unchanged is left alone, so that rerunning
CMake recompiles nothing.
"""

from __future__ import annotations

import os

from .archs import runtime_gencode
from .kernel import Kernel
from .sources import BANNER, kernel_source, registry_source, unit_source
from .units import units


def _write_if_changed(path: str, text: str) -> None:
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(text)


def emit(
    outdir: str,
    kernels: list[Kernel],
    per_family: dict[str, list[str]],
    build: dict,
    size: int = 1,
    jobs: int = 1,
) -> list:
    """Write a source per kernel, the units compiling them ``size`` at a time (at most
    ``jobs`` at once), the registry and kernels.cmake; returns the units."""
    for sub in ("kernels", "units"):
        os.makedirs(os.path.join(outdir, sub), exist_ok=True)
    for k in kernels:
        _write_if_changed(os.path.join(outdir, "kernels", k.name + ".cu"), kernel_source(k))
    cmake = [f"# {BANNER[3:]}set(PCR_KERNEL_SOURCES)", f"set(PCR_UNIT_JOBS {jobs})"]
    compiled = units(kernels, per_family, size)
    for name, members, flags in compiled:
        if len(members) == 1:
            path = os.path.join(outdir, "kernels", name + ".cu")
        else:
            path = os.path.join(outdir, "units", name + ".cu")
            _write_if_changed(path, unit_source(members))
        cmake.append(f'list(APPEND PCR_KERNEL_SOURCES "{path}")')
        cmake.append(
            f'set_source_files_properties("{path}" PROPERTIES COMPILE_OPTIONS "{";".join(flags)}")'
        )
    cmake.append(f'set(PCR_RUNTIME_GENCODE "{";".join(runtime_gencode(per_family))}")')
    _write_if_changed(os.path.join(outdir, "registry.cpp"), registry_source(kernels, build))
    _write_if_changed(os.path.join(outdir, "kernels.cmake"), "\n".join(cmake) + "\n")
    return compiled
