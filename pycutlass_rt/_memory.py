"""The device memory the library keeps: what it holds, a cap on it, and how to release it.

Calls that need scratch (a kernel's workspace, operands staged for alignment, grouped-GEMM
argument arrays) take it from a memory pool of the library's own on each device, outside
every framework's allocator. A stream keeps its last buffer of each kind for its next
call, so a steady state allocates nothing; what a CUDA graph captures is the graph's (a
kept buffer it took over, held for the life of the process, or graph memory freed with
the graph). These functions report, cap and release that memory, or hand the eager
calls' scratch to another allocator (:func:`set_allocator`; ``pycutlass_rt.torch`` lends
torch's caching allocator, so that torch's memory statistics count it).
"""

from __future__ import annotations

import ctypes
import threading
import warnings

from . import _lib
from ._abi import AllocFn, MemoryUsage, ReleaseFn
from .errors import InvalidArgumentError


def memory_stats(device: int = 0) -> dict:
    """What the library holds on ``device``, in bytes.

    Returns:
        ``kept``: buffers kept for eager calls (all streams); ``graphs``: buffers retired
        into captured CUDA graphs (held for the life of the process); ``pool_reserved`` and
        ``pool_used``: the library pool's memory held from the device and in use;
        ``limit``: the cap on ``kept`` (:func:`set_scratch_limit`); ``kept_streams``: the
        streams keeping buffers; ``lent``: whether eager calls' scratch comes from another
        allocator (:func:`set_allocator`), which then counts it instead.

    Example:
        >>> import pycutlass_rt as pcr
        >>> stats = pcr.memory_stats(0)
        >>> stats["kept"] <= stats["limit"]
        True
    """
    lib = _lib.load()
    out = MemoryUsage()
    lib.check(lib.pcr_memory_stats(int(device), ctypes.byref(out)))
    return {
        "kept": out.kept_bytes,
        "graphs": out.graph_bytes,
        "pool_reserved": out.pool_reserved,
        "pool_used": out.pool_used,
        "limit": out.limit,
        "kept_streams": out.kept_streams,
        "lent": bool(out.lent),
    }


def empty_cache(device: int | None = None) -> None:
    """Frees the scratch kept for eager calls on ``device`` (None: every device) and hands
    the pool's free memory back to the device, as ``torch.cuda.empty_cache()`` does for
    torch's. Buffers that captured graphs hold stay. It synchronizes the device, so call
    it between steps, never inside a graph capture.

    Example (on a GPU):
        >>> import pycutlass_rt as pcr
        >>> pcr.empty_cache()
        >>> pcr.memory_stats(0)["kept"]
        0
    """
    lib = _lib.load()
    lib.check(lib.pcr_empty_cache(-1 if device is None else int(device)))


def set_scratch_limit(nbytes: int) -> None:
    """Caps the scratch kept for eager calls, per device, at ``nbytes`` (default 1 GiB, or
    the environment's ``PYCUTLASS_RT_SCRATCH_LIMIT``, such as ``256M``); 0 keeps nothing,
    and each call then allocates its scratch on its stream (about 1 us more per call
    that needs any). Buffers kept already stay until :func:`empty_cache`.

    Raises:
        InvalidArgumentError: ``nbytes`` is negative.

    Example:
        >>> import pycutlass_rt as pcr
        >>> pcr.set_scratch_limit(256 << 20)
        >>> pcr.memory_stats(0)["limit"]
        268435456
        >>> pcr.set_scratch_limit(1 << 30)
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
    lib = _lib.load()
    lib.check(lib.pcr_set_scratch_limit(max(min(nbytes, 2**63 - 1), -1)))


class _Lent:
    """The allocator the library was handed, as ctypes callbacks (kept alive here)."""

    lock = threading.Lock()
    # every pair ever handed over: a call in flight may still hold an old one (a few
    # hundred bytes each, never freed)
    callbacks: list = []


def set_allocator(alloc=None, release=None) -> None:
    """Takes each eager call's scratch from ``alloc`` and gives it back to ``release``
    (both None: the library's own pool, kept per stream, again).

    ``alloc(nbytes, device, stream)`` returns the address (an int) of ``nbytes`` of
    ``device``'s memory for use in stream order on ``stream`` (a ``cudaStream_t`` as an
    int), or 0 (or raises) when it has none: the call then raises
    :class:`~pycutlass_rt.CudaError` having written nothing. ``release(ptr, nbytes,
    device, stream)`` takes it back when the call has enqueued its work; the allocator must
    keep stream order, as caching allocators do (torch's, cupy's). Nothing is kept per
    stream meanwhile. Calls inside a CUDA-graph capture still take the graph's own memory.
    Buffers kept before stay until :func:`empty_cache`.

    Raises:
        InvalidArgumentError: one of the two given without the other.

    Example:
        >>> import pycutlass_rt as pcr
        >>> pcr.set_allocator()  # the library's own pool
    """
    if (alloc is None) != (release is None):
        raise InvalidArgumentError("set_allocator: alloc and release come together (or neither)")
    lib = _lib.load()

    def lend(nbytes, device, stream, _context):
        try:
            return int(alloc(int(nbytes), int(device), int(stream or 0)) or 0) or None
        except Exception as e:  # noqa: BLE001 - a callback from C: the library raises for it
            warnings.warn(
                f"pycutlass_rt: the allocator failed: {type(e).__name__}: {e}",
                RuntimeWarning,
                stacklevel=1,
            )
            return None

    def take_back(ptr, nbytes, device, stream, _context):
        try:
            release(int(ptr), int(nbytes), int(device), int(stream or 0))
        except Exception as e:  # noqa: BLE001 - a callback from C: nothing above to raise to
            warnings.warn(
                f"pycutlass_rt: the allocator's release failed: {e}", RuntimeWarning, stacklevel=1
            )

    with _Lent.lock:
        pair = (AllocFn(lend), ReleaseFn(take_back)) if alloc is not None else ()
        lib.check(lib.pcr_set_allocator(*(pair or (AllocFn(), ReleaseFn())), None))
        _Lent.callbacks.append(pair)
