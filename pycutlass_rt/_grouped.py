"""Grouped GEMMs: many problems, each of its own size, in one kernel launch.

The per-group sizes, pointers and leading dimensions are written into GPU arrays by the
library's own small kernel (from its launch parameters, or from the MoE offsets tensor):
no host synchronization, and safe inside CUDA-graph capture.
"""

from __future__ import annotations

import ctypes

from . import _call, _dlpack, _lib
from .errors import InvalidArgumentError


def grouped_gemm(
    As,
    Bs,
    Cs,
    Ds,
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
):
    """Computes ``Ds[g] = act(alpha * As[g] @ Bs[g] + beta * Cs[g] + bias[g])`` for every g,
    in one launch.

    Each group has its own M, N and K; the groups share dtypes and, after orienting each
    ``Ds[g]`` row-major, layouts (as :func:`pycutlass_rt.gemm` orients a single GEMM).
    Empty groups (M, N or K = 0) are handled (K = 0 gives ``act(beta * Cs[g] + bias[g])``).
    With quantized inputs (fp8), each product is dequantized as :func:`pycutlass_rt.gemm`
    does it: ``(scale_a[g] * As[g]) @ (Bs[g] * scale_b[g])``.

    Args:
        As, Bs, Cs, Ds: sequences of GPU matrices, one entry per group; ``Cs`` may be None,
            or hold None for a group without C (read as zeros).
        alpha, beta: real scalars shared by the groups.
        bias: None, or one per group: a vector of ``Ds[g]``'s dtype along its columns,
            (N,) or (1, N).
        activation: as :func:`pycutlass_rt.gemm`'s, shared by the groups.
        scale_a, scale_b: None, or one float32 GPU tensor per group: ``As[g]``'s scale (one
            value, or M per row) and ``Bs[g]``'s (one value, or N per column); every group
            has the same kinds.
        math: as :func:`pycutlass_rt.gemm`'s.
        stream: a CUDA stream; default: the producer framework's current stream.
        kernel: force a grouped kernel by name.

    Returns:
        ``Ds``.

    Raises:
        InvalidArgumentError: sequences of different lengths, or groups that differ in
            dtypes, layouts, device or which extras they have (the message names the group).
        UnsupportedError: no grouped kernel in this build for the dtypes, layouts and
            epilogue (block-scale grids, aux, amax and scale_d have none).

    Example (on a GPU):
        >>> import torch, pycutlass_rt as pcr
        >>> As = [torch.randn(m, 512, device="cuda", dtype=torch.bfloat16) for m in (7, 300, 64)]
        >>> Bs = [torch.randn(512, 256, device="cuda", dtype=torch.bfloat16) for _ in As]
        >>> Ds = [torch.empty(a.shape[0], 256, device="cuda", dtype=torch.bfloat16) for a in As]
        >>> [tuple(d.shape) for d in pcr.grouped_gemm(As, Bs, None, Ds)]  # returns Ds
        [(7, 256), (300, 256), (64, 256)]
    """
    lib = _lib.load()
    As, Bs, Ds = list(As), list(Bs), list(Ds)
    count = len(As)
    Cs = [None] * count if Cs is None else list(Cs)
    per_group = {"bias": bias, "scale_a": scale_a, "scale_b": scale_b}
    given = {k: list(v) for k, v in per_group.items() if v is not None}
    names = ["As", "Bs", "Cs", "Ds", *given]
    lengths = [len(As), len(Bs), len(Cs), len(Ds), *map(len, given.values())]
    if len(set(lengths)) != 1:
        raise InvalidArgumentError(
            f"{', '.join(names[:-1])} and {names[-1]} need one entry per group; got "
            f"{', '.join(map(str, lengths[:-1]))} and {lengths[-1]}"
        )
    lists = {k: given.get(k, [None] * count) for k in per_group}
    kidx = _call.kernel_index(kernel)
    if count == 0:  # nothing to run, but bad arguments are still errors
        _call.scalar(alpha, "alpha"), _call.scalar(beta, "beta"), _call.activation_of(activation)
        if stream is not None:
            _dlpack.stream_handle(stream)
        return Ds
    calls = [
        _call.prepare(
            As[g],
            Bs[g],
            Cs[g],
            Ds[g],
            alpha,
            beta,
            activation=activation,
            math=math,
            stream=stream,
            **{k: v[g] for k, v in lists.items()},
        )
        for g in range(count)
    ]
    if len({call.alpha for call in calls}) > 1:
        raise InvalidArgumentError(
            "the groups' number scales differ (each folds into the shared alpha); pass "
            "them as one-element float32 tensors"
        )
    first = calls[0]
    columns = [(ctypes.py_object * count)(*(c.objs[i] for c in calls)) for i in range(4)]
    extras = None
    if any(c.extra is not None for c in calls):
        extras = (ctypes.py_object * count)(*(c.extra for c in calls))
    problem = _lib.Problem()
    args = (*columns, extras, count, first.alpha, first.beta, kidx, first.flags, first.handle)
    _run(lib, lib.pcr_py_grouped_gemm, (*args, ctypes.byref(problem)), problem)
    del calls
    return Ds


def moe_gemm(
    x,
    w,
    offsets,
    out,
    alpha=1.0,
    *,
    bias=None,
    activation=None,
    scale_a=None,
    scale_b=None,
    math=None,
    stream=None,
    kernel=None,
):
    """A mixture-of-experts layer's GEMM:
    ``out[rows of e] = act(alpha * (scale_a * x[rows of e]) @ (w[e] * scale_b[e]) + bias[e])``.

    The tokens of ``x`` are sorted by expert; ``offsets`` says where each expert's rows
    are. Offsets stay on the GPU: the call never synchronizes, so it can be captured in a
    CUDA graph and replayed as the routing changes.

    fp8 layers (e4m3 ``x`` and ``w``, bfloat16 ``out``) take the scale layouts MoE
    checkpoints and quantizers use: ``scale_a`` per tensor or per token, ``scale_b`` per
    tensor, per expert, or per expert and output channel; or DeepSeek-V3's block scales:
    ``scale_a`` one per token and 128 of K (``pcr.quantize(x, granularity="group")``'s
    M-major grid), ``scale_b`` one per expert and 128 x 128 block of its (N, K) weight
    (the checkpoint's ``weight_scale_inv`` stacked to (E, ceil(N/128), ceil(K/128)), passed
    ``.transpose(1, 2)``).

    Args:
        x: (T, K) row-major tokens: float16, bfloat16, or float8_e4m3fn.
        w: (E, K, N) expert weights, any strides (e.g. ``w_nk.transpose(1, 2)`` for
            (E, N, K) Linear weights, the layout fp8 kernels take).
        offsets: GPU int32 or int64 vector: E + 1 boundaries (``offsets[0] = 0``,
            ``offsets[E] = T``), or E ends as ``torch._grouped_mm`` takes them.
            Rows outside [0, T) are ignored; rows no expert covers are left untouched.
        out: (T, N) row-major output: x's dtype, or bfloat16 for fp8.
        alpha: real scalar.
        bias: None, or ``out``'s dtype: (N,) / (1, N) shared by the experts, or (E, N) /
            (E, 1, N) one row per expert.
        activation: as :func:`pycutlass_rt.gemm`'s (e.g. "silu", "gelu", "relu").
        scale_a: x's dequantizing scales, float32 on the GPU: one value (or a Python
            number), T (per token: (T,) or (T, 1)), or a (T, ceil(K/128)) block grid (any
            strides).
        scale_b: w's: one value (or a number), E (per expert: (E,) or (E, 1)), (1, N) (per
            channel, shared), (E, N) / (E, 1, N) (per expert and channel), or an
            (E, ceil(K/128), ceil(N/128)) block grid, each expert's packed with its K
            blocks contiguous (``weight_scale_inv.transpose(1, 2)`` of a contiguous one).
        math: as :func:`pycutlass_rt.gemm`'s.
        stream: a CUDA stream; default: the producer framework's current stream.
        kernel: force a grouped kernel by name.

    Returns:
        ``out``.

    Raises:
        InvalidArgumentError: bad shapes, strides or offsets, named.
        UnsupportedError: no grouped kernel for the dtypes, scales and epilogue, or block
            grids in other layouts.

    Example (on a GPU):
        >>> import torch, pycutlass_rt as pcr
        >>> x = torch.randn(1000, 1024, device="cuda", dtype=torch.bfloat16)
        >>> w = torch.randn(8, 1024, 512, device="cuda", dtype=torch.bfloat16)
        >>> ends = torch.tensor([100, 100, 400, 420, 700, 800, 990, 1000], device="cuda", dtype=torch.int32)
        >>> out = pcr.moe_gemm(x, w, ends, torch.empty(1000, 512, device="cuda", dtype=torch.bfloat16))
        >>> out.shape
        torch.Size([1000, 512])

    Example (on a GPU): an fp8 layer, per-token activations and per-channel weights.
        >>> xq, sx = pcr.quantize(x, granularity="token")
        >>> wq = torch.randn(8, 512, 1024, device="cuda").to(torch.float8_e4m3fn)
        >>> sw = torch.rand(8, 512, device="cuda") / 100
        >>> y = pcr.moe_gemm(xq, wq.transpose(1, 2), ends, out, scale_a=sx, scale_b=sw,
        ...                  activation="silu")
    """
    lib = _lib.load()
    # offsets travels in c's slot: one more DLPack operand of the same call
    call = _call.prepare(
        x,
        w,
        offsets,
        out,
        alpha,
        0.0,
        bias=bias,
        activation=activation,
        scale_a=scale_a,
        scale_b=scale_b,
        math=math,
        stream=stream,
        kernel=kernel,
    )
    problem = _lib.Problem()
    args = (*call.objs[:4], call.alpha, call.extra, call.kernel, call.flags, call.handle)
    _run(lib, lib.pcr_py_moe_gemm, (*args, ctypes.byref(problem)), problem)
    del call
    return out


def _run(lib, fn, args, problem) -> None:
    """Calls ``fn`` (which describes its problem into ``problem``); raises its error."""
    lib.check(fn(*args))
    _lib.note_cuda_used()
