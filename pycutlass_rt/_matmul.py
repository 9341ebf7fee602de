"""matmul(): ``a @ b`` returned as a new tensor of a's framework, gemm() underneath."""

from __future__ import annotations

from typing import Any

from . import _gemm
from ._dtypes import dtype_name
from ._outputs import new_like
from .errors import InvalidArgumentError

#: input dtype -> output dtype when out_dtype is None: the input's own for floats; int8
#: exactly into int32 (bfloat16 with scales); fp8 into bfloat16 (torch._scaled_mm's usual)
_DEFAULT_OUT = {"int8": "int32", "float8_e4m3fn": "bfloat16", "float8_e5m2": "bfloat16"}


def _dtype_name(t) -> str:
    return str(getattr(t, "dtype", "")).split(".")[-1]


def matmul(
    a: Any,
    b: Any,
    *,
    out: Any = None,
    out_dtype: Any = None,
    bias: Any = None,
    activation: str | tuple | None = None,
    scale_a: Any = None,
    scale_b: Any = None,
    math: str | None = None,
    stream: Any = None,
    kernel: str | None = None,
) -> Any:
    """Returns ``act(a @ b + bias)`` (dequantized by the scales, as :func:`gemm`).

    The result is ``out`` when given, else a new tensor of a's framework on its device
    (torch, cupy; numpy in host memory): ``(M, N)``, or ``(L, M, N)`` for a batch.

    Args:
        a: (M, K) or (L, M, K).
        b: (K, N) or (L, K, N), of a's dtype.
        out: the output to write (then ``out_dtype`` must agree or be None).
        out_dtype: the result's dtype as torch names it ("float32", ...), as kernel names
            do ("f32", "bf16"), or a framework's dtype (``torch.float32``); None: a's for
            floats, int32 for int8 (bfloat16 with scales), bfloat16 for float8.
        bias, activation, scale_a, scale_b, math, stream, kernel: as for :func:`gemm`.

    Returns:
        The result tensor.

    Raises:
        InvalidArgumentError: operands of a rank other than 2 or 3, or an ``out`` whose
            dtype is not ``out_dtype``; and whatever :func:`gemm` raises.
        DTypeError: an ``out_dtype`` the library has no name for.

    Example (on a GPU):
        >>> import torch, pycutlass_rt as pcr
        >>> a = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
        >>> w = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
        >>> pcr.matmul(a, w.t(), activation="gelu").shape
        torch.Size([64, 256])
    """
    a_shape, b_shape = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
    if len(a_shape) not in (2, 3) or len(b_shape) not in (2, 3):
        raise InvalidArgumentError(
            f"matmul takes (M, K) or (L, M, K) and (K, N) or (L, K, N); got {a_shape} and {b_shape}"
        )
    want = None if out_dtype is None else dtype_name(out_dtype, "out_dtype")
    if out is not None:
        if want is not None and _dtype_name(out) != want:
            raise InvalidArgumentError(f"out is {_dtype_name(out)} but out_dtype is {want}")
    else:
        a_dtype = _dtype_name(a)
        if want is None:
            scaled = scale_a is not None or scale_b is not None
            want = (
                "bfloat16" if a_dtype == "int8" and scaled else _DEFAULT_OUT.get(a_dtype, a_dtype)
            )
        batch = max(len(a_shape), len(b_shape)) == 3
        lead = ((a_shape[0] if len(a_shape) == 3 else b_shape[0]),) if batch else ()
        out = new_like(a, (*lead, a_shape[-2], b_shape[-1]), want, what="a")
    return _gemm.gemm(
        a,
        b,
        None,
        out,
        bias=bias,
        activation=activation,
        scale_a=scale_a,
        scale_b=scale_b,
        math=math,
        stream=stream,
        kernel=kernel,
    )
