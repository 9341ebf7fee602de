"""What every GEMM entry point does before its launch: arguments, operands, kernel choice."""
from __future__ import annotations

import ctypes
import numbers

from . import _dlpack, _kernels, _lib, _select
from .errors import DTypeError, Error, InvalidArgumentError, NoKernelForArchError, UnsupportedError

NAMES = ("a", "b", "c", "d", "bias")
#: activation name -> pcr_activation (native/include/pycutlass_rt.h)
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}


def scalar(value, name: str) -> float:
    """alpha or beta as a float; DTypeError for anything that is not a real number."""
    if type(value) is float or type(value) is int:  # the common case, checked cheaply
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise DTypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    return float(value)


def activation_code(activation) -> int:
    """The pcr_activation of an activation name (None: no activation)."""
    if activation is None:
        return 0
    code = ACTIVATIONS.get(activation) if isinstance(activation, str) else None
    if code is None:
        raise InvalidArgumentError(
            f"activation must be None or one of {', '.join(map(repr, ACTIVATIONS))}; "
            f"got {activation!r}")
    return code


def kernel_index(kernel) -> int:
    """-1 for None (select), else the index of the named kernel in this build."""
    if kernel is None:
        return -1
    if isinstance(kernel, _kernels.KernelInfo):
        kernel = kernel.name
    if not isinstance(kernel, str):
        raise DTypeError(f"kernel must be a kernel name (str), got {type(kernel).__name__}")
    return _kernels.by_name(kernel).index


def pointer_device(ptr: int) -> int:
    lib = _lib.load()
    dev = ctypes.c_int32()
    lib.check(lib.pcr_pointer_device(ptr, ctypes.byref(dev)))
    return dev.value


def operands(tensors, stream, bias=None):
    """(objects for the C call, stream handle, flags, keep-alive) for (a, b, c, d) and
    bias: five objects, a, b, c, d, bias."""
    return _dlpack.prepare((*tensors, bias), NAMES, stream, pointer_device)


def describe(lib, objs, alpha: float, beta: float, activation: int = 0) -> _lib.Problem:
    a, b, c, d, bias = objs
    problem = _lib.Problem()
    lib.check(lib.pcr_py_describe(a, b, c, d, alpha, beta, bias, activation,
                                  ctypes.byref(problem)))
    return problem


#: called with each problem that reaches selection (pycutlass_rt.tune records with it)
selection_hooks: list = []


def remember(lib, objs, alpha: float, beta: float, activation: int = 0) -> None:
    """Chooses kernels for a problem seen for the first time; C memoizes the ranking."""
    remember_problem(lib, describe(lib, objs, alpha, beta, activation))


def remember_problem(lib, problem) -> None:
    """Ranks the kernels for a described problem and hands the ranking to C."""
    for hook in selection_hooks:
        hook(problem)
    choice = _select.choose(lib, problem, _kernels.kernels())
    if not choice.ranked:
        raise no_candidates(problem, choice)
    ids = [k.index for k, _ in choice.ranked[:8]]
    lib.check(lib.pcr_select_put(ctypes.byref(problem), (ctypes.c_int32 * len(ids))(*ids),
                                 len(ids)))


def no_candidates(problem, choice) -> Error:
    """The error for a problem no kernel of the build takes, with the reasons."""
    every = _kernels.kernels()
    if not any(k.family in _select.families_for(problem.cc) for k in every):
        families = sorted({f"sm{k.family}" for k in every})
        return NoKernelForArchError(
            f"this GPU is compute {problem.cc // 10}.{problem.cc % 10}, and the build holds "
            f"kernels only for {', '.join(families) or 'no arch'}: rebuild with "
            "PYCUTLASS_RT_ARCHS=native (or include this GPU's arch)")
    reasons = "\n".join(f"  {k.name}: {why}" for k, why in choice.rejected
                        if _select.static_match(k, problem) is None)
    fused = " with a fused bias/activation epilogue" if problem.epilogue else ""
    return UnsupportedError(
        "no kernel of this build can run this problem "
        f"({problem.m}x{problem.n}x{problem.k}{fused}); candidates and why they were "
        "rejected:\n" + (reasons or f"  (no kernel has these dtypes and layouts{fused})"))
