"""Loading libpycutlass_rt.so, and every ctypes signature, in one place.

Importing pycutlass_rt never loads the library; the first call that needs it does, and
a failure then says which paths were tried and which variable overrides them
(``PYCUTLASS_RT_LIBRARY``). Functions taking Python objects are bound through
``ctypes.PyDLL`` (the GIL stays held: they call back into CPython); the rest through
``ctypes.CDLL`` (the GIL is released).
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading
from ctypes import POINTER, c_char_p, c_double, c_int, c_int32, c_size_t, c_void_p, py_object

from . import errors

ABI_VERSION = 5  # PCR_ABI_VERSION in native/include/pycutlass_rt.h
LIBRARY_ENV = "PYCUTLASS_RT_LIBRARY"
LIBRARY_NAME = "libpycutlass_rt.so"
STREAM_FROM_PRODUCER = 1  # PCR_STREAM_FROM_PRODUCER


class DLTensor(ctypes.Structure):
    """DLPack's DLTensor (the ABI's tensor view)."""

    _fields_ = [("data", c_void_p), ("device_type", c_int32), ("device_id", c_int32),
                ("ndim", c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", POINTER(ctypes.c_int64)),
                ("strides", POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class KernelDesc(ctypes.Structure):
    """pcr_kernel_desc."""

    _fields_ = [("name", c_char_p), ("family", c_int32),
                ("dtype_a", c_int32), ("dtype_b", c_int32), ("dtype_acc", c_int32),
                ("dtype_d", c_int32), ("layout_a", c_int32), ("layout_b", c_int32),
                ("tile_m", c_int32), ("tile_n", c_int32), ("tile_k", c_int32),
                ("cluster_m", c_int32), ("cluster_n", c_int32), ("cluster_k", c_int32),
                ("warps_m", c_int32), ("warps_n", c_int32), ("warps_k", c_int32),
                ("stages", c_int32), ("schedule", c_int32), ("epilogue", c_int32),
                ("split", c_int32), ("align_a", c_int32), ("align_b", c_int32),
                ("align_c", c_int32), ("swap_ab", c_int32), ("grouped", c_int32),
                ("tensor_scales", c_int32)]


class Problem(ctypes.Structure):
    """pcr_problem: a validated GEMM in canonical form (D row-major)."""

    _fields_ = [("m", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64),
                ("dtype_a", c_int32), ("dtype_b", c_int32), ("dtype_c", c_int32),
                ("dtype_d", c_int32), ("layout_a", c_int32), ("layout_b", c_int32),
                ("align_a", c_int32), ("align_b", c_int32), ("align_c", c_int32),
                ("align_d", c_int32), ("c_mode", c_int32), ("transposed", c_int32),
                ("host", c_int32), ("staged", c_int32), ("device", c_int32), ("cc", c_int32),
                ("sm_count", c_int32), ("batch", ctypes.c_int64), ("bias", c_int32),
                ("activation", c_int32), ("align_bias", c_int32), ("epilogue", c_int32),
                ("grouped", c_int32), ("scale_m", c_int32), ("scale_n", c_int32)]


class Extras(ctypes.Structure):
    """pcr_extras: bias, scales, activation and math of a GEMM."""

    _fields_ = [("bias", POINTER(DLTensor)), ("scale_a", POINTER(DLTensor)),
                ("scale_b", POINTER(DLTensor)), ("activation", c_int32), ("math", c_int32)]


# name: (Python-object entry point?, restype, argtypes)   -- C prototype beside each
_SIGNATURES = {
    # int pcr_abi_version(void);
    "pcr_abi_version": (False, c_int, []),
    # const char* pcr_last_error(void);
    "pcr_last_error": (False, c_char_p, []),
    # const char* pcr_build_info(void);
    "pcr_build_info": (False, c_char_p, []),
    # int pcr_kernel_count(void);
    "pcr_kernel_count": (False, c_int, []),
    # int pcr_kernel_info(int32_t kernel, pcr_kernel_desc* out);
    "pcr_kernel_info": (False, c_int, [c_int32, POINTER(KernelDesc)]),
    # int pcr_kernel_find(const char* name, int32_t* kernel);
    "pcr_kernel_find": (False, c_int, [c_char_p, POINTER(c_int32)]),
    # int pcr_kernel_runs_on(int32_t kernel, int32_t device, int32_t* runs);
    "pcr_kernel_runs_on": (False, c_int, [c_int32, c_int32, POINTER(c_int32)]),
    # int pcr_kernel_check(int32_t kernel, const pcr_problem* problem);
    "pcr_kernel_check": (False, c_int, [c_int32, POINTER(Problem)]),
    # int pcr_driver_version(int32_t* version);
    "pcr_driver_version": (False, c_int, [POINTER(c_int32)]),
    # int pcr_runtime_version(int32_t* version);
    "pcr_runtime_version": (False, c_int, [POINTER(c_int32)]),
    # int pcr_device_count(int32_t* count);
    "pcr_device_count": (False, c_int, [POINTER(c_int32)]),
    # int pcr_device_name(int32_t device, char* buf, size_t size);
    "pcr_device_name": (False, c_int, [c_int32, c_char_p, c_size_t]),
    # int pcr_device_cc(int32_t device, int32_t* cc, int32_t* sm_count);
    "pcr_device_cc": (False, c_int, [c_int32, POINTER(c_int32), POINTER(c_int32)]),
    # int pcr_pointer_device(const void* ptr, int32_t* device);
    "pcr_pointer_device": (False, c_int, [c_void_p, POINTER(c_int32)]),
    # int pcr_describe(const DLTensor* a, const DLTensor* b, const DLTensor* c,
    #                  const DLTensor* d, double alpha, double beta,
    #                  const pcr_extras* extras, pcr_problem* out);
    "pcr_describe": (False, c_int, [POINTER(DLTensor)] * 4 + [
        c_double, c_double, POINTER(Extras), POINTER(Problem)]),
    # int pcr_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
    #              double alpha, double beta, const pcr_extras* extras, int32_t kernel,
    #              void* stream, pcr_problem* problem);
    "pcr_gemm": (False, c_int, [POINTER(DLTensor)] * 4 + [
        c_double, c_double, POINTER(Extras), c_int32, c_void_p, POINTER(Problem)]),
    # int pcr_grouped_gemm(const DLTensor* const* a, const DLTensor* const* b,
    #                      const DLTensor* const* c, const DLTensor* const* d, int32_t count,
    #                      double alpha, double beta, int32_t kernel, void* stream,
    #                      pcr_problem* problem);
    "pcr_grouped_gemm": (False, c_int, [POINTER(POINTER(DLTensor))] * 4 + [
        c_int32, c_double, c_double, c_int32, c_void_p, POINTER(Problem)]),
    # int pcr_moe_gemm(const DLTensor* x, const DLTensor* w, const DLTensor* offsets,
    #                  const DLTensor* out, double alpha, int32_t kernel, void* stream,
    #                  pcr_problem* problem);
    "pcr_moe_gemm": (False, c_int, [POINTER(DLTensor)] * 4 + [
        c_double, c_int32, c_void_p, POINTER(Problem)]),
    # int pcr_select_put(const pcr_problem* problem, const int32_t* kernels, int32_t count);
    "pcr_select_put": (False, c_int, [POINTER(Problem), POINTER(c_int32), c_int32]),
    # int pcr_select_clear(void);
    "pcr_select_clear": (False, c_int, []),
    # int pcr_plan_create(const DLTensor* a, const DLTensor* b, const DLTensor* c,
    #                     const DLTensor* d, double alpha, double beta,
    #                     const pcr_extras* extras, int32_t kernel, pcr_problem* problem,
    #                     pcr_plan** plan);
    "pcr_plan_create": (False, c_int, [POINTER(DLTensor)] * 4 + [
        c_double, c_double, POINTER(Extras), c_int32, POINTER(Problem), POINTER(c_void_p)]),
    # int pcr_plan_run(pcr_plan* plan, void* stream);
    "pcr_plan_run": (False, c_int, [c_void_p, c_void_p]),
    # int pcr_plan_run_with(pcr_plan* plan, const DLTensor* a, const DLTensor* b,
    #                       const DLTensor* c, const DLTensor* d, const pcr_extras* extras,
    #                       void* stream);
    "pcr_plan_run_with": (False, c_int, [c_void_p] + [POINTER(DLTensor)] * 4 + [
        POINTER(Extras), c_void_p]),
    # int pcr_plan_kernel(const pcr_plan* plan, int32_t* kernel);
    "pcr_plan_kernel": (False, c_int, [c_void_p, POINTER(c_int32)]),
    # void pcr_plan_destroy(pcr_plan* plan);
    "pcr_plan_destroy": (False, None, [c_void_p]),
    # int pcr_py_gemm(void* a, void* b, void* c, void* d, double alpha, double beta,
    #                 void* extras, int32_t kernel, int32_t flags, void* stream,
    #                 pcr_problem* problem);
    "pcr_py_gemm": (True, c_int, [py_object] * 4 + [
        c_double, c_double, py_object, c_int32, c_int32, c_void_p, POINTER(Problem)]),
    # int pcr_py_plan_create(void* a, void* b, void* c, void* d, double alpha, double beta,
    #                        void* extras, int32_t kernel, pcr_problem* problem,
    #                        pcr_plan** plan);
    "pcr_py_plan_create": (True, c_int, [py_object] * 4 + [
        c_double, c_double, py_object, c_int32, POINTER(Problem), POINTER(c_void_p)]),
    # int pcr_py_plan_run(pcr_plan* plan, void* a, void* b, void* c, void* d, void* extras,
    #                     int32_t flags, void* stream);
    "pcr_py_plan_run": (True, c_int, [c_void_p] + [py_object] * 5 + [c_int32, c_void_p]),
    # int pcr_py_grouped_gemm(void** a, void** b, void** c, void** d, int32_t count,
    #                         double alpha, double beta, int32_t kernel, int32_t flags,
    #                         void* stream, pcr_problem* problem);
    "pcr_py_grouped_gemm": (True, c_int, [POINTER(py_object)] * 4 + [
        c_int32, c_double, c_double, c_int32, c_int32, c_void_p, POINTER(Problem)]),
    # int pcr_py_moe_gemm(void* x, void* w, void* offsets, void* out, double alpha,
    #                     int32_t kernel, int32_t flags, void* stream, pcr_problem* problem);
    "pcr_py_moe_gemm": (True, c_int, [py_object] * 4 + [
        c_double, c_int32, c_int32, c_void_p, POINTER(Problem)]),
    # int pcr_py_plan_launch(pcr_plan* plan);
    "pcr_py_plan_launch": (True, c_int, [c_void_p]),
    # int pcr_py_describe(void* a, void* b, void* c, void* d, double alpha, double beta,
    #                     void* extras, pcr_problem* out);
    "pcr_py_describe": (True, c_int, [py_object] * 4 + [
        c_double, c_double, py_object, POINTER(Problem)]),
    # const void* pcr_py_builtins(void);
    "pcr_py_builtins": (True, c_void_p, []),
}


class _MethodDef(ctypes.Structure):
    """CPython's PyMethodDef, as pcr_py_builtins() returns an array of them."""

    _fields_ = [("name", c_char_p), ("function", c_void_p), ("flags", c_int),
                ("doc", c_char_p)]


def _builtins(table: int | None) -> dict:
    """name -> builtin function, for the library's METH_FASTCALL entry points.

    The per-call entry points (gemm, plan_run, plan_launch) are called as builtins: ctypes
    spends microseconds converting ten arguments, a builtin takes them as they are. Each
    returns the status as an int; their C prototypes are in pycutlass_rt.h.
    """
    if not table:
        raise errors.LibraryError("pcr_py_builtins(): CPython's API was not found in this "
                                  "process")
    new = ctypes.pythonapi.PyCFunction_NewEx
    new.restype, new.argtypes = py_object, [c_void_p, c_void_p, c_void_p]  # self, module: NULL
    out = {}
    entry = _MethodDef.from_address(table)
    while entry.name:  # the static array lives as long as the library (never unloaded)
        out[entry.name.decode()] = new(ctypes.addressof(entry), None, None)
        entry = _MethodDef.from_address(ctypes.addressof(entry) + ctypes.sizeof(_MethodDef))
    return out


class Library:
    """The loaded library: one attribute per C function, typed from _SIGNATURES."""

    def __init__(self, path: str):
        self.path = path
        cdll = ctypes.CDLL(path)
        pydll = ctypes.PyDLL(path)
        for name, (with_gil, restype, argtypes) in _SIGNATURES.items():
            try:
                fn = getattr(pydll if with_gil else cdll, name)
            except AttributeError:
                raise errors.LibraryError(
                    f"{path} lacks {name}(): it was built from another version of "
                    f"pycutlass_rt; rebuild it, or point {LIBRARY_ENV} at a matching build"
                ) from None
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        abi = self.pcr_abi_version()
        if abi != ABI_VERSION:
            raise errors.LibraryError(
                f"{path} has ABI version {abi}, this Python package expects {ABI_VERSION}; "
                f"reinstall pycutlass_rt, or point {LIBRARY_ENV} at a matching build")
        calls = _builtins(self.pcr_py_builtins())
        #: builtin: gemm(a, b, c, d, alpha, beta, extras, kernel, flags, stream) -> status
        self.gemm = calls["gemm"]
        #: builtin: plan_run(plan, a, b, c, d, extras, flags, stream) -> status
        self.plan_run = calls["plan_run"]
        #: builtin: plan_launch(plan) -> status
        self.plan_launch = calls["plan_launch"]

    def last_error(self) -> str:
        msg = self.pcr_last_error()
        return msg.decode(errors="replace") if msg else ""

    def check(self, status: int) -> None:
        """Raises the exception for a non-zero status."""
        if status:
            raise self.error(status)

    def error(self, status: int) -> errors.Error:
        """The exception for a non-zero status, with the thread's message."""
        message = self.last_error()
        if _fork.forked_after_cuda and status in (errors.ERR_NO_DEVICE, errors.ERR_CUDA):
            message += (" (this process was forked after its parent had used CUDA, which a "
                        "forked child cannot do: start workers with the 'spawn' method)")
        return errors.from_status(status, message)


class _ForkState:
    """Whether CUDA was used before this process was forked (CUDA cannot follow a fork)."""

    cuda_used = False
    forked_after_cuda = False

    def child(self):
        self.forked_after_cuda = self.cuda_used


_fork = _ForkState()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fork.child)


def note_cuda_used() -> None:
    _fork.cuda_used = True


def candidate_paths() -> list[str]:
    """Where the library is looked for, in order."""
    env = os.environ.get(LIBRARY_ENV)
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, LIBRARY_NAME)]
    # A source checkout: the library scikit-build-core left in build/<wheel tag>/.
    built = glob.glob(os.path.join(os.path.dirname(here), "build", "*", LIBRARY_NAME))
    paths += sorted(built, key=os.path.getmtime, reverse=True)
    return paths


_lock = threading.Lock()
_lib: Library | None = None


def load() -> Library:
    """The library, loaded on first use (raises LibraryError with the paths tried)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            tried = []
            for path in candidate_paths():
                if not os.path.exists(path):
                    tried.append(f"{path} (missing)")
                    continue
                try:
                    _lib = Library(path)
                    break
                except OSError as e:
                    tried.append(f"{path} ({e})")
            if _lib is None:
                raise errors.LibraryError(
                    "cannot load libpycutlass_rt.so; tried: " + "; ".join(tried) +
                    f". Build and install the package (pip install .), or set {LIBRARY_ENV} "
                    "to the library's path")
    return _lib
