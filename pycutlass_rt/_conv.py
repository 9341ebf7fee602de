"""2-D convolutions: fprop, dgrad and wgrad as implicit GEMMs on NHWC tensors.

A convolution goes down the GEMM's one call path (``_call.prepare``, the ``gemm``
builtin, selection, plans' machinery): its tensors take the places of a, b, c, d and
pcr_extras.conv carries the geometry; the C side checks every shape. Each framework's
tensors become the packed NHWC / KRSC views the kernels read in
:mod:`pycutlass_rt._conv_tensors`; where a GEMM runs the pass better, the GEMM kernels run
it (:mod:`pycutlass_rt._conv_gemm`).
"""

from __future__ import annotations

import functools

from . import _call, _conv_gemm, _gemm, _lib
from ._abi import Op, Status
from ._conv_tensors import Geometry, _torch, empty_like_producer, geometry, nhwc
from ._explain import explain as explain_gemm
from ._explain import explanation
from ._kernels import kernels
from .errors import InvalidArgumentError, NoDeviceError, UnsupportedError


def conv_math(math):
    """A convolution's math=: float32 runs on TF32 tensor cores unless told (cuDNN's default)."""
    return "tf32" if math is None else math


def prepare(geo: Geometry, views, alpha, beta, bias, activation, math, stream, kernel):
    """The :class:`~pycutlass_rt._call.Call` of one convolution pass on the kernels'
    ``views`` (a, b, c, d): the GEMM's, with pcr_extras.conv set."""
    return _call.prepare(
        *views,
        alpha,
        beta,
        bias=bias,
        activation=activation,
        math=conv_math(math),
        stream=stream,
        kernel=kernel,
        conv=geo.fields(),
    )


def run(geo: Geometry, views, alpha, beta, bias, activation, math, stream, kernel, explain):
    """Runs one convolution pass on the kernels' ``views`` (a, b, c, and d to write), or
    with ``explain`` returns its :class:`~pycutlass_rt.Explanation` instead. Unless a
    convolution kernel is named, a grouped convolution runs on a direct kernel of the build
    for its group width where there is one; then the GEMM forms of
    :func:`pycutlass_rt._conv_gemm.routes` (pointwise; few channels, groups, fp32 accuracy,
    too few output tiles, a strided and dilated dgrad on unfolded operands) run where a GEMM
    kernel of the build takes them; the rest, and those, on the convolution kernels."""
    math = conv_math(math)
    if kernel is None and _direct_first(geo, views):
        # as GEMMs, one per group, it would be K / groups wide; else the GEMM forms
        done = _native(geo, views, alpha, beta, bias, activation, math, stream, None, explain)
        if done is not False:
            return done
    for form, note in (
        _conv_gemm.routes(geo, views, stream, alpha, beta, bias, math, explain)
        if kernel is None
        else ()
    ):
        if form is None:
            continue
        kw = dict(bias=bias, activation=activation, math=math)
        if explain:
            told = explain_gemm(*form[:6], **kw)
            if told.kernel is not None:
                told.notes.append(note)
                return told
            continue
        try:
            _gemm.gemm(*form[:6], stream=stream, **kw)
        except UnsupportedError:  # raised before the GEMM launched anything
            continue
        if form.finish is not None:
            form.finish()
        return None
    return _native(geo, views, alpha, beta, bias, activation, math, stream, kernel, explain, True)


def _direct_first(geo: Geometry, views) -> bool:
    """Whether a grouped pass goes to the convolution kernels before the GEMM forms: where
    the build holds direct grouped kernels of its pass and group width (C / groups)."""
    if geo.groups == 1:
        return False
    width = views[1].shape[3]  # w: K x R x S x C / groups
    return width > 1 and (geo.op, width) in _direct_widths()


@functools.cache
def _direct_widths() -> frozenset:
    """The (pass, group width) pairs of the build's direct grouped kernels."""
    return frozenset(
        (Op.from_token(k.op), k.group_width) for k in kernels() if k.schedule == "direct"
    )


#: what a call that is not the last route hands on to the next: no kernel of the build takes
#: it, none for this GPU, or no GPU to ask (each before any launch)
_PASSED_ON = (Status.ERR_UNSUPPORTED, Status.ERR_NO_KERNEL_FOR_ARCH, Status.ERR_NO_DEVICE)


def _native(geo, views, alpha, beta, bias, activation, math, stream, kernel, explain, last=False):
    """The convolution kernels' run of one pass (None), or its Explanation with
    ``explain``. Where no kernel of the build takes it, or there is no GPU to run it on:
    False, the next route's turn, unless ``last`` (then the error, or the Explanation
    saying so)."""
    call = prepare(geo, views, alpha, beta, bias, activation, math, stream, kernel)
    lib = _lib.load()
    if explain:
        try:
            told = explanation(lib, call)
        except (UnsupportedError, NoDeviceError):  # NoKernelForArchError is an Unsupported one
            if last:
                raise
            return False
        return told if last or told.kernel is not None else False
    o = call.objs
    args = (o[0], o[1], o[2], o[3], call.alpha, call.beta, call.extra, call.kernel)
    st = lib.gemm(*args, call.flags, call.handle)
    if st in _PASSED_ON and not last:
        return False  # refused before any launch
    lib.check(st)
    _lib.note_cuda_used()
    return None


def _output(out, like, dims, dtype, name):
    """(what the caller gets, the kernel's view) for an ``out`` argument or a new tensor."""
    if out is None:
        return empty_like_producer(like, dims, dtype, name)
    view, have = nhwc(out, name)
    if have != dims:
        raise InvalidArgumentError(f"{name} must hold {dims} (NHWC), got {have}")
    return out, view


def _out_dims(out, size, like):
    """The NHWC dims of a gradient's output: ``out``'s, or ``size`` as ``like``'s producer
    spells shapes (torch: NCHW / KCRS), or None."""
    if out is not None:
        return nhwc(out, "out")[1]
    if size is None:
        return None
    size = tuple(size)
    return (size[0], size[2], size[3], size[1]) if _torch(like) is not None else size


def _residual(c, name="c"):
    return None if c is None else nhwc(c, name)[0]


def conv2d(
    x,
    w,
    bias=None,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    *,
    activation=None,
    out=None,
    alpha=1.0,
    beta=0.0,
    c=None,
    math=None,
    stream=None,
    kernel=None,
    explain=False,
):
    """``y = act(alpha * conv2d(x, w) + beta * c + bias)``: torch.nn.functional.conv2d's
    convolution (cross-correlation), with its bias, an activation and a residual fused into
    one kernel.

    Args:
        x: activations: a channels_last torch tensor (N, C, H, W), or an NHWC array
            (N, H, W, C) from any DLPack producer. float16, bfloat16 or float32.
        w: filters in x's dtype: torch (K, C/groups, R, S) channels_last, or KRSC arrays.
        bias: None or K values (one per output channel) in y's dtype.
        stride, padding, dilation: ints or (h, w) pairs, as torch's.
        groups: input and output channels split into this many groups.
        activation: as :func:`pycutlass_rt.gemm`'s (a name, or a name with parameters).
        out: the output to write (torch (N, K, P, Q) channels_last, or NHWC (N, P, Q, K));
            None: a new one in x's framework (torch, cupy, numpy).
        alpha, beta, c: ``c`` (y's shape and dtype, packed) is added times beta.
        math: float32 inputs: None or "tf32" (TF32 tensor cores, as cuDNN's default), or
            "ieee" (fp32 accuracy: a GEMM's 3xTF32 kernels on the unfolded input).
        stream, kernel: as :func:`pycutlass_rt.gemm`'s (kernel names contain ``fprop``).
        explain: return the :class:`~pycutlass_rt.Explanation` of the call (which kernel,
            why, and why not the others) instead of running it.

    Returns:
        y (``out`` when given).

    Raises:
        InvalidArgumentError: shapes that do not fit the geometry, non-packed tensors.
        UnsupportedError: no kernel of this build for the dtypes or the geometry.

    Example (on a GPU):
        >>> import torch, pycutlass_rt as pcr
        >>> cl = torch.channels_last
        >>> x = torch.randn(8, 64, 56, 56, device="cuda", dtype=torch.float16).to(memory_format=cl)
        >>> w = torch.randn(128, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=cl)
        >>> y = pcr.conv2d(x, w, stride=2, padding=1, activation="relu")
        >>> y.shape
        torch.Size([8, 128, 28, 28])
    """
    geo = geometry(Op.OP_FPROP, stride, padding, dilation, groups)
    xv, (n, h, wd, _) = nhwc(x, "x")
    wv, (k, r, s, _) = nhwc(w, "w")
    p, q = geo.out_extent((h, wd), (r, s))
    y, yv = _output(out, x, (n, p, q, k), x.dtype, "out")
    views = (xv, wv, _residual(c), yv)
    done = run(geo, views, alpha, beta, bias, activation, math, stream, kernel, explain)
    return done if explain else y


def conv2d_dgrad(
    dy,
    w,
    input_size=None,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    *,
    out=None,
    alpha=1.0,
    beta=0.0,
    c=None,
    math=None,
    stream=None,
    kernel=None,
    explain=False,
):
    """The gradient of :func:`conv2d` with respect to its input:
    ``dx = alpha * conv2d_input(dy, w) + beta * c`` (torch.nn.grad.conv2d_input's).

    Args:
        dy: the output's gradient (torch (N, K, P, Q) channels_last, or NHWC (N, P, Q, K)).
        w: the filters, as :func:`conv2d` takes them.
        input_size: x's shape as the producer spells it (torch (N, C, H, W), else NHWC),
            where a stride leaves H or W ambiguous; None: the smallest input that gives
            dy's size (or ``out``'s shape).
        out, alpha, beta, c, math, stream, kernel, explain: as :func:`conv2d`'s (names
            ``dgrad``).

    Returns:
        dx.
    """
    geo = geometry(Op.OP_DGRAD, stride, padding, dilation, groups)
    dyv, (n, p, q, _) = nhwc(dy, "dy")
    wv, (_, r, s, cg) = nhwc(w, "w")
    dims = _out_dims(out, input_size, dy)
    if dims is None:  # the smallest input whose output is dy's
        hw = [
            (o - 1) * st - 2 * pd + dl * (f - 1) + 1
            for o, f, pd, st, dl in zip((p, q), (r, s), geo.padding, geo.stride, geo.dilation)
        ]
        dims = (n, hw[0], hw[1], cg * geo.groups)
    dx, dxv = _output(out, dy, dims, dy.dtype, "out")
    views = (dyv, wv, _residual(c), dxv)
    done = run(geo, views, alpha, beta, None, None, math, stream, kernel, explain)
    return done if explain else dx


def conv2d_wgrad(
    dy,
    x,
    weight_size=None,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    *,
    out=None,
    alpha=1.0,
    beta=0.0,
    c=None,
    math=None,
    stream=None,
    kernel=None,
    explain=False,
):
    """The gradient of :func:`conv2d` with respect to its filters:
    ``dw = alpha * conv2d_weight(x, dy) + beta * c`` (torch.nn.grad.conv2d_weight's).

    Args:
        dy: the output's gradient, as :func:`conv2d_dgrad` takes it.
        x: the forward pass's input, as :func:`conv2d` takes it.
        weight_size: w's shape as the producer spells it (torch (K, C/groups, R, S), else
            KRSC); needed unless ``out`` is given (R and S are not implied by the sizes).
        out, alpha, beta, c, math, stream, kernel, explain: as :func:`conv2d`'s (names
            ``wgrad``).
            ``beta=1, c=out`` accumulates into an existing gradient.

    Returns:
        dw.
    """
    geo = geometry(Op.OP_WGRAD, stride, padding, dilation, groups)
    dyv, _ = nhwc(dy, "dy")
    xv, _ = nhwc(x, "x")
    dims = _out_dims(out, weight_size, x)
    if dims is None:
        raise InvalidArgumentError("conv2d_wgrad needs weight_size or out (the filters' R x S)")
    dw, dwv = _output(out, x, dims, x.dtype, "out")
    views = (dyv, xv, _residual(c), dwv)
    done = run(geo, views, alpha, beta, None, None, math, stream, kernel, explain)
    return done if explain else dw
