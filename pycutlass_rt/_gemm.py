"""gemm(): ``d = act(alpha * a @ b + beta * c + bias)`` in place, on any framework's tensors.

A plain call on tensors whose C exchange API the library reads, of a problem seen before,
goes straight to C; anything else is prepared here (:func:`pycutlass_rt._call.prepare`)
and made again the general way.
"""

from __future__ import annotations

from typing import Any, TypeVar

from . import _call, _dlpack, _lib
from ._abi import PCR_KERNEL_SELECT, PCR_STREAM_FROM_PRODUCER

#: the output tensor, whatever its framework: gemm() returns the one it was given
T = TypeVar("T")

#: the scalar types gemm()'s hot path hands to C as they are (bool, an int, is left to the
#: general path's refusal)
_SCALARS = frozenset((float, int))


def gemm(
    a: Any,
    b: Any,
    c: Any,
    d: T,
    alpha: float = 1.0,
    beta: float = 0.0,
    *,
    bias: Any = None,
    activation: str | tuple | None = None,
    scale_a: Any = None,
    scale_b: Any = None,
    math: str | None = None,
    stream: Any = None,
    kernel: str | None = None,
    aux: Any = None,
    amax: Any = None,
    scale_d: Any = None,
) -> T:
    """Computes ``d = act(alpha * a @ b + beta * c + bias)`` in place and returns ``d``.

    With quantized inputs, ``a @ b`` is dequantized first: ``(scale_a * a) @ (b * scale_b)``.

    Batched: any of a, b, c, d may be a 3-D batch ``(L, rows, cols)`` with any batch
    stride; ``d`` must be ``(L, M, N)``, and an input with a batch of 1 (or a 2-D one, or
    batch stride 0) is shared by all L products. The batch runs as one kernel launch.

    Args:
        a: (M, K) matrix or (L, M, K) batch; any DLPack tensor (torch, cupy, jax, numpy)
            or an object with ``__cuda_array_interface__`` (numba). float16, bfloat16,
            float32, float64, int8, float8_e4m3fn or float8_e5m2 (which dtypes and
            layouts have kernels: :func:`kernels`; an unsupported combination raises
            UnsupportedError listing the ones that exist).
        b: (K, N) matrix or (L, K, N) batch of a's dtype.
        c: (M, N) matrix (or batch), or None when ``beta == 0``. May be ``d`` itself; any
            layout, dtype or broadcast view is accepted (copied into ``d`` first if the
            kernel cannot read it directly).
        d: (M, N) output (or (L, M, N)), written in place: a's dtype or float32 for
            float inputs; int32 for int8 (computed exactly: alpha and beta must be
            integers), or int8/float16/bfloat16 with scales; bfloat16, float16 or float32
            for fp8. Row- or column-major with any leading dimension; must not overlap
            ``a`` or ``b``.
        alpha: real scalar.
        beta: real scalar.
        bias: None, or a vector in d's dtype broadcast against d like numpy: shape (N,)
            or (1, N) adds ``bias[j]`` to column j, (M, 1) adds ``bias[i]`` to row i. The
            same vector serves every matrix of a batch.
        activation: None (or "none"), "relu", "gelu" (erf), "gelu_tanh" (torch's
            approximate="tanh"), "silu", "sigmoid", "tanh", "hardswish", "leaky_relu"
            (slope 0.01) or ``("leaky_relu", negative_slope)``, or ``("clamp", min,
            max)``, applied last. With a bias or an activation the call runs a kernel
            with the fused epilogue (UnsupportedError if the build has none for the
            dtypes); nothing is computed as a separate pass.
        scale_a, scale_b: dequantization scales of int8 and fp8 inputs, or per-row and
            per-column factors of float16 and bfloat16 ones: a Python number
            (folded into alpha), or a float32 GPU tensor of one element (per tensor), of
            M elements for scale_a (one per row of a: shape (M,) or (M, 1)) or of N for
            scale_b (one per column of b: (N,) or (1, N)). Vectors must be contiguous and
            16-byte aligned. Per-tensor scale tensors alone are read by the plain sm90a
            and sm100a fp8 kernels (``KernelInfo.tensor_scales``); vectors, scale tensors
            with a bias or activation, int8 with a float or int8 output, and any scale
            tensor on older families or on 16-bit inputs run the dequantizing epilogue
            (kernels named ``_scaled``; for 16-bit inputs outside the default build).
            fp8 block scales (DeepSeek-V3, Qwen3-FP8; torch._scaled_mm's BlockWise1x128 and
            BlockWise128x128) are float32 grids shaped as the operand cut into blocks,
            rounded up, any strides: scale_a ``(M, ceil(K/128))`` (per token and 128 of
            K) or ``(ceil(M/128), ceil(K/128))``; scale_b ``(ceil(K/128), ceil(N/128))``
            (a checkpoint's ``weight_scale_inv`` of an (N, K) weight, transposed:
            ``weight_scale_inv.t()``) or ``(ceil(K/128), N)``. Each 128 of K's partial
            product is scaled by its block's two scales before it is accumulated, in
            float32 (kernels named ``_blk``, e.g. ``_blkgb``: per-token a, per-block b).
        math: for float32 inputs: None or "ieee" (default: fp32 accuracy, 3xTF32 tensor
            cores) or "tf32" (TF32 tensor cores: 10-bit mantissas, faster, like torch's
            ``allow_tf32``). For fp8 inputs: None or "ieee" (default: partial sums added
            into float32 every 128 of K, as cuBLAS and ``torch._scaled_mm`` do) or
            "fast_accum" (kernels named ``_coopfa`` / ``_pingpongfa`` may accumulate in
            the MMA's reduced precision, like ``torch._scaled_mm(use_fast_accum=True)``:
            faster, less exact over a long K; where the build has none for the problem,
            the default's run it). Ignored for other dtypes.
        stream: a CUDA stream (int handle, or an object with ``__cuda_stream__``,
            ``.cuda_stream`` or ``.ptr``). Default: the producer framework's current stream.
        kernel: force a kernel by name (see :func:`kernels`).
        aux: None, or a tensor like ``d`` (its shape, dtype and layout, 16-byte aligned
            as ``d`` must then be) that receives the activation's input, ``alpha * a @ b
            + beta * c + bias``, from the same kernel (what a backward pass through the
            activation needs). Kernels named ``_aux``: float16 and bfloat16, tn; others
            raise UnsupportedError.
        amax: None, or a float32 tensor of one element where ``d`` is, which receives
            ``max |d|`` over every element of ``d`` (all matrices of a batch), reduced by
            the same kernel as it writes ``d`` (an fp8 recipe's next scale; 0 for an empty
            ``d``, NaN when ``d`` holds a NaN). The ``_aux`` kernels, with or without
            ``aux``; with int8 or fp8 inputs (or scale tensors), the quantized epilogues
            (``KernelInfo.out_scale``: every family's ``_scaled`` kernels, and sm90a and
            sm100a kernels reading scale tensors), which take it before ``scale_d``.
        scale_d: None, or a float32 tensor of one element on ``d``'s GPU: with int8 or
            fp8 inputs (or scale tensors) ``d = saturate(scale_d * result)``, an fp8
            output's scale (1 / its dequantizing scale; e4m3 saturates at +-448). Kernels
            with ``out_scale``.

    Returns:
        ``d``.

    Raises:
        InvalidArgumentError: bad shapes, strides or scalars (a ValueError).
        DTypeError: an operand that is not a tensor, or an unknown dtype (a TypeError).
        UnsupportedError: no kernel of this build for the combination (lists what exists).
        NoDeviceError: no GPU or driver.

    Host (numpy) arrays are copied to the GPU and back, and the call then synchronizes.

    Example (on a GPU):
        >>> import numpy as np, pycutlass_rt as pcr
        >>> a = np.ones((4, 8), np.float16); b = np.ones((8, 2), np.float16)
        >>> d = np.empty((4, 2), np.float16)
        >>> pcr.gemm(a, b, None, d)[0]
        array([8., 8.], dtype=float16)
        >>> bias = np.array([-9, 1], np.float16)
        >>> pcr.gemm(a, b, None, d, bias=bias, activation="relu")[0]
        array([0., 9.], dtype=float16)

    Example (on a GPU): a fused linear layer that keeps the activation's input, and one
    that reduces amax:

        >>> import torch
        >>> x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
        >>> w = torch.randn(32, 128, device="cuda", dtype=torch.bfloat16)
        >>> y, z = x.new_empty(64, 32), x.new_empty(64, 32)
        >>> pcr.gemm(x, w.t(), None, y, activation="gelu", aux=z) is y  # z: gelu's input
        True
        >>> torch.allclose(y, torch.nn.functional.gelu(z), 1e-2, 1e-2)
        True
        >>> amax = torch.empty((), device="cuda")
        >>> pcr.gemm(x, w.t(), None, y, amax=amax) is y
        True
        >>> torch.allclose(amax, y.abs().max().float(), 1e-2)
        True

    Example (on a GPU with fp8 kernels): a scale per row of a and per column of b:

        >>> x8 = torch.randn(64, 128, device="cuda").to(torch.float8_e4m3fn)
        >>> w8 = torch.randn(32, 128, device="cuda").to(torch.float8_e4m3fn)
        >>> y = torch.empty(64, 32, device="cuda", dtype=torch.bfloat16)
        >>> sx = torch.rand(64, 1, device="cuda"); sw = torch.rand(1, 32, device="cuda")
        >>> pcr.gemm(x8, w8.t(), None, y, scale_a=sx, scale_b=sw) is y
        True
        >>> torch.allclose(y.float(), sx * (x8.float() @ w8.float().t()) * sw, 1e-2, 1e-2)
        True

    Example (on a GPU with block-scaled fp8 kernels): DeepSeek-V3's recipe:

        >>> x8 = torch.randn(64, 512, device="cuda").to(torch.float8_e4m3fn)
        >>> w8 = torch.randn(256, 512, device="cuda").to(torch.float8_e4m3fn)
        >>> y = torch.empty(64, 256, device="cuda", dtype=torch.bfloat16)
        >>> sx = torch.rand(64, 4, device="cuda")  # per token and 128 of K
        >>> sw = torch.rand(2, 4, device="cuda")  # per 128x128 block of w
        >>> pcr.gemm(x8, w8.t(), None, y, scale_a=sx, scale_b=sw.t()) is y
        True
        >>> xs = x8.float() * sx.repeat_interleave(128, 1)
        >>> ws = w8.float() * sw.repeat_interleave(128, 0).repeat_interleave(128, 1)
        >>> torch.allclose(y.float(), xs @ ws.t(), 1e-2, 1e-2)
        True
    """
    # The hottest path (torch tensors, a plain GEMM on the producer's stream or a stream
    # handle, a problem seen before): a few type checks here, and C reads the tensors (and
    # the producer's stream) itself. CUDA's use is noted on the way below: every process
    # selects its first problem there.
    lib = _lib.loaded or _lib.load()
    x = _dlpack.EXCHANGE_TYPES
    hot = 0
    if (
        type(alpha) in _SCALARS
        and type(beta) in _SCALARS
        and type(a) in x
        and type(b) in x
        and type(d) in x
        and (c is None or type(c) in x)
        and bias is None
        and scale_a is None
        and scale_b is None
        and activation is None
        and math is None
        and (stream is None or (type(stream) is int and stream >= 0))
        and kernel is None
        and aux is None
        and amax is None
        and scale_d is None
    ):
        hot = lib.gemm(
            a,
            b,
            c,
            d,
            alpha,
            beta,
            None,
            PCR_KERNEL_SELECT,
            PCR_STREAM_FROM_PRODUCER if stream is None else 0,
            stream or 0,
        )
        if hot:  # a failed call is never made again
            raise lib.error(hot)
        return d
    # anything else: its Python objects prepared here
    call = _call.prepare(
        a,
        b,
        c,
        d,
        alpha,
        beta,
        bias=bias,
        activation=activation,
        scale_a=scale_a,
        scale_b=scale_b,
        math=math,
        stream=stream,
        kernel=kernel,
        aux=aux,
        amax=amax,
        scale_d=scale_d,
    )
    lib.check(lib.gemm(*call.gemm_args()))
    _lib.note_cuda_used()
    return d
