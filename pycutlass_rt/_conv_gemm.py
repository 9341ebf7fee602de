"""Convolutions as GEMMs: where the GEMM kernels (and their calibrated table) run a
convolution pass better than the convolution kernels, or run one those cannot. A pointwise
pass is a GEMM on its tensors' flat views (:func:`as_gemm`); a pass with few channels or
filters, groups, fp32 accuracy or too few output tiles is a GEMM on its input unfolded
(im2col) or, for dgrad, a GEMM whose result is folded back (col2im) (:func:`as_unfolded`).
:func:`routes` offers them best first; pycutlass_rt._conv.run takes the first a GEMM kernel
of the build accepts.
"""

from __future__ import annotations

import ctypes
import functools
from typing import NamedTuple

from . import _call, _gemm, _lib
from ._abi import Op, Status
from ._conv_tensors import Geometry, _torch, empty_like_producer


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
    """Whether x's channels (its last dimension) fall short of 16 bytes: where the implicit
    GEMM's few-channels iterators crawl (a stem's 3 colours, a latent's 4, an output of 4)."""
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
    a batch, where the convolution kernels do badly or not at all: input channels short of
    16 bytes, or filters (wgrad's, and fprop's without a bias: the GEMM stages the
    misaligned matrix around a fast kernel where the convolution kernels would read it
    element by element; a bias along it would keep the GEMM on those too), a dgrad
    both strided and dilated, float32 at fp32 accuracy (``math="ieee"``: the
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
    ieee = math == "ieee" and str(image.dtype).endswith("float32")
    if groups > 1:
        if ch == 1 or (op == Op.OP_FPROP and bias is not None):
            return None
    elif not (
        _few_channels(image)
        or (op == Op.OP_WGRAD and _few_channels(views[0]))
        or (op == Op.OP_FPROP and bias is None and _few_channels(views[3]))
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
        _gemm.gemm(_matrix(image, k, 0), _matrix(image, 0, width), grad[:, :width], dw, 1.0, 1.0)

    return GemmForm(_t(dy), cols, None, _split_rows(grad, groups), alpha, 0.0, copy)


def routes(geo: Geometry, views, stream, alpha, beta, bias, math, explain):
    """A convolution's GEMM forms (``math``: the call's, resolved), best first, each with
    the note explain() gives it (None where the form does not apply); made lazily, so that
    a route taken ends the search."""
    mats = as_gemm(geo, views)
    note = "pointwise: run as a GEMM on the NHWC tensors' flat views"
    yield (None if mats is None else GemmForm(*mats, alpha, beta)), note
    note = (
        "unfolded: run as a GEMM (one per group) on the input unfolded, im2col (dgrad: its "
        "result folded back, col2im), one more pass over N*P*Q x R*S*C"
    )
    yield as_unfolded(geo, views, stream, alpha, beta, bias, math, fill=not explain), note
