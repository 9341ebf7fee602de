"""torch operators on pycutlass_rt's kernels: autograd, torch.compile and CUDA graphs.

Importing this module (it imports torch; ``import pycutlass_rt`` never does) registers,
through ``torch.library``, the operators of the ``pycutlass_rt::`` namespace::

    torch.ops.pycutlass_rt.mm(a, b)                           # a @ b
    torch.ops.pycutlass_rt.mm.out(a, b, out=d)                # into d (returns nothing)
    torch.ops.pycutlass_rt.linear(x, w, bias, activation)     # act(x @ w.T + bias), fused
    torch.ops.pycutlass_rt.scaled_mm(a, b, scale_a, scale_b, bias, out_dtype)  # fp8, int8
    torch.ops.pycutlass_rt.grouped_mm(x, w, offs)             # MoE, as torch._grouped_mm

and the functions :func:`mm`, :func:`linear`, :func:`scaled_mm` and :func:`grouped_mm`
that call them, the module :class:`Linear` (``nn.Linear``'s parameters and state_dict,
optionally with a fused activation) and :func:`replace_linear`.

Each operator has a fake (meta) implementation written on symbolic sizes, so
``torch.compile(fullgraph=True)`` traces it without a graph break, with dynamic shapes;
its CUDA implementation allocates the output and makes one :func:`pycutlass_rt.gemm` (or
:func:`pycutlass_rt.moe_gemm`) call on torch's current stream, with no synchronization,
so ``mode="reduce-overhead"`` captures it in its CUDA graphs. ``mm`` and ``linear`` have
autograd: both gradients are GEMMs on pycutlass_rt's kernels, computed by torch only
where the build has no kernel for their dtype and layout (:class:`UnsupportedError`).
CPU tensors are computed by torch's own CPU operators (the library has no CPU kernels),
so a model built on the CPU runs before it moves to the GPU.

Example:
    >>> import torch, pycutlass_rt.torch as pt
    >>> lin = pt.Linear(64, 32, activation="gelu")
    >>> sorted(lin.state_dict()) == sorted(torch.nn.Linear(64, 32).state_dict())
    True
    >>> x = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16)  # doctest: +SKIP
    >>> y = pt.linear(x, lin.weight.cuda().bfloat16(), activation="silu")  # doctest: +SKIP
    >>> f = torch.compile(lambda x, w: pt.linear(x, w, None, "gelu"), fullgraph=True)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from . import gemm as _gemm
from . import moe_gemm as _moe_gemm
from ._call import ACTIVATIONS as _PCR_ACTIVATIONS
from .errors import UnsupportedError

if not hasattr(torch.library, "register_fake") or not hasattr(torch.library, "register_autograd"):
    raise ImportError(
        f"pycutlass_rt.torch needs torch 2.4 or later (torch.library.register_fake and "
        f"register_autograd); this is torch {torch.__version__}"
    )

__all__ = [
    "ACTIVATIONS",
    "Linear",
    "grouped_mm",
    "linear",
    "mm",
    "replace_linear",
    "scaled_mm",
]

#: the activation names pycutlass_rt.gemm fuses ("none" is also taken: no activation)
ACTIVATIONS = tuple(name for name in _PCR_ACTIVATIONS if name != "none")

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
#: what scaled_mm writes, by input dtype (pycutlass_rt's dequantizing epilogues)
_SCALED_OUT = {
    **{t: (torch.bfloat16, torch.float16, torch.float32) for t in _FP8},
    torch.int8: (torch.bfloat16, torch.float16, torch.int8),
}
_HALF = (torch.float16, torch.bfloat16)
_OFFSETS = (torch.int32, torch.int64)

# ---- the operators' schemas ----------------------------------------------------------
# Library.define + Library.impl rather than torch.library.custom_op: the dispatcher calls
# the Python kernels directly, without custom_op's per-call wrapper (its argument
# binding and device selection); benchmarks/torch_ops.py measures both against torch.mm.

_LIB = torch.library.Library("pycutlass_rt", "DEF")
_LIB.define("mm(Tensor a, Tensor b) -> Tensor")
# Returns nothing, as torch.compile functionalizes a mutating custom op on every torch
# from 2.4 on only then (an aliasing return needs torch.Tag.out, which is newer).
_LIB.define("mm.out(Tensor a, Tensor b, *, Tensor(a!) out) -> ()")
_LIB.define("linear(Tensor x, Tensor w, Tensor? bias=None, str? activation=None) -> Tensor")
_LIB.define(
    "scaled_mm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
    "ScalarType? out_dtype=None) -> Tensor"
)
_LIB.define("grouped_mm(Tensor x, Tensor w, Tensor offs) -> Tensor")
# The backward passes' GEMMs: mm's kernel, or torch.mm where the build has none for the
# dtype and layout. Not for users: forward calls raise UnsupportedError instead.
_LIB.define("_grad_mm(Tensor a, Tensor b) -> Tensor")

_OPS = torch.ops.pycutlass_rt
_mm, _mm_out = _OPS.mm.default, _OPS.mm.out
_linear, _scaled_mm = _OPS.linear.default, _OPS.scaled_mm.default
_grouped_mm, _grad_mm = _OPS.grouped_mm.default, _OPS._grad_mm.default


# ---- argument checks, shared by the fake and the real implementations ----------------
# ``check(cond, message, *args)`` raises RuntimeError(message.format(*args)) unless cond.
# Fake implementations check with torch._check (a symbolic size becomes a guard or a
# runtime assert, never a Python int); real ones with _eager_check, which costs a
# comparison where torch._check costs microseconds. Both raise the same messages.


def _eager_check(cond, message, *args):
    if not cond:
        raise RuntimeError(_message(message, args))


def _fake_check(cond, message, *args):
    torch._check(cond, lambda: _message(message, args))


def _message(message, args):
    """The message, with shapes (passed as they are: formatting costs) as tuples."""
    return message.format(*(tuple(a) if isinstance(a, torch.Size) else a for a in args))


def _act_name(activation):
    """None for no activation ("none" too), else the name; ValueError for unknown names."""
    if activation is None or activation == "none":
        return None
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"activation must be None or one of {', '.join(map(repr, ACTIVATIONS))}; "
            f"got {activation!r}"
        )
    return activation


def _same_device(op, check, first, *others):
    for t in others:
        if t is not None:
            check(t.device == first.device, "{}: tensors on {} and {}", op, first.device, t.device)


def _check_matrices(op, check, a, b):
    check(
        a.dim() == 2 and b.dim() == 2,
        "{}: a and b must be matrices, got {}-D and {}-D",
        op,
        a.dim(),
        b.dim(),
    )
    check(a.shape[1] == b.shape[0], "{}: a {} and b {} cannot be multiplied", op, a.shape, b.shape)


def _check_mm(op, check, a, b):
    _check_matrices(op, check, a, b)
    check(
        a.dtype == b.dtype, "{}: a and b must have one dtype, got {} and {}", op, a.dtype, b.dtype
    )
    check(
        a.dtype in _FLOATS,
        "{}: takes float16, bfloat16, float32 or float64, got {} "
        "(int8 and float8: pycutlass_rt::scaled_mm)",
        op,
        a.dtype,
    )
    _same_device(op, check, a, b)


def _check_out(op, check, a, b, out):
    # one symbolic condition per check: `and` would turn a symbolic size into a bool
    shape = "{}: out must be {}x{}, got {}"
    check(out.dim() == 2, shape, op, a.shape[0], b.shape[1], out.shape)
    check(out.shape[0] == a.shape[0], shape, op, a.shape[0], b.shape[1], out.shape)
    check(out.shape[1] == b.shape[1], shape, op, a.shape[0], b.shape[1], out.shape)
    allowed = (a.dtype, torch.float32) if a.dtype in _HALF else (a.dtype,)
    check(
        out.dtype in allowed,
        "{}: out of {} inputs must be one of {}, got {}",
        op,
        a.dtype,
        allowed,
        out.dtype,
    )
    _same_device(op, check, a, out)


def _check_linear(check, x, w, bias, activation):
    op = "pycutlass_rt::linear"
    _act_name(activation)
    check(
        x.dim() >= 1 and w.dim() == 2,
        "{}: x needs a dimension and w two, got {}-D and {}-D",
        op,
        x.dim(),
        w.dim(),
    )
    check(
        x.shape[-1] == w.shape[1],
        "{}: x has {} features, w (out_features x in_features) {}x{}",
        op,
        x.shape[-1],
        w.shape[0],
        w.shape[1],
    )
    check(
        x.dtype == w.dtype, "{}: x and w must have one dtype, got {} and {}", op, x.dtype, w.dtype
    )
    check(
        x.dtype in _FLOATS, "{}: takes float16, bfloat16, float32 or float64, got {}", op, x.dtype
    )
    if bias is not None:
        check(
            bias.dim() == 1 and bias.shape[0] == w.shape[0],
            "{}: bias must be a vector of {}, got {}",
            op,
            w.shape[0],
            bias.shape,
        )
        check(bias.dtype == x.dtype, "{}: bias must be {}, got {}", op, x.dtype, bias.dtype)
    _same_device(op, check, x, w, bias)


def _scaled_out_dtype(out_dtype):
    return torch.bfloat16 if out_dtype is None else out_dtype


def _check_scaled_mm(check, a, b, scale_a, scale_b, bias, out_dtype):
    op = "pycutlass_rt::scaled_mm"
    _check_matrices(op, check, a, b)
    check(
        a.dtype in _SCALED_OUT and b.dtype == a.dtype,
        "{}: a and b must both be float8_e4m3fn, float8_e5m2 or int8; got {} and {}",
        op,
        a.dtype,
        b.dtype,
    )
    out, allowed = _scaled_out_dtype(out_dtype), _SCALED_OUT.get(a.dtype, ())
    check(
        out in allowed,
        "{}: out_dtype of {} inputs is one of {}; got {}",
        op,
        a.dtype,
        allowed,
        out,
    )
    for name, s, extent, per in (
        ("scale_a", scale_a, a.shape[0], "row of a ((M, 1) or (M,))"),
        ("scale_b", scale_b, b.shape[1], "column of b ((1, N) or (N,))"),
    ):
        check(s.dtype == torch.float32, "{}: {} must be float32, got {}", op, name, s.dtype)
        check(
            (s.numel() == 1) | (s.numel() == extent),
            "{}: {} holds one value (per tensor) or one per {}; got shape {}",
            op,
            name,
            per,
            s.shape,
        )
    if bias is not None:
        check(
            bias.dim() == 1 and bias.shape[0] == b.shape[1],
            "{}: bias must be a vector of {}, got {}",
            op,
            b.shape[1],
            bias.shape,
        )
        check(bias.dtype == out, "{}: bias must be {}, got {}", op, out, bias.dtype)
    _same_device(op, check, a, b, scale_a, scale_b, bias)


def _check_grouped_mm(check, x, w, offs):
    op = "pycutlass_rt::grouped_mm"
    check(
        x.dim() == 2 and w.dim() == 3 and offs.dim() == 1,
        "{}: x (T, K), w (E, K, N) and offs (E,); got {}-D, {}-D and {}-D",
        op,
        x.dim(),
        w.dim(),
        offs.dim(),
    )
    check(x.shape[1] == w.shape[1], "{}: x has K = {}, w (E, K, N) is {}", op, x.shape[1], w.shape)
    check(
        offs.shape[0] == w.shape[0],
        "{}: offs holds one end offset per expert ({}), got {}",
        op,
        w.shape[0],
        offs.shape[0],
    )
    check(offs.dtype in _OFFSETS, "{}: offs must be int32 or int64, got {}", op, offs.dtype)
    check(
        x.dtype == w.dtype and x.dtype in _HALF,
        "{}: x and w must both be float16 or bfloat16, got {} and {}",
        op,
        x.dtype,
        w.dtype,
    )
    _same_device(op, check, x, w, offs)


def _mm_ok(a, b):
    """_check_mm's conditions in one expression: eager calls test this, and run the
    checks (for their messages) only when it fails."""
    return (
        a.dim() == 2
        and b.dim() == 2
        and a.shape[1] == b.shape[0]
        and a.dtype == b.dtype
        and a.dtype in _FLOATS
        and a.device == b.device
    )


_ACT_OK = frozenset((None, "none", *ACTIVATIONS))


def _linear_ok(x, w, bias, activation):
    """_check_linear's conditions in one expression (as _mm_ok)."""
    return (
        x.dim() >= 1
        and w.dim() == 2
        and x.shape[-1] == w.shape[1]
        and x.dtype == w.dtype
        and x.dtype in _FLOATS
        and x.device == w.device
        and activation in _ACT_OK
        and (
            bias is None
            or (
                bias.dim() == 1
                and bias.shape[0] == w.shape[0]
                and bias.dtype == x.dtype
                and bias.device == x.device
            )
        )
    )


# ---- fake (meta) implementations: shapes and dtypes only, on symbolic sizes ----------


def _rows(x):
    """The rows of x viewed as a matrix: the product of its leading sizes (symbolic ok)."""
    m = 1
    for s in x.shape[:-1]:
        m = m * s
    return m


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


# ---- CUDA implementations: pycutlass_rt's kernels on torch's current stream -----------


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


# ---- CPU implementations: torch's own operators (the library has no CPU kernels) ------


def _gelu_tanh(z):
    return F.gelu(z, approximate="tanh")


#: the activations as torch functions (what pycutlass_rt.gemm fuses, by name)
_ACT_FN = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": _gelu_tanh, "silu": F.silu}


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


def _scaled_mm_cpu(a, b, scale_a, scale_b, bias=None, out_dtype=None):
    _check_scaled_mm(_eager_check, a, b, scale_a, scale_b, bias, out_dtype)
    out = _scaled_out_dtype(out_dtype)
    sa = scale_a.reshape(-1, 1) if scale_a.numel() > 1 else scale_a.reshape(())
    sb = scale_b.reshape(1, -1) if scale_b.numel() > 1 else scale_b.reshape(())
    y = (a.double() @ b.double()) * sa.double() * sb.double()
    if bias is not None:
        y = y + bias.double()
    if out == torch.int8:
        return y.round().clamp(-128, 127).to(torch.int8)
    return y.to(out)


def _grouped_mm_cpu(x, w, offs):
    _check_grouped_mm(_eager_check, x, w, offs)
    out = x.new_zeros((x.shape[0], w.shape[2]))
    start = 0
    for e, end in enumerate(offs.tolist()):  # a host tensor: reading it costs no sync
        end = min(max(end, start), x.shape[0])
        out[start:end] = x[start:end] @ w[e]
        start = end
    return out


for _name, _fn in (
    ("mm", _mm_cpu),
    ("mm.out", _mm_out_cpu),
    ("_grad_mm", _grad_mm_cpu),
    ("linear", _linear_cpu),
    ("scaled_mm", _scaled_mm_cpu),
    ("grouped_mm", _grouped_mm_cpu),
):
    _LIB.impl(_name, _fn, "CPU")


# ---- autograd -------------------------------------------------------------------------


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


#: d act(z) / dz applied to the incoming gradient, as torch's own activations compute it
_ACT_GRAD = {"gelu": _gelu_grad, "gelu_tanh": _gelu_tanh_grad, "silu": torch.ops.aten.silu_backward}


# The pre-activation z = x @ w.T + bias, which the gradient of gelu/gelu_tanh/silu needs:
# the operator fuses the activation, so z never exists in its forward pass. relu needs
# no z (its gradient passes where the output is positive). For the others, linear() and
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
    ctx.save_for_backward(x, w, bias, output if act == "relu" else None)


def _linear_backward(ctx, grad):
    x, w, bias, out = ctx.saved_tensors
    act = ctx.act
    if act == "relu":
        grad = torch.ops.aten.threshold_backward(grad, out, 0)
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


# ---- the Python API --------------------------------------------------------------------


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
        TF32 tensor cores where ``torch.backends.cuda.matmul.allow_tf32`` is set.

    Raises:
        RuntimeError: shapes, dtypes or devices that do not fit.
        UnsupportedError: no kernel of this build for the dtype and layout.

    Example:
        >>> import torch, pycutlass_rt.torch as pt  # doctest: +SKIP
        >>> a = torch.randn(128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)  # doctest: +SKIP
        >>> b = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)  # doctest: +SKIP
        >>> pt.mm(a, b).sum().backward()  # a.grad: a GEMM of the library  # doctest: +SKIP
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
    too. When one is needed and the activation is gelu, gelu_tanh or silu (whose
    gradient needs the pre-activation), the GEMM runs without the activation and torch's
    own activation follows, so autograd keeps the pre-activation (as ``nn.Linear``
    followed by the activation does) rather than recomputing it in backward; relu's
    gradient needs only the output, so it stays fused.

    Args:
        x: (..., K) CUDA tensor, float16, bfloat16, float32 or float64, any leading dims.
        weight: (N, K), as ``nn.Linear`` stores it.
        bias: optional (N,) vector of x's dtype.
        activation: None, "relu", "gelu", "gelu_tanh" or "silu".

    Returns:
        (..., N) tensor of x's dtype.

    Example:
        >>> import torch, pycutlass_rt.torch as pt  # doctest: +SKIP
        >>> x = torch.randn(4, 128, 1024, device="cuda", dtype=torch.bfloat16)  # doctest: +SKIP
        >>> w = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)  # doctest: +SKIP
        >>> pt.linear(x, w, None, "silu").shape  # doctest: +SKIP
        torch.Size([4, 128, 4096])
    """
    if (
        activation is not None
        and activation != "relu"
        and torch.is_grad_enabled()
        and (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
    ):
        act = _act_name(activation)  # the pre-activation kept for backward
        z = _linear(x, weight, bias, None)
        return z if act is None else _ACT_FN[act](z)
    return _linear(x, weight, bias, activation)


def scaled_mm(a, b, scale_a, scale_b, bias=None, out_dtype=None):
    """``(scale_a * a) @ (b * scale_b) + bias`` for float8 and int8, like ``torch._scaled_mm``.

    Calls ``torch.ops.pycutlass_rt.scaled_mm`` (no autograd).

    Args:
        a: (M, K) row-major float8_e4m3fn, float8_e5m2 or int8.
        b: (K, N) column-major (a (N, K) weight's ``.t()``), of a's dtype.
        scale_a: float32 GPU tensor: one value, or one per row of a ((M, 1) or (M,)).
        scale_b: float32 GPU tensor: one value, or one per column of b ((1, N) or (N,)).
        bias: optional (N,) vector of the output dtype.
        out_dtype: bfloat16 (default: the library writes no float8), float16, float32 (for
            float8), or int8 (for int8).

    Returns:
        (M, N) tensor of ``out_dtype``.

    Example:
        >>> import torch, pycutlass_rt.torch as pt  # doctest: +SKIP
        >>> a = torch.randn(64, 128, device="cuda").to(torch.float8_e4m3fn)  # doctest: +SKIP
        >>> w = torch.randn(32, 128, device="cuda").to(torch.float8_e4m3fn)  # doctest: +SKIP
        >>> sa = torch.rand(64, 1, device="cuda"); sw = torch.rand(1, 32, device="cuda")  # doctest: +SKIP
        >>> pt.scaled_mm(a, w.t(), sa, sw, out_dtype=torch.bfloat16)  # doctest: +SKIP
    """
    return _scaled_mm(a, b, scale_a, scale_b, bias, out_dtype)


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

    Example:
        >>> import torch, pycutlass_rt.torch as pt  # doctest: +SKIP
        >>> x = torch.randn(1000, 1024, device="cuda", dtype=torch.bfloat16)  # doctest: +SKIP
        >>> w = torch.randn(8, 1024, 512, device="cuda", dtype=torch.bfloat16)  # doctest: +SKIP
        >>> offs = torch.tensor([100, 100, 400, 420, 700, 800, 990, 1000], device="cuda", dtype=torch.int32)  # doctest: +SKIP
        >>> pt.grouped_mm(x, w, offs).shape  # doctest: +SKIP
        torch.Size([1000, 512])
    """
    return _grouped_mm(x, w, offs)


class Linear(nn.Linear):
    """``nn.Linear`` on pycutlass_rt's kernels, with an optional fused activation.

    The same parameters (``weight`` (out_features, in_features), ``bias``), initialization
    and state_dict as ``nn.Linear``, so checkpoints load either way; ``forward`` is
    :func:`linear` (``act(x @ weight.T + bias)`` in one kernel).

    Args:
        in_features, out_features, bias, device, dtype: as for ``nn.Linear``.
        activation: None, "relu", "gelu", "gelu_tanh" or "silu", applied after the bias.

    Example:
        >>> import torch, pycutlass_rt.torch as pt
        >>> lin = pt.Linear(1024, 4096, activation="silu")
        >>> lin
        Linear(in_features=1024, out_features=4096, bias=True, activation='silu')
        >>> lin = lin.to("cuda", torch.bfloat16)  # doctest: +SKIP
        >>> lin(torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)).shape  # doctest: +SKIP
        torch.Size([8, 4096])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device=None,
        dtype=None,
        activation: str | None = None,
    ):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.activation = _act_name(activation)

    @classmethod
    def from_linear(cls, linear: nn.Linear, activation: str | None = None) -> Linear:
        """A :class:`Linear` on ``linear``'s own parameters (shared, not copied): optimizer
        state, tied weights and hooks on the parameters carry over.

        Example:
            >>> import torch, pycutlass_rt.torch as pt
            >>> lin = torch.nn.Linear(16, 8)
            >>> fast = pt.Linear.from_linear(lin, activation="relu")
            >>> fast.weight is lin.weight
            True
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_linear takes an nn.Linear, got {type(linear).__name__}")
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        if linear.bias is None:
            new.register_parameter("bias", None)
        else:
            new.bias = linear.bias
        new.activation = _act_name(activation)
        new.train(linear.training)
        return new

    def forward(self, x):
        return linear(x, self.weight, self.bias, self.activation)

    def extra_repr(self) -> str:
        act = f", activation={self.activation!r}" if self.activation else ""
        return super().extra_repr() + act


def replace_linear(model: nn.Module, activation=None) -> nn.Module:
    """Swaps every ``nn.Linear`` of ``model`` for a :class:`Linear` on the same parameters.

    In place: the model keeps its parameters (so optimizers, tied weights and the
    state_dict stay as they were) and is returned. Only modules whose type is exactly
    ``nn.Linear`` are swapped (subclasses such as attention's out_proj, used through their
    weights, are left as they are); one module used at several places stays one module
    (with the activation of the first of its names).
    A model that is itself an ``nn.Linear`` cannot be swapped in place: its
    :class:`Linear` is returned.

    Args:
        model: the module to change.
        activation: None; one name (fused into every swapped layer: the model must not
            apply it again); or a mapping from a layer's name in
            ``model.named_modules()`` to its activation (other layers get none; a name
            that is not an ``nn.Linear`` of the model raises ValueError).

    Returns:
        ``model``.

    Example:
        >>> import torch, pycutlass_rt.torch as pt
        >>> mlp = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Linear(32, 8))
        >>> mlp = pt.replace_linear(mlp, activation={"0": "gelu"})
        >>> mlp
        Sequential(
          (0): Linear(in_features=8, out_features=32, bias=True, activation='gelu')
          (1): Linear(in_features=32, out_features=8, bias=True)
        )
    """
    by_name = activation if isinstance(activation, Mapping) else None
    if by_name is None:
        _act_name(activation)
    else:
        for act in by_name.values():
            _act_name(act)
    if type(model) is nn.Linear:
        act = by_name.get("", None) if by_name is not None else activation
        return Linear.from_linear(model, act)
    swapped: dict = {}  # id(nn.Linear) -> its Linear, for modules used at several places
    named = dict(model.named_modules(remove_duplicate=False))
    if by_name is not None:
        bad = [n for n in by_name if type(named.get(n)) is not nn.Linear]
        if bad:
            raise ValueError(
                f"replace_linear: {', '.join(map(repr, bad))} name no nn.Linear of the model"
            )
    for parent_name, parent in named.items():
        for child_name, child in list(parent._modules.items()):  # every name, shared or not
            if type(child) is not nn.Linear:
                continue
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            if id(child) not in swapped:
                act = by_name.get(full) if by_name is not None else activation
                swapped[id(child)] = Linear.from_linear(child, act)
            setattr(parent, child_name, swapped[id(child)])
    return model
