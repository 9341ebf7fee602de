"""CUDA implementations: pycutlass_rt's kernels on torch's current stream.

Each allocates its output and makes one :func:`pycutlass_rt.gemm` (or
:func:`pycutlass_rt.moe_gemm`) call, with no synchronization, so CUDA graphs capture it.
Where the build has no kernel, ``_grad_mm`` falls back to ``torch.mm`` and ``linear`` to
an unfused epilogue; :data:`_TORCH_MM` and :data:`_UNFUSED` remember those cases.
"""

import torch

from .. import gemm as _gemm
from .. import moe_gemm as _moe_gemm
from ..errors import UnsupportedError
from ._checks import (
    _act_name,
    _check_grouped_mm,
    _check_linear,
    _check_mm,
    _check_out,
    _check_scaled_mm,
    _eager_check,
    _linear_ok,
    _mm_ok,
    _rows,
    _scaled_out_dtype,
)
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
    torch allows them (torch.backends.cuda.matmul.allow_tf32), else fp32 accuracy."""
    if dtype is torch.float32 and torch.backends.cuda.matmul.allow_tf32:
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


#: (device, dtype, a row-major, b row-major) of backward GEMMs pycutlass_rt has no kernel for
_TORCH_MM: set = set()


def _grad_mm_cuda(a, b):
    if not _mm_ok(a, b):
        _check_mm("pycutlass_rt::_grad_mm", _eager_check, a, b)
    a, b = _mat(a), _mat(b)
    out = a.new_empty((a.shape[0], b.shape[1]))
    key = (a.device.index, a.dtype, a.stride(1) == 1, b.stride(1) == 1)
    if key not in _TORCH_MM:
        try:
            return _gemm(a, b, None, out, math=_math(a.dtype))
        except UnsupportedError:
            _TORCH_MM.add(key)  # no kernel for this dtype and layout: torch's from now on
    return torch.mm(a, b, out=out)


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
#: (device, dtype, bias?, activation, x row-major, w row-major) with no fused kernel
_UNFUSED: set = set()


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
        key = (x.device.index, x.dtype, bias is not None, act, x2.stride(1) == 1, w.stride(1) == 1)
        fused = key not in _UNFUSED
        if fused:
            try:
                _gemm(x2, wt, None, y, bias=bias, activation=act, math=math)
            except UnsupportedError:
                _UNFUSED.add(key)
                fused = False
        if not fused:
            # No bias/activation kernel for this dtype (float32, float64): the bias comes
            # in as C (still one pycutlass_rt GEMM) and the activation runs in place after.
            c = None if bias is None else bias.expand(y.shape)
            _gemm(x2, wt, c, y, beta=0.0 if c is None else 1.0, math=math)
            if act is not None:
                _ACT_INPLACE[act](y)
    return y if x.dim() == 2 else y.view(*x.shape[:-1], n)


def _scaled_mm_cuda(a, b, scale_a, scale_b, bias=None, out_dtype=None):
    _check_scaled_mm(_eager_check, a, b, scale_a, scale_b, bias, out_dtype)
    out = a.new_empty((a.shape[0], b.shape[1]), dtype=_scaled_out_dtype(out_dtype))
    # a and b as given: the kernels take K-major operands (a row-major, b column-major),
    # as torch._scaled_mm does, and a layout without a kernel raises UnsupportedError
    return _gemm(a, b, None, out, bias=_vec(bias), scale_a=_vec(scale_a), scale_b=_vec(scale_b))


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


for _name, _fn in (
    ("mm", _mm_cuda),
    ("mm.out", _mm_out_cuda),
    ("_grad_mm", _grad_mm_cuda),
    ("linear", _linear_cuda),
    ("scaled_mm", _scaled_mm_cuda),
    ("grouped_mm", _grouped_mm_cuda),
):
    _LIB.impl(_name, _fn, "CUDA")
