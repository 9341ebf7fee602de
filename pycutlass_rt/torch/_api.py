"""The Python API: :func:`mm`, :func:`linear`, :func:`scaled_mm`, :func:`grouped_mm`,
:func:`scaled_grouped_mm` and :func:`conv2d`, each a call of its ``torch.ops.pycutlass_rt``
operator."""

import torch

from ._autograd import OUTPUT_GRADIENT
from ._checks import _act_name
from ._cpu import _ACT_FN
from ._schema import (
    _conv2d,
    _grouped_mm,
    _linear,
    _mm,
    _mm_out,
    _quantize,
    _scaled_grouped_mm,
    _scaled_mm,
)


def _fused_unless_kept(op, activation, x, weight, bias, *args):
    """``op(x, weight, bias, *args, activation)``: the activation fused, unless a gradient
    is needed and the activation's needs the pre-activation (gelu, gelu_tanh, silu,
    hardswish): then op without it and torch's activation after, so autograd keeps the
    pre-activation instead of recomputing it in backward."""
    if (
        activation is not None
        and _act_name(activation) not in OUTPUT_GRADIENT
        and torch.is_grad_enabled()
        and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
    ):
        act = _act_name(activation)
        z = op(x, weight, bias, *args, None)
        return z if act is None else _ACT_FN[act](z)
    return op(x, weight, bias, *args, activation)


def mm(a, b, *, out=None):
    """``a @ b`` on pycutlass_rt's kernels: ``torch.ops.pycutlass_rt.mm`` (or ``mm.out``).

    Args:
        a: (M, K) CUDA matrix, float16, bfloat16, float32 or float64; row- or
            column-major with any leading dimension (other strides are copied first).
        b: (K, N) matrix of a's dtype.
        out: optional (M, N) output written in place: a's dtype, or float32 for float16
            and bfloat16 inputs. Not differentiable (as torch's ``out=``).

    Returns:
        The (M, N) product (``out`` where given). float32 runs at fp32 accuracy, or on
        TF32 tensor cores where torch allows them for matmuls
        (``torch.backends.cuda.matmul.fp32_precision = "tf32"``, or the legacy
        ``allow_tf32``).

    Raises:
        RuntimeError: shapes, dtypes or devices that do not fit.
        UnsupportedError: no kernel of this build for the dtype and layout.

    Example (on a GPU):
        >>> import torch, pycutlass_rt.torch as pt
        >>> a = torch.randn(128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        >>> b = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)
        >>> pt.mm(a, b).sum().backward()  # a.grad: a GEMM of the library
    """
    if out is None:
        return _mm(a, b)
    _mm_out(a, b, out=out)
    return out


def linear(x, weight, bias=None, activation=None):
    """``act(x @ weight.T + bias)``: ``F.linear`` with the activation fused into the GEMM.

    Calls ``torch.ops.pycutlass_rt.linear``, one kernel per call: a tn GEMM of ``x``
    viewed as (M, K) and ``weight.t()``, with the bias and activation in its epilogue
    (where the build has no fused kernel for the dtype, the bias is added as C and the
    activation runs after). Gradients of x, weight and bias are GEMMs of the library
    too. When one is needed and the activation is gelu, gelu_tanh, silu or hardswish
    (whose gradient needs the pre-activation), the GEMM runs without the activation and
    torch's own activation follows, so autograd keeps the pre-activation (as
    ``nn.Linear`` followed by the activation does) rather than recomputing it in
    backward; relu's, sigmoid's and tanh's gradients need only the output, so they stay
    fused.

    Args:
        x: (..., K) CUDA tensor, float16, bfloat16, float32 or float64, any leading dims.
        weight: (N, K), as ``nn.Linear`` stores it.
        bias: optional (N,) vector of x's dtype.
        activation: None or one of ``ACTIVATIONS`` ("relu", "gelu", "gelu_tanh",
            "silu", "sigmoid", "tanh", "hardswish", "leaky_relu" with torch's default slope).

    Returns:
        (..., N) tensor of x's dtype.

    Example (on a GPU):
        >>> import torch, pycutlass_rt.torch as pt
        >>> x = torch.randn(4, 128, 1024, device="cuda", dtype=torch.bfloat16)
        >>> w = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
        >>> pt.linear(x, w, None, "silu").shape
        torch.Size([4, 128, 4096])
    """
    return _fused_unless_kept(_linear, activation, x, weight, bias)


def scaled_mm(
    a, b, scale_a, scale_b, bias=None, out_dtype=None, activation=None, use_fast_accum=False
):
    """``act((scale_a * a) @ (b * scale_b) + bias)`` for float8 and int8, like
    ``torch._scaled_mm`` (its tensorwise, rowwise and blockwise recipes).

    Calls ``torch.ops.pycutlass_rt.scaled_mm`` (no autograd).

    Args:
        a: (M, K) row-major float8_e4m3fn, float8_e5m2 or int8.
        b: (K, N) column-major (a (N, K) weight's ``.t()``), of a's dtype.
        scale_a: float32 GPU tensor: one value, or one per row of a ((M, 1) or (M,)); for
            float8 also a block-scale grid, (M, ceil(K/128)) per token or
            (ceil(M/128), ceil(K/128)) per 128x128 block, any strides.
        scale_b: float32 GPU tensor: one value, or one per column of b ((1, N) or (N,));
            or a grid, (ceil(K/128), ceil(N/128)) (a weight's (N/128, K/128)
            ``weight_scale_inv.t()``) or (ceil(K/128), N).
        bias: optional (N,) vector of the output dtype.
        out_dtype: bfloat16 (default), float16, float32 (for float8), or int8 (for int8).
        activation: None or one of ``ACTIVATIONS``, fused after the bias.
        use_fast_accum: float8 only, as ``torch._scaled_mm``'s: lets kernels accumulate
            the products in the MMA's reduced precision (``math="fast_accum"`` of
            :func:`pycutlass_rt.gemm`) instead of adding them into float32 every 128 of K.

    Returns:
        (M, N) tensor of ``out_dtype``.

    Example (on a GPU with fp8 kernels):
        >>> import torch, pycutlass_rt.torch as pt
        >>> a = torch.randn(64, 128, device="cuda").to(torch.float8_e4m3fn)
        >>> w = torch.randn(32, 128, device="cuda").to(torch.float8_e4m3fn)
        >>> sa = torch.rand(64, 1, device="cuda"); sw = torch.rand(1, 32, device="cuda")
        >>> y = pt.scaled_mm(a, w.t(), sa, sw, out_dtype=torch.bfloat16)
        >>> y.shape, y.dtype
        (torch.Size([64, 32]), torch.bfloat16)
    """
    return _scaled_mm(a, b, scale_a, scale_b, bias, out_dtype, activation, use_fast_accum)


def quantize(x, dtype=None, granularity="group"):
    """``x`` quantized to float8_e4m3fn (default) or int8 with its float32 scales,
    ``x ~= q * scale`` (:func:`pycutlass_rt.quantize`), as an operator: traced by
    ``torch.compile`` without a graph break, captured in CUDA graphs.

    Args:
        x: (..., K) float16, bfloat16 or float32.
        dtype: torch.float8_e4m3fn (default) or torch.int8.
        granularity: "tensor", "token", "group" (per row and 128 of K) or "block" (a 2-D
            weight's 128x128 blocks).

    Returns:
        ``(q, scale)``: q of x's shape, scale shaped as pycutlass_rt.quantize makes it
        (groups M-major: the layout scaled_mm's block scales and torch._scaled_mm take).

    Example:
        >>> import torch, pycutlass_rt.torch as pt
        >>> q, s = pt.quantize(torch.randn(4, 300), granularity="group")
        >>> q.dtype, tuple(s.shape), s.stride()
        (torch.float8_e4m3fn, (4, 3), (1, 4))
    """
    return _quantize(x, torch.float8_e4m3fn if dtype is None else dtype, granularity)


def grouped_mm(x, w, offs):
    """A mixture-of-experts GEMM in one launch, like ``torch._grouped_mm(x, w, offs=offs)``.

    Rows of ``x`` are sorted by expert; expert ``e`` owns rows ``offs[e-1]:offs[e]``
    (``0:offs[0]`` for the first) and ``out[those rows] = x[those rows] @ w[e]``. Rows
    past ``offs[-1]`` are not written (their gradient is zero). ``offs`` stays on the GPU:
    nothing synchronizes, and CUDA graphs replay new routings. Autograd gives x's
    gradient (by the same grouped kernel); w's raises NotImplementedError.

    Args:
        x: (T, K) float16 or bfloat16 tokens.
        w: (E, K, N) expert weights of x's dtype, any strides (``w_nk.transpose(1, 2)``
            for (E, N, K) Linear weights).
        offs: (E,) int32 (or int64) GPU vector of end offsets.

    Returns:
        (T, N) tensor of x's dtype.

    Example (on a GPU):
        >>> import torch, pycutlass_rt.torch as pt
        >>> x = torch.randn(1000, 1024, device="cuda", dtype=torch.bfloat16)
        >>> w = torch.randn(8, 1024, 512, device="cuda", dtype=torch.bfloat16)
        >>> offs = torch.tensor([100, 100, 400, 420, 700, 800, 990, 1000], device="cuda", dtype=torch.int32)
        >>> pt.grouped_mm(x, w, offs).shape
        torch.Size([1000, 512])
    """
    return _grouped_mm(x, w, offs)


def scaled_grouped_mm(x, w, scale_x, scale_w, offs, bias=None, out_dtype=None, activation=None):
    """An fp8 mixture-of-experts GEMM in one launch, like
    ``torch._scaled_grouped_mm(x, w, scale_x, scale_w, offs=offs, out_dtype=out_dtype)``
    (its 2-D x by 3-D w case), with a bias and an activation fused.

    Rows of ``x`` are sorted by expert; expert ``e`` owns rows ``offs[e-1]:offs[e]``
    (``0:offs[0]`` for the first) and
    ``out[those rows] = act((x[those rows] * scale_x) @ (w[e] * scale_w[e]) + bias[e])``.
    Rows no expert covers (past ``offs[-1]``) are zeros: the CUDA implementation allocates
    its output with zeros, as :func:`pycutlass_rt.moe_gemm` leaves those rows untouched.
    ``offs`` and the scales stay on the GPU: nothing synchronizes, and CUDA graphs replay
    new routings and new per-token scales. Calls ``torch.ops.pycutlass_rt.scaled_grouped_mm``
    (one :func:`pycutlass_rt.moe_gemm`); an inference operator: it has no autograd (backward
    raises NotImplementedError). CPU tensors run a float64 reference in torch.

    Args:
        x: (T, K) row-major float8_e4m3fn tokens (other strides are copied first).
        w: (E, K, N) float8_e4m3fn expert weights, K-major: ``w_enk.transpose(1, 2)`` of
            an (E, N, K) stack of Linear weights (the layout the fp8 grouped kernels take;
            another raises UnsupportedError on the GPU).
        scale_x: x's float32 dequantizing scales: one value (per tensor), or (T,) / (T, 1)
            (per token, as :func:`quantize` with ``granularity="token"`` makes them); or,
            with a grid scale_w, DeepSeek-V3's block scales: (T, ceil(K/128)), one per
            token and 128 of K, in any strides (:func:`quantize` with
            ``granularity="group"`` makes its M-major one).
        scale_w: w's float32 scales: one value, (E,) (per expert), or (E, N) (per expert and
            output channel); or, with a grid scale_x, (E, ceil(K/128), ceil(N/128)), one
            per expert and 128 x 128 block of its (N, K) weight, each expert's K blocks
            contiguous (strides (any, 1, ceil(K/128))): a checkpoint's ``weight_scale_inv``
            (E, ceil(N/128), ceil(K/128)), contiguous, passed ``.transpose(1, 2)`` (per
            expert, :func:`quantize` with ``granularity="block"`` makes one (ceil(N/128),
            ceil(K/128)): stack them). Another layout of that grid raises
            UnsupportedError on the GPU. Grids come in pairs (both, or neither): a 3-D
            scale_w (but a (1, 1, 1) one value) beside a 2-D scale_x is a pair, so where
            ceil(K/128) == 1 a (T, 1) scale_x is x's grid (the same scales as per token). Partial last blocks (K or N not a
            multiple of 128) take their block's scale; the bias and activation apply as
            with the other scales.
        offs: (E,) int32 (or int64) vector of end offsets on x's device.
        bias: optional (N,) shared by the experts, or (E, N) one per expert, of the output
            dtype.
        out_dtype: bfloat16 (the default; what the fp8 grouped kernels write).
        activation: None or one of ``ACTIVATIONS``, fused after the bias.

    Returns:
        (T, N) tensor of ``out_dtype``.

    Raises:
        RuntimeError: shapes, dtypes or devices that do not fit, naming the operator.
        UnsupportedError: no fp8 grouped kernel of this build for the problem, or a w grid
            not packed per expert (on the GPU).

    Example:
        >>> import torch, pycutlass_rt.torch as pt
        >>> x = torch.randn(6, 32).to(torch.float8_e4m3fn)
        >>> w = torch.randn(3, 16, 32).to(torch.float8_e4m3fn).transpose(1, 2)  # (E, K, N)
        >>> sx, sw = torch.rand(6), torch.rand(3, 16)
        >>> offs = torch.tensor([2, 2, 5], dtype=torch.int32)  # row 5: no expert
        >>> y = pt.scaled_grouped_mm(x, w, sx, sw, offs, activation="silu")
        >>> y.shape, y.dtype, bool((y[5] == 0).all())
        (torch.Size([6, 16]), torch.bfloat16, True)

    On a GPU with fp8 grouped kernels, the same call on CUDA tensors (x quantized per
    token by :func:`quantize`) runs one kernel::

        xq, sx = pt.quantize(x_bf16, granularity="token")
        y = pt.scaled_grouped_mm(xq, wq.transpose(1, 2), sx, sw, offs, bias, None, "silu")

    DeepSeek-V3's block-scaled layer (its checkpoint's ``weight`` (E, N, K) e4m3 and
    ``weight_scale_inv`` (E, ceil(N/128), ceil(K/128)), stacked over the experts) on a
    build with block-scaled fp8 grouped kernels::

        xq, sx = pt.quantize(x_bf16, granularity="group")  # sx: (T, ceil(K/128))
        y = pt.scaled_grouped_mm(
            xq, weight.transpose(1, 2), sx, weight_scale_inv.transpose(1, 2), offs
        )
    """
    return _scaled_grouped_mm(x, w, scale_x, scale_w, offs, bias, out_dtype, activation)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, activation=None):
    """``act(F.conv2d(x, weight, bias, stride, padding, dilation, groups))``, fused.

    Calls ``torch.ops.pycutlass_rt.conv2d``: one :func:`pycutlass_rt.conv2d` kernel (an
    implicit GEMM on NHWC memory) with the bias and activation in its epilogue. Inputs
    that are not ``channels_last`` are copied to it first; the output is ``channels_last``
    (keep a network in that format to save the copies). Gradients of x and weight are the
    library's dgrad and wgrad convolutions; the bias's is a sum. Where the build's kernel
    list has nothing for the pass's dtype and form (float64 but pointwise, float32 on
    TF32 in a build without TF32 convolution kernels, a depthwise convolution in a build
    without the direct depthwise kernels of that pass (the default one), and where
    float32, with a channel multiplier or with channels short of 16-byte vectors, a
    grouped one with a bias), torch's own convolution (cuDNN) runs it
    instead, the activation after, logged once (``pycutlass_rt.torch._cuda._TORCH_CONV``
    lists those kinds); a problem the library refuses otherwise raises, and under
    ``PYCUTLASS_RT_STRICT=1`` every one does. float32 runs on TF32 tensor cores, as torch's convolutions do by
    default (with cuDNN's TF32 off, at fp32 accuracy on the GEMM's 3xTF32 kernels, the
    input unfolded). As :func:`linear`, with a gradient needed and an activation whose
    gradient needs the pre-activation (gelu, gelu_tanh, silu, hardswish), the convolution
    runs without it and torch's activation follows, so autograd keeps the pre-activation.

    Args:
        x: (N, C, H, W) CUDA tensor, float16, bfloat16, float32 or float64.
        weight: (K, C/groups, R, S) filters of x's dtype, as ``nn.Conv2d`` stores them.
        bias: optional (K,) vector of x's dtype.
        stride, padding, dilation: ints or (h, w) pairs, as ``F.conv2d``'s (padding is
            numeric: no "same" or "valid").
        groups: input and output channels split into this many groups.
        activation: None or one of ``ACTIVATIONS``, as :func:`linear`'s.

    Returns:
        (N, K, P, Q) channels_last tensor of x's dtype.

    Raises:
        RuntimeError: shapes, dtypes, devices or a geometry that do not fit.
        UnsupportedError: a problem the library refuses where the build has kernels for
            its dtype and form (an implicit GEMM too large, a pinned kernel that cannot
            take it), or any problem without a kernel under ``PYCUTLASS_RT_STRICT=1``.

    Example (on a GPU):
        >>> import torch, pycutlass_rt.torch as pt
        >>> cl = torch.channels_last
        >>> x = torch.randn(8, 64, 56, 56, device="cuda", dtype=torch.float16).to(memory_format=cl)
        >>> w = torch.randn(128, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=cl)
        >>> pt.conv2d(x, w, None, stride=2, padding=1, activation="relu").shape
        torch.Size([8, 128, 28, 28])
    """
    geometry = (stride, padding, dilation, groups)
    return _fused_unless_kept(_conv2d, activation, x, weight, bias, *geometry)
