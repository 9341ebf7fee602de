"""2-D convolutions: fprop, dgrad and wgrad as implicit GEMMs on NHWC tensors.

A convolution goes down the GEMM's one call path (``_call.prepare``, the ``gemm``
builtin, selection, plans' machinery): its tensors take the places of a, b, c, d and
pcr_extras.conv carries the geometry; the C side checks every shape. This module only
turns each framework's tensors into the packed NHWC / KRSC views the kernels read:

- torch tensors keep torch's logical shapes, NCHW activations and (K, C/groups, R, S)
  filters, and must be ``channels_last`` in memory (then their NHWC permutation is packed);
  outputs are made ``channels_last``;
- every other producer (cupy, numpy, numba, jax arrays) passes NHWC activations and KRSC
  filters as they lie; outputs are made with the producer's ``empty`` (cupy, numpy), or
  must be given.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import NamedTuple

from . import _call, _lib
from ._abi import Op, Status
from ._explain import explain as explain_gemm
from ._explain import explanation
from .errors import InvalidArgumentError, UnsupportedError


class Geometry(NamedTuple):
    """A convolution's parameters as pcr_conv holds them (pairs as (h, w))."""

    op: Op
    padding: tuple
    stride: tuple
    dilation: tuple
    groups: int

    def fields(self) -> tuple:
        """pcr_conv's fields, in order: the extras tuple's conv entry."""
        return (int(self.op), *self.padding, *self.stride, *self.dilation, self.groups)

    def out_extent(self, size: tuple, filt: tuple) -> tuple:
        """(P, Q) of an input (H, W) and a filter (R, S), as torch's conv2d computes them
        (the C side checks the output's shape against the same rule).

        Raises:
            InvalidArgumentError: the dilated filter is larger than the padded input.
        """
        spans = [
            n + 2 * p - d * (f - 1) - 1
            for n, f, p, d in zip(size, filt, self.padding, self.dilation)
        ]
        if min(spans) < 0:
            raise InvalidArgumentError(
                f"the filter {filt} (dilation {self.dilation}) is larger than the padded "
                f"input {size} (padding {self.padding})"
            )
        return tuple(span // s + 1 for span, s in zip(spans, self.stride))


def _pair(value, name: str) -> tuple:
    """An int, or an (h, w) pair of ints, as a pair."""
    pair = (value, value) if not isinstance(value, (tuple, list)) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise InvalidArgumentError(f"{name} must be an int or a pair of ints, got {value!r}")
    return pair


def geometry(op: Op, stride, padding, dilation, groups) -> Geometry:
    """The Geometry of a convolution's arguments, torch's conventions (ints or pairs)."""
    if not isinstance(groups, int) or isinstance(groups, bool):
        raise InvalidArgumentError(f"groups must be an int, got {groups!r}")
    return Geometry(
        op, _pair(padding, "padding"), _pair(stride, "stride"), _pair(dilation, "dilation"), groups
    )


def _torch(t):
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(t, torch.Tensor) else None


def nhwc(t, name: str):
    """The packed NHWC (activations) or KRSC (filters) view the kernels read, and the four
    dimensions in that order. torch tensors are (N, C, H, W) / (K, C, R, S) logically and
    must be channels_last in memory."""
    torch = _torch(t)
    if torch is None:
        shape = tuple(getattr(t, "shape", ()))
        if len(shape) != 4:
            raise InvalidArgumentError(f"{name} must be a 4-D NHWC tensor, got shape {shape}")
        return t, shape
    if t.dim() != 4:
        raise InvalidArgumentError(f"{name} must be a 4-D tensor, got {tuple(t.shape)}")
    view = t.permute(0, 2, 3, 1)
    if not view.is_contiguous():
        raise InvalidArgumentError(
            f"{name} must be channels_last in memory (the kernels read NHWC): use "
            f"{name}.contiguous(memory_format=torch.channels_last)"
        )
    return view, tuple(view.shape)


def empty_like_producer(like, dims: tuple, dtype, name: str):
    """A new output of NHWC ``dims`` in ``like``'s framework and device: (the object the
    caller gets, its NHWC view for the kernel)."""
    torch = _torch(like)
    if torch is not None:
        n, h, w, c = dims
        # made channels_last, not made NCHW and then converted: a conversion is a transposing
        # copy as large as the tensor (for the GEMM routes' scratch, larger than the GEMM)
        t = torch.empty(
            (n, c, h, w), dtype=dtype, device=like.device, memory_format=torch.channels_last
        )
        return t, t.permute(0, 2, 3, 1)
    module = sys.modules.get(type(like).__module__.split(".")[0])
    if module is not None and module.__name__ in ("cupy", "numpy"):
        if module.__name__ == "cupy":
            with module.cuda.Device(like.device.id):
                out = module.empty(dims, dtype)
        else:
            out = module.empty(dims, dtype)
        return out, out
    raise InvalidArgumentError(
        f"pass {name}= (an NHWC array to write): {type(like).__name__} arrays are not "
        "made here (torch tensors, cupy and numpy arrays are)"
    )


def _packed(t) -> bool:
    """Whether ``t`` is a C-contiguous array (so that its flat views are views, never copies)."""
    if t is None:
        return True
    if _torch(t) is not None:
        return t.is_contiguous()
    flags = getattr(t, "flags", None)
    return bool(flags is not None and flags.c_contiguous)


def as_gemm(geo: Geometry, views):
    """A pointwise convolution (1x1 filters, unit stride, no padding, one group) is a GEMM on
    its packed NHWC tensors' flat views, which the GEMM kernels and their calibrated table
    then run: (a, b, c, d) as matrices, or None. fprop: x (NHW, C) @ w^T (C, K); dgrad:
    dy (NHW, K) @ w (K, C); wgrad: dy^T (K, NHW) @ x (NHW, C)."""
    filters = views[3] if geo.op == Op.OP_WGRAD else views[1]
    pointwise = tuple(filters.shape[1:3]) == (1, 1) and geo.stride == (1, 1)
    if not pointwise or geo.padding != (0, 0) or geo.groups != 1:
        return None
    if not all(_packed(t) for t in views):
        return None
    a, b, c, d = (None if t is None else t.reshape(-1, t.shape[-1]) for t in views)
    if geo.op == Op.OP_FPROP:
        return a, b.T, c, d
    return (a, b, c, d) if geo.op == Op.OP_DGRAD else (a.T, b, c, d)


def _matrix(like, rows: int, cols: int):
    """A new row-major (rows, cols) matrix in ``like``'s framework, device and dtype."""
    _, view = empty_like_producer(like, (1, 1, rows, cols), like.dtype, "out")
    return view.reshape(rows, cols)


def _on_gpu(t) -> bool:
    device = getattr(t, "__dlpack_device__", None)
    return t is None or (device is not None and device()[0] == 2)  # kDLCUDA


def _makes_matrices(t) -> bool:
    """Whether :func:`_matrix` can make scratch in ``t``'s framework on its GPU (torch,
    cupy): the GEMM routes that need scratch are taken only there."""
    return _torch(t) is not None or type(t).__module__.split(".")[0] == "cupy"


def _unfold(x, r: int, s: int, geo: Geometry, width: int, fill: bool):
    """x unfolded for an r x s filter (pcr_im2col, on the producer's stream): a new
    (N*P*Q, width) matrix; left unfilled without ``fill`` (explain() describes it only)."""
    n, h, w, _ = x.shape
    p, q = geo.out_extent((h, w), (r, s))
    cols = _matrix(x, n * p * q, width)
    if fill:
        lib = _lib.load()
        objs, handle, flags, keep = _call.operands((x, None, None, cols), None)
        lib.check(lib.pcr_py_im2col(objs[0], objs[3], geo.fields(), r, s, flags, handle))
        del keep
    return cols


def _fold(cols, dx, c, geo: Geometry, r: int, s: int, alpha: float, beta: float) -> None:
    """dx = alpha * col2im(cols) + beta * c (pcr_col2im, on the producer's stream)."""
    lib = _lib.load()
    objs, handle, flags, keep = _call.operands((cols, None, c, dx), None)
    lib.check(
        lib.pcr_py_col2im(objs[0], objs[3], objs[2], geo.fields(), r, s, alpha, beta, flags, handle)
    )
    del keep


#: a filter flattened (K x R*S*C) is its unfolding as an R x S image: one output position
FLAT = Geometry(Op.OP_FPROP, (0, 0), (1, 1), (1, 1), 1)


#: the largest unfolded matrix a GEMM route makes (beyond it, the convolution kernels run)
UNFOLD_MAX_BYTES = 4 << 30


class GemmForm(NamedTuple):
    """A convolution pass as one GEMM d = act(alpha * a @ b + beta * c + bias), and what
    turns its d into the pass's result afterwards (None: d is the result)."""

    a: object
    b: object
    c: object
    d: object
    alpha: float
    beta: float
    finish: object = None


def _few_channels(x) -> bool:
    """Whether x's channels fall short of 16 bytes: where the implicit GEMM's few-channels
    iterators crawl (a stem's 3 colours, a latent's 4)."""
    return (x.shape[3] * x.dtype.itemsize) % 16 != 0


#: the GEMM routes also take the convolutions whose implicit GEMM the convolution kernels
#: run badly (False: only those the kernels cannot run well at all; benchmarks/conv.py
#: --no-unfold-lagging compares): see :func:`_kernels_lag`
UNFOLD_LAGGING = True
#: the share of the SMs below which the convolution kernels' output tiles count as too few
#: (chosen on the H200 by that A/B over the ResNet-50 and SD UNet layers: at 1/2 of the SMs
#: the unfolding's extra pass lost more than the split reduction won; at 1/8, ten-tile
#: layers won 12-30%)
LAG_FILL = 0.125
#: the least R*S*C (fprop) or R*S*K (dgrad) reduction worth spreading over the GPU
LAG_REDUCTION = 1024


@functools.cache
def _sm_count(device: int) -> int:
    """SMs of CUDA device ``device`` (0 when the library cannot tell)."""
    cc, sms = ctypes.c_int32(), ctypes.c_int32()
    ok = _lib.load().pcr_device_cc(device, ctypes.byref(cc), ctypes.byref(sms)) == Status.OK
    return sms.value if ok else 0


def _kernels_lag(geo: Geometry, views, image) -> bool:
    """Whether the convolution kernels run this fprop or dgrad badly where a GEMM on the
    unfolded operands need not: an implicit GEMM whose 128 x 128 output tiles fill less
    than LAG_FILL of the SMs over a long reduction (deep layers at small images: the GEMM's
    split-K and stream-K kernels spread the reduction over the GPU, the convolution kernels
    cannot)."""
    if not UNFOLD_LAGGING or geo.op == Op.OP_WGRAD:
        return False
    k, r, s, ch = views[1].shape
    n, h, w, _ = views[3].shape  # the output: y (fprop), dx (dgrad)
    cols, depth = (k, r * s * ch) if geo.op == Op.OP_FPROP else (ch, r * s * k)
    tiles = -(-(n * h * w) // 128) * -(-cols // 128)
    return depth >= LAG_REDUCTION and tiles < LAG_FILL * _sm_count(image.__dlpack_device__()[1])


def _split_cols(m, groups: int):
    """(rows, groups * w) -> (groups, rows, w): a block of columns per group (a view)."""
    if groups == 1:
        return m
    rows, cols = m.shape
    return m.reshape(rows, groups, cols // groups).swapaxes(0, 1)


def _split_rows(m, groups: int):
    """(groups * r, cols) -> (groups, r, cols): a block of rows per group (a view)."""
    return m if groups == 1 else m.reshape(groups, m.shape[0] // groups, m.shape[1])


def _t(m):
    """The (batched) matrix transposed: a view."""
    return m.swapaxes(-1, -2)


def as_unfolded(geo: Geometry, views, stream, alpha, beta, bias, math, fill: bool = True):
    """A convolution as one GEMM on its input unfolded (im2col) or, for dgrad, a GEMM whose
    unfolded result is folded back (col2im): the :class:`GemmForm` of fprop (y = cols @
    w^T), wgrad (dw = dy^T @ cols) and dgrad (dx = col2im(dy @ w)), one GEMM per group in
    a batch, where the convolution kernels do badly or not at all: channels short of 16
    bytes, a dgrad both strided and dilated, float32 at fp32 accuracy (``math="ieee"``: the
    GEMM's 3xTF32 kernels), groups (not depthwise: one channel per group would make GEMMs
    of width one; a grouped fprop takes no bias this way), and where the kernels lag
    (:func:`_kernels_lag`: too few output tiles over a long reduction). GPU tensors on
    the producer's stream (the unfolded matrices are its framework's memory, ordered by that
    stream); else None. Each group's unfolded columns and its flattened filters are padded
    with zeros to 16 bytes; wgrad computes a padded gradient that ``finish`` copies into dw
    (so takes no ``beta * c``)."""
    op, groups = geo.op, geo.groups
    if stream is not None or not all(_on_gpu(t) for t in views):
        return None
    image = views[1] if op == Op.OP_WGRAD else views[3] if op == Op.OP_DGRAD else views[0]
    if not _makes_matrices(image):
        return None
    k, r, s, ch = (views[3] if op == Op.OP_WGRAD else views[1]).shape  # ch: C / groups
    strided_dilated = max(geo.stride) > 1 and max(geo.dilation) > 1
    ieee = conv_math(math) == "ieee" and str(image.dtype).endswith("float32")
    if groups > 1:
        if ch == 1 or (op == Op.OP_FPROP and bias is not None):
            return None
    elif not (
        _few_channels(image)
        or (op == Op.OP_DGRAD and strided_dilated)
        or ieee
        or _kernels_lag(geo, views, image)
    ):
        return None
    if op == Op.OP_WGRAD and (beta != 0 or views[2] is not None):
        return None
    width = r * s * ch
    unit = 16 // image.dtype.itemsize
    padded = -(-width // unit) * unit
    n, p, q, _ = (views[3] if op == Op.OP_FPROP else views[0]).shape  # y or dy
    if n * p * q * groups * padded * image.dtype.itemsize > UNFOLD_MAX_BYTES:
        return None

    def filters():  # w flattened (K x R*S*C/groups), padded: its unfolding as an R x S image
        w = views[1]
        flat = w.reshape(k, width) if padded == width else _unfold(w, r, s, FLAT, padded, fill)
        return _split_rows(flat, groups)

    if op == Op.OP_FPROP:
        cols = _split_cols(_unfold(image, r, s, geo, groups * padded, fill), groups)
        c = None if views[2] is None else _split_cols(views[2].reshape(-1, k), groups)
        y = _split_cols(views[3].reshape(-1, k), groups)
        return GemmForm(cols, _t(filters()), c, y, alpha, beta)
    dy = _split_cols(views[0].reshape(-1, k), groups)
    if op == Op.OP_DGRAD:
        grad = _matrix(image, n * p * q, groups * padded)

        def fold():
            _fold(grad, image, views[2], geo, r, s, alpha, beta)

        return GemmForm(dy, filters(), None, _split_cols(grad, groups), 1.0, 0.0, fold)
    cols = _split_cols(_unfold(image, r, s, geo, groups * padded, fill), groups)
    dw = views[3].reshape(k, width)
    if padded == width:
        return GemmForm(_t(dy), cols, None, _split_rows(dw, groups), alpha, 0.0)
    grad = _matrix(image, k, padded)

    def copy():  # dw = the padded gradient's first r*s*C/groups columns: a K = 0 GEMM, d = c
        from . import gemm

        gemm(_matrix(image, k, 0), _matrix(image, 0, width), grad[:, :width], dw, 1.0, 1.0)

    return GemmForm(_t(dy), cols, None, _split_rows(grad, groups), alpha, 0.0, copy)


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


def _gemm_routes(geo: Geometry, views, stream, alpha, beta, bias, math, explain):
    """A convolution's GEMM forms, best first, each with the note explain() gives it (None
    where the form does not apply); made lazily, so that a route taken ends the search."""
    mats = as_gemm(geo, views)
    note = "pointwise: run as a GEMM on the NHWC tensors' flat views"
    yield (None if mats is None else GemmForm(*mats, alpha, beta)), note
    note = (
        "unfolded: run as a GEMM (one per group) on the input unfolded, im2col (dgrad: its "
        "result folded back, col2im), one more pass over N*P*Q x R*S*C"
    )
    yield as_unfolded(geo, views, stream, alpha, beta, bias, math, fill=not explain), note


def run(geo: Geometry, views, alpha, beta, bias, activation, math, stream, kernel, explain):
    """Runs one convolution pass on the kernels' ``views`` (a, b, c, and d to write), or
    with ``explain`` returns its :class:`~pycutlass_rt.Explanation` instead. Unless a
    convolution kernel is named, a pointwise one runs as a GEMM on its tensors
    (:func:`as_gemm`), a few-channel, grouped or fp32-accurate one (and a strided, dilated
    dgrad) as a GEMM on unfolded operands (:func:`as_unfolded`), where a GEMM kernel of the
    build takes them; the rest, and those, on the convolution kernels."""
    for form, note in (
        _gemm_routes(geo, views, stream, alpha, beta, bias, math, explain) if kernel is None else ()
    ):
        if form is None:
            continue
        from . import gemm

        kw = dict(bias=bias, activation=activation, math=conv_math(math))
        if explain:
            told = explain_gemm(*form[:6], **kw)
            if told.kernel is not None:
                told.notes.append(note)
                return told
            continue
        try:
            gemm(*form[:6], stream=stream, **kw)
        except UnsupportedError:  # raised before the GEMM launched anything
            continue
        if form.finish is not None:
            form.finish()
        return None
    call = prepare(geo, views, alpha, beta, bias, activation, math, stream, kernel)
    lib = _lib.load()
    if explain:
        return explanation(lib, call)
    o = call.objs
    args = (o[0], o[1], o[2], o[3], call.alpha, call.beta, call.extra, call.kernel)
    st = lib.gemm(*args, call.flags, call.handle)
    if st:
        _call.settle(
            lib,
            st,
            lambda: lib.gemm(*args, call.flags, call.handle),
            lambda: call.describe(lib),
        )
    _lib.note_cuda_used()


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

    Example:
        >>> import torch, pycutlass_rt as pcr  # doctest: +SKIP
        >>> cl = torch.channels_last  # doctest: +SKIP
        >>> x = torch.randn(8, 64, 56, 56, device="cuda", dtype=torch.float16).to(memory_format=cl)  # doctest: +SKIP
        >>> w = torch.randn(128, 64, 3, 3, device="cuda", dtype=torch.float16).to(memory_format=cl)  # doctest: +SKIP
        >>> y = pcr.conv2d(x, w, stride=2, padding=1, activation="relu")  # doctest: +SKIP
        >>> y.shape  # doctest: +SKIP
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
