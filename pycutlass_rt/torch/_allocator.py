"""The library's scratch from torch's caching allocator, so that torch counts it.

With ``pycutlass_rt.torch`` imported, every eager call's scratch (a kernel's workspace,
operands staged for alignment, grouped-GEMM argument arrays) comes from torch's caching
allocator on the call's stream and goes back to it when the call has enqueued its work:
``torch.cuda.memory_allocated`` and ``memory_stats`` see it, ``torch.cuda.empty_cache``
releases it, and nothing is kept per stream outside torch. Calls captured in CUDA graphs
still take the graph's own memory. ``PYCUTLASS_RT_TORCH_ALLOCATOR=0`` (read when the
library loads) or :func:`use_caching_allocator` ``(False)`` keeps the library's own pool.
"""

from __future__ import annotations

import os

import torch

from .. import _lib, _memory

ENV = "PYCUTLASS_RT_TORCH_ALLOCATOR"


def _alloc(nbytes: int, device: int, stream: int) -> int:
    return torch.cuda.caching_allocator_alloc(nbytes, device, stream)


def _release(ptr: int, nbytes: int, device: int, stream: int) -> None:
    torch.cuda.caching_allocator_delete(ptr)


def use_caching_allocator(enabled: bool = True) -> None:
    """Takes the library's scratch from torch's caching allocator (True), or from the
    library's own pool (False).

    Example:
        >>> import pycutlass_rt.torch as pt
        >>> pt.use_caching_allocator(False); pt.use_caching_allocator(True)
    """
    if enabled:
        _memory.set_allocator(_alloc, _release)
    else:
        _memory.set_allocator()


def _on_load(lib) -> None:
    if os.environ.get(ENV, "").strip().lower() not in ("0", "false", "no", "off"):
        use_caching_allocator(True)


_lib.on_load(_on_load)
