"""Loading libpycutlass_rt.so, and binding every C function, in one place.

Importing pycutlass_rt never loads the library; the first call that needs it does, and
a failure then says which paths were tried and which variable overrides them
(``PYCUTLASS_RT_LIBRARY``). The signatures come from ``_abi`` (generated from the C
header): functions taking Python objects (``pcr_py_*``) are bound through
``ctypes.PyDLL`` (the GIL stays held: they call back into CPython), the rest through
``ctypes.CDLL`` (the GIL is released).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
from ctypes import c_char_p, c_int, c_void_p, py_object

from . import _abi, errors
from ._abi import DLTensor, Extras, KernelDesc, Problem, Status  # noqa: F401  (the structs' old home)

ABI_VERSION = _abi.PCR_ABI_VERSION  # what this package expects; checked at load
LIBRARY_ENV = "PYCUTLASS_RT_LIBRARY"
LIBRARY_NAME = "libpycutlass_rt.so"

#: name -> _abi.Function (restype, argtypes, bound through PyDLL) of every C function
_SIGNATURES = _abi.FUNCTIONS


class _MethodDef(ctypes.Structure):
    """CPython's PyMethodDef, as pcr_py_builtins() returns an array of them."""

    _fields_ = [("name", c_char_p), ("function", c_void_p), ("flags", c_int), ("doc", c_char_p)]


def _builtins(table: int | None) -> dict:
    """name -> builtin function, for the library's METH_FASTCALL entry points.

    The per-call entry points (gemm, plan_run, plan_launch) exist only as builtins: ctypes
    spends microseconds converting ten arguments, a builtin takes them as they are. Each
    returns the status as an int, or raises a failing producer's own exception;
    pycutlass_rt.h documents their arguments.
    """
    if not table:
        raise errors.LibraryError("pcr_py_builtins(): CPython's API was not found in this process")
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
        for name, (restype, argtypes, python) in _SIGNATURES.items():
            try:
                fn = getattr(pydll if python else cdll, name)
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
                f"reinstall pycutlass_rt, or point {LIBRARY_ENV} at a matching build"
            )
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
        if _fork.forked_after_cuda and status in (Status.ERR_NO_DEVICE, Status.ERR_CUDA):
            message += (
                " (this process was forked after its parent had used CUDA, which a "
                "forked child cannot do: start workers with the 'spawn' method)"
            )
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
#: the library once load() has loaded it (the hot paths read this before calling load())
loaded: Library | None = None


def _refuse_without_gil() -> None:
    """The library's Python-object entry points run on the GIL's protection (they are bound
    through ctypes.PyDLL and read tensors' Python objects without locks of their own), so a
    free-threaded CPython running without its GIL is refused at import, saying how to run
    it (the package imports no extension module that could turn the GIL back on)."""
    gil_enabled = getattr(sys, "_is_gil_enabled", None)
    if gil_enabled is not None and not gil_enabled():
        raise ImportError(
            "pycutlass_rt needs the GIL, and this free-threaded Python runs without it; "
            "start Python with PYTHON_GIL=1 (or -X gil=1), or use a standard CPython"
        )


_refuse_without_gil()


#: called with the library once it is loaded (on_load): what must be in place before its
#: first call, such as the selector's provider (_select.install)
_load_hooks: list = []


def on_load(hook) -> None:
    """Calls ``hook(library)`` once the library is loaded (now, if it is)."""
    with _lock:
        _load_hooks.append(hook)
        now = loaded
    if now is not None:
        hook(now)


def load() -> Library:
    """The library, loaded on first use (raises LibraryError with the paths tried)."""
    global loaded
    if loaded is not None:
        return loaded
    with _lock:
        if loaded is None:
            tried = []
            for path in candidate_paths():
                if not os.path.exists(path):
                    tried.append(f"{path} (missing)")
                    continue
                try:
                    loaded = Library(path)
                    break
                except OSError as e:
                    tried.append(f"{path} ({e})")
            if loaded is None:
                raise errors.LibraryError(
                    "cannot load libpycutlass_rt.so; tried: "
                    + "; ".join(tried)
                    + f". Build and install the package (pip install .), or set {LIBRARY_ENV} "
                    "to the library's path"
                )
            for hook in _load_hooks:
                hook(loaded)
    return loaded
