"""Fake (meta) implementations: shapes and dtypes only, on symbolic sizes.

What ``torch.compile(fullgraph=True)`` traces each operator with (dynamic shapes
included), checking the arguments as the real implementations do. The conv operators'
outputs are channels_last, as the real ones (:func:`_conv_empty`, the same strides).
"""

import torch

from ._checks import (
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
    _fake_check,
    _quant_grid,
    _scaled_out_dtype,
)
from ._schema import _LIB


@torch.library.register_fake("pycutlass_rt::mm", lib=_LIB)
def _mm_fake(a, b):
    _check_mm("pycutlass_rt::mm", _fake_check, a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("pycutlass_rt::mm.out", lib=_LIB)
def _mm_out_fake(a, b, *, out):
    _check_mm("pycutlass_rt::mm.out", _fake_check, a, b)
    _check_out("pycutlass_rt::mm.out", _fake_check, a, b, out)


@torch.library.register_fake("pycutlass_rt::_grad_mm", lib=_LIB)
def _grad_mm_fake(a, b):
    _check_mm("pycutlass_rt::_grad_mm", _fake_check, a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.register_fake("pycutlass_rt::linear", lib=_LIB)
def _linear_fake(x, w, bias=None, activation=None):
    _check_linear(_fake_check, x, w, bias, activation)
    return x.new_empty((*x.shape[:-1], w.shape[0]))


@torch.library.register_fake("pycutlass_rt::scaled_mm", lib=_LIB)
def _scaled_mm_fake(
    a, b, scale_a, scale_b, bias=None, out_dtype=None, activation=None, use_fast_accum=False
):
    _check_scaled_mm(_fake_check, a, b, scale_a, scale_b, bias, out_dtype, activation)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=_scaled_out_dtype(out_dtype))


@torch.library.register_fake("pycutlass_rt::quantize", lib=_LIB)
def _quantize_fake(x, dtype, granularity):
    _check_quantize(_fake_check, x, dtype, granularity)
    shape, strides = _quant_grid(x, granularity)
    scale = torch.empty_strided(shape, strides, dtype=torch.float32, device=x.device)
    return x.new_empty(x.shape, dtype=dtype), scale


@torch.library.register_fake("pycutlass_rt::grouped_mm", lib=_LIB)
def _grouped_mm_fake(x, w, offs):
    _check_grouped_mm(_fake_check, x, w, offs)
    return x.new_empty((x.shape[0], w.shape[2]))


@torch.library.register_fake("pycutlass_rt::scaled_grouped_mm", lib=_LIB)
def _scaled_grouped_mm_fake(
    x, w, scale_x, scale_w, offs, bias=None, out_dtype=None, activation=None
):
    _check_scaled_grouped_mm(_fake_check, x, w, scale_x, scale_w, offs, bias, out_dtype, activation)
    return x.new_empty((x.shape[0], w.shape[2]), dtype=_scaled_out_dtype(out_dtype))


@torch.library.register_fake("pycutlass_rt::conv2d", lib=_LIB)
def _conv2d_fake(
    x, w, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, activation=None
):
    _check_conv2d(_fake_check, x, w, bias, stride, padding, dilation, groups, activation)
    p, q = _conv_extent(x.shape, w.shape, stride, padding, dilation)
    return _conv_empty(x, (x.shape[0], w.shape[0], p, q))


@torch.library.register_fake("pycutlass_rt::_conv2d_dgrad", lib=_LIB)
def _conv2d_dgrad_fake(dy, w, input_size, stride, padding, dilation, groups):
    _check_conv2d_dgrad(_fake_check, dy, w, input_size, stride, padding, dilation, groups)
    return _conv_empty(dy, input_size)


@torch.library.register_fake("pycutlass_rt::_conv2d_wgrad", lib=_LIB)
def _conv2d_wgrad_fake(dy, x, weight_size, stride, padding, dilation, groups):
    _check_conv2d_wgrad(_fake_check, dy, x, weight_size, stride, padding, dilation, groups)
    return _conv_empty(x, weight_size)
