"""Grouped GEMMs: many problems, each of its own size, in one kernel launch.

The per-group sizes, pointers and leading dimensions are written into GPU arrays by the
library's own small kernel (from its launch parameters, or from the MoE offsets tensor):
no host synchronization, and safe inside CUDA-graph capture.
"""

from __future__ import annotations

import ctypes

from . import _call, _dlpack, _lib
from ._abi import PCR_STREAM_FROM_PRODUCER
from .errors import InvalidArgumentError


def grouped_gemm(As, Bs, Cs, Ds, alpha=1.0, beta=0.0, *, stream=None, kernel=None):
    """Computes ``Ds[g] = alpha * As[g] @ Bs[g] + beta * Cs[g]`` for every g, in one launch.

    Each group has its own M, N and K; the groups share dtypes and, after orienting each
    ``Ds[g]`` row-major, layouts (as :func:`pycutlass_rt.gemm` orients a single GEMM).
    Empty groups (M, N or K = 0) are handled (K = 0 gives ``beta * Cs[g]``).

    Args:
        As, Bs, Cs, Ds: sequences of GPU matrices, one entry per group; ``Cs`` may be None,
            or hold None for a group without C (read as zeros).
        alpha, beta: real scalars shared by the groups.
        stream: a CUDA stream; default: the producer framework's current stream.
        kernel: force a grouped kernel by name.

    Returns:
        ``Ds``.

    Raises:
        InvalidArgumentError: sequences of different lengths, or groups that differ in
            dtypes, layouts or device (the message names the group).
        UnsupportedError: no grouped kernel in this build for the dtypes and layouts.

    Example (on a GPU):
        >>> import torch, pycutlass_rt as pcr
        >>> As = [torch.randn(m, 512, device="cuda", dtype=torch.bfloat16) for m in (7, 300, 64)]
        >>> Bs = [torch.randn(512, 256, device="cuda", dtype=torch.bfloat16) for _ in As]
        >>> Ds = [torch.empty(a.shape[0], 256, device="cuda", dtype=torch.bfloat16) for a in As]
        >>> [tuple(d.shape) for d in pcr.grouped_gemm(As, Bs, None, Ds)]  # returns Ds
        [(7, 256), (300, 256), (64, 256)]
    """
    lib = _lib.load()
    alpha, beta = _call.scalar(alpha, "alpha"), _call.scalar(beta, "beta")
    kidx = _call.kernel_index(kernel)
    As, Bs, Ds = list(As), list(Bs), list(Ds)
    Cs = [None] * len(As) if Cs is None else list(Cs)
    if not len(As) == len(Bs) == len(Cs) == len(Ds):
        raise InvalidArgumentError(
            "As, Bs, Cs and Ds need one entry per group; got "
            f"{len(As)}, {len(Bs)}, {len(Cs)} and {len(Ds)}"
        )
    count = len(As)
    if count == 0 and stream is not None:  # nothing to run, but a bad stream is an error
        _dlpack.stream_handle(stream)
    columns, keep, handle, flags = ([], [], [], []), [], 0, PCR_STREAM_FROM_PRODUCER
    for g in range(count):
        objs, h, f, k = _call.operands((As[g], Bs[g], Cs[g], Ds[g]), stream)
        if g == 0:
            handle, flags = h, f
        for column, obj in zip(columns, objs):
            column.append(obj)
        keep.append(k)
    arrays = [(ctypes.py_object * max(count, 1))(*column) for column in columns]
    problem = _lib.Problem()
    args = (*arrays, count, alpha, beta, kidx, flags, handle, ctypes.byref(problem))
    _run(lib, lib.pcr_py_grouped_gemm, args, problem)
    del keep
    return Ds


def moe_gemm(x, w, offsets, out, alpha=1.0, *, stream=None, kernel=None):
    """A mixture-of-experts layer's GEMM: ``out[rows of e] = alpha * x[rows of e] @ w[e]``.

    The tokens of ``x`` are sorted by expert; ``offsets`` says where each expert's rows
    are. Offsets stay on the GPU: the call never synchronizes, so it can be captured in a
    CUDA graph and replayed as the routing changes.

    Args:
        x: (T, K) row-major tokens, float16 or bfloat16.
        w: (E, K, N) expert weights, any strides (e.g. ``w_nk.transpose(1, 2)`` for
            (E, N, K) Linear weights).
        offsets: GPU int32 or int64 vector: E + 1 boundaries (``offsets[0] = 0``,
            ``offsets[E] = T``), or E end offsets as ``torch._grouped_mm`` takes them.
            Rows outside [0, T) are ignored; rows no expert covers are left untouched.
        out: (T, N) row-major output of x's dtype.
        alpha: real scalar.
        stream: a CUDA stream; default: the producer framework's current stream.
        kernel: force a grouped kernel by name.

    Returns:
        ``out``.

    Example (on a GPU):
        >>> import torch, pycutlass_rt as pcr
        >>> x = torch.randn(1000, 1024, device="cuda", dtype=torch.bfloat16)
        >>> w = torch.randn(8, 1024, 512, device="cuda", dtype=torch.bfloat16)
        >>> ends = torch.tensor([100, 100, 400, 420, 700, 800, 990, 1000], device="cuda", dtype=torch.int32)
        >>> out = pcr.moe_gemm(x, w, ends, torch.empty(1000, 512, device="cuda", dtype=torch.bfloat16))
        >>> out.shape
        torch.Size([1000, 512])
    """
    lib = _lib.load()
    alpha = _call.scalar(alpha, "alpha")
    kidx = _call.kernel_index(kernel)
    # offsets travels in c's slot: one more DLPack operand of the same call
    objs, handle, flags, keep = _call.operands((x, w, offsets, out), stream)
    ox, ow, ooff, oout = objs[:4]
    problem = _lib.Problem()
    _run(
        lib,
        lib.pcr_py_moe_gemm,
        (ox, ow, ooff, oout, alpha, kidx, flags, handle, ctypes.byref(problem)),
        problem,
    )
    del keep
    return out


def _run(lib, fn, args, problem) -> None:
    """Calls ``fn`` (which describes its problem into ``problem``); raises its error."""
    lib.check(fn(*args))
    _lib.note_cuda_used()
