"""The build backend of pyproject.toml: scikit-build-core's, with the CUDA toolkit and the
CUTLASS headers chosen before CMake runs. The pins of both live here, and only here: each
wheel fetched is pinned by version and by its SHA-256 (pip verifies them:
``--require-hashes``), whether it comes from an index or from ``PIP_FIND_LINKS`` offline.

CUDA: the system toolkit when an nvcc is found (``CMAKE_CUDA_COMPILER`` given to CMake,
``CUDACXX``, ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin``, ``PATH``); otherwise PyPI's CUDA 13
wheels (``CUDA_WHEELS``: nvcc, its front end and ``cicc``, the headers and the static
runtime) are fetched and unpacked into ``build/cuda-<version>``, kept for later builds, and
CMake compiles with their nvcc (``PYCUTLASS_RT_CUDA=pypi``, CMakeLists.txt).
``PYCUTLASS_RT_CUDA=system`` or ``pypi`` forces either route.

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
from typing import NamedTuple

from scikit_build_core import build as _skbuild
from scikit_build_core.build import *  # noqa: F403  (the hooks this module does not extend)


class Pin(NamedTuple):
    """A wheel pinned by version and by the SHA-256 of each platform's file."""

    name: str
    version: str
    sha256: tuple  # every platform's digest: pip takes the file matching any of them

    def requirement(self) -> str:
        """A requirements-file line that pip checks with --require-hashes."""
        return f"{self.name}=={self.version} " + " ".join(f"--hash=sha256:{h}" for h in self.sha256)


#: the CUTLASS headers the kernels are written against
CUTLASS = Pin(
    "nvidia-cutlass",
    "4.2.0.0",
    ("f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6",),  # py3-none-any
)
#: one CUDA 13.0 toolkit (the system toolkit of the release builds): nvidia-cuda-nvcc leaves
#: its own dependencies (nvvm, crt) unpinned, so every part is pinned here; digests of the
#: x86_64 and aarch64 manylinux wheels
CUDA_WHEELS = [
    Pin(
        "nvidia-cuda-nvcc",
        "13.0.88",
        (
            "56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03",
            "c7ff28f86a24effdc6c034fa15230c549a273e4771b10a7fec14996f8cf3307f",
        ),
    ),
    Pin(
        "nvidia-cuda-crt",
        "13.0.88",
        (
            "2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4",
            "ee2ea2a97073e02ee62bb27841f437332be2c248e3eac013df07997ada39c003",
        ),
    ),
    Pin(
        "nvidia-nvvm",
        "13.0.88",
        (
            "c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0",
            "c4376a291d72d22a315d9d2f69bdae8f8cd83a627f75bad395cee49a0fe65dc1",
        ),
    ),
    Pin(
        "nvidia-cuda-runtime",
        "13.0.96",
        (
            "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548",
            "ef9bcbe90493a2b9d810e43d249adb3d02e98dd30200d86607d8d02687c43f55",
        ),
    ),
    Pin(
        "nvidia-cuda-cccl",
        "13.0.85",
        (
            "e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649",
            "6f0203e29fed809ee2b7fe9b1344df66ecab990c37d6a2e0e189b26d6c97ed7c",
        ),
    ),
]
#: where the fetched CUTLASS headers and CUDA wheels are kept, relative to the project
CUTLASS_CACHE = os.path.join("build", "cutlass-" + CUTLASS.version)
CUDA_CACHE = os.path.join("build", "cuda-" + CUDA_WHEELS[0].version)


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


VARIANT_ENV = "PYCUTLASS_RT_CUDA_VARIANT"


def cuda_major(nvcc: str) -> int:
    """The CUDA major version of an nvcc (``nvcc --version``'s "release 12.4")."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"release (\d+)\.", out)
    if not found:
        raise RuntimeError(f"{nvcc} --version names no release:\n{out}")
    return int(found.group(1))


def set_cuda_variant(config_settings=None) -> None:
    """Names the wheel's CUDA variant for pyproject.toml's override: a CUDA 12 toolkit
    builds ``+cu12`` (drivers of the CUDA 12 line, Volta included), CUDA 13 the plain
    version. A variable the caller set must agree with the toolkit found."""
    major = 13
    if cuda_route(config_settings) == "system":
        major = cuda_major(system_nvcc(config_settings))
    if major < 12:
        raise RuntimeError(f"CUDA {major} is too old: pycutlass_rt builds with CUDA 12 or 13")
    want = "cu12" if major == 12 else ""
    given = os.environ.get(VARIANT_ENV)
    if given is not None and given != want:
        raise RuntimeError(
            f"{VARIANT_ENV}={given!r}, but the toolkit found is CUDA {major} ({want or 'plain'})"
        )
    os.environ[VARIANT_ENV] = want


def cuda_wheels_root():
    """The CUDA wheels' toolkit tree (nvidia/cu13): fetched into CUDA_CACHE, or installed in
    this Python; None where neither is."""
    for path in [os.path.abspath(CUDA_CACHE)] + sys.path:
        root = os.path.join(path, "nvidia", "cu13")
        if os.path.isfile(os.path.join(root, "bin", "nvcc")):
            return root
    return None


def _download(pins: list, dest: str) -> list:
    """The pinned wheels downloaded into ``dest`` (without dependencies, each file's hash
    checked); their paths."""
    if importlib.util.find_spec("pip") is None:
        raise RuntimeError(
            "pycutlass_rt: fetching " + ", ".join(p.name for p in pins) + " needs pip in the "
            "build's Python (or set CUTLASS_DIR / put nvcc on PATH)"
        )
    reqs = os.path.join(dest, "requirements.txt")
    with open(reqs, "w") as f:
        f.write("\n".join(p.requirement() for p in pins) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        + ["--disable-pip-version-check", "--require-hashes", "--dest", dest, "-r", reqs],
        check=True,
    )
    return [os.path.join(dest, f) for f in os.listdir(dest) if f.endswith(".whl")]


def _unpack(wheel: str, dest: str, prefix: str = "") -> None:
    """A wheel's files (those under ``prefix``) into ``dest``, executable bits kept."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if not info.filename.startswith(prefix) or ".dist-info/" in info.filename:
                continue
            path = z.extract(info, dest)
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                os.chmod(path, mode)


def fetch_cuda():
    """PyPI's CUDA 13 wheels (CUDA_WHEELS) unpacked into CUDA_CACHE; its toolkit tree."""
    root = cuda_wheels_root()
    if root is not None:
        return root
    dest = os.path.abspath(CUDA_CACHE)
    print(f"pycutlass_rt: fetching CUDA {CUDA_WHEELS[0].version} from PyPI's wheels into {dest}")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(dest)) as tmp:
        wheels, tree = os.path.join(tmp, "wheels"), os.path.join(tmp, "tree")
        os.makedirs(wheels)
        for wheel in _download(CUDA_WHEELS, wheels):
            _unpack(wheel, tree)
        try:
            os.replace(tree, dest)
        except OSError:  # a concurrent build got there first
            pass
    return cuda_wheels_root()


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
    print(f"pycutlass_rt: fetching the CUTLASS headers: {CUTLASS.name}=={CUTLASS.version}")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(dest)) as tmp:
        (wheel,) = _download([CUTLASS], tmp)
        src = os.path.join(tmp, "cutlass")
        source = "cutlass_library/source/"
        with zipfile.ZipFile(wheel) as z:
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
    """pip, where the build fetches pinned wheels itself and the environment lacks it."""
    needs_cuda = cuda_route(config_settings) == "pypi" and cuda_wheels_root() is None
    needs_cutlass = not (_cutlass_elsewhere(config_settings) or _cutlass_cached())
    if (needs_cuda or needs_cutlass) and importlib.util.find_spec("pip") is None:
        return ["pip"]
    return []


def _settings(config_settings):
    """config_settings for scikit-build-core, with the toolkit and CUTLASS chosen."""
    settings = dict(config_settings or {})
    route = cuda_route(settings)
    settings["cmake.define.PYCUTLASS_RT_CUDA"] = route
    if route == "pypi":
        root = fetch_cuda()
        print(f"pycutlass_rt: CUDA from PyPI's wheels at {root} (PYCUTLASS_RT_CUDA=pypi)")
        settings["cmake.define.PYCUTLASS_RT_CUDA_WHEELS"] = root
        # its own build directory: CMake keeps the compiler it first found in a build tree
        if "build-dir" not in settings and not os.environ.get("SKBUILD_BUILD_DIR"):
            settings["build-dir"] = "build/{wheel_tag}-cuda-pypi"
    # always named, so that a build directory never keeps a tree an earlier build chose
    settings["cmake.define.CUTLASS_DIR"] = _cutlass_elsewhere(settings) or fetch_cutlass()
    return settings


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    set_cuda_variant(config_settings)
    return _skbuild.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    set_cuda_variant(config_settings)
    return _skbuild.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def get_requires_for_build_wheel(config_settings=None):
    requires = _skbuild.get_requires_for_build_wheel(config_settings)
    return requires + _extra_requires(config_settings)


def get_requires_for_build_editable(config_settings=None):
    requires = _skbuild.get_requires_for_build_editable(config_settings)
    return requires + _extra_requires(config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    set_cuda_variant(config_settings)
    return _skbuild.build_wheel(wheel_directory, _settings(config_settings), metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    set_cuda_variant(config_settings)
    settings = _settings(config_settings)
    return _skbuild.build_editable(wheel_directory, settings, metadata_directory)
