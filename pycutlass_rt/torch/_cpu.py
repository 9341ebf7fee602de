"""CPU implementations: torch's own operators (the library has no CPU kernels).

So a model built on the CPU runs before it moves to the GPU, and the registrations are
tested without a GPU.
"""

import torch
import torch.nn.functional as F

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
    _eager_check,
    _grouped_grids,
    _linear_ok,
    _mm_ok,
    _quant_grid,
    _scale_grids,
    _scaled_out_dtype,
    _with_strides_of,
)
from ._schema import _LIB


def _gelu_tanh(z):
    return F.gelu(z, approximate="tanh")


#: the activations as torch functions (what pycutlass_rt.gemm fuses, by name)
_ACT_FN = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": _gelu_tanh,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "hardswish": F.hardswish,
    "leaky_relu": F.leaky_relu,
}


def _mm_cpu(a, b):
    if not _mm_ok(a, b):
        _check_mm("pycutlass_rt::mm", _eager_check, a, b)
    return torch.mm(a, b)


def _mm_out_cpu(a, b, *, out):
    if not _mm_ok(a, b):
        _check_mm("pycutlass_rt::mm.out", _eager_check, a, b)
    _check_out("pycutlass_rt::mm.out", _eager_check, a, b, out)
    out.copy_(torch.mm(a.to(out.dtype), b.to(out.dtype)))


def _grad_mm_cpu(a, b):
    if not _mm_ok(a, b):
        _check_mm("pycutlass_rt::_grad_mm", _eager_check, a, b)
    return torch.mm(a, b)


def _linear_cpu(x, w, bias=None, activation=None):
    if not _linear_ok(x, w, bias, activation):
        _check_linear(_eager_check, x, w, bias, activation)
    act = _act_name(activation)
    y = F.linear(x, w, bias)
    return y if act is None else _ACT_FN[act](y)


def _block_product(a, b, scale_a, scale_b):
    """The block-scaled product in float64: each 128 of K's partial product times its
    K-block's scales (a's per row or per 128 rows, b's per column or per 128 columns)."""
    m, k = a.shape
    n = b.shape[1]
    y = torch.zeros(m, n, dtype=torch.float64)
    for kb in range(-(-k // 128)):
        ks = slice(kb * 128, (kb + 1) * 128)
        ra, rb = scale_a[:, kb].double(), scale_b[kb, :].double()
        if ra.shape[0] != m:
            ra = ra.repeat_interleave(128)[:m]
        if rb.shape[0] != n:
            rb = rb.repeat_interleave(128)[:n]
        y += (a[:, ks].double() @ b[ks, :].double()) * ra[:, None] * rb[None, :]
    return y


def _scaled_mm_cpu(
    a, b, scale_a, scale_b, bias=None, out_dtype=None, activation=None, use_fast_accum=False
):  # float64 products: use_fast_accum (a permission) changes nothing here
    _check_scaled_mm(_eager_check, a, b, scale_a, scale_b, bias, out_dtype, activation)
    out = _scaled_out_dtype(out_dtype)
    if _scale_grids(a, b, scale_a, scale_b):
        y = _block_product(a, b, scale_a, scale_b)
    else:
        sa = scale_a.reshape(-1, 1) if scale_a.numel() > 1 else scale_a.reshape(())
        sb = scale_b.reshape(1, -1) if scale_b.numel() > 1 else scale_b.reshape(())
        y = (a.double() @ b.double()) * sa.double() * sb.double()
    if bias is not None:
        y = y + bias.double()
    act = _act_name(activation)
    if act is not None:
        y = _ACT_FN[act](y)
    if out == torch.int8:
        return y.round().clamp(-128, 127).to(torch.int8)
    return y.to(out)


def _quantize_cpu(x, dtype, granularity):
    """pycutlass_rt.quantize's arithmetic in torch: the scale of each region is max(|x|,
    1e-10) / qmax, q = x / scale rounded to nearest, saturating."""
    _check_quantize(_eager_check, x, dtype, granularity)
    qmax = 127.0 if dtype == torch.int8 else 448.0
    k = x.shape[-1]
    xf = x.detach().float().reshape(-1, k) if x.dim() != 2 else x.detach().float()
    m = xf.shape[0]
    a = xf.abs()
    if granularity == "tensor":
        amax = a.max().reshape(1, 1) if a.numel() else a.new_zeros(1, 1)
        full = amax.expand(m, k)
    elif granularity == "token":
        amax = a.amax(1, keepdim=True) if k else a.new_zeros(m, 1)
        full = amax.expand(m, k)
    elif granularity == "group":
        groups = F.pad(a, (0, (-k) % 128)).reshape(m, -1, 128)
        amax = groups.amax(2) if groups.numel() else groups.new_zeros(m, groups.shape[1])
        full = amax.repeat_interleave(128, 1)[:, :k]
    else:
        p = F.pad(a, (0, (-k) % 128, 0, (-m) % 128))
        amax = p.reshape(p.shape[0] // 128, 128, p.shape[1] // 128, 128).amax((1, 3))
        full = amax.repeat_interleave(128, 0).repeat_interleave(128, 1)[:m, :k]
    scales = amax.clamp_min(1e-10) / qmax
    q = (xf / (full.clamp_min(1e-10) / qmax)).clamp(-qmax - (dtype == torch.int8), qmax)
    q = q.round().to(torch.int8) if dtype == torch.int8 else q.to(dtype)
    shape, strides = _quant_grid(x, granularity)
    out = torch.empty_strided(shape, strides, dtype=torch.float32)
    out.copy_(scales.reshape(shape))
    return q.reshape(x.shape), out


def _grouped_mm_cpu(x, w, offs):
    _check_grouped_mm(_eager_check, x, w, offs)
    out = x.new_zeros((x.shape[0], w.shape[2]))
    start = 0
    for e, end in enumerate(offs.tolist()):  # a host tensor: reading it costs no sync
        end = min(max(end, start), x.shape[0])
        out[start:end] = x[start:end] @ w[e]
        start = end
    return out


def _scaled_grouped_mm_cpu(
    x, w, scale_x, scale_w, offs, bias=None, out_dtype=None, activation=None
):
    """Each expert's rows dequantized in float64, ``(x * scale_x) @ (w[e] * scale_w[e])``,
    plus the bias and the activation; rows no expert covers are zeros. Block-scale grids
    dequantize block by block: each scale repeated over its 128 of K (and 128 of N), the
    partial last blocks trimmed."""
    _check_scaled_grouped_mm(
        _eager_check, x, w, scale_x, scale_w, offs, bias, out_dtype, activation
    )
    act = _act_name(activation)
    t, k, n = x.shape[0], x.shape[1], w.shape[2]
    if _grouped_grids(scale_x, scale_w):
        # (T, K): x's scale per token and 128 of K; (E, K, N): w's per 128 x 128 block
        sx = scale_x.double().repeat_interleave(128, 1)[:, :k]
        sw = scale_w.double().repeat_interleave(128, 1)[:, :k]
        sw = sw.repeat_interleave(128, 2)[:, :, :n]
    else:
        # one value, or (T, 1) per token
        sx = scale_x.double().reshape(-1, 1)
        # (1, 1, 1) shared, (E, 1, 1) per expert, (E, 1, N) per expert and channel
        sw = scale_w.double().reshape(1, 1, 1) if scale_w.numel() == 1 else scale_w.double()
        sw = sw.reshape(sw.shape[0], 1, -1)
    b = None if bias is None else bias.double().reshape(-1, n)  # (1, N) or (E, N)
    y = torch.zeros((t, n), dtype=torch.float64)
    start = 0
    for e, end in enumerate(offs.tolist()):  # a host tensor: reading it costs no sync
        end = min(max(end, start), t)
        if end > start:
            rows = slice(start, end)
            xd = x[rows].double() * (sx[rows] if sx.shape[0] > 1 else sx)
            z = xd @ (w[e].double() * sw[e if sw.shape[0] > 1 else 0])
            if b is not None:
                z = z + b[e if b.shape[0] > 1 else 0]
            y[rows] = z if act is None else _ACT_FN[act](z)
        start = end
    return y.to(_scaled_out_dtype(out_dtype))


def _channels_last(t):
    """t with the strides of :func:`_conv_empty` (the fake implementations' outputs)."""
    return _with_strides_of(_conv_empty(t, t.shape), t)


def _conv2d_cpu(
    x, w, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, activation=None
):
    _check_conv2d(_eager_check, x, w, bias, stride, padding, dilation, groups, activation)
    act = _act_name(activation)
    y = F.conv2d(x, w, bias, stride, padding, dilation, groups)
    return _channels_last(y if act is None else _ACT_FN[act](y))


def _conv2d_dgrad_cpu(dy, w, input_size, stride, padding, dilation, groups):
    _check_conv2d_dgrad(_eager_check, dy, w, input_size, stride, padding, dilation, groups)
    dx = torch.nn.grad.conv2d_input(input_size, w, dy, stride, padding, dilation, groups)
    return _channels_last(dx)


def _conv2d_wgrad_cpu(dy, x, weight_size, stride, padding, dilation, groups):
    _check_conv2d_wgrad(_eager_check, dy, x, weight_size, stride, padding, dilation, groups)
    dw = torch.nn.grad.conv2d_weight(x, weight_size, dy, stride, padding, dilation, groups)
    return _channels_last(dw)


for _name, _fn in (
    ("mm", _mm_cpu),
    ("mm.out", _mm_out_cpu),
    ("_grad_mm", _grad_mm_cpu),
    ("linear", _linear_cpu),
    ("scaled_mm", _scaled_mm_cpu),
    ("quantize", _quantize_cpu),
    ("grouped_mm", _grouped_mm_cpu),
    ("scaled_grouped_mm", _scaled_grouped_mm_cpu),
    ("conv2d", _conv2d_cpu),
    ("_conv2d_dgrad", _conv2d_dgrad_cpu),
    ("_conv2d_wgrad", _conv2d_wgrad_cpu),
):
    _LIB.impl(_name, _fn, "CPU")
