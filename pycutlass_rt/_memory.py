"""The device memory the library keeps: what it holds, a cap on it, and how to release it.

Calls that need scratch (a kernel's workspace, operands staged for alignment, grouped-GEMM
argument arrays) take it from a memory pool of the library's own on each device, outside
every framework's allocator. A stream keeps its last buffer of each kind for its next
call, so a steady state allocates nothing; what a CUDA graph captures is the graph's (a
kept buffer it took over, held for the life of the process, or graph memory freed with
the graph). These functions report, cap and release that memory.
"""

from __future__ import annotations

import ctypes

from . import _lib
from ._abi import MemoryUsage


def memory_stats(device: int = 0) -> dict:
    """What the library holds on ``device``, in bytes.

    Returns:
        ``kept``: buffers kept for eager calls (all streams); ``graphs``: buffers retired
        into captured CUDA graphs (held for the life of the process); ``pool_reserved`` and
        ``pool_used``: the library pool's memory held from the device and in use;
        ``limit``: the cap on ``kept`` (:func:`set_scratch_limit`); ``kept_streams``: the
        streams keeping buffers.

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
