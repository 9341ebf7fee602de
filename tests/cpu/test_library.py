"""The loader, the ABI header against the ctypes layer, and the registry in the binary."""

import ctypes
import os
import re
import shutil
import subprocess
import sys

import catalog
import pytest

import pycutlass_rt as pcr
from pycutlass_rt import _abi, _lib, errors

NATIVE = os.path.dirname(os.path.dirname(catalog.__file__))  # catalog is native/catalog/
HEADER = os.path.join(NATIVE, "include", "pycutlass_rt.h")


def header_text():
    """The public header, then the package's private one (the selector's tables)."""
    texts = []
    for path in (HEADER, os.path.join(NATIVE, "include", "pycutlass_rt_tables.h")):
        with open(path) as f:
            texts.append(f.read())
    return "\n".join(texts)


def c_struct_fields(name):
    body = dict(
        (n, b) for b, n in re.findall(r"typedef struct \{([^{}]*)\} (\w+);", header_text())
    )[name]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        ctype, names = re.match(r"((?:const )?\w+\*?)\s+(.*)", decl).groups()
        fields += [(n.strip().lstrip("*"), ctype) for n in names.split(",")]
    return fields


CTYPE = {
    "int64_t": ctypes.c_int64,
    "int32_t": ctypes.c_int32,
    "const char*": ctypes.c_char_p,
    "pcr_conv_shape": _abi.ConvShape,
}


@pytest.mark.parametrize(
    "cname,pystruct", [("pcr_problem", _lib.Problem), ("pcr_kernel_desc", _lib.KernelDesc)]
)
def test_structs_match_header(cname, pystruct):
    assert [(n, CTYPE[t]) for n, t in c_struct_fields(cname)] == list(pystruct._fields_)


def test_status_codes_match_header():
    codes = dict(re.findall(r"\b(PCR_(?:ERR_\w+|OK))\s*=\s*(\d+)", header_text()))
    assert codes, "no status codes found"
    for cname, value in codes.items():
        assert getattr(errors, cname[4:]) == int(value), cname


def test_every_abi_function_is_bound():
    declared = set(re.findall(r"PCR_API [\w\s\*]+?\b(pcr_\w+)\(", header_text()))
    assert declared == set(_lib._SIGNATURES)
    assert (
        int(re.search(r"#define PCR_ABI_VERSION (\d+)", header_text()).group(1)) == _lib.ABI_VERSION
    )


def test_builtins_are_named_in_the_header_and_check_their_arguments(lib):
    for name in ("gemm", "plan_run", "plan_launch"):
        assert callable(getattr(lib, name)) and f" *   {name}(" in header_text()
    assert lib.gemm(1, 2) == errors.ERR_INVALID_ARGUMENT
    assert "takes 10 arguments, got 2" in lib.last_error()
    assert lib.gemm(None, None, None, None, "x", 0.0, None, -1, 0, 0) == errors.ERR_INVALID_ARGUMENT
    assert "argument 4 is not a number" in lib.last_error()
    assert lib.plan_run(0, None, None, None, None, None, 0, 0) == errors.ERR_INVALID_ARGUMENT
    assert lib.plan_launch(0) == errors.ERR_INVALID_ARGUMENT and "NULL" in lib.last_error()
    with pytest.raises(errors.InvalidArgumentError, match="not a number"):
        lib.check(lib.plan_launch("plan"))


def test_loads_and_reports(lib):
    assert lib.pcr_abi_version() == _lib.ABI_VERSION
    info = pcr.info()
    assert info["abi"] == _lib.ABI_VERSION and info["build"]["kernels"] == len(pcr.kernels())
    assert info["runtime_version"]


#: catalogue dtype names -> the library's
DTYPE_NAMES = {
    "f16": "float16",
    "bf16": "bfloat16",
    "f32": "float32",
    "tf32": "tfloat32",
    "f64": "float64",
    "s8": "int8",
    "s32": "int32",
    "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
}


def test_registry_matches_catalogue(lib):
    by_name = {k.name: k for k in catalog.catalogue()}
    kernels = pcr.kernels()
    assert kernels, "the build holds no kernels"
    for k in kernels:
        rec = by_name[k.name]  # every built kernel is a catalogue record
        assert k.family == int(rec.family[2:])
        assert k.layout == rec.layout and k.tile == rec.tile
        assert (k.dtype_a, k.dtype_d) == (DTYPE_NAMES[rec.a], DTYPE_NAMES[rec.d])
        assert k.align == (rec.align, rec.align_b, rec.align_c)
        assert k.tensor_scales == rec.tensor_scales
        assert (k.schedule, k.split, k.epilogue) == (rec.schedule, rec.split, rec.epilogue)
        if rec.family in ("sm90", "sm100"):
            assert k.cluster == rec.cluster and k.schedule == rec.schedule
        else:
            assert k.stages == rec.stages and k.schedule == rec.schedule


def test_kernel_find(lib):
    k = pcr.kernels()[0]
    idx = ctypes.c_int32()
    assert lib.pcr_kernel_find(k.name.encode(), ctypes.byref(idx)) == 0 and idx.value == k.index
    assert lib.pcr_kernel_find(b"nope", ctypes.byref(idx)) == errors.ERR_KERNEL_NOT_FOUND
    assert "nope" in lib.last_error()
    with pytest.raises(pcr.KernelNotFoundError, match="did you mean"):
        pcr._kernels.by_name(k.name[:-1])


@pytest.mark.skipif(not shutil.which("nm"), reason="nm not installed")
def test_exports_only_the_abi(lib):
    out = subprocess.run(
        ["nm", "-D", "--defined-only", lib.path], capture_output=True, text=True, check=True
    ).stdout
    syms = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert syms and all(s.startswith("pcr_") for s in syms), [
        s for s in syms if not s.startswith("pcr_")
    ]


def run_py(code, **env):
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full)


def test_missing_library_is_a_clear_error():
    r = run_py(
        "import pycutlass_rt as p\ntry:\n p.kernels()\nexcept p.LibraryError as e: print('ERR', e)",
        PYCUTLASS_RT_LIBRARY="/nonexistent/libpycutlass_rt.so",
    )
    assert "ERR" in r.stdout and "/nonexistent/libpycutlass_rt.so (missing)" in r.stdout
    assert "PYCUTLASS_RT_LIBRARY" in r.stdout


def test_corrupt_library_is_a_clear_error(tmp_path):
    bad = tmp_path / "libpycutlass_rt.so"
    bad.write_bytes(b"\x7fELF garbage")
    r = run_py(
        "import pycutlass_rt as p\ntry:\n p.kernels()\nexcept p.LibraryError as e: print('ERR', e)",
        PYCUTLASS_RT_LIBRARY=str(bad),
    )
    assert "ERR" in r.stdout and str(bad) in r.stdout


def test_abi_mismatch_is_a_clear_error(lib):
    r = run_py(
        "import pycutlass_rt as p\nfrom pycutlass_rt import _lib\n_lib.ABI_VERSION = 999\n"
        "try:\n p.kernels()\nexcept p.LibraryError as e: print('ERR', e)",
        PYCUTLASS_RT_LIBRARY=lib.path,
    )
    assert "ERR" in r.stdout and f"ABI version {_lib.ABI_VERSION}" in r.stdout
    assert "expects 999" in r.stdout


def test_import_never_needs_the_library():
    r = run_py("import pycutlass_rt; print('imported')", PYCUTLASS_RT_LIBRARY="/nonexistent.so")
    assert r.returncode == 0 and "imported" in r.stdout


# Grouped calls that claim 2^31 - 1 groups: their per-group arrays (about 1 TB and 300 GB)
# exceed the address-space limit, so std::bad_alloc is thrown inside the library.
BAD_ALLOC = """
import ctypes, resource
resource.setrlimit(resource.RLIMIT_AS, (64 << 30, 64 << 30))
from pycutlass_rt import _lib
lib = _lib.load()
objs = (ctypes.py_object * 1)(None)
print(lib.pcr_py_grouped_gemm(objs, objs, None, objs, None, 2 ** 31 - 1, 1.0, 0.0, -1, 0, 0, None),
      lib.last_error())
views = (ctypes.POINTER(_lib.DLTensor) * 1)()
print(lib.pcr_grouped_gemm(views, views, None, views, 2 ** 31 - 1, 1.0, 0.0, None, -1, None, None),
      lib.last_error())
"""


def test_cpp_exceptions_never_cross_the_abi(lib):
    """Every export runs behind one guard (native/src/guard.h): a C++ exception comes back as
    PCR_ERR_INTERNAL with its message; unguarded, std::bad_alloc aborted the process."""
    r = run_py(BAD_ALLOC, PYCUTLASS_RT_LIBRARY=lib.path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{int(errors.ERR_INTERNAL)} out of host memory"] * 2


OLD_DRIVER = """
/* libcuda.so.1 of a driver that supports CUDA 12.4 only: the runtime asks its version */
int cuDriverGetVersion(int* version) { *version = 12040; return 0; }
int cuInit(unsigned flags) { (void)flags; return 0; }
"""


def test_driver_older_than_the_build_is_a_clear_error(lib, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in driver")
    runtime = ctypes.c_int32()
    assert lib.pcr_runtime_version(ctypes.byref(runtime)) == 0
    if runtime.value < 13000:
        pytest.skip("this build's runtime runs on a CUDA 12.4 driver")
    (tmp_path / "fake.c").write_text(OLD_DRIVER)
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(tmp_path / "fake.c")],
        check=True,
    )
    code = (
        "import numpy as np, pycutlass_rt as p\n"
        "a = np.ones((4, 8), np.float16); b = np.ones((8, 6), np.float16)\n"
        "try:\n p.gemm(a, b, None, np.zeros((4, 6), np.float16))\n"
        "except p.NoDeviceError as e: print('ERR', e)\n"
    )
    # The stand-in comes first on the search path, ahead of a real driver if there is one.
    path = os.pathsep.join([str(tmp_path), os.environ.get("LD_LIBRARY_PATH", "")])
    r = run_py(code, PYCUTLASS_RT_LIBRARY=lib.path, LD_LIBRARY_PATH=path)
    major = runtime.value // 1000
    assert "ERR" in r.stdout, r.stdout + r.stderr
    assert "driver supports CUDA 12.4" in r.stdout
    assert f"needs a driver for CUDA {major}.0 or newer" in r.stdout


def test_a_python_without_its_gil_is_refused_at_import_with_a_message():
    """The Python-object entry points run under the GIL: a free-threaded interpreter with
    the GIL off cannot import the package, and is told how to run it (simulated: this one
    has a GIL)."""
    code = (
        "import sys; sys._is_gil_enabled = lambda: False\n"
        "try:\n    import pycutlass_rt\nexcept ImportError as e:\n    print('REFUSED', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "REFUSED" in r.stdout and "PYTHON_GIL=1" in r.stdout, r.stdout + r.stderr


def test_wheel_metadata_ships_the_licenses_and_a_cpython_tag():
    """What pip builds: a CPython-only (abi3) wheel whose metadata (PEP 639) names our
    license and carries its text, the notices of what the library links in (CUTLASS, the
    CUDA runtime, DLPack, XLA's FFI headers) and the vendored XLA headers' license."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        doc = tomllib.load(f)
    wheel, project = doc["tool"]["scikit-build"]["wheel"], doc["project"]
    assert wheel["py-api"].startswith("cp3")  # abi3: PyPy and GraalPy do not install it
    assert project["license"] == "BSD-3-Clause"  # an SPDX expression, PEP 639
    assert project["license-files"] == [
        "LICENSE",
        "THIRD_PARTY_NOTICES.md",
        "native/third_party/xla/LICENSE",
    ]
    assert all(os.path.isfile(os.path.join(root, f)) for f in project["license-files"])
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # PEP 639
    with open(os.path.join(root, "THIRD_PARTY_NOTICES.md")) as f:
        notices = f.read()
    assert "BSD-3-Clause" in notices and "NVIDIA CORPORATION" in notices  # CUTLASS's text
    assert "cudart_static" in notices and "Apache License" in notices
    assert "native/third_party/xla" in notices
    with open(os.path.join(root, "LICENSE")) as f:
        assert "BSD 3-Clause" in f.read()
