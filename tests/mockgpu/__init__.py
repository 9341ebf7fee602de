"""The library's CUDA-core kernels run on the CPU: their device code, compiled by the host's
C++ compiler against a host model of CUDA's execution (``mockgpu.h``), and driven through
their own ``can_implement``/``prepare``/``launch`` (``driver.cpp``), from the catalogue's
generated sources. A CPU test thus runs the same kernel code a GPU would, less the GPU.

What it needs: a C++17 compiler (``$CXX``, else ``c++``), the CUDA headers and CUTLASS's.
Headers are looked up where a build leaves them: ``$CUTLASS_DIR`` and ``$CUDA_HOME``
(``/usr/local/cuda``), the ``CMakeCache.txt`` beside ``$PYCUTLASS_RT_LIBRARY``, and the
checkout's ``build/cutlass-*`` and ``build/cuda-*`` (what ``pip install .`` fetches).
Without them the tests skip, unless ``PYCUTLASS_RT_REQUIRE_MOCKGPU`` is set (CI sets it):
then they fail.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess

import numpy as np

from pycutlass_rt._abi import Activation

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
REQUIRE = "PYCUTLASS_RT_REQUIRE_MOCKGPU"
#: pcr_activation's values by the names pcr.gemm takes (None: none)
ACTIVATIONS = {None: int(Activation.ACT_NONE), **{a.token: int(a) for a in Activation}}


def encode(values, dtype: str):
    """float values -> their 16-bit encodings (uint16) in ``dtype`` ("f16" or "bf16"),
    rounded to nearest even (bfloat16 by way of float32, exact for values float32 holds).

    >>> encode([1.0, -2.5], "bf16")
    array([16256, 49184], dtype=uint16)
    >>> decode(encode([1.0 + 2**-9, 3.0], "bf16"), "bf16")  # 1 + 2^-9 ties to even: 1
    array([1., 3.])
    """
    v = np.asarray(values, dtype=np.float64)
    if dtype == "f16":
        return v.astype(np.float16).view(np.uint16)
    bits = v.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return np.where(np.isnan(v), 0x7FC0, rounded).astype(np.uint16)


def decode(bits, dtype: str):
    """16-bit encodings in ``dtype`` -> float64 values."""
    b = np.asarray(bits, dtype=np.uint16)
    if dtype == "f16":
        return b.view(np.float16).astype(np.float64)
    return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


class Unavailable(Exception):
    """The compiler or headers the emulation needs are not on this machine."""


class Refused(Exception):
    """The kernel's can_implement refused the problem; the message is its reason."""


def required() -> bool:
    """Whether ``PYCUTLASS_RT_REQUIRE_MOCKGPU`` asks the emulation to run, not skip."""
    return os.environ.get(REQUIRE, "").strip().lower() not in ("", "0", "false", "no", "off")


def _cmake_cache() -> dict:
    lib = os.environ.get("PYCUTLASS_RT_LIBRARY", "")
    path = os.path.join(os.path.dirname(lib), "CMakeCache.txt") if lib else ""
    out = {}
    if path and os.path.isfile(path):
        for line in open(path, encoding="utf-8", errors="replace"):
            key, _, value = line.partition("=")
            out[key.split(":")[0]] = value.strip()
    return out


def _first(candidates, marker):
    """The first directory of ``candidates`` that holds ``marker``."""
    for d in candidates:
        if d and os.path.isfile(os.path.join(d, marker)):
            return d
    return None


def include_dirs() -> list:
    """The include directories the kernels compile with: the project's, CUTLASS's, CUDA's
    (with CCCL's ``cuda/std``); raises Unavailable naming what is missing."""
    cache = _cmake_cache()
    cutlass_roots = [os.environ.get("CUTLASS_DIR", ""), cache.get("CUTLASS_DIR", "")]
    cutlass_roots += sorted(glob.glob(os.path.join(ROOT, "build", "cutlass-*")))
    cutlass = _first([os.path.join(r, "include") for r in cutlass_roots if r], "cutlass/cutlass.h")
    cuda_roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    cuda_dirs = [os.path.join(r, "include") for r in cuda_roots if r]
    cuda_dirs += cache.get("CUDAToolkit_INCLUDE_DIR", "").split(";")
    cuda_dirs += sorted(
        glob.glob(os.path.join(ROOT, "build", "cuda-*", "nvidia", "cu*", "include"))
    )
    cuda = _first(cuda_dirs, "cuda_runtime.h")
    if not cutlass or not cuda:
        missing = [n for n, d in (("CUTLASS's", cutlass), ("CUDA's", cuda)) if not d]
        raise Unavailable(
            f"no {' or '.join(missing)} headers found (set CUTLASS_DIR / CUDA_HOME, or build "
            "the package in this checkout first)"
        )
    cccl = _first([os.path.join(cuda, "cccl"), cuda], "cuda/std/utility")
    if not cccl:
        raise Unavailable(f"CUDA's headers at {cuda} lack CCCL (cuda/std)")
    kernels = os.path.join(ROOT, "native", "kernels")
    return [HERE, kernels, os.path.join(ROOT, "native", "include"), cutlass, cccl, cuda]


def compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise Unavailable("no C++ compiler ($CXX, c++ or g++)")
    return cxx


def kernels_source(kernels) -> str:
    """One translation unit holding ``kernels`` (catalogue entries) as the build generates
    them, after the host model, and the table the driver looks them up in."""
    from catalog import kernel_source

    table = "".join(f"    &pcr_kernel_{k.ident},\n" for k in kernels)
    return (
        '#include "mockgpu.h"\n'
        + "".join(kernel_source(k) for k in kernels)
        + "namespace pcr::emulate {\n"
        + f"extern const KernelEntry* const kEntries[] = {{\n{table}    nullptr}};\n"
        + "}  // namespace pcr::emulate\n"
    )


def build(kernels, dest: str) -> str:
    """Compiles the driver with ``kernels`` into ``dest`` (reused when nothing changed) and
    returns the executable's path."""
    dirs = include_dirs()
    # heap and shared memory checked; not the stack: CUTLASS's host-side Array<half_t, 2>
    # element stores write 4 bytes into a 2-byte temporary (its device path is intrinsics)
    flags = ["-std=c++17", "-O1", "-pthread", "-DPCR_EMULATE", "-fsanitize=address"]
    flags += ["--param=asan-stack=0", "-fno-omit-frame-pointer", "-w"]
    cmd = [compiler(), *flags] + [f"-I{d}" for d in dirs]
    source = kernels_source(kernels)
    stamp = hashlib.sha256((source + " ".join(cmd)).encode())
    for d in dirs[:3]:  # the project's headers and the driver: what this tree may change
        for name in sorted(os.listdir(d)):
            if name.endswith((".h", ".cuh", ".cpp")):
                stamp.update(open(os.path.join(d, name), "rb").read())
    exe = os.path.join(dest, "driver-" + stamp.hexdigest()[:16])
    if os.path.isfile(exe):
        return exe
    os.makedirs(dest, exist_ok=True)
    unit = os.path.join(dest, "kernels.cpp")
    with open(unit, "w") as f:
        f.write(source)
    cmd += [os.path.join(HERE, "driver.cpp"), unit, "-o", exe + ".tmp"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"building the emulated kernels failed:\n{done.stderr[-4000:]}")
    os.replace(exe + ".tmp", exe)
    return exe


def driver(kernels) -> str:
    """The driver built with ``kernels`` (cached under the checkout's build/mockgpu), for a
    test module's fixture: where it cannot be built the calling tests skip, or fail under
    ``PYCUTLASS_RT_REQUIRE_MOCKGPU``."""
    import pytest

    try:
        return build(kernels, os.path.join(ROOT, "build", "mockgpu"))
    except Unavailable as e:
        if required():
            pytest.fail(f"{REQUIRE} is set, but {e}", pytrace=False)
        pytest.skip(str(e))


def fprop(exe: str, kernel: str, dtype: str, x, w, *, groups: int, workdir: str, **kw):
    """:func:`conv` of an fprop, x (N, H, W, C) by w (K, R, S, C / groups), the shapes
    theirs."""
    return conv(
        exe,
        kernel,
        dtype,
        x,
        w,
        x_shape=x.shape,
        w_shape=w.shape,
        groups=groups,
        workdir=workdir,
        **kw,
    )


def conv(
    exe: str,
    kernel: str,
    dtype: str,
    a,
    b,
    *,
    x_shape,
    w_shape,
    stride=(1, 1),
    padding=(0, 0),
    dilation=(1, 1),
    groups=1,
    bias=None,
    c=None,
    alpha=1.0,
    beta=0.0,
    activation=None,
    workdir: str,
):
    """One pass by ``kernel`` (the pass its name says) in the emulation: a and b its inputs
    (fprop: x, w; dgrad: dy, w; wgrad: dy, x) as values, rounded to ``dtype`` ("f16" or
    "bf16"), activations NHWC and filters KRSC; x_shape (N, H, W, C) and w_shape (K, R, S,
    C/groups) the geometry; c and bias (K) likewise. Returns the output (fprop y (N, P, Q,
    K), dgrad dx (N, H, W, C), wgrad dw (K, R, S, C/groups)) as float64 values, or raises
    Refused with the kernel's reason. ``activation``: a name of ACTIVATIONS, or (name,
    alpha[, beta])."""
    op = kernel.split("_")[1]
    n, h, w_, ch = x_shape
    k, r, s, _ = w_shape
    p = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    q = (w_ + 2 * padding[1] - dilation[1] * (s - 1) - 1) // stride[1] + 1
    out_shape = {"fprop": (n, p, q, k), "dgrad": tuple(x_shape), "wgrad": tuple(w_shape)}[op]
    act = activation if isinstance(activation, tuple) else (activation,)
    params = list(act[1:]) + [0.0] * (3 - len(act))
    os.makedirs(workdir, exist_ok=True)
    paths = {}
    for name, arr in (("a", a), ("b", b), ("c", c), ("bias", bias)):
        if arr is None:
            paths[name] = "-"
            continue
        paths[name] = os.path.join(workdir, name + ".bin")
        encode(arr, dtype).tofile(paths[name])
    paths["d"] = os.path.join(workdir, "d.bin")
    geo = [n, h, w_, ch, k, r, s, p, q, *padding, *stride, *dilation, groups]
    lines = [
        f"kernel {kernel}",
        "conv " + " ".join(map(str, geo)),
        f"scalars {alpha!r} {beta!r}",
        f"activation {ACTIVATIONS[act[0]]} {params[0]!r} {params[1]!r}",
    ] + [f"{name} {path}" for name, path in paths.items()]
    request = os.path.join(workdir, "request.txt")
    with open(request, "w") as f:
        f.write("\n".join(lines) + "\n")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
    done = subprocess.run([exe, request], capture_output=True, text=True, env=env)
    if done.returncode == 3:
        raise Refused(done.stdout.strip())
    if done.returncode:
        raise RuntimeError(
            f"the emulated {kernel} failed ({done.returncode}):\n{done.stderr[-4000:]}"
        )
    return decode(np.fromfile(paths["d"], dtype=np.uint16), dtype).reshape(out_shape)
