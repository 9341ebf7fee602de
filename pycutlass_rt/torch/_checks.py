"""Argument checks shared by the fake and the real implementations, and their vocabulary.

``check(cond, message, *args)`` raises ``RuntimeError(message.format(*args))`` unless
cond. Fake implementations check with ``torch._check`` (:func:`_fake_check`: a symbolic
size becomes a guard or a runtime assert, never a Python int); real ones with
:func:`_eager_check`, which costs a comparison where ``torch._check`` costs microseconds.
Both raise the same messages. :func:`_mm_ok` and :func:`_linear_ok` test the eager calls'
conditions in one expression first. :func:`_rows` (an operand's rows, viewed as a matrix)
serves the fake, CUDA and autograd code alike, as :func:`_conv_extent` (a convolution's
output size) and :func:`_conv_empty` (its channels_last output) serve the conv operators'.
"""

import torch

from .._call import ACT_PARAMS as _PARAMS
from .._call import ACTIVATIONS as _PCR_ACTIVATIONS

#: the activation names pycutlass_rt.gemm fuses ("none" is also taken: no activation), but
#: those that need parameters (clamp's bounds: the operators' schemas carry none);
#: leaky_relu takes torch's default slope, 0.01
ACTIVATIONS = tuple(
    name
    for name in _PCR_ACTIVATIONS
    if name != "none" and _PARAMS.get(name, ((), ()))[1] is not None
)

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_FP8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
#: what scaled_mm writes, by input dtype (pycutlass_rt's dequantizing epilogues)
_SCALED_OUT = {
    **{t: (torch.bfloat16, torch.float16, torch.float32) for t in _FP8},
    torch.int8: (torch.bfloat16, torch.float16, torch.int8),
}
_HALF = (torch.float16, torch.bfloat16)
_OFFSETS = (torch.int32, torch.int64)


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
    _check_bias(op, check, bias, w.shape[0], x.dtype)
    _same_device(op, check, x, w, bias)


def _scaled_out_dtype(out_dtype):
    return torch.bfloat16 if out_dtype is None else out_dtype


def _is_grid(s, rows, k, block_rows_first):
    """Whether a scale tensor is an fp8 block-scale grid of an operand of ``rows`` by ``k``
    (the library's and torch._scaled_mm's BlockWise1x128 / 128x128 shapes): 2-D, of
    ceil(K/128) along K and ``rows`` or ceil(rows/128) along the other side, and not a
    vector or a single value (a vector's meaning is the same where both fit)."""
    if s.dim() != 2:
        return False
    kb, blocks = -(-k // 128), -(-rows // 128)
    along, kdim = (s.shape[0], s.shape[1]) if block_rows_first else (s.shape[1], s.shape[0])
    fits = kdim == kb and (along == rows or along == blocks)
    return bool(fits and s.numel() != 1 and not (kb == 1 and along == rows))


def _scale_grids(a, b, scale_a, scale_b):
    """Whether scaled_mm's scales are block-scale grids (both are, or neither)."""
    k = a.shape[1]
    return _is_grid(scale_a, a.shape[0], k, True) or _is_grid(scale_b, b.shape[1], k, False)


def _check_scaled_mm(check, a, b, scale_a, scale_b, bias, out_dtype, activation=None):
    op = "pycutlass_rt::scaled_mm"
    _act_name(activation)
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
    if a.dtype in _FP8 and _scale_grids(a, b, scale_a, scale_b):
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        kb = -(-k // 128)
        for name, s, rows, first in (("scale_a", scale_a, m, True), ("scale_b", scale_b, n, False)):
            check(s.dtype == torch.float32, "{}: {} must be float32, got {}", op, name, s.dtype)
            check(
                s.dim() == 2
                and (s.shape[int(first)] == kb)
                and (s.shape[int(not first)] in (rows, -(-rows // 128))),
                "{}: block scales: scale_a ({}, {}) or ({}, {}), scale_b ({}, {}) or ({}, {}); "
                "got {} {}",
                op,
                m,
                kb,
                -(-m // 128),
                kb,
                kb,
                -(-n // 128),
                kb,
                n,
                name,
                s.shape,
            )
    else:
        for name, s, extent, per in (
            ("scale_a", scale_a, a.shape[0], "row of a ((M, 1) or (M,))"),
            ("scale_b", scale_b, b.shape[1], "column of b ((1, N) or (N,))"),
        ):
            check(s.dtype == torch.float32, "{}: {} must be float32, got {}", op, name, s.dtype)
            check(
                (s.numel() == 1) | (s.numel() == extent),
                "{}: {} holds one value (per tensor), one per {}, or a block-scale grid "
                "(float8); got shape {}",
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


#: quantize's output dtypes and granularities
_QUANT_DTYPES = tuple(t for t in (*_FP8[:1], torch.int8))
_GRANULARITIES = ("tensor", "token", "group", "block")


def _check_quantize(check, x, dtype, granularity):
    op = "pycutlass_rt::quantize"
    check(
        granularity in _GRANULARITIES,
        "{}: granularity is one of {}; got {!r}",
        op,
        _GRANULARITIES,
        granularity,
    )
    check(dtype in _QUANT_DTYPES, "{}: dtype is float8_e4m3fn or int8; got {}", op, dtype)
    check(x.dim() >= 1, "{}: x needs a dimension (..., K)", op)
    check(x.dtype in _FLOATS[:3], "{}: x is float16, bfloat16 or float32; got {}", op, x.dtype)
    check(
        granularity != "block" or x.dim() == 2,
        "{}: granularity 'block' takes a 2-D x (a weight); got {}-D",
        op,
        x.dim(),
    )


def _quant_grid(x, granularity):
    """The scale grid quantize writes for x: (shape, strides), groups M-major."""
    from .._abi import Quant
    from .._quantize import grid_shape, grid_strides

    gran = Quant.from_token(granularity)
    shape = grid_shape(tuple(x.shape), gran)
    strides = grid_strides(tuple(x.shape), gran)
    if strides is None:
        strides, step = [], 1
        for extent in reversed(shape):
            strides.insert(0, step)
            step *= extent
    return shape, tuple(strides)


def _check_moe_operands(op, check, x, w, offs):
    """A MoE GEMM's x (T, K), w (E, K, N) and offs (E end offsets, int32 or int64)."""
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


def _check_grouped_mm(check, x, w, offs):
    op = "pycutlass_rt::grouped_mm"
    _check_moe_operands(op, check, x, w, offs)
    check(
        x.dtype == w.dtype and x.dtype in _HALF,
        "{}: x and w must both be float16 or bfloat16, got {} and {}",
        op,
        x.dtype,
        w.dtype,
    )
    _same_device(op, check, x, w, offs)


#: what scaled_grouped_mm takes and writes: the fp8 grouped kernels' e4m3 inputs and
#: bfloat16 outputs (torch._scaled_grouped_mm's too)
_GROUPED_FP8 = _FP8[:1]
_GROUPED_SCALED_OUT = (torch.bfloat16,)


def _shape_is(t, *sizes):
    """Whether t's shape is ``sizes``: one condition (symbolic where sizes are), never a
    Python bool made of a symbolic size."""
    if t.dim() != len(sizes):
        return False
    cond = True
    for have, want in zip(t.shape, sizes):
        cond = cond & (have == want)
    return cond


def _grouped_grids(scale_x, scale_w):
    """Whether scaled_grouped_mm's scales are DeepSeek-V3's block-scale grids: x's
    (T, ceil(K/128)) and w's (E, ceil(K/128), ceil(N/128)).

    Decided from the ranks, never from a symbolic size: a 3-D scale_w beside a 2-D
    scale_x, but a (1, 1, 1) scale_w (one value, as before grids; sizes of 1 are static
    ints under torch.compile). Where ceil(K/128) == 1, a (T, 1) scale_x is per token too:
    scale_w decides, and both readings are the same scales. A 3-D scale_w beside a
    scale_x of another rank is an error (grids come in pairs), bar one value."""
    one_value = all(type(s) is int and s == 1 for s in scale_w.shape)
    return scale_w.dim() == 3 and scale_x.dim() == 2 and not one_value


#: the scale pairs scaled_grouped_mm takes, for its errors: T, Kb, E, Kb, Nb
_GROUPED_PAIRS = (
    "scales come as scale_x one value, (T,) or (T, 1) with scale_w one value, (E,) or "
    "(E, N); or as block-scale grids, scale_x (T, ceil(K/128)) = ({}, {}) with scale_w "
    "(E, ceil(K/128), ceil(N/128)) = ({}, {}, {})"
)


def _check_scaled_grouped_mm(check, x, w, scale_x, scale_w, offs, bias, out_dtype, activation):
    op = "pycutlass_rt::scaled_grouped_mm"
    _act_name(activation)
    _check_moe_operands(op, check, x, w, offs)
    t, k, e, n = x.shape[0], x.shape[1], w.shape[0], w.shape[2]
    check(
        x.dtype in _GROUPED_FP8 and w.dtype == x.dtype,
        "{}: x and w must both be float8_e4m3fn, got {} and {}",
        op,
        x.dtype,
        w.dtype,
    )
    out = _scaled_out_dtype(out_dtype)
    check(
        out in _GROUPED_SCALED_OUT,
        "{}: out_dtype is one of {} (what the fp8 grouped kernels write); got {}",
        op,
        _GROUPED_SCALED_OUT,
        out,
    )
    for name, s in (("scale_x", scale_x), ("scale_w", scale_w)):
        check(s.dtype == torch.float32, "{}: {} must be float32, got {}", op, name, s.dtype)
    kb, nb = (k + 127) // 128, (n + 127) // 128
    pairs = (t, kb, e, kb, nb)
    if _grouped_grids(scale_x, scale_w):
        check(
            _shape_is(scale_w, e, kb, nb),
            "{}: scale_w as a block-scale grid is one per expert and 128 x 128 block of its "
            "(N, K) weight, (E, ceil(K/128), ceil(N/128)) = ({}, {}, {}) (a checkpoint's "
            "weight_scale_inv.transpose(1, 2)); got shape {}",
            op,
            e,
            kb,
            nb,
            scale_w.shape,
        )
        check(
            _shape_is(scale_x, t, kb),
            "{}: scale_w is a block-scale grid, so scale_x must be x's, one per token and 128 "
            "of K; got shape {}: " + _GROUPED_PAIRS,
            op,
            scale_x.shape,
            *pairs,
        )
    else:
        if scale_w.dim() == 3:
            check(
                scale_w.numel() == 1,
                "{}: scale_w of shape {} is a block-scale grid but scale_x of shape {} is "
                "not; " + _GROUPED_PAIRS,
                op,
                scale_w.shape,
                scale_x.shape,
                *pairs,
            )
        check(
            (scale_w.numel() == 1) | _shape_is(scale_w, e) | _shape_is(scale_w, e, n),
            "{}: scale_w holds one value (per tensor), one per expert ((E,), E = {}) or one "
            "per expert and output channel ((E, N), N = {}), or a block-scale grid "
            "(E, ceil(K/128), ceil(N/128)) = ({}, {}, {}) beside scale_x's; got shape {}",
            op,
            e,
            n,
            e,
            kb,
            nb,
            scale_w.shape,
        )
        check(
            (scale_x.numel() == 1) | _shape_is(scale_x, t) | _shape_is(scale_x, t, 1),
            "{}: scale_x holds one value (per tensor) or one per token ((T,) or (T, 1), "
            "T = {}), or is a block-scale grid beside scale_w's; got shape {} (scale_w {}); "
            + _GROUPED_PAIRS,
            op,
            t,
            scale_x.shape,
            scale_w.shape,
            *pairs,
        )
    if bias is not None:
        check(
            _shape_is(bias, n) | _shape_is(bias, e, n),
            "{}: bias must be (N,) shared by the experts or (E, N) one per expert, with "
            "E = {} and N = {}; got {}",
            op,
            e,
            n,
            bias.shape,
        )
        check(bias.dtype == out, "{}: bias must be {}, got {}", op, out, bias.dtype)
    _same_device(op, check, x, w, scale_x, scale_w, offs, bias)


def _check_conv_geometry(op, check, stride, padding, dilation, groups):
    # int[2] arguments arrive as lists of any length (the schema does not count them)
    for name, pair, least in (
        ("stride", stride, 1),
        ("padding", padding, 0),
        ("dilation", dilation, 1),
    ):
        check(
            len(pair) == 2 and min(pair) >= least,
            "{}: {} must be an int or two ints of at least {}, got {}",
            op,
            name,
            least,
            pair,
        )
    check(groups >= 1, "{}: groups must be positive, got {}", op, groups)


def _check_conv_operands(op, check, names, a, b):
    check(
        a.dim() == 4 and b.dim() == 4,
        "{}: {} and {} must be 4-D, got {}-D and {}-D",
        op,
        *names,
        a.dim(),
        b.dim(),
    )
    check(
        a.dtype == b.dtype,
        "{}: {} and {} must have one dtype, got {} and {}",
        op,
        *names,
        a.dtype,
        b.dtype,
    )
    check(
        a.dtype in _FLOATS, "{}: takes float16, bfloat16, float32 or float64, got {}", op, a.dtype
    )


def _check_conv_channels(op, check, x_size, w_size, groups):
    """x (N, C, H, W) against w (K, C/groups, R, S): sizes as tensors' shapes or lists."""
    check(
        x_size[1] == w_size[1] * groups,
        "{}: x has {} channels; w {} with groups={} takes {}",
        op,
        x_size[1],
        w_size,
        groups,
        w_size[1] * groups,
    )
    check(
        w_size[0] % groups == 0,
        "{}: w's {} output channels do not split into groups={}",
        op,
        w_size[0],
        groups,
    )


def _check_conv_output(op, check, x_size, w_size, dy, stride, padding, dilation):
    """A gradient pass's dy (N, K, P, Q) against the convolution of x_size by w_size."""
    p, q = _conv_extent(x_size, w_size, stride, padding, dilation)
    shape = "{}: dy must be {}x{}x{}x{} (x {}, w {}), got {}"
    # one symbolic condition per check: `and` would turn a symbolic size into a bool
    for have, want in zip(dy.shape, (x_size[0], w_size[0], p, q)):
        check(have == want, shape, op, x_size[0], w_size[0], p, q, x_size, w_size, dy.shape)


def _check_bias(op, check, bias, n, dtype):
    """A bias, where given: a vector of ``n`` (output features or channels) in ``dtype``."""
    if bias is not None:
        check(
            bias.dim() == 1 and bias.shape[0] == n,
            "{}: bias must be a vector of {}, got {}",
            op,
            n,
            bias.shape,
        )
        check(bias.dtype == dtype, "{}: bias must be {}, got {}", op, dtype, bias.dtype)


def _check_conv2d(check, x, w, bias, stride, padding, dilation, groups, activation):
    op = "pycutlass_rt::conv2d"
    _act_name(activation)
    _check_conv_geometry(op, check, stride, padding, dilation, groups)
    _check_conv_operands(op, check, ("x (N, C, H, W)", "w (K, C/groups, R, S)"), x, w)
    _check_conv_channels(op, check, x.shape, w.shape, groups)
    _check_bias(op, check, bias, w.shape[0], x.dtype)
    p, q = _conv_extent(x.shape, w.shape, stride, padding, dilation)
    size = "{}: the output would be {}x{} (x {}, w {}, stride {}, padding {}, dilation {})"
    for extent in (p, q):
        check(extent > 0, size, op, p, q, x.shape, w.shape, stride, padding, dilation)
    _same_device(op, check, x, w, bias)


def _check_conv2d_dgrad(check, dy, w, input_size, stride, padding, dilation, groups):
    op = "pycutlass_rt::_conv2d_dgrad"
    _check_conv_geometry(op, check, stride, padding, dilation, groups)
    _check_conv_operands(op, check, ("dy (N, K, P, Q)", "w (K, C/groups, R, S)"), dy, w)
    check(len(input_size) == 4, "{}: input_size must be (N, C, H, W), got {}", op, input_size)
    _check_conv_channels(op, check, input_size, w.shape, groups)
    _check_conv_output(op, check, input_size, w.shape, dy, stride, padding, dilation)
    _same_device(op, check, dy, w)


def _check_conv2d_wgrad(check, dy, x, weight_size, stride, padding, dilation, groups):
    op = "pycutlass_rt::_conv2d_wgrad"
    _check_conv_geometry(op, check, stride, padding, dilation, groups)
    _check_conv_operands(op, check, ("dy (N, K, P, Q)", "x (N, C, H, W)"), dy, x)
    check(
        len(weight_size) == 4,
        "{}: weight_size must be (K, C/groups, R, S), got {}",
        op,
        weight_size,
    )
    _check_conv_channels(op, check, x.shape, weight_size, groups)
    _check_conv_output(op, check, x.shape, weight_size, dy, stride, padding, dilation)
    _same_device(op, check, dy, x)


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


def _rows(x):
    """The rows of x viewed as a matrix: the product of its leading sizes (symbolic ok)."""
    m = 1
    for s in x.shape[:-1]:
        m = m * s
    return m


def _conv_extent(x_size, w_size, stride, padding, dilation):
    """(P, Q): the output's height and width of x (N, C, H, W) by w (K, C/groups, R, S),
    as torch's conv2d computes them (symbolic sizes ok)."""
    return tuple(
        (n + 2 * p - d * (f - 1) - 1) // s + 1
        for n, f, s, p, d in zip(x_size[2:], w_size[2:], stride, padding, dilation)
    )


def _with_strides_of(out, t):
    """``t`` where it has ``out``'s strides (the fake implementations' channels_last ones),
    else copied into ``out``: torch's convolution results as the conv operators return them."""
    return t if t.stride() == out.stride() else out.copy_(t)


def _conv_empty(like, shape):
    """A new channels_last tensor of ``shape`` in like's dtype and device: every conv
    operator's output, fake or real (one allocation, so the strides agree everywhere, the
    sizes of 1 included)."""
    return torch.empty(
        shape, dtype=like.dtype, device=like.device, memory_format=torch.channels_last
    )
