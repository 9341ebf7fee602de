"""CUDA implementations: pycutlass_rt's kernels on torch's current stream.

Each allocates its output and makes one :func:`pycutlass_rt.gemm` (or
:func:`pycutlass_rt.moe_gemm`, :func:`pycutlass_rt.conv2d`, ``conv2d_dgrad``,
``conv2d_wgrad``) call, with no synchronization, so CUDA graphs capture it. Where the
build has no kernel for the call's dtype and layout (:mod:`._fallback` decides, from the
library's kernel list, never from one call's refusal), ``_grad_mm`` falls back to
``torch.mm``, ``linear`` to an unfused epilogue, and the conv operators to torch's
convolution (cuDNN); :data:`_TORCH_MM`, :data:`_UNFUSED` and :data:`_TORCH_CONV` hold the
(operator, dtype, layout) of the fallbacks taken, each logged once. Everything the
library refuses otherwise (UnsupportedError included) is raised.
"""

import torch
import torch.nn.functional as F

from .._conv import conv2d as _pcr_conv2d
from .._conv import conv2d_dgrad as _pcr_conv2d_dgrad
from .._conv import conv2d_wgrad as _pcr_conv2d_wgrad
from .._gemm import gemm as _gemm
from .._grouped import moe_gemm as _moe_gemm
from .._quantize import quantize as _pcr_quantize
from ..errors import UnsupportedError
from ._checks import (
    _act_name,
    _check_conv2d,
    _check_conv2d_dgrad,
    _check_conv2d_wgrad,
    _check_grouped_mm,
    _check_linear,
    _check_mm,
    _check_out,
    _check_quantize,
    _check_scaled_grouped_mm,
    _check_scaled_mm,
    _conv_empty,
    _conv_extent,
    _eager_check,
    _grouped_grids,
    _linear_ok,
    _mm_ok,
    _rows,
    _scale_grids,
    _scaled_out_dtype,
    _with_strides_of,
)
from ._fallback import conv_alternatives, conv_form, falls_back, gemm_layouts, kernel_dtype
from ._precision import tf32_conv, tf32_matmul
from ._schema import _LIB


def _mat(t):
    """``t`` where pycutlass_rt reads it as it is (row- or column-major, any leading
    dimension: the library's layout rule), else a contiguous copy; never a gradient's
    requires_grad (older torch refuses to export such tensors through DLPack)."""
    if t.requires_grad:
        t = t.detach()
    r, c = t.shape
    s0, s1 = t.stride()
    if (s1 == 1 or c <= 1) and (r == 1 or s0 >= max(c, 1)):
        return t
    if (s0 == 1 or r <= 1) and (c == 1 or s1 >= max(r, 1)):
        return t
    return t.contiguous()


def _vec(t):
    """A bias or scale vector as the library reads it: contiguous, detached."""
    if t is None:
        return None
    if t.requires_grad:
        t = t.detach()
    return t if t.is_contiguous() else t.contiguous()


def _math(dtype):
    """pycutlass_rt.gemm's math= for torch's float32 matmul setting: TF32 tensor cores where
    torch allows them (_precision.tf32_matmul), else fp32 accuracy."""
    if dtype is torch.float32 and tf32_matmul():
        return "tf32"
    return None


def _mm_cuda(a, b):
    if not _mm_ok(a, b):
        _check_mm("pycutlass_rt::mm", _eager_check, a, b)
    a, b = _mat(a), _mat(b)
    out = a.new_empty((a.shape[0], b.shape[1]))
    return _gemm(a, b, None, out, math=_math(a.dtype))


def _mm_out_cuda(a, b, *, out):
    if not _mm_ok(a, b):
        _check_mm("pycutlass_rt::mm.out", _eager_check, a, b)
    _check_out("pycutlass_rt::mm.out", _eager_check, a, b, out)
    _gemm(_mat(a), _mat(b), None, out, math=_math(a.dtype))


def _gemm_falls_back(taken, op, a, b, math, fused, instead):
    """Whether the GEMM of matrices a and b (out in a's dtype) of operator ``op`` runs
    ``instead``: where the build has no kernel for its dtype and layout (_fallback)."""
    layouts = gemm_layouts(a, b)
    dtype = kernel_dtype(a.dtype, math)
    out = kernel_dtype(a.dtype)
    need = (("gemm", layouts),)
    return falls_back(taken, op, a.device.index, layouts[0], dtype, out, need, fused, instead)


#: (operator, dtype, layout) of the backward GEMMs torch.mm runs: no kernel in the build
_TORCH_MM: set = set()


def _grad_mm_cuda(a, b):
    if not _mm_ok(a, b):
        _check_mm("pycutlass_rt::_grad_mm", _eager_check, a, b)
    a, b = _mat(a), _mat(b)
    out = a.new_empty((a.shape[0], b.shape[1]))
    math = _math(a.dtype)
    if _gemm_falls_back(_TORCH_MM, "_grad_mm", a, b, math, False, "torch.mm runs such calls"):
        return torch.mm(a, b, out=out)
    return _gemm(a, b, None, out, math=math)


def _gelu_(y):
    return torch.ops.aten.gelu_(y)


def _gelu_tanh_(y):
    return torch.ops.aten.gelu_(y, approximate="tanh")


#: in-place activations, for a build without the fused epilogue for the dtype
_ACT_INPLACE = {
    "relu": torch.relu_,
    "gelu": _gelu_,
    "gelu_tanh": _gelu_tanh_,
    "silu": torch.ops.aten.silu_,
    "sigmoid": torch.sigmoid_,
    "tanh": torch.tanh_,
    "hardswish": torch.ops.aten.hardswish_,
    "leaky_relu": torch.ops.aten.leaky_relu_,
}
#: (operator, dtype, layout) of the linear calls whose bias and activation run unfused: no
#: bias/activation kernel in the build
_UNFUSED: set = set()
_UNFUSED_WORDS = "the bias is added as C and torch's activation runs after"


def _linear_cuda(x, w, bias=None, activation=None):
    if not _linear_ok(x, w, bias, activation):
        _check_linear(_eager_check, x, w, bias, activation)
    act = _act_name(activation)
    n, k = w.shape
    x2 = _mat(x if x.dim() == 2 else x.reshape(_rows(x), k))
    wt = _mat(w).t()  # nn.Linear's (N, K) row-major weight is a column-major (K, N) b: tn
    y = x2.new_empty((x2.shape[0], n))
    math = _math(x.dtype)
    if bias is None and act is None:
        _gemm(x2, wt, None, y, math=math)
    else:
        bias = _vec(bias)
        if not _gemm_falls_back(_UNFUSED, "linear", x2, wt, math, True, _UNFUSED_WORDS):
            _gemm(x2, wt, None, y, bias=bias, activation=act, math=math)
        else:
            # No bias/activation kernel for this dtype and layout in the build: the bias
            # comes in as C (still one pycutlass_rt GEMM) and the activation runs after.
            c = None if bias is None else bias.expand(y.shape)
            _gemm(x2, wt, c, y, beta=0.0 if c is None else 1.0, math=math)
            if act is not None:
                _ACT_INPLACE[act](y)
    return y if x.dim() == 2 else y.view(*x.shape[:-1], n)


def _scaled_mm_cuda(
    a, b, scale_a, scale_b, bias=None, out_dtype=None, activation=None, use_fast_accum=False
):
    _check_scaled_mm(_eager_check, a, b, scale_a, scale_b, bias, out_dtype, activation)
    out = a.new_empty((a.shape[0], b.shape[1]), dtype=_scaled_out_dtype(out_dtype))
    # a and b as given: the kernels take K-major operands (a row-major, b column-major),
    # as torch._scaled_mm does, and a layout without a kernel raises UnsupportedError.
    # Block-scale grids are read with their strides, never copied.
    if not _scale_grids(a, b, scale_a, scale_b):
        scale_a, scale_b = _vec(scale_a), _vec(scale_b)
    act = _act_name(activation)
    math = "fast_accum" if use_fast_accum else None  # int8 ignores it, as torch does
    return _gemm(
        a,
        b,
        None,
        out,
        bias=_vec(bias),
        scale_a=scale_a,
        scale_b=scale_b,
        activation=act,
        math=math,
    )


def _quantize_cuda(x, dtype, granularity):
    _check_quantize(_eager_check, x, dtype, granularity)
    if x.requires_grad:
        x = x.detach()
    return _pcr_quantize(x, str(dtype).split(".")[-1], granularity)


def _grouped_mm_cuda(x, w, offs):
    _check_grouped_mm(_eager_check, x, w, offs)
    if x.requires_grad or x.stride(1) != 1 or x.stride(0) < x.shape[1]:
        x = x.detach().contiguous()  # the library reads x row-major
    if w.requires_grad:
        w = w.detach()
    out = x.new_empty((x.shape[0], w.shape[2]))
    # offs as torch._grouped_mm takes them (E end offsets) is a form moe_gemm reads as is;
    # they stay on the GPU (no synchronization, capturable)
    return _moe_gemm(x, w, offs, out)


def _grid(t):
    """A block-scale grid as the library reads it: its strides as they are, detached."""
    return t.detach() if t.requires_grad else t


def _w_grid_packed(scale_w):
    """Whether w's (E, Kb, Nb) grid has each expert's K blocks contiguous, strides
    (any, 1, Kb), as moe_gemm's block-scaled kernels read it (the strides of a size-1
    dimension say nothing: never stepped over)."""
    _, kb, nb = scale_w.shape
    _, s_k, s_n = scale_w.stride()
    return (kb <= 1 or s_k == 1) and (nb <= 1 or s_n == kb)


def _scaled_grouped_mm_cuda(
    x, w, scale_x, scale_w, offs, bias=None, out_dtype=None, activation=None
):
    op = "pycutlass_rt::scaled_grouped_mm"
    _check_scaled_grouped_mm(
        _eager_check, x, w, scale_x, scale_w, offs, bias, out_dtype, activation
    )
    if x.requires_grad or x.stride(1) != 1 or x.stride(0) < x.shape[1]:
        x = x.detach().contiguous()  # the library reads x row-major
    if w.requires_grad:
        w = w.detach()
    if _grouped_grids(scale_x, scale_w):
        # Block-scale grids as given, never copied: x's in any strides (moe_gemm packs it
        # per expert on the GPU); w's must be packed per expert, its K blocks contiguous.
        if not _w_grid_packed(scale_w):
            raise UnsupportedError(
                f"{op}: scale_w's block-scale grid (E, ceil(K/128), ceil(N/128)) = "
                f"{tuple(scale_w.shape)} must have each expert's K blocks contiguous "
                f"(strides (any, 1, {scale_w.shape[1]})); got strides {scale_w.stride()}. "
                "Pass weight_scale_inv.transpose(1, 2) of a contiguous (E, ceil(N/128), "
                "ceil(K/128)) weight_scale_inv"
            )
        scale_x, scale_w = _grid(scale_x), _grid(scale_w)
    else:
        scale_x, scale_w = _vec(scale_x), _vec(scale_w)
    # w as given: the fp8 grouped kernels take it K-major (an (E, N, K) stack's
    # .transpose(1, 2)), as torch._scaled_grouped_mm does; another layout raises
    # UnsupportedError. Zeros, not empty: moe_gemm leaves the rows no expert covers
    # untouched, and the operator returns them as zeros (as the CPU implementation).
    out = torch.zeros((x.shape[0], w.shape[2]), dtype=_scaled_out_dtype(out_dtype), device=x.device)
    return _moe_gemm(
        x,
        w,
        offs,
        out,
        bias=_vec(bias),
        activation=_act_name(activation),
        scale_a=scale_x,
        scale_b=scale_w,
    )


_CL = torch.channels_last


def _nhwc(t):
    """A conv operand as pycutlass_rt reads it: channels_last (its NHWC permutation
    packed), else a channels_last copy; detached, as :func:`_mat`."""
    if t.requires_grad:
        t = t.detach()
    return t if t.permute(0, 2, 3, 1).is_contiguous() else t.contiguous(memory_format=_CL)


def _conv_math(dtype):
    """The conv functions' math= for torch's float32 convolution setting: TF32 tensor cores
    where torch allows them (_precision.tf32_conv: cuDNN's, on by default), else "ieee"
    (fp32 accuracy: the library runs it as GEMMs on the unfolded input)."""
    if dtype is torch.float32:
        return "tf32" if tf32_conv() else "ieee"
    return None


#: (operator, dtype, layout) of the convolution passes torch's convolution (cuDNN) runs:
#: no kernel in the build for the dtype and form (_fallback.conv_form)
_TORCH_CONV: set = set()
_TORCH_CONV_WORDS = "torch's convolution runs such calls"


def _conv_falls_back(op, pass_, t, math, groups, filters, geometry, fused, bias=False):
    """Whether a convolution pass of operator ``op`` on ``t``'s dtype and device, with
    filters of shape ``filters`` (K, C/groups, R, S), runs torch's convolution instead."""
    form = conv_form(pass_, groups, filters, geometry, bias, t.element_size())
    dtype = kernel_dtype(t.dtype, math)
    need = conv_alternatives(pass_, form, dtype)
    out = kernel_dtype(t.dtype)
    device = t.device.index
    return falls_back(_TORCH_CONV, op, device, form, dtype, out, need, fused, _TORCH_CONV_WORDS)


def _conv2d_cuda(
    x, w, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, activation=None
):
    _check_conv2d(_eager_check, x, w, bias, stride, padding, dilation, groups, activation)
    act = _act_name(activation)
    x, w, bias = _nhwc(x), _nhwc(w), _vec(bias)
    p, q = _conv_extent(x.shape, w.shape, stride, padding, dilation)
    y = _conv_empty(x, (x.shape[0], w.shape[0], p, q))
    math = _conv_math(x.dtype)
    geo = (stride, padding, dilation)
    fused = bias is not None or act is not None
    if not _conv_falls_back(
        "conv2d", "fprop", x, math, groups, w.shape, geo, fused, bias is not None
    ):
        _pcr_conv2d(x, w, bias, stride, padding, dilation, groups, activation=act, out=y, math=math)
        return y
    y = _with_strides_of(y, F.conv2d(x, w, bias, stride, padding, dilation, groups))
    return y if act is None else _ACT_INPLACE[act](y)


def _conv_grad_cuda(pass_, library, fallback, dy, other, size, *geometry):
    """A gradient ``pass_`` ("dgrad": ``other`` is w; "wgrad": x) into a new channels_last
    tensor of ``size``: ``library`` (pcr.conv2d_dgrad or _wgrad), or ``fallback`` (torch's)
    where the build has no kernel for its dtype and form."""
    stride, padding, dilation, groups = geometry
    dy, other = _nhwc(dy), _nhwc(other)
    out = _conv_empty(dy, size)
    math = _conv_math(dy.dtype)
    filters = other.shape if pass_ == "dgrad" else out.shape  # w's, or dw's
    geo = (stride, padding, dilation)
    if not _conv_falls_back(f"_conv2d_{pass_}", pass_, dy, math, groups, filters, geo, False):
        return library(dy, other, size, *geometry, out=out, math=math)
    return _with_strides_of(out, fallback(dy, other, out, *geometry))


def _conv2d_dgrad_cuda(dy, w, input_size, stride, padding, dilation, groups):
    _check_conv2d_dgrad(_eager_check, dy, w, input_size, stride, padding, dilation, groups)
    return _conv_grad_cuda(
        "dgrad",
        _pcr_conv2d_dgrad,
        lambda dy, w, dx, *geo: torch.nn.grad.conv2d_input(dx.shape, w, dy, *geo),
        dy,
        w,
        input_size,
        stride,
        padding,
        dilation,
        groups,
    )


def _conv2d_wgrad_cuda(dy, x, weight_size, stride, padding, dilation, groups):
    _check_conv2d_wgrad(_eager_check, dy, x, weight_size, stride, padding, dilation, groups)
    return _conv_grad_cuda(
        "wgrad",
        _pcr_conv2d_wgrad,
        lambda dy, x, dw, *geo: torch.nn.grad.conv2d_weight(x, dw.shape, dy, *geo),
        dy,
        x,
        weight_size,
        stride,
        padding,
        dilation,
        groups,
    )


for _name, _fn in (
    ("mm", _mm_cuda),
    ("mm.out", _mm_out_cuda),
    ("_grad_mm", _grad_mm_cuda),
    ("linear", _linear_cuda),
    ("scaled_mm", _scaled_mm_cuda),
    ("quantize", _quantize_cuda),
    ("grouped_mm", _grouped_mm_cuda),
    ("scaled_grouped_mm", _scaled_grouped_mm_cuda),
    ("conv2d", _conv2d_cuda),
    ("_conv2d_dgrad", _conv2d_dgrad_cuda),
    ("_conv2d_wgrad", _conv2d_wgrad_cuda),
):
    _LIB.impl(_name, _fn, "CUDA")
