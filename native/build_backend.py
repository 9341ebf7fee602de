"""The build backend of pyproject.toml: scikit-build-core's, with the CUDA toolkit and the
CUTLASS headers chosen before CMake runs. The pins of both live here, and only here.

CUDA: the system toolkit when an nvcc is found (``CMAKE_CUDA_COMPILER`` given to CMake,
``CUDACXX``, ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, ``PATH``); otherwise PyPI's CUDA 13
wheels (``CUDA_WHEELS``: nvcc, its front end and ``cicc``, the headers and the static
runtime) become build requirements and CMake compiles with their nvcc
(``PYCUTLASS_RT_CUDA=pypi``, CMakeLists.txt). ``PYCUTLASS_RT_CUDA=system`` or ``pypi``
forces either route.

CUTLASS: headers only. ``CUTLASS_DIR`` (environment or CMake define) names a source tree;
else an importable ``nvidia-cutlass`` serves (a build without isolation that has it); else
the pinned ``nvidia-cutlass`` wheel is fetched with ``pip download --no-deps`` (its Python
dependencies, cuda-python, scipy, networkx and more, are not needed to compile) and its
headers are unpacked into ``build/cutlass-<version>``, kept for later builds.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

from scikit_build_core import build as _skbuild
from scikit_build_core.build import *  # noqa: F403  (the hooks this module does not extend)

#: the CUTLASS headers the kernels are written against
CUTLASS = "nvidia-cutlass==4.2.0.0"
#: one CUDA 13.0 toolkit (the system toolkit of the release builds): nvidia-cuda-nvcc leaves
#: its own dependencies (nvvm, crt) unpinned, so every part is pinned here
CUDA_WHEELS = [
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
]
#: where the fetched CUTLASS headers are kept, relative to the project
CUTLASS_CACHE = os.path.join("build", "cutlass-" + CUTLASS.split("==")[1])


def _defined(config_settings, name):
    """The value given to CMake for ``name`` (-C cmake.define.NAME, cmake.args, CMAKE_ARGS)."""
    value = (config_settings or {}).get("cmake.define." + name)
    if value:
        return value if isinstance(value, str) else value[-1]
    args = (config_settings or {}).get("cmake.args", [])
    args = " ".join([args] if isinstance(args, str) else args)
    found = re.findall(rf"-D\s*{name}(?::\w+)?=(\S+)", f"{os.environ.get('CMAKE_ARGS', '')} {args}")
    return found[-1] if found else None


def system_nvcc(config_settings=None):
    """The nvcc CMake would find, or None."""
    given = _defined(config_settings, "CMAKE_CUDA_COMPILER")
    if given:
        return given
    candidates = [os.environ.get("CUDACXX")]
    candidates += [
        os.path.join(os.environ[var], "bin", "nvcc")
        for var in ("CUDA_HOME", "CUDA_PATH")
        if os.environ.get(var)
    ]
    candidates.append("nvcc")
    for candidate in candidates:
        found = candidate and shutil.which(candidate)
        if found:
            return found
    return None


def cuda_route(config_settings=None):
    """'system' or 'pypi' (PYCUTLASS_RT_CUDA: auto, the default, takes PyPI's without nvcc)."""
    choice = _defined(config_settings, "PYCUTLASS_RT_CUDA")
    choice = (choice or os.environ.get("PYCUTLASS_RT_CUDA") or "auto").lower()
    if choice not in ("auto", "system", "pypi"):
        raise ValueError(f"PYCUTLASS_RT_CUDA={choice}: expected auto, system or pypi")
    if choice == "auto":
        return "system" if system_nvcc(config_settings) else "pypi"
    return choice


def cuda_wheels_root():
    """The CUDA wheels' toolkit tree in this Python (site-packages/nvidia/cu13), or None."""
    for path in sys.path:
        root = os.path.join(path, "nvidia", "cu13")
        if os.path.isfile(os.path.join(root, "bin", "nvcc")):
            return root
    return None


def _cutlass_elsewhere(config_settings):
    """The CUTLASS tree given (CUTLASS_DIR) or installed here (nvidia-cutlass), or None."""
    given = _defined(config_settings, "CUTLASS_DIR") or os.environ.get("CUTLASS_DIR")
    if given:
        return given
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(spec.submodule_search_locations[0], "source")


def _cutlass_cached():
    return os.path.isfile(os.path.join(CUTLASS_CACHE, "include", "cutlass", "version.h"))


def fetch_cutlass():
    """The pinned nvidia-cutlass wheel's headers, unpacked into CUTLASS_CACHE (its path)."""
    dest = os.path.abspath(CUTLASS_CACHE)
    if _cutlass_cached():
        return dest
    if importlib.util.find_spec("pip") is None:
        raise RuntimeError(
            f"pycutlass_rt: fetching the CUTLASS headers ({CUTLASS}) needs pip in the build's "
            "Python; or set CUTLASS_DIR to a CUTLASS source tree"
        )
    print(f"pycutlass_rt: fetching the CUTLASS headers: {CUTLASS}, without its dependencies")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(dest)) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
            + ["--disable-pip-version-check", "--dest", tmp, CUTLASS],
            check=True,
        )
        (wheel,) = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        src = os.path.join(tmp, "cutlass")
        source = "cutlass_library/source/"
        with zipfile.ZipFile(os.path.join(tmp, wheel)) as z:
            for member in z.namelist():
                if member.startswith((source + "include/", source + "tools/util/include/")):
                    z.extract(member, tmp)
                elif member.endswith(".dist-info/licenses/LICENSE.txt"):
                    os.makedirs(src, exist_ok=True)
                    with open(os.path.join(src, "LICENSE.txt"), "wb") as f:
                        f.write(z.read(member))
        os.makedirs(src, exist_ok=True)
        for part in ("include", "tools"):
            os.replace(os.path.join(tmp, source, part), os.path.join(src, part))
        try:
            os.replace(src, dest)
        except OSError:  # a concurrent build got there first
            if not _cutlass_cached():
                raise
    return dest


def _extra_requires(config_settings):
    extra = list(CUDA_WHEELS) if cuda_route(config_settings) == "pypi" else []
    needs_fetch = not (_cutlass_elsewhere(config_settings) or _cutlass_cached())
    if needs_fetch and importlib.util.find_spec("pip") is None:
        extra.append("pip")
    return extra


def _settings(config_settings):
    """config_settings for scikit-build-core, with the toolkit and CUTLASS chosen."""
    settings = dict(config_settings or {})
    route = cuda_route(settings)
    settings["cmake.define.PYCUTLASS_RT_CUDA"] = route
    if route == "pypi":
        root = cuda_wheels_root()
        if root is None:
            raise RuntimeError(
                "pycutlass_rt: no nvcc found (CUDACXX, CUDA_HOME, CUDA_PATH, PATH) and no "
                "CUDA wheels in this Python: put nvcc on PATH, or pip install "
                + " ".join(CUDA_WHEELS)
                + " (pip install . with build isolation does so itself)"
            )
        print(f"pycutlass_rt: CUDA from PyPI's wheels at {root} (PYCUTLASS_RT_CUDA=pypi)")
        # its own build directory: CMake keeps the compiler it first found in a build tree
        if "build-dir" not in settings and not os.environ.get("SKBUILD_BUILD_DIR"):
            settings["build-dir"] = "build/{wheel_tag}-cuda-pypi"
    # always named, so that a build directory never keeps a tree an earlier build chose
    settings["cmake.define.CUTLASS_DIR"] = _cutlass_elsewhere(settings) or fetch_cutlass()
    return settings


def get_requires_for_build_wheel(config_settings=None):
    requires = _skbuild.get_requires_for_build_wheel(config_settings)
    return requires + _extra_requires(config_settings)


def get_requires_for_build_editable(config_settings=None):
    requires = _skbuild.get_requires_for_build_editable(config_settings)
    return requires + _extra_requires(config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _skbuild.build_wheel(wheel_directory, _settings(config_settings), metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    settings = _settings(config_settings)
    return _skbuild.build_editable(wheel_directory, settings, metadata_directory)
