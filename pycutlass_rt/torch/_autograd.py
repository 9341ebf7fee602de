"""Autograd: the operators' backward formulas, registered on their schemas.

``mm`` and ``linear`` have gradients that are GEMMs of the library (``_grad_mm``, which
is differentiable too); ``conv2d``'s are the library's dgrad and wgrad convolutions
(``_conv2d_dgrad`` and ``_conv2d_wgrad``, differentiable too); ``grouped_mm`` gives x's
gradient; ``scaled_mm`` and ``scaled_grouped_mm`` have none, and ``mm.out`` refuses inputs
that need one (as torch's ``out=`` variants do).
"""

import torch

from ._checks import _act_name, _rows
from ._schema import (
    _LIB,
    _conv2d,
    _conv2d_dgrad,
    _conv2d_wgrad,
    _grad_mm,
    _grouped_mm,
    _linear,
    _mm_out,
)


def _mm_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _mm_backward(ctx, grad):
    """d(a @ b): grad_a = grad @ b.T, grad_b = a.T @ grad, both GEMMs of the library."""
    a, b = ctx.saved_tensors
    grad_a = _grad_mm(grad, b.t()) if ctx.needs_input_grad[0] else None
    grad_b = _grad_mm(a.t(), grad) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b


torch.library.register_autograd("pycutlass_rt::mm", _mm_backward, setup_context=_mm_setup, lib=_LIB)
# the backward's GEMMs are differentiable too (double backward)
torch.library.register_autograd(
    "pycutlass_rt::_grad_mm", _mm_backward, setup_context=_mm_setup, lib=_LIB
)


def _gelu_grad(grad, z):
    return torch.ops.aten.gelu_backward(grad, z)


def _gelu_tanh_grad(grad, z):
    return torch.ops.aten.gelu_backward(grad, z, approximate="tanh")


#: d act(z) / dz applied to the incoming gradient, as torch's own activations compute it:
#: from the pre-activation z ...
_ACT_GRAD = {
    "gelu": _gelu_grad,
    "gelu_tanh": _gelu_tanh_grad,
    "silu": torch.ops.aten.silu_backward,
    "hardswish": torch.ops.aten.hardswish_backward,
}


def _relu_grad(grad, out):
    return torch.ops.aten.threshold_backward(grad, out, 0)


def _leaky_relu_grad(grad, out):  # the slope is positive: the output keeps z's sign
    return torch.ops.aten.leaky_relu_backward(grad, out, 0.01, True)


#: ... or from the output alone, which the operator's forward keeps (no z needed)
_OUT_GRAD = {
    "relu": _relu_grad,
    "sigmoid": torch.ops.aten.sigmoid_backward,
    "tanh": torch.ops.aten.tanh_backward,
    "leaky_relu": _leaky_relu_grad,
}
OUTPUT_GRADIENT = frozenset(_OUT_GRAD)  # activations whose gradient needs only the output


# The pre-activation z = x @ w.T + bias, which the gradient of gelu/gelu_tanh/silu/hardswish
# needs: the operator fuses the activation, so z never exists in its forward pass. relu,
# sigmoid and tanh need no z (their gradients follow from the output). For the others, linear() and
# Linear keep z when a gradient is needed: they call the operator without activation and
# apply torch's activation to z, whose autograd saves z (M x N elements, what nn.Linear
# followed by the activation keeps too) and costs no extra GEMM. The operator called
# directly under autograd recomputes z in backward instead (one more GEMM of the forward's
# size), the only way for an operator whose forward returns the activated output alone.


def _linear_setup(ctx, inputs, output):
    # defaults are filled in by torch.library on current torch; padded for older ones
    x, w, bias, activation = (*inputs, None, None)[:4]
    act = _act_name(activation)
    ctx.act, ctx.inputs = act, len(inputs)
    ctx.save_for_backward(x, w, bias, output if act in _OUT_GRAD else None)


def _linear_backward(ctx, grad):
    x, w, bias, out = ctx.saved_tensors
    act = ctx.act
    if act in _OUT_GRAD:
        grad = _OUT_GRAD[act](grad, out)
    elif act is not None:
        grad = _ACT_GRAD[act](grad, _linear(x, w, bias, None))  # z, recomputed (see above)
    n, k = w.shape
    g2 = grad.reshape(_rows(grad), n)
    need = ctx.needs_input_grad
    grad_x = _grad_mm(g2, w).reshape(x.shape) if need[0] else None  # (M, N) @ (N, K)
    grad_w = _grad_mm(g2.t(), x.reshape(_rows(x), k)) if need[1] else None  # (N, M) @ (M, K)
    grad_bias = g2.sum(0) if bias is not None and need[2] else None
    return (grad_x, grad_w, grad_bias, None)[: ctx.inputs]


torch.library.register_autograd(
    "pycutlass_rt::linear", _linear_backward, setup_context=_linear_setup, lib=_LIB
)


#: conv2d's arguments after x and w, as its schema's defaults (for a torch that passes
#: setup_context the given arguments only)
_CONV_DEFAULTS = (None, [1, 1], [0, 0], [1, 1], 1, None)


def _conv_setup(ctx, inputs, output):
    x, w, bias, stride, padding, dilation, groups, activation = (
        *inputs,
        *_CONV_DEFAULTS[len(inputs) - 2 :],
    )
    act = _act_name(activation)
    ctx.act, ctx.geo, ctx.inputs = act, (stride, padding, dilation, groups), len(inputs)
    ctx.save_for_backward(x, w, bias, output if act in _OUT_GRAD else None)


def _conv_backward(ctx, grad):
    """dx = dgrad(grad, w), dw = wgrad(grad, x): convolutions of the library; the
    activation's gradient first, as linear's (z recomputed where it needs z)."""
    x, w, bias, out = ctx.saved_tensors
    act, geo = ctx.act, ctx.geo
    if act in _OUT_GRAD:
        grad = _OUT_GRAD[act](grad, out)
    elif act is not None:
        grad = _ACT_GRAD[act](grad, _conv2d(x, w, bias, *geo, None))  # z, recomputed
    need = ctx.needs_input_grad
    grad_x = _conv2d_dgrad(grad, w, x.shape, *geo) if need[0] else None
    grad_w = _conv2d_wgrad(grad, x, w.shape, *geo) if need[1] else None
    grad_bias = grad.sum((0, 2, 3)) if bias is not None and need[2] else None
    return (grad_x, grad_w, grad_bias, None, None, None, None, None)[: ctx.inputs]


torch.library.register_autograd(
    "pycutlass_rt::conv2d", _conv_backward, setup_context=_conv_setup, lib=_LIB
)


# The backward passes are linear in each operand, so their own gradients are the other
# passes: <dgrad(dy, w), g> = <dy, conv2d(g, w)> and <wgrad(dy, x), g> = <dy, conv2d(x, g)>
# (double backward).


def _conv_grad_setup(ctx, inputs, output):
    dy, other, _, stride, padding, dilation, groups = inputs
    ctx.geo = (stride, padding, dilation, groups)
    ctx.save_for_backward(dy, other)


def _dgrad_backward(ctx, grad):
    dy, w = ctx.saved_tensors
    need = ctx.needs_input_grad
    grad_dy = _conv2d(grad, w, None, *ctx.geo, None) if need[0] else None
    grad_w = _conv2d_wgrad(dy, grad, w.shape, *ctx.geo) if need[1] else None
    return grad_dy, grad_w, None, None, None, None, None


def _wgrad_backward(ctx, grad):
    dy, x = ctx.saved_tensors
    need = ctx.needs_input_grad
    grad_dy = _conv2d(x, grad, None, *ctx.geo, None) if need[0] else None
    grad_x = _conv2d_dgrad(dy, grad, x.shape, *ctx.geo) if need[1] else None
    return grad_dy, grad_x, None, None, None, None, None


torch.library.register_autograd(
    "pycutlass_rt::_conv2d_dgrad", _dgrad_backward, setup_context=_conv_grad_setup, lib=_LIB
)
torch.library.register_autograd(
    "pycutlass_rt::_conv2d_wgrad", _wgrad_backward, setup_context=_conv_grad_setup, lib=_LIB
)


def _grouped_setup(ctx, inputs, output):
    x, w, offs = inputs
    ctx.save_for_backward(w, offs)


def _grouped_backward(ctx, grad):
    """grad_x = grad @ w[e].T over each expert's rows, by the same grouped kernel; rows no
    expert covers get zeros. grad_w is a GEMM per expert over its own rows (K varies by
    group), which the library's grouped kernels do not compute."""
    w, offs = ctx.saved_tensors
    if ctx.needs_input_grad[1]:
        raise NotImplementedError(
            "pycutlass_rt::grouped_mm computes no gradient for w (a per-expert GEMM over "
            "each expert's rows, which its grouped kernels do not run); detach w, or use "
            "torch._grouped_mm where w is trained"
        )
    grad_x = None
    if ctx.needs_input_grad[0]:
        rows = grad.shape[0]
        if w.shape[0] == 0:
            return grad.new_zeros((rows, w.shape[1])), None, None
        grad_x = _grouped_mm(grad, w.transpose(1, 2), offs)
        covered = torch.arange(rows, device=grad.device) < offs[-1]
        grad_x = torch.where(covered.unsqueeze(1), grad_x, grad_x.new_zeros(()))
    return grad_x, None, None


torch.library.register_autograd(
    "pycutlass_rt::grouped_mm", _grouped_backward, setup_context=_grouped_setup, lib=_LIB
)


def _scaled_backward(ctx, grad):
    raise NotImplementedError(
        "pycutlass_rt::scaled_mm has no backward: its int8/fp8 inputs carry no gradient; "
        "detach the scales and the bias"
    )


torch.library.register_autograd("pycutlass_rt::scaled_mm", _scaled_backward, lib=_LIB)


def _scaled_grouped_backward(ctx, grad):
    raise NotImplementedError(
        "pycutlass_rt::scaled_grouped_mm has no backward (an inference op: its fp8 inputs "
        "carry no gradient); detach the scales and the bias, or train the 16-bit layer "
        "(pycutlass_rt::grouped_mm)"
    )


torch.library.register_autograd(
    "pycutlass_rt::scaled_grouped_mm", _scaled_grouped_backward, lib=_LIB
)


def _quantize_backward(ctx, grad_q, grad_scale):
    raise NotImplementedError(
        "pycutlass_rt::quantize has no backward (rounding has no useful gradient): quantize "
        "detached activations (inference), or train the float layer"
    )


torch.library.register_autograd("pycutlass_rt::quantize", _quantize_backward, lib=_LIB)


_increment_version = getattr(torch.autograd.graph, "increment_version", None) or (
    torch._C._increment_version
)


def _mm_out_autograd(keyset, a, b, *, out):
    """mm.out under autograd: refused where a gradient would be needed (as torch's out=
    variants do), else out's version is bumped (it is written) and the kernel runs."""
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or out.requires_grad):
        raise RuntimeError(
            "pycutlass_rt::mm.out: functions with out=... arguments don't support automatic "
            "differentiation, but one of the arguments requires grad"
        )
    _increment_version(out)
    with torch._C._AutoDispatchBelowAutograd():
        return _mm_out.redispatch(keyset & torch._C._after_autograd_keyset, a, b, out=out)


_LIB.impl("mm.out", _mm_out_autograd, "Autograd", with_keyset=True)
