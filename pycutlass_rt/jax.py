"""JAX: :func:`gemm` and :func:`linear` as XLA operations, usable inside ``jax.jit``.

Each call is a ``jax.ffi.ffi_call`` to the library's XLA FFI handler (``pcr_xla_gemm``,
registered for CUDA on first use as the target ``pycutlass_rt_gemm``), which runs the
GEMM through the same path as :func:`pycutlass_rt.gemm`, on the stream XLA gives it. The
output is a new array whose shape and dtype are known while tracing, so the calls work
under ``jit``, ``jax.eval_shape`` and ``vmap``: vmap batches them with
``vmap_method="expand_dims"``, and the handler runs the batch as one batched GEMM (one
launch; dimensions over which operands are batched unevenly, such as a batched bias, are
looped over, a launch per index). There is no differentiation rule (``jax.grad`` raises).

Kernels are chosen by the library when the handler runs (tuned cache, shipped table,
model, as for :func:`pycutlass_rt.gemm`), so a trace holds no kernel names and serves any
GPU and build. Tracing checks that some kernel runs the problem (raising the error the
call would) and hands the library the device's tuned kernels on the tracing thread.

Every build holds the handler (:func:`available`), compiled against the XLA FFI headers
the project vendors, so no jax is needed to build; only a build configured with
``PYCUTLASS_RT_XLA_FFI_INCLUDE=OFF`` leaves it out. This module imports jax on first use
only; ``import pycutlass_rt`` never does.
"""

from __future__ import annotations

import ctypes
import functools
import math
import threading
from typing import Any

from . import _call, _kernels, _lib, _select
from ._abi import (
    DLDataType,
    DLDataTypeCode,
    DLDevice,
    DLDeviceType,
    DLTensor,
    Extras,
    Problem,
    Verdict,
)
from ._dtypes import dtype_name
from .errors import DTypeError, InvalidArgumentError, UnsupportedError

__all__ = ["gemm", "linear", "available", "TARGET", "SYMBOL"]

#: the XLA custom-call target the handler is registered under (platform CUDA)
TARGET = "pycutlass_rt_gemm"
#: the library's handler symbol (every build but one configured without it)
SYMBOL = "pcr_xla_gemm"

#: dtype name -> (DLPack type code, bits): what the handler maps XLA's element types to
_DLPACK = {
    "float16": (DLDataTypeCode.Float, 16),
    "bfloat16": (DLDataTypeCode.Bfloat, 16),
    "float32": (DLDataTypeCode.Float, 32),
    "float64": (DLDataTypeCode.Float, 64),
    "int8": (DLDataTypeCode.Int, 8),
    "int32": (DLDataTypeCode.Int, 32),
    "float8_e4m3fn": (DLDataTypeCode.Float8_e4m3fn, 8),
    "float8_e5m2": (DLDataTypeCode.Float8_e5m2, 8),
}
#: input dtype -> output dtype when out_dtype is None (int8 computes exactly into int32;
#: fp8 has no fp8 output)
_DEFAULT_OUT = {"int8": "int32", "float8_e4m3fn": "bfloat16", "float8_e5m2": "bfloat16"}

_lock = threading.Lock()
_registered = False


@functools.cache
def _handler(path: str, symbol: str):
    """The handler ``symbol`` of the library at ``path`` (a ctypes function), or None."""
    try:
        return getattr(ctypes.CDLL(path), symbol)
    except AttributeError:
        return None


def available() -> bool:
    """Whether the loaded library holds the JAX handler (every build does, unless it was
    configured with ``PYCUTLASS_RT_XLA_FFI_INCLUDE=OFF``). Needs no GPU and does not import
    jax.

    Example:
        >>> import pycutlass_rt.jax as pcr_jax
        >>> pcr_jax.available()
        True
    """
    return _handler(_lib.load().path, SYMBOL) is not None


def _register() -> None:
    """Registers the handler with XLA once per process.

    Raises:
        UnsupportedError: the library was built without the handler.
    """
    global _registered
    if _registered:
        return
    with _lock:
        if _registered:
            return
        lib = _lib.load()
        fn = _handler(lib.path, SYMBOL)
        if fn is None:
            raise UnsupportedError(
                f"{lib.path} was built without the JAX handler ({SYMBOL}): it was configured "
                "with PYCUTLASS_RT_XLA_FFI_INCLUDE=OFF. Rebuild with that variable unset (the "
                "vendored XLA FFI headers; no jax needed to build): the build says 'JAX "
                "handler built' when it configures"
            )
        import jax

        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(fn), platform="CUDA")
        _registered = True


def _dtype_name(x, name: str) -> str:
    dtype = str(x.dtype)
    if dtype not in _DLPACK:
        raise DTypeError(
            f"{name} is {dtype}; pycutlass_rt.jax takes {', '.join(_DLPACK)} "
            "(which have kernels: pycutlass_rt.kernels())"
        )
    return dtype


# ---- kernel choice while tracing ------------------------------------------------------


def _gpu_ordinal():
    """The CUDA ordinal of JAX's first CUDA device, or None when JAX has none."""
    import jax

    try:
        device = jax.devices("cuda")[0]
    except RuntimeError:
        return None
    ordinal = getattr(device, "local_hardware_id", None)
    return device.id if ordinal is None else ordinal


class _Views:
    """ctypes DLTensors of the views the handler builds from XLA's buffers, at made-up
    distinct 256-byte aligned addresses (XLA's buffers are at least 16-byte aligned, and
    describing a problem reads no memory)."""

    def __init__(self, device: int):
        self.device, self.keep, self.count = device, [], 0

    def _tensor(self, dtype: str, shape, strides) -> DLTensor:
        self.count += 1
        code, bits = _DLPACK[dtype]
        dims = (ctypes.c_int64 * len(shape))(*shape)
        steps = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        self.keep += [dims, steps]
        return DLTensor(
            data=self.count << 40,
            device=DLDevice(DLDeviceType.CUDA, self.device),
            ndim=len(shape),
            dtype=DLDataType(code, bits, 1),
            shape=ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64)),
            strides=None if steps is None else ctypes.cast(steps, ctypes.POINTER(ctypes.c_int64)),
            byte_offset=0,
        )

    def matrices(self, dtype: str, dims, count: int, transposed: bool = False) -> DLTensor:
        """``count`` matrices (1: shared) of an operand whose last two dimensions are
        ``dims``, read transposed when asked: the handler's View."""
        p, q = dims
        if transposed:
            return self._tensor(dtype, (count, q, p), (p * q, 1, q))
        return self._tensor(dtype, (count, p, q), (p * q, q, 1))

    def vector(self, dtype: str, dims) -> DLTensor:
        return self._tensor(dtype, tuple(dims), None)


def _check(lib, views, batches, ops, alpha, beta, activation) -> None:
    """Ranks the problem of ``ops`` (name -> (dtype, matrix dims, transposed)) with
    ``batches`` (name -> matrices in the launch) as the handler will see it, so that a
    problem no kernel runs raises while tracing; the library is asked for the device's
    tuned kernels here, on the tracing thread, and not on XLA's."""
    t = {
        k: views.matrices(dtype, dims, batches[k], transposed)
        for k, (dtype, dims, transposed) in ops.items()
        if k != "bias"
    }
    bias = None
    if "bias" in ops:
        bias = views.vector(ops["bias"][0], ops["bias"][1])
    extras = Extras(
        bias=None if bias is None else ctypes.pointer(bias),
        activation=activation.code,
        math=0,
        activation_alpha=activation.alpha,
        activation_beta=activation.beta,
    )
    problem, every = Problem(), _kernels.kernels()
    verdicts = (Verdict * len(every))()
    c = ctypes.byref(t["c"]) if "c" in t else None
    status = lib.pcr_describe(
        ctypes.byref(t["a"]),
        ctypes.byref(t["b"]),
        c,
        ctypes.byref(t["d"]),
        alpha,
        beta,
        ctypes.byref(extras),
        ctypes.byref(problem),
        verdicts,
        len(every),
    )
    lib.check(status)
    _select.ranking(lib, problem, verdicts)


def _trace_check(ops, batch, alpha, beta, activation) -> None:
    """:func:`_check` of the problem as traced (nothing where JAX sees no GPU: the handler
    then says so)."""
    device = _gpu_ordinal()
    if device is None:
        return
    counts = {k: (batch if dims_batch else 1) for k, (dims_batch, *_) in ops.items()}
    plain = {k: v[1:] for k, v in ops.items()}
    _check(_lib.load(), _Views(device), counts, plain, alpha, beta, activation)


# ---- the operations ---------------------------------------------------------------------


def gemm(
    a: Any,
    b: Any,
    c: Any = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    *,
    bias: Any = None,
    activation: str | tuple | None = None,
    transpose_a: bool = False,
    transpose_b: bool = False,
    out_dtype: Any = None,
) -> Any:
    """Returns ``act(alpha * a @ b + beta * c + bias)`` as a new JAX array.

    Runs as one XLA operation on the library's kernels (a ``jax.ffi.ffi_call``), eagerly
    or inside ``jax.jit``, on the stream XLA runs it on; under ``jax.vmap`` the batch
    runs as one batched GEMM.

    Batched: a, b and c may be 3-D batches ``(L, rows, cols)``; one of batch 1 (or a 2-D
    one) is shared by all L products, and the result is then ``(L, M, N)``, as with
    :func:`pycutlass_rt.gemm`.

    Args:
        a: (M, K) or (L, M, K) array; (K, M) or (L, K, M) with ``transpose_a``. float16,
            bfloat16, float32, float64, int8, float8_e4m3fn or float8_e5m2 (which have
            kernels: :func:`pycutlass_rt.kernels`).
        b: (K, N) or (L, K, N) array of a's dtype; (N, K) or (L, N, K) with
            ``transpose_b`` (a weight stored as ``nn.Linear`` stores it: the K-major
            "tn" layout that int8, fp8 and TF32 kernels take).
        c: None, or an array broadcasting to (M, N) (or (L, M, N)); needed when ``beta``
            is not 0, ignored when it is. Any dtype the library takes.
        alpha: real scalar.
        beta: real scalar.
        bias: None, or a vector in the output's dtype: (N,) or (1, N) per column,
            (M, 1) per row; one vector for the whole batch.
        activation: as :func:`pycutlass_rt.gemm`'s (a name, or ``("leaky_relu", slope)``
            / ``("clamp", min, max)``: hashable, so it can be a static argument), applied
            last and fused into the kernel's epilogue.
        transpose_a: read a's last two dimensions as (K, M).
        transpose_b: read b's last two dimensions as (N, K).
        out_dtype: the result's dtype (a jnp dtype, or its name spelled as torch or as
            kernel names do: "float32", "f32"): a's dtype by default (int32 for int8
            inputs, bfloat16 for fp8); float32 for float16/bfloat16 inputs also exists.

    Returns:
        A new (M, N) or (L, M, N) array.

    Raises:
        UnsupportedError: the library has no JAX handler (built without jaxlib's FFI
            headers; the message says how to rebuild), or no kernel of the build runs
            the problem (raised while tracing, listing the candidates).
        InvalidArgumentError: shapes that do not match, or a bad activation.
        DTypeError: a dtype the library does not take, or a and b of different dtypes.

    Example (on a GPU):
        >>> import jax, jax.numpy as jnp, pycutlass_rt.jax as pcr_jax
        >>> a = jnp.ones((128, 64), jnp.bfloat16); b = jnp.ones((64, 32), jnp.bfloat16)
        >>> pcr_jax.gemm(a, b)[0, :4]
        Array([64, 64, 64, 64], dtype=bfloat16)
        >>> f = jax.jit(lambda a, b, c: pcr_jax.gemm(a, b, c, alpha=2.0, beta=1.0))
        >>> f(a, b, jnp.ones((128, 32), jnp.bfloat16))[0, 0]
        Array(129, dtype=bfloat16)
        >>> x = jnp.ones((8, 128, 64), jnp.bfloat16)
        >>> jax.vmap(pcr_jax.gemm, in_axes=(0, None))(x, b).shape
        (8, 128, 32)
    """
    _register()
    import jax
    import jax.numpy as jnp
    import numpy as np

    alpha, beta = _call.scalar(alpha, "alpha"), _call.scalar(beta, "beta")
    act = _call.activation_of(activation)
    a, b = jnp.asarray(a), jnp.asarray(b)
    dt = _dtype_name(a, "a")
    if _dtype_name(b, "b") != dt:
        raise DTypeError(f"a is {dt} but b is {b.dtype}; a and b must share a dtype")
    if out_dtype is None:
        out = _DEFAULT_OUT.get(dt, dt)
    else:  # a name spelled either way, or a dtype jnp knows
        out = dtype_name(
            out_dtype if isinstance(out_dtype, str) else jnp.dtype(out_dtype), "out_dtype"
        )
    if out not in _DLPACK:
        raise DTypeError(f"out_dtype {out} is not one pycutlass_rt computes")
    for x, name in ((a, "a"), (b, "b")):
        if x.ndim not in (2, 3):
            raise InvalidArgumentError(
                f"{name} must be a 2-D matrix or a 3-D batch of matrices, got shape {x.shape}"
            )
    m, k = a.shape[-1:-3:-1] if transpose_a else a.shape[-2:]
    k2, n = b.shape[-1:-3:-1] if transpose_b else b.shape[-2:]
    if k != k2:
        raise InvalidArgumentError(
            f"shape mismatch: a is {a.shape}, b is {b.shape}"
            f"{' (read transposed)' if transpose_a or transpose_b else ''}; "
            "need a (M, K) and b (K, N)"
        )
    if beta != 0.0 and c is None:
        raise InvalidArgumentError(f"c is None but beta = {beta:g}; pass c, or beta=0")
    if beta == 0.0:
        c = None  # never read
    if c is not None:
        c = jnp.asarray(c)
        _dtype_name(c, "c")
        if c.ndim > 3:
            raise InvalidArgumentError(f"c must broadcast to (M, N) or (L, M, N), got {c.shape}")
        c = jnp.broadcast_to(c, (c.shape[0], m, n) if c.ndim == 3 else (m, n))
    operands = {"a": a, "b": b, **({"c": c} if c is not None else {})}
    sizes = {x.shape[0] for x in operands.values() if x.ndim == 3} - {1}
    if len(sizes) > 1:
        raise InvalidArgumentError(
            "batch mismatch: "
            + ", ".join(f"{k_} is {x.shape}" for k_, x in operands.items())
            + "; each 3-D operand holds L matrices or one (shared)"
        )
    batched = any(x.ndim == 3 for x in operands.values())
    batch = sizes.pop() if sizes else 1
    shape = (batch, m, n) if batched else (m, n)
    if batched:  # every operand with d's batch dimension, of extent L or 1
        operands = {k_: x if x.ndim == 3 else x[None] for k_, x in operands.items()}
    if bias is not None:
        bias = jnp.asarray(bias)
        _dtype_name(bias, "bias")
        if bias.ndim not in (1, 2):
            raise InvalidArgumentError(
                f"bias must be a vector of shape (N,), (1, N) or (M, 1); got {bias.shape}"
            )
        operands["bias"] = bias[None] if batched else bias

    flags = {"a": transpose_a, "b": transpose_b, "c": False}
    described = {  # name -> (batched, dtype, last two dimensions, transposed)
        k_: (x.ndim == 3 and x.shape[0] != 1, str(x.dtype), x.shape[-2:], flags[k_])
        for k_, x in operands.items()
        if k_ != "bias"
    }
    described["d"] = (True, out, (m, n), False)
    if bias is not None:
        described["bias"] = (False, str(bias.dtype), bias.shape, False)
    _trace_check(described, batch, alpha, beta, act)

    call = jax.ffi.ffi_call(TARGET, jax.ShapeDtypeStruct(shape, out), vmap_method="expand_dims")
    return call(
        *operands.values(),
        alpha=np.float64(alpha),
        beta=np.float64(beta),
        transpose_a=np.int32(bool(transpose_a)),
        transpose_b=np.int32(bool(transpose_b)),
        has_c=np.int32(c is not None),
        has_bias=np.int32(bias is not None),
        activation=np.int32(act.code),
        activation_alpha=np.float64(act.alpha),
        activation_beta=np.float64(act.beta),
        rank=np.int32(len(shape)),
    )


def linear(x: Any, w: Any, bias: Any = None, activation: str | tuple | None = None) -> Any:
    """``act(x @ w.T + bias)``: a linear layer (``torch.nn.functional.linear``'s shapes).

    One GEMM of all of x's rows (its leading dimensions flattened) against the weight as
    stored (the "tn" layout, no transpose materialized), with the bias and activation
    fused into the kernel's epilogue.

    Args:
        x: (..., in_features) array.
        w: (out_features, in_features) weight in x's dtype.
        bias: None, or an (out_features,) vector in x's dtype.
        activation: as :func:`gemm`'s.

    Returns:
        A new (..., out_features) array in x's dtype.

    Raises:
        UnsupportedError, InvalidArgumentError, DTypeError: as :func:`gemm`.

    Example (on a GPU):
        >>> import jax, jax.numpy as jnp, pycutlass_rt.jax as pcr_jax
        >>> x = jnp.ones((4, 16, 256), jnp.bfloat16); w = jnp.ones((512, 256), jnp.bfloat16)
        >>> bias = jnp.zeros((512,), jnp.bfloat16)
        >>> y = jax.jit(pcr_jax.linear, static_argnames="activation")(
        ...     x, w, bias, activation="gelu")
        >>> y.shape
        (4, 16, 512)
    """
    _register()
    import jax.numpy as jnp

    x, w = jnp.asarray(x), jnp.asarray(w)
    if w.ndim != 2:
        raise InvalidArgumentError(f"w must be (out_features, in_features), got shape {w.shape}")
    if x.ndim < 1 or x.shape[-1] != w.shape[1]:
        raise InvalidArgumentError(
            f"x is {x.shape} but w is {w.shape}; need x (..., in_features) and w "
            "(out_features, in_features)"
        )
    lead = x.shape[:-1]
    rows = x.reshape(math.prod(lead), x.shape[-1])
    y = gemm(rows, w, bias=bias, activation=activation, transpose_b=True, out_dtype=x.dtype)
    return y.reshape(*lead, w.shape[0])
