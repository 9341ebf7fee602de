"""Fake (meta) implementations: shapes and dtypes only, on symbolic sizes.

What ``torch.compile(fullgraph=True)`` traces each operator with (dynamic shapes
included), checking the arguments as the real implementations do.
"""

import torch

from ._checks import (
    _check_grouped_mm,
    _check_linear,
    _check_mm,
    _check_out,
    _check_scaled_mm,
    _fake_check,
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
def _scaled_mm_fake(a, b, scale_a, scale_b, bias=None, out_dtype=None):
    _check_scaled_mm(_fake_check, a, b, scale_a, scale_b, bias, out_dtype)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=_scaled_out_dtype(out_dtype))


@torch.library.register_fake("pycutlass_rt::grouped_mm", lib=_LIB)
def _grouped_mm_fake(x, w, offs):
    _check_grouped_mm(_fake_check, x, w, offs)
    return x.new_empty((x.shape[0], w.shape[2]))
