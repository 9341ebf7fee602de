"""quantize(): fp8 e4m3 or int8 with the scales a scaled GEMM reads, in one pass.

The scale grids are laid out as the block-scaled kernels (and ``torch._scaled_mm``'s
blockwise recipes) read them best: per-group scales M-major, ``(M, ceil(K/128))`` with
strides ``(1, M)``, so that a tile's rows at one K-block are contiguous.
"""

from __future__ import annotations

import math
from typing import Any

from . import _call, _lib
from ._abi import Quant
from ._dtypes import dtype_name
from ._outputs import new_like
from .errors import DTypeError, InvalidArgumentError

#: granularity name -> pcr_quant (its tokens: "tensor", "token", "group", "block")
GRANULARITIES = {g.token: g for g in Quant}
#: the dtypes q is made in
DTYPES = ("float8_e4m3fn", "int8")


def quantize(
    x: Any,
    dtype: Any = "float8_e4m3fn",
    granularity: str = "group",
    *,
    scale: Any = None,
    out: Any = None,
    scale_out: Any = None,
    stream: Any = None,
) -> tuple[Any, Any]:
    """Quantizes ``x`` to fp8 e4m3 or int8: ``x ~= q * scale``, rounding to nearest and
    saturating (e4m3 to +-448, int8 to [-128, 127]).

    ``x`` is ``(..., K)`` (float16, bfloat16 or float32 on a GPU, K contiguous); its
    leading dimensions are the rows (tokens). Scales are float32, one per:

    - "tensor": the whole tensor, shape ``()``;
    - "token": row, shape ``(..., 1)`` (torch._scaled_mm's rowwise scale_a);
    - "group": row and group of 128 along K, ``(..., ceil(K/128))``, M-major (strides
      ``(1, M)`` for 2-D x): block-scaled GEMMs' scale_a, torch's BlockWise1x128;
    - "block": 128 x 128 block of a 2-D x, ``(ceil(M/128), ceil(K/128))``: a weight's
      (DeepSeek-V3's ``weight_scale_inv``, torch's BlockWise128x128).

    Dynamic (``scale`` None): each scale is ``max(max |x|, 1e-10) / qmax`` over its
    elements (qmax 448 for e4m3, 127 for int8), computed in the same pass as q; x is read
    from memory once (per tensor: twice, in three launches). Static: ``scale`` (a number,
    or a float32 tensor of the grid's shape, any strides) is read. Asynchronous on the
    producer's stream (or ``stream``), no host synchronization: safe under CUDA graphs.

    Args:
        x: the tensor to quantize (torch, cupy; GPU).
        dtype: "float8_e4m3fn" (or "e4m3", or ``torch.float8_e4m3fn``) or "int8" (or
            "s8").
        granularity: "tensor", "token", "group" or "block".
        scale: None (dynamic), or the scales to divide by (static).
        out: q's destination (x's shape, ``dtype``, K contiguous); default: a new tensor
            of x's framework.
        scale_out: a dynamic call's scale destination (the grid's shape, any strides);
            default: a new one, laid out as above.
        stream: a CUDA stream; default: the producer framework's current stream.

    Returns:
        ``(q, scale)``.

    Raises:
        InvalidArgumentError, DTypeError: a bad granularity, dtype, shape or stride.
        UnsupportedError: an output this framework cannot make (cupy has no fp8: pass
            ``out=``), or host arrays.

    Example (on a GPU with block-scaled fp8 kernels):
        >>> import torch, pycutlass_rt as pcr
        >>> x = torch.randn(4096, 7168, device="cuda", dtype=torch.bfloat16)
        >>> q, s = pcr.quantize(x)  # e4m3, per token and 128 of K
        >>> q.dtype, tuple(s.shape)
        (torch.float8_e4m3fn, (4096, 56))
        >>> w = torch.randn(2048, 7168, device="cuda", dtype=torch.bfloat16)  # (N, K)
        >>> w8, ws = pcr.quantize(w, granularity="block")  # a weight, 128x128 blocks
        >>> tuple(ws.shape)
        (16, 56)
        >>> y = torch.empty(4096, w.shape[0], device="cuda", dtype=torch.bfloat16)
        >>> y = pcr.gemm(q, w8.t(), None, y, scale_a=s, scale_b=ws.t())  # ~ x @ w.T
    """
    gran = GRANULARITIES.get(granularity) if isinstance(granularity, str) else None
    if gran is None:
        raise InvalidArgumentError(
            f"granularity must be one of {', '.join(map(repr, GRANULARITIES))}; got {granularity!r}"
        )
    try:
        name = dtype_name(dtype)
    except DTypeError:
        name = None
    if name not in DTYPES:
        raise InvalidArgumentError(
            f"dtype must be 'float8_e4m3fn' (or 'e4m3') or 'int8' (or 's8'); got {dtype!r}"
        )
    shape = tuple(getattr(x, "shape", ()))
    if not shape:
        raise InvalidArgumentError("x must be a tensor of at least one dimension (..., K)")
    rows, k = math.prod(shape[:-1]), shape[-1]
    if gran == Quant.QUANT_BLOCK and len(shape) != 2:
        raise InvalidArgumentError(f"granularity 'block' takes a 2-D x (a weight); got {shape}")
    dynamic = scale is None
    if (
        not dynamic
        and not hasattr(scale, "__dlpack__")
        and not hasattr(scale, "__cuda_array_interface__")
    ):
        scale = new_like(x, grid_shape(shape, gran), "float32", fill=_call.scalar(scale, "scale"))
    q = out if out is not None else new_like(x, shape, name, what="x")
    s = scale if not dynamic else scale_out
    if s is None:
        s = new_like(x, grid_shape(shape, gran), "float32", grid_strides(shape, gran))
    # the library takes rows x K: the leading dimensions folded (views; x may be copied)
    kb = -(-k // 128)
    grid2d = {Quant.QUANT_TOKEN: (rows, 1), Quant.QUANT_GROUP: (rows, kb)}.get(gran)
    x2 = _fold(x, (rows, k), copy=True) if len(shape) != 2 else x
    q2 = _fold(q, (rows, k), copy=False) if len(shape) != 2 else q
    s2 = _fold(s, grid2d, copy=False) if grid2d and len(shape) != 2 else s
    lib = _lib.load()
    objs, handle, flags, keep = _call.operands((x2, None, s2, q2), stream)
    lib.check(lib.pcr_py_quantize(objs[0], objs[3], objs[2], gran, int(dynamic), flags, handle))
    del keep
    return q, s


def _fold(t, shape: tuple, copy: bool):
    """``t`` as a tensor of ``shape`` (its leading dimensions folded into rows): a view, or
    for an input (``copy``) whatever reshape gives."""
    try:
        return t.reshape(shape) if copy else t.view(shape)
    except (RuntimeError, ValueError, AttributeError, TypeError):
        try:  # cupy's view takes a dtype: its reshape gives a view where one exists
            v = t.reshape(shape)
        except Exception:  # noqa: BLE001 - any framework's refusal means the same here
            v = None
        if v is not None and (copy or getattr(v, "base", None) is not None):
            return v
    raise InvalidArgumentError(
        f"quantize: an output of shape {tuple(t.shape)} does not fold into {shape} without a "
        "copy; pass a contiguous one"
    )


def grid_shape(shape: tuple, gran: Quant) -> tuple:
    """The scale grid's shape for x of ``shape`` (..., K).

    >>> grid_shape((2, 300, 1000), Quant.QUANT_GROUP), grid_shape((300, 1000), Quant.QUANT_BLOCK)
    ((2, 300, 8), (3, 8))
    """
    kb = -(-shape[-1] // 128)
    if gran == Quant.QUANT_TENSOR:
        return ()
    if gran == Quant.QUANT_TOKEN:
        return (*shape[:-1], 1)
    if gran == Quant.QUANT_GROUP:
        return (*shape[:-1], kb)
    return (-(-shape[0] // 128), kb)


def grid_strides(shape: tuple, gran: Quant) -> tuple | None:
    """Element strides of a new grid: groups M-major (the rows contiguous at each K-block),
    others compact (None).

    >>> grid_strides((2, 300, 1000), Quant.QUANT_GROUP)
    (300, 1, 600)
    """
    if gran != Quant.QUANT_GROUP:
        return None
    lead, stride = shape[:-1], []
    step = 1
    for extent in reversed(lead):
        stride.insert(0, step)
        step *= extent
    return (*stride, step)
