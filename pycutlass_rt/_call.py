"""What every GEMM entry point does before its launch: arguments, operands, kernel choice."""

from __future__ import annotations

import ctypes
import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple

from . import _dlpack, _kernels, _lib
from ._abi import PCR_KERNEL_SELECT, Activation, Math, Verdict
from .errors import DTypeError, InvalidArgumentError

NAMES = ("a", "b", "c", "d", "bias", "scale_a", "scale_b", "aux", "amax", "scale_d")
#: activation name -> pcr_activation: the constants' tokens ("gelu_tanh" is ACT_GELU_TANH)
ACTIVATIONS = {act.token: act for act in Activation}
#: math name -> pcr_math: float32 inputs at fp32 accuracy ("ieee") or on TF32 tensor cores;
#: fp8 inputs accumulated into fp32 every 128 of K ("ieee") or fast ("fast_accum")
MATHS = {m.token: m for m in Math}


def scalar(value, name: str) -> float:
    """alpha or beta as a float; DTypeError for anything that is not a real number."""
    if type(value) is float:  # the common case, checked cheaply
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise DTypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int past float's range
        raise InvalidArgumentError(f"{name} must be finite, got {value!r}") from None


class Act(NamedTuple):
    """An activation as the C calls take it: its pcr_activation and parameters (0 where
    it takes none)."""

    code: Activation
    alpha: float = 0.0
    beta: float = 0.0


NO_ACT = Act(Activation.ACT_NONE)
#: the activations that take parameters: name -> (the parameters' names, their defaults, or
#: None where they must be given); the C side checks the values (finite; min <= max)
ACT_PARAMS = {
    "leaky_relu": (("negative_slope",), (0.01,)),  # torch's default slope
    "clamp": (("min", "max"), None),
}


def activation_of(activation) -> Act:
    """The :class:`Act` of an activation argument: None, a name, or a tuple of a name and
    its parameters, ``("leaky_relu", negative_slope)`` or ``("clamp", min, max)``.

    >>> activation_of(("leaky_relu", 0.2))
    Act(code=<Activation.ACT_LEAKY_RELU: 8>, alpha=0.2, beta=0.0)
    >>> activation_of("leaky_relu").alpha, activation_of(None).code.token
    (0.01, 'none')
    """
    if activation is None:
        return NO_ACT
    name, given = activation, ()
    if isinstance(activation, tuple) and activation and isinstance(activation[0], str):
        name, given = activation[0], activation[1:]
    code = ACTIVATIONS.get(name) if isinstance(name, str) else None
    if code is None:
        raise InvalidArgumentError(
            f"activation must be None or one of {', '.join(map(repr, ACTIVATIONS))}, or a "
            f"name with its parameters, ('leaky_relu', negative_slope) or ('clamp', min, "
            f"max); got {activation!r}"
        )
    names, defaults = ACT_PARAMS.get(name, ((), ()))
    values = given or defaults
    if values is None or len(values) != len(names):
        takes = f"takes ({name!r}, {', '.join(names)})" if names else "takes no parameters"
        raise InvalidArgumentError(f"activation {name!r} {takes}; got {activation!r}")
    return Act(code, *(scalar(v, f"{name}'s {n}") for v, n in zip(values, names)))


def activation_words(act: Act) -> str:
    """How explain() names an activation.

    >>> activation_words(activation_of(("clamp", -1, 1))), activation_words(activation_of("gelu"))
    ('clamp(-1, 1)', 'gelu')
    """
    names = ACT_PARAMS.get(act.code.token, ((),))[0]
    params = (act.alpha, act.beta)[: len(names)]
    return act.code.token + (f"({', '.join(f'{v:g}' for v in params)})" if names else "")


def math_code(math) -> Math:
    """The pcr_math of a math name (None: "ieee")."""
    if math is None:
        return Math.MATH_IEEE
    code = MATHS.get(math) if isinstance(math, str) else None
    if code is None:
        raise InvalidArgumentError(
            f"math must be None or one of {', '.join(map(repr, MATHS))}; got {math!r}"
        )
    return code


def host_scales(alpha: float, scale_a, scale_b):
    """Folds Python-number scales into alpha: (alpha, scale_a, scale_b) with only tensor
    scales left (read on the GPU by the kernel's epilogue)."""
    if isinstance(scale_a, numbers.Real):
        alpha, scale_a = alpha * finite(scale_a, "scale_a"), None
    if isinstance(scale_b, numbers.Real):
        alpha, scale_b = alpha * finite(scale_b, "scale_b"), None
    return alpha, scale_a, scale_b


def finite(value, name: str) -> float:
    """A host scale as a finite float, named in the error otherwise (folded into alpha,
    a NaN or infinity would otherwise be blamed on alpha)."""
    x = scalar(value, name)
    if not math.isfinite(x):
        raise InvalidArgumentError(f"{name} must be a finite number, got {value!r}")
    return x


def kernel_index(kernel) -> int:
    """PCR_KERNEL_SELECT for None (select), else the index of the named kernel in this build."""
    if kernel is None:
        return PCR_KERNEL_SELECT
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


def stream_wait(consumer: int, producer: int) -> None:
    """Later work on ``consumer`` waits for what ``producer`` has enqueued so far."""
    lib = _lib.load()
    lib.check(lib.pcr_stream_wait(consumer, producer))


def operands(
    tensors, stream, bias=None, scale_a=None, scale_b=None, aux=None, amax=None, scale_d=None
):
    """(objects for the C call, stream handle, flags, keep-alive) for (a, b, c, d) and
    the extras' tensors: ten objects, a, b, c, d, bias, scale_a, scale_b, aux, amax,
    scale_d."""
    return _dlpack.prepare(
        (*tensors, bias, scale_a, scale_b, aux, amax, scale_d),
        NAMES,
        stream,
        pointer_device,
        stream_wait,
    )


def extras(objs, act: Act, math: int, conv: tuple | None = None):
    """The extras argument of the pcr_py_* calls: None, or (bias, scale_a, scale_b,
    activation, math, activation_alpha, activation_beta, conv, aux, amax, scale_d), conv None or
    pcr_conv's fields as a tuple (op, pad_h, pad_w, stride_h, stride_w, dilation_h,
    dilation_w, groups)."""
    if (
        objs[4] is None
        and objs[5] is None
        and objs[6] is None
        and objs[7] is None
        and objs[8] is None
        and objs[9] is None
        and not (act.code or math)
        and conv is None
    ):
        return None  # indexed, not sliced: the hot path
    return (objs[4], objs[5], objs[6], act.code, math, act.alpha, act.beta, conv, *objs[7:10])


@dataclass
class Call:
    """One GEMM call's arguments, checked and converted once, in the form the C entry points
    take: ``gemm`` (off its hottest path), ``explain`` and ``Gemm`` build it alike."""

    objs: tuple  # a, b, c, d, bias, scale_a, scale_b, aux, amax, scale_d as C takes them
    alpha: float  # Python-number scales folded in
    beta: float
    activation: Act
    math: Math
    extra: tuple | None  # the pcr_extras argument (see extras)
    kernel: int  # PCR_KERNEL_SELECT, or the forced kernel's index
    handle: int  # the stream handle (0 with flags: the producer's stream)
    flags: int
    keep: object  # the call's temporary exports, alive until the call is dropped

    def gemm_args(self) -> tuple:
        """The arguments of the library's gemm builtin for this call."""
        a, b, c, d = self.objs[:4]  # the extras' tensors travel in `extra`
        return (a, b, c, d, self.alpha, self.beta, self.extra, self.kernel, self.flags, self.handle)

    def describe(self, lib) -> Judged:
        """The call's problem and every kernel's verdict on it (one C call)."""
        return describe(lib, self.objs, self.alpha, self.beta, self.extra)


def prepare(
    a,
    b,
    c,
    d,
    alpha=1.0,
    beta=0.0,
    *,
    bias=None,
    activation=None,
    scale_a=None,
    scale_b=None,
    math=None,
    stream=None,
    kernel=None,
    conv=None,
    aux=None,
    amax=None,
    scale_d=None,
) -> Call:
    """The :class:`Call` of a GEMM entry point's arguments (those of pycutlass_rt.gemm);
    ``conv``: a convolution's pcr_conv tuple (see :func:`extras`), its tensors in a, b, c, d.

    Raises:
        DTypeError, InvalidArgumentError: a bad scalar, activation, math, kernel name or
            operand, named.
    """
    alpha, beta = scalar(alpha, "alpha"), scalar(beta, "beta")
    act, mth = activation_of(activation), math_code(math)
    alpha, scale_a, scale_b = host_scales(alpha, scale_a, scale_b)
    kidx = kernel_index(kernel)
    objs, handle, flags, keep = operands(
        (a, b, c, d), stream, bias, scale_a, scale_b, aux, amax, scale_d
    )
    extra = extras(objs, act, mth, conv)
    return Call(objs, alpha, beta, act, mth, extra, kidx, handle, flags, keep)


@dataclass
class Judged:
    """A described problem and each kernel's verdict on it, as the C side judged them:
    ``verdicts[i]`` is (status, reason) of the build's kernel ``i`` (status 0: it runs
    the problem), ``array`` the pcr_verdict records they came from (what the selector
    ranks by: _select.ranking)."""

    problem: _lib.Problem
    verdicts: list
    array: object = None


def _verdicts(array) -> list:
    return [(v.status, v.reason.decode(errors="replace")) for v in array]


def describe(lib, objs, alpha: float, beta: float, extra=None) -> Judged:
    """The problem of a call's C objects with every kernel's full verdict (CUTLASS's
    ``can_implement`` on these operands included), in one C call."""
    a, b, c, d = objs[:4]
    problem, count = _lib.Problem(), len(_kernels.kernels())
    array = (Verdict * count)()
    lib.check(
        lib.pcr_py_describe(a, b, c, d, alpha, beta, extra, ctypes.byref(problem), array, count)
    )
    return Judged(problem, _verdicts(array), array)


def judge(lib, problem) -> Judged:
    """Every kernel's verdict on a problem alone, without operands: what a grouped problem
    gets (its sizes live on the GPU)."""
    count = len(_kernels.kernels())
    array = (Verdict * count)()
    lib.check(lib.pcr_kernel_verdicts(ctypes.byref(problem), array, count))
    return Judged(problem, _verdicts(array), array)
