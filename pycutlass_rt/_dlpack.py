"""Tensor ingestion: turn framework objects into what the C entry points read.

The C side parses DLPack; Python only decides, once per type, how an object is handed
over (fastest first):

1. the type offers ``__dlpack_c_exchange_api__`` (torch): the object itself; C calls the
   producer's ``dltensor_from_py_object_no_sync`` and ``current_work_stream``;
2. a DLPack capsule: as is;
3. ``__dlpack__``: a versioned capsule (``max_version=(1, 0)``), else a legacy one;
4. ``__cuda_array_interface__`` (numba): a capsule built around a DLTensor describing it.

Streams: an explicit ``stream=`` wins; otherwise the producer's current stream (the
exchange API's, cupy's current stream, the CAI ``stream``), else the legacy default.

Producers that fail: their own exception propagates unchanged, whether ``__dlpack__``,
``__dlpack_device__`` or (read in C) the exchange API raised it; a ``BufferError`` from
``__dlpack__``, DLPack's "cannot export", becomes InvalidArgumentError naming the operand.
An answer DLPack does not allow (``__dlpack__`` returning no capsule, ``__dlpack_device__``
no (device_type, device_id) pair) is a DTypeError naming the operand.
"""

from __future__ import annotations

import ctypes
import operator
import sys
from typing import Any

from . import errors
from ._abi import PCR_STREAM_FROM_PRODUCER, DLDataTypeCode, DLDeviceType, DLTensor

# A binding of our own: ctypes.pythonapi.PyCapsule_New is one object shared by the process,
# whose argtypes other code may set (jax.ffi.pycapsule does, for pycutlass_rt.jax too).
_PyCapsule_New = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))

# ---- strategies, chosen once per type ---------------------------------------------
EXCHANGE, CAPSULE, DLPACK, CAI = "exchange", "capsule", "dlpack", "cai"
_strategy: dict[type, str] = {}
#: the types of EXCHANGE strategy, for the entry points' one-line hot-path test
EXCHANGE_TYPES: set[type] = set()
_versioned: dict[type, bool] = {}  # whether __dlpack__ accepts max_version


def _capsule_type() -> type:
    return type(_PyCapsule_New(1, b"probe", None))


_CAPSULE_TYPE = _capsule_type()


def strategy(tp: type, name: str) -> str:
    s = _strategy.get(tp)
    if s is None:
        if tp is _CAPSULE_TYPE:
            s = CAPSULE
        elif hasattr(tp, "__dlpack_c_exchange_api__"):
            s = EXCHANGE
        elif hasattr(tp, "__dlpack__"):
            s = DLPACK
        elif hasattr(tp, "__cuda_array_interface__"):
            s = CAI
        else:
            raise errors.DTypeError(
                f"{name}: {tp.__module__}.{tp.__qualname__} is not a tensor pycutlass_rt can "
                "read; pass an object with __dlpack__ (torch, cupy, jax, numpy) or "
                "__cuda_array_interface__ (numba)"
            )
        _strategy[tp] = s
        if s == EXCHANGE:
            EXCHANGE_TYPES.add(tp)
    return s


# ---- streams ----------------------------------------------------------------------


def stream_handle(stream: Any) -> int:
    """A cudaStream_t value from an int, or an object with __cuda_stream__, .cuda_stream or .ptr."""
    if isinstance(stream, bool):
        raise errors.DTypeError("stream must be a CUDA stream or its handle, not a bool")
    if isinstance(stream, int):
        if stream < 0:
            raise errors.InvalidArgumentError(f"stream handle {stream} is negative")
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        version, handle = proto() if callable(proto) else proto
        return int(handle)
    for attr in ("cuda_stream", "ptr", "handle"):
        handle = getattr(stream, attr, None)
        if isinstance(handle, int):
            return handle
    raise errors.DTypeError(
        f"stream: cannot get a CUDA stream handle from {type(stream).__qualname__}; pass an "
        "int, or an object with __cuda_stream__, .cuda_stream or .ptr"
    )


def dlpack_stream_code(handle: int) -> int:
    """DLPack's code for a stream handle: 1 is the legacy default (handle 0), never 0."""
    return 1 if handle == 0 else handle


def _framework_stream(obj: Any) -> int | None:
    """The current stream of obj's framework, for producers without the exchange API."""
    root = type(obj).__module__.split(".", 1)[0]
    if root == "cupy":
        return sys.modules["cupy"].cuda.get_current_stream().ptr
    if root == "torch":
        torch = sys.modules["torch"]
        return torch.cuda.current_stream(obj.device).cuda_stream
    if root == "numba":
        return cai_stream(obj) or 0
    return None


# ---- __cuda_array_interface__ ----------------------------------------------------


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


# CAI typestr kind+size -> DLPack (code, bits)
_CAI_DTYPES = {
    "f2": (DLDataTypeCode.Float, 16),
    "f4": (DLDataTypeCode.Float, 32),
    "f8": (DLDataTypeCode.Float, 64),
    "i1": (DLDataTypeCode.Int, 8),
    "i4": (DLDataTypeCode.Int, 32),
    "u1": (DLDataTypeCode.UInt, 8),
}


def cai_capsule(obj: Any, name: str, device_of) -> tuple[Any, Any]:
    """A legacy DLPack capsule viewing obj's __cuda_array_interface__, plus a keep-alive."""
    cai = obj.__cuda_array_interface__
    typestr = cai["typestr"]
    dt = _CAI_DTYPES.get(typestr[1:])
    if typestr[0] == ">" or dt is None:
        raise errors.DTypeError(
            f"{name}: __cuda_array_interface__ dtype {typestr!r} is not supported"
        )
    shape = tuple(int(s) for s in cai["shape"])
    itemsize = int(typestr[2:])
    strides = cai.get("strides")
    if strides is None:
        elems, acc = [], 1
        for s in reversed(shape):
            elems.append(acc)
            acc *= s
        elems.reverse()
    else:
        if any(int(s) % itemsize for s in strides):
            raise errors.InvalidArgumentError(f"{name}: strides {strides} are not whole elements")
        elems = [int(s) // itemsize for s in strides]
    ptr, read_only = cai["data"]
    nd = len(shape)
    shape_arr = (ctypes.c_int64 * max(nd, 1))(*shape)
    stride_arr = (ctypes.c_int64 * max(nd, 1))(*elems)
    mt = _DLManagedTensor()
    mt.dl_tensor.data = ptr
    mt.dl_tensor.device.device_type = DLDeviceType.CUDA
    mt.dl_tensor.device.device_id = device_of(ptr) if ptr else 0
    mt.dl_tensor.ndim = nd
    mt.dl_tensor.dtype.code, mt.dl_tensor.dtype.bits = dt
    mt.dl_tensor.dtype.lanes = 1
    mt.dl_tensor.shape = shape_arr
    mt.dl_tensor.strides = stride_arr
    capsule = _PyCapsule_New(ctypes.addressof(mt), b"dltensor", None)
    return capsule, (mt, shape_arr, stride_arr, read_only)


def cai_stream(obj: Any) -> int | None:
    """The stream handle obj's __cuda_array_interface__ says its data is written on, or
    None where it asks for no synchronization (no "stream", or None). The interface codes
    the legacy default stream as 1 and the per-thread one as 2; 0 is not allowed."""
    s = obj.__cuda_array_interface__.get("stream")
    if s is None:
        return None
    if isinstance(s, bool) or not isinstance(s, int) or s == 0:
        raise errors.InvalidArgumentError(
            f"__cuda_array_interface__ stream {s!r}: must be None or a stream handle "
            "(1 legacy default, 2 per-thread default; 0 is disallowed)"
        )
    return 0 if s == 1 else s  # 2 is cudaStreamPerThread's own handle


# ---- the per-call entry ------------------------------------------------------------

#: frameworks whose arrays may be read but never written (their buffers are immutable)
IMMUTABLE = ("jax", "jaxlib")


#: the positions of the outputs among prepare()'s operands (d, aux, amax)
_OUTPUTS = (3, 7, 8)


def prepare(operands, names, stream, device_of, wait=None):
    """Objects for the C call, the stream handle and flags, and values to keep alive.

    ``operands`` are (a, b, c, d, bias, scale_a, scale_b, aux, amax, scale_d); c and the last six may
    be None. ``device_of(ptr)`` is the CUDA ordinal of a device pointer; ``wait(consumer,
    producer)`` makes the call's stream wait for the stream a __cuda_array_interface__
    operand names (None: not asked). Raises DTypeError for non-tensors.
    """
    x = EXCHANGE_TYPES
    a, b, c, d, bias, scale_a, scale_b, aux, amax, scale_d = operands  # named: the hot path
    if (
        type(a) in x
        and type(b) in x
        and type(d) in x
        and (c is None or type(c) in x)
        and (bias is None or type(bias) in x)
        and (scale_a is None or type(scale_a) in x)
        and (scale_b is None or type(scale_b) in x)
        and (aux is None or type(aux) in x)
        and (amax is None or type(amax) in x)
        and (scale_d is None or type(scale_d) in x)
    ):
        # The hot path (torch): C reads the tensors and the producer's stream itself.
        if stream is None:
            return operands, 0, PCR_STREAM_FROM_PRODUCER, None
        return operands, stream_handle(stream), 0, None
    kinds = [None if x is None else strategy(type(x), n) for x, n in zip(operands, names)]
    if all(k in (None, EXCHANGE, CAPSULE) for k in kinds):
        # Fast path: C reads everything (and the producer's stream) itself.
        if stream is None:
            return list(operands), 0, PCR_STREAM_FROM_PRODUCER, None
        return list(operands), stream_handle(stream), 0, None

    # Which stream the launch goes to, decided before asking producers to export.
    if stream is not None:
        handle = stream_handle(stream)
    else:
        handle = None
        for i in (3, 0, 1, 2):
            x = operands[i]
            if x is not None and strategy(type(x), "") != CAPSULE:
                handle = _framework_stream(x) if not _is_host(x, names[i]) else None
                if handle is not None:
                    break
        handle = handle or 0
    code = dlpack_stream_code(handle)

    for i in _OUTPUTS:  # d, aux, amax: written
        if i >= len(operands) or operands[i] is None:
            continue
        x, name = operands[i], names[i]
        if kinds[i] == DLPACK and type(x).__module__.split(".", 1)[0] in IMMUTABLE:
            raise errors.ReadOnlyError(
                f"{name} is a {type(x).__qualname__} from {type(x).__module__}: "
                "JAX arrays are immutable, so pycutlass_rt does not write into them; pass a "
                "writable output (torch, cupy, numba, numpy) and view it with jax.dlpack"
            )
        if kinds[i] == CAI and x.__cuda_array_interface__["data"][1]:
            raise errors.ReadOnlyError(
                f"{name} exposes a read-only __cuda_array_interface__ (its data's read-only "
                "flag is set); pycutlass_rt does not write into it: pass a writable output"
            )
    out, keep = [], []
    for x, kind, name in zip(operands, kinds, names):
        if kind == DLPACK:
            x = _export(x, code, name)
        elif kind == CAI:
            producer = cai_stream(x)
            if wait is not None and producer is not None and producer != handle:
                wait(handle, producer)  # the interface's rule: synchronize before consuming
            x, k = cai_capsule(x, name, device_of)
            keep.append(k)
        out.append(x)
    return out, handle, 0, keep


def _is_host(x: Any, name: str) -> bool:
    """Whether x's producer says it is in host memory (False without __dlpack_device__)."""
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return False
    answer = dev()
    try:
        device_type, _ = answer
        device_type = operator.index(device_type)
    except (TypeError, ValueError):
        raise errors.DTypeError(
            f"{name}: __dlpack_device__() returned {answer!r}, not a (device_type, device_id) pair"
        ) from None
    return device_type in (DLDeviceType.CPU, DLDeviceType.CUDAHost)


def _export(x: Any, code: int, name: str):
    stream = None if _is_host(x, name) else code
    try:
        capsule = _dlpack_of(x, stream)
    except BufferError as e:
        raise errors.InvalidArgumentError(f"{name}: the producer refused to export it ({e})") from e
    if type(capsule) is not _CAPSULE_TYPE:
        raise errors.DTypeError(
            f"{name}: __dlpack__() returned a {type(capsule).__qualname__}, not a DLPack capsule"
        )
    return capsule


def _dlpack_of(x: Any, stream):
    """x.__dlpack__(): a DLPack 1.x capsule where the producer takes max_version."""
    tp = type(x)
    if _versioned.get(tp, True):
        try:
            return x.__dlpack__(max_version=(1, 0), stream=stream)
        except TypeError:
            _versioned[tp] = False
    return x.__dlpack__(stream=stream)
