"""Convolutions without a GPU: the geometry, and the C side's checks of shapes, packing and
arguments, which run before any device is asked for (numpy NHWC arrays)."""

import ctypes
import types

import numpy as np
import pytest

import pycutlass_rt as pcr
from pycutlass_rt import _call, _conv, _conv_gemm, _conv_tensors, _gemm, _lib, _select, errors
from pycutlass_rt._abi import Epilogue, Op
from pycutlass_rt._kernels import KernelInfo


def test_output_extent_is_torchs():
    """P, Q as torch's conv2d computes them: a ResNet stem, a dilated 3x3, a patch embedding."""
    geo = _conv_tensors.geometry(Op.OP_FPROP, 2, 3, 1, 1)
    assert geo.out_extent((224, 224), (7, 7)) == (112, 112)
    assert _conv_tensors.geometry(Op.OP_FPROP, 1, 2, 2, 1).out_extent((15, 13), (3, 3)) == (15, 13)
    assert _conv_tensors.geometry(Op.OP_FPROP, 16, 0, 1, 1).out_extent((224, 224), (16, 16)) == (
        14,
        14,
    )
    assert geo.fields() == (1, 3, 3, 2, 2, 1, 1, 1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(stride=(1, 2, 3)), "stride must be an int or a pair"),
        (dict(padding=1.5), "padding must be an int or a pair"),
        (dict(groups="2"), "groups must be an int"),
    ],
)
def test_python_side_arguments(kwargs, match):
    x = np.zeros((1, 8, 8, 16), np.float16)
    w = np.zeros((8, 3, 3, 16), np.float16)
    with pytest.raises(pcr.InvalidArgumentError, match=match):
        pcr.conv2d(x, w, **kwargs)


def nhwc(*shape):
    return np.zeros(shape, np.float16)


@pytest.mark.parametrize(
    "call, match",
    [
        # channels of x against the filters' C / groups
        (lambda: pcr.conv2d(nhwc(1, 8, 8, 16), nhwc(8, 3, 3, 8)), "x has 16 channels but w"),
        (
            lambda: pcr.conv2d(nhwc(1, 8, 8, 16), nhwc(6, 3, 3, 4), groups=4),
            "not a multiple of groups",
        ),
        # a filter larger than the padded input
        (lambda: pcr.conv2d(nhwc(1, 2, 2, 8), nhwc(8, 5, 5, 8)), "larger than the padded input"),
        # an output of the wrong shape
        (
            lambda: pcr.conv2d(nhwc(1, 8, 8, 8), nhwc(8, 3, 3, 8), out=nhwc(1, 8, 8, 8)),
            r"must hold \(1, 6, 6, 8\)",
        ),
        (
            lambda: pcr.conv2d_dgrad(nhwc(1, 6, 6, 8), nhwc(8, 3, 3, 8), out=nhwc(1, 9, 9, 8)),
            r"dy must be \(N, P, Q, K\) = \(1, 7, 7, 8\)",
        ),
        # a strided (not packed) view
        (
            lambda: pcr.conv2d(nhwc(1, 8, 8, 16)[:, :, :, ::2], nhwc(8, 3, 3, 8)),
            "packed NHWC",
        ),
        # bias and activations fuse into fprop only
        (
            lambda: pcr.conv2d_wgrad(nhwc(1, 6, 6, 8), nhwc(1, 8, 8, 8), out=nhwc(8, 3, 3, 8)),
            None,
        ),
        (lambda: pcr.conv2d_wgrad(nhwc(1, 6, 6, 8), nhwc(1, 8, 8, 8)), "weight_size or out"),
        (
            lambda: pcr.conv2d(nhwc(1, 8, 8, 8), nhwc(8, 3, 3, 8), bias=np.zeros(5, np.float16)),
            "bias must be a contiguous vector of the 8 output channels",
        ),
        (
            lambda: pcr.conv2d(nhwc(1, 8, 8, 8), nhwc(8, 3, 3, 8), padding=-1),
            "padding must be at least 0",
        ),
        # checked before anything is made (stride 0 divided, padding 2^31 allocated)
        (lambda: pcr.conv2d(nhwc(1, 8, 8, 8), nhwc(8, 3, 3, 8), stride=0), "stride must be"),
        (lambda: pcr.conv2d(nhwc(1, 8, 8, 8), nhwc(8, 3, 3, 8), stride=-1), "stride must be"),
        (
            lambda: pcr.conv2d(nhwc(1, 8, 8, 8), nhwc(8, 3, 3, 8), padding=2**31),
            "below 2.31",
        ),
        (lambda: pcr.conv2d(nhwc(1, 8, 8, 8), nhwc(8, 3, 3, 8), groups=0), "groups must be"),
    ],
)
def test_checks_name_the_tensor_at_fault(call, match):
    """Every check names the call's own tensor (x, w, y, dy, dx, dw) and what it needs;
    a well-formed call gets as far as asking for a GPU (or a kernel) and no further."""
    if match is None:
        with pytest.raises((pcr.NoDeviceError, pcr.UnsupportedError, pcr.NoKernelForArchError)):
            call()
        return
    with pytest.raises(pcr.InvalidArgumentError, match=match):
        call()


def test_torch_tensors_must_be_channels_last():
    torch = pytest.importorskip("torch")
    x = torch.zeros(1, 16, 8, 8, dtype=torch.float16)
    w = torch.zeros(8, 16, 3, 3, dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    with pytest.raises(pcr.InvalidArgumentError, match="channels_last"):
        pcr.conv2d(x, w)


@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
def test_pointwise_convolutions_run_as_gemms(monkeypatch, op):
    """1x1 filters at unit stride without padding: one GEMM on the tensors' flat NHWC views
    (views, never copies), with the convolution's scalars, bias and activation; a named
    convolution kernel, a stride or padding keep the convolution kernels."""
    calls = []
    monkeypatch.setattr(_gemm, "gemm", lambda *args, **kw: calls.append((args, kw)))
    x, w, dy = nhwc(2, 5, 3, 16), nhwc(24, 1, 1, 16), nhwc(2, 5, 3, 24)
    if op == "fprop":
        out = pcr.conv2d(x, w, activation="relu", alpha=2.0)
        (a, b, c, d, alpha, beta), kw = calls[0]
        assert (a.shape, b.shape, d.shape) == ((30, 16), (16, 24), (30, 24))
        assert np.shares_memory(b, w) and np.shares_memory(d, out) and kw["activation"] == "relu"
        assert (alpha, beta) == (2.0, 0.0)
    elif op == "dgrad":
        out = pcr.conv2d_dgrad(dy, w)
        (a, b, c, d, *_), _ = calls[0]
        assert (a.shape, b.shape, d.shape) == (
            (30, 24),
            (24, 16),
            (30, 16),
        ) and out.shape == x.shape
    else:
        out = pcr.conv2d_wgrad(dy, x, out=nhwc(24, 1, 1, 16), beta=1.0, c=nhwc(24, 1, 1, 16))
        (a, b, c, d, *_), _ = calls[0]
        assert (a.shape, b.shape, c.shape, d.shape) == ((24, 30), (30, 16), (24, 16), (24, 16))
        assert np.shares_memory(d, out)
    calls.clear()
    with pytest.raises((pcr.NoDeviceError, pcr.UnsupportedError, pcr.NoKernelForArchError)):
        pcr.conv2d(x, w, stride=2)  # a strided 1x1: the convolution kernels
    assert not calls


def test_a_pointwise_convolution_no_gemm_kernel_takes_goes_to_the_convolution_kernels(monkeypatch):
    tried = []

    def no_gemm_kernel(*args, **kw):
        tried.append(args)
        raise pcr.UnsupportedError("no GEMM kernel (this test)")

    monkeypatch.setattr(_gemm, "gemm", no_gemm_kernel)
    try:
        pcr.conv2d(nhwc(2, 5, 3, 16), nhwc(24, 1, 1, 16))  # without a GPU: NoDeviceError
    except pcr.Error as e:
        assert "this test" not in str(e)
    assert len(tried) == 1


@pytest.mark.parametrize("op", ["fprop", "wgrad"])
def test_few_channel_convolutions_run_as_a_gemm_on_the_unfolded_input(monkeypatch, op):
    """A stem's 3 channels: the input unfolded (27 values per output position, padded with
    zeros to 32: 16 bytes), the filters (fprop) or the gradient (wgrad) padded alike, one
    GEMM; wgrad's padded gradient then copied into dw by a K = 0 GEMM (d = c)."""
    calls, unfolded = [], []

    def unfold(x, r, s, geo, width, fill):
        n, h, w, _ = x.shape
        p, q = geo.out_extent((h, w), (r, s))
        unfolded.append((x.shape, (r, s), geo.stride, width, fill))
        return np.zeros((n * p * q, width), x.dtype)

    monkeypatch.setattr(_conv_gemm, "_on_gpu", lambda t: True)
    monkeypatch.setattr(_conv_gemm, "_makes_matrices", lambda t: True)
    monkeypatch.setattr(_conv_gemm, "_unfold", unfold)
    monkeypatch.setattr(_gemm, "gemm", lambda *args, **kw: calls.append((args, kw)))
    x, w, dy = nhwc(2, 9, 9, 3), nhwc(8, 3, 3, 3), nhwc(2, 5, 5, 8)
    if op == "fprop":
        y = pcr.conv2d(x, w, stride=2, padding=1, activation="relu")
        assert unfolded == [((2, 9, 9, 3), (3, 3), (2, 2), 32, True)] + [
            ((8, 3, 3, 3), (3, 3), (1, 1), 32, True)  # the filters: one output position
        ]
        (a, b, c, d, alpha, beta), kw = calls[0]
        assert (a.shape, b.shape, d.shape) == ((50, 32), (32, 8), (50, 8)) and c is None
        assert np.shares_memory(d, y) and kw["activation"] == "relu"
    else:
        dw = pcr.conv2d_wgrad(dy, x, weight_size=(8, 3, 3, 3), stride=2, padding=1)
        (a, b, c, d, alpha, beta), _ = calls[0]
        assert (a.shape, b.shape, d.shape) == ((8, 50), (50, 32), (8, 32)) and beta == 0.0
        (a0, b0, c0, d0, alpha0, beta0), _ = calls[1]  # dw = the first 27 columns
        assert (a0.shape, b0.shape, c0.shape, d0.shape) == ((8, 0), (0, 27), (8, 27), (8, 27))
        assert np.shares_memory(c0, d) and np.shares_memory(d0, dw) and beta0 == 1.0
        calls.clear()
        with pytest.raises((pcr.NoDeviceError, pcr.UnsupportedError, pcr.NoKernelForArchError)):
            pcr.conv2d_wgrad(dy, x, weight_size=(8, 3, 3, 3), stride=2, padding=1, beta=1.0, c=dw)
        assert not calls  # beta * c: the convolution kernels
    for where in ("_on_gpu", "_makes_matrices"):  # host arrays, or a framework (jax, numba)
        monkeypatch.setattr(_conv_gemm, where, lambda t: False)  # whose scratch is not made here:
        calls.clear()  # the convolution kernels
        with pytest.raises((pcr.NoDeviceError, pcr.UnsupportedError, pcr.NoKernelForArchError)):
            pcr.conv2d(x, w, stride=2, padding=1)
        assert not calls


@pytest.mark.parametrize(
    "x, cols, r, match",
    [
        (
            nhwc(1, 4, 4, 3),
            np.zeros((16, 27), np.float16),
            3,
            "pcr_im2col: x and cols must be on one GPU",
        ),
        (
            nhwc(1, 4, 4, 3),
            np.zeros((16, 20), np.float16),
            3,
            r"cols must be a contiguous row-major \(16, 1 x >= 27\)",
        ),
        (nhwc(1, 4, 4, 3), np.zeros((16, 27), np.float32), 3, "cols must have x's dtype"),
        (nhwc(1, 4, 4, 3), np.zeros((16, 27), np.float16), 0, "needs a filter of at least 1 x 1"),
        (nhwc(1, 4, 4, 3), np.zeros((16, 27), np.float16)[:, ::2], 3, "contiguous row-major"),
    ],
)
def test_im2col_checks_its_tensors(x, cols, r, match):
    """pcr_im2col (3 x 3, padding 1: 16 output positions of 27 values) refuses before any GPU."""
    from pycutlass_rt import _call, _lib

    lib = _lib.load()
    geo = _conv_tensors.geometry(Op.OP_FPROP, 1, 1, 1, 1)
    objs, handle, flags, keep = _call.operands((x, None, None, cols), None)
    with pytest.raises(pcr.Error, match=match):
        lib.check(lib.pcr_py_im2col(objs[0], objs[3], geo.fields(), r, r, flags, handle))


@pytest.mark.parametrize(
    "channels, stride, dilation", [(3, 2, 1), (16, 2, 2)], ids=["few channels", "strided dilated"]
)
def test_dgrad_the_kernels_do_badly_runs_as_a_gemm_folded_back(
    monkeypatch, channels, stride, dilation
):
    """dgrad with channels short of 16 bytes, or strided and dilated at once: one GEMM into
    the unfolded gradient (dy @ w flattened, padded), then col2im into dx with alpha, beta, c."""
    calls, folds = [], []

    def unfold(x, r, s, geo, width, fill):
        return np.zeros((x.shape[0], width), x.dtype)  # the filters only: one position each

    monkeypatch.setattr(_conv_gemm, "_on_gpu", lambda t: True)
    monkeypatch.setattr(_conv_gemm, "_makes_matrices", lambda t: True)
    monkeypatch.setattr(_conv_gemm, "_unfold", unfold)
    monkeypatch.setattr(_conv_gemm, "_fold", lambda *args: folds.append(args))
    monkeypatch.setattr(_gemm, "gemm", lambda *args, **kw: calls.append((args, kw)))
    x_shape = (2, 9, 9, channels)
    p = (9 + 2 - dilation * 2 - 1) // stride + 1
    dy, w = nhwc(2, p, p, 8), nhwc(8, 3, 3, channels)
    c = nhwc(*x_shape)
    geo = dict(stride=stride, padding=1, dilation=dilation)
    dx = pcr.conv2d_dgrad(dy, w, input_size=x_shape, alpha=2.0, beta=0.5, c=c, **geo)
    width = 9 * channels
    padded = -(-width // 8) * 8
    (a, b, c0, d, alpha, beta), _ = calls[0]
    assert (a.shape, b.shape, d.shape) == ((2 * p * p, 8), (8, padded), (2 * p * p, padded))
    assert (c0, alpha, beta) == (None, 1.0, 0.0)
    ((cols, into, added, geom, r, s, alpha, beta),) = folds
    assert cols is d and np.shares_memory(into, dx) and added is c and (alpha, beta) == (2.0, 0.5)
    assert (geom.stride, geom.dilation, r, s) == ((stride, stride), (dilation, dilation), 3, 3)


@pytest.mark.parametrize(
    "dx, cols, c, match",
    [
        (nhwc(1, 4, 4, 3), np.zeros((16, 27), np.float16), None, "dx and cols must be on one GPU"),
        (nhwc(1, 4, 4, 3), np.zeros((15, 27), np.float16), None, r"\(16, 1 x >= 27\)"),
        (np.zeros((1, 4, 4, 3), np.int8), np.zeros((16, 27), np.int8), None, "float16, bfloat16"),
        (
            nhwc(1, 4, 4, 3),
            np.zeros((16, 27), np.float16),
            nhwc(1, 4, 4, 2),
            "c must be dx's shape",
        ),
    ],
)
def test_col2im_checks_its_tensors(dx, cols, c, match):
    """pcr_col2im refuses before any GPU: shapes, dtypes, places."""
    from pycutlass_rt import _call, _lib

    lib = _lib.load()
    geo = _conv_tensors.geometry(Op.OP_DGRAD, 1, 1, 1, 1)
    objs, handle, flags, keep = _call.operands((cols, None, c, dx), None)
    with pytest.raises(pcr.Error, match=match):
        lib.check(
            lib.pcr_py_col2im(
                objs[0], objs[3], objs[2], geo.fields(), 3, 3, 1.0, 0.0, flags, handle
            )
        )


# ---- the GEMM routes end to end, on the CPU: the library's unfolding and GEMM emulated --


def _put(d, value):
    """d[...] = value for a numpy array or a (CPU) torch tensor, views included."""
    if isinstance(d, np.ndarray):
        d[...] = value
    else:
        import torch

        d.copy_(torch.from_numpy(np.ascontiguousarray(value)).to(d.dtype))


def _like(x, value):
    """value (numpy) in x's framework."""
    if isinstance(x, np.ndarray):
        return value
    import torch

    return torch.from_numpy(value)


def np_unfold(x, r, s, geo, width, fill=True):
    """pcr_im2col's contract in numpy (group blocks of width / groups columns)."""
    x = np.asarray(x)
    n, h, w, c = x.shape
    groups, (ph, pw), (sh, sw), (dh, dw) = geo.groups, geo.padding, geo.stride, geo.dilation
    cg, block = c // groups, width // groups
    p, q = geo.out_extent((h, w), (r, s))
    xp = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    cols = np.zeros((n * p * q, width), x.dtype)
    for i in range(r):
        for j in range(s):
            win = xp[
                :, i * dh : i * dh + sh * (p - 1) + 1 : sh, j * dw : j * dw + sw * (q - 1) + 1 : sw
            ]
            win = win.reshape(n * p * q, groups, cg)
            for g in range(groups):
                at = g * block + (i * s + j) * cg
                cols[:, at : at + cg] = win[:, g]
    return cols


def any_unfold(x, r, s, geo, width, fill=True):
    """np_unfold, its result in x's framework."""
    return _like(x, np_unfold(x, r, s, geo, width, fill))


def np_fold(cols, dx, c, geo, r, s, alpha, beta):
    """pcr_col2im's contract in numpy: the adjoint of np_unfold, then alpha and beta * c."""
    cols, c = np.asarray(cols), None if c is None else np.asarray(c)
    n, h, w, ch = dx.shape
    groups, (ph, pw), (sh, sw), (dh, dw) = geo.groups, geo.padding, geo.stride, geo.dilation
    cg, block = ch // groups, cols.shape[1] // groups
    p = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    q = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
    acc = np.zeros((n, h + 2 * ph + sh, w + 2 * pw + sw, ch))
    for i in range(r):
        for j in range(s):
            taps = [cols[:, g * block + (i * s + j) * cg :][:, :cg] for g in range(groups)]
            grad = np.concatenate(taps, axis=1).reshape(n, p, q, ch)
            acc[:, i * dh : i * dh + sh * p : sh, j * dw : j * dw + sw * q : sw] += grad
    _put(dx, alpha * acc[:, ph : ph + h, pw : pw + w] + (0 if c is None else beta * c))


def np_gemm(a, b, c, d, alpha=1.0, beta=0.0, **kw):
    """pcr.gemm's contract in numpy (batched by matmul), no bias or activation."""
    a, b = (np.asarray(t).astype(np.float64) for t in (a, b))
    out = alpha * np.matmul(a, b)
    _put(d, out if c is None else out + beta * np.asarray(c))


def reference(op, x, w, dy, stride, padding, dilation, groups):
    """torch's conv2d and its gradients, by loops over the filter taps (float64, NHWC)."""
    n, h, wd, ch = x.shape
    k, r, s, cg = w.shape
    kg = k // groups
    p, q = dy.shape[1:3]
    xp = np.pad(x.astype(np.float64), ((0, 0), (padding,) * 2, (padding,) * 2, (0, 0)))
    y = np.zeros((n, p, q, k))
    dxp, dw = np.zeros_like(xp), np.zeros((k, r, s, cg))
    for i in range(r):
        for j in range(s):
            hs = slice(i * dilation, i * dilation + stride * (p - 1) + 1, stride)
            ws = slice(j * dilation, j * dilation + stride * (q - 1) + 1, stride)
            for g in range(groups):
                xw = xp[:, hs, ws, g * cg : (g + 1) * cg]
                wg, dyg = (
                    w[g * kg : (g + 1) * kg, i, j].astype(np.float64),
                    dy[..., g * kg : (g + 1) * kg],
                )
                y[..., g * kg : (g + 1) * kg] += np.einsum("npqc,kc->npqk", xw, wg)
                dxp[:, hs, ws, g * cg : (g + 1) * cg] += np.einsum("npqk,kc->npqc", dyg, wg)
                dw[g * kg : (g + 1) * kg, i, j] += np.einsum("npqk,npqc->kc", dyg, xw)
    dx = dxp[:, padding : padding + h, padding : padding + wd]
    return {"fprop": y, "dgrad": dx, "wgrad": dw}[op]


CASES = {  # (n, h, w, c, k, r, s, stride, padding, dilation, groups)
    "stem": (2, 9, 8, 3, 5, 3, 3, 2, 1, 1, 1),
    "grouped": (2, 7, 6, 8, 6, 3, 3, 1, 1, 1, 2),
    "grouped strided": (1, 9, 9, 12, 6, 3, 3, 2, 1, 1, 3),
    "strided dilated": (1, 11, 10, 16, 8, 3, 3, 2, 2, 2, 1),
    "few outputs": (2, 7, 6, 16, 4, 3, 3, 1, 1, 1, 1),  # 4 filters: 8-byte rows of y, dy
}
#: the passes a case's GEMM route takes (the rest: every pass)
ROUTED = {"strided dilated": ("dgrad",), "few outputs": ("fprop", "wgrad")}


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
def test_gemm_routes_compute_the_convolution(monkeypatch, case, op, framework):
    """The unfolding routes' views, padding, group batches and finishing steps, run with
    numpy stand-ins for pcr_im2col, pcr_col2im and the GEMM: torch's convolution. On numpy
    NHWC arrays and on CPU torch tensors (channels_last, torch's shapes), whose views the
    routes take apart the same way on the GPU."""
    n, h, w_, c, k, r, s, stride, padding, dilation, groups = CASES[case]
    if op not in ROUTED.get(case, (op,)):
        pytest.skip("the convolution kernels take it")
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, (n, h, w_, c)).astype(np.float16)
    w = rng.integers(-2, 3, (k, r, s, c // groups)).astype(np.float16)
    p = (h + 2 * padding - dilation * (r - 1) - 1) // stride + 1
    q = (w_ + 2 * padding - dilation * (s - 1) - 1) // stride + 1
    dy = rng.integers(-2, 3, (n, p, q, k)).astype(np.float16)
    monkeypatch.setattr(_conv_gemm, "_on_gpu", lambda t: True)
    monkeypatch.setattr(_conv_gemm, "_makes_matrices", lambda t: True)
    monkeypatch.setattr(_conv_gemm, "_unfold", any_unfold)
    monkeypatch.setattr(_conv_gemm, "_fold", np_fold)
    monkeypatch.setattr(_gemm, "gemm", np_gemm)
    geo = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    xs, ws, dys = x, w, dy
    if framework == "torch":  # NCHW logically, NHWC in memory: channels_last
        torch = pytest.importorskip("torch")
        xs, ws, dys = (torch.from_numpy(t).permute(0, 3, 1, 2) for t in (x, w, dy))
    if op == "fprop":
        got = pcr.conv2d(xs, ws, **geo)
    elif op == "dgrad":
        got = pcr.conv2d_dgrad(dys, ws, input_size=xs.shape, alpha=2.0, beta=1.0, c=xs, **geo)
    else:
        got = pcr.conv2d_wgrad(dys, xs, weight_size=ws.shape, **geo)
    if framework == "torch":
        got = got.permute(0, 2, 3, 1).numpy()
    want = reference(op, x, w, dy, stride, padding, dilation, groups)
    if op == "dgrad":
        want = 2 * want + x
    np.testing.assert_array_equal(got.astype(np.float64), want)  # small integers: exact


FPROP4, DGRAD4 = (Op.OP_FPROP, 4), (Op.OP_DGRAD, 4)


@pytest.mark.parametrize(
    "width, built", [(4, {FPROP4, DGRAD4}), (4, {FPROP4}), (8, {FPROP4}), (4, set())]
)
def test_a_grouped_pass_goes_to_a_direct_kernel_of_its_width_first(monkeypatch, width, built):
    """A grouped fprop or dgrad whose pass and group width the build has direct kernels for
    goes to the convolution kernels first, and on to the unfolded GEMM route only where they
    refuse it; other passes and widths, and builds without direct kernels, take the GEMM
    route directly."""
    tried, calls = [], []

    def native(geo, views, *args):
        tried.append(geo.op)
        return False  # refused before any launch: no kernel takes it

    monkeypatch.setattr(_conv, "_direct_widths", lambda: frozenset(built))
    monkeypatch.setattr(_conv, "_native", native)
    monkeypatch.setattr(_conv_gemm, "_on_gpu", lambda t: True)
    monkeypatch.setattr(_conv_gemm, "_makes_matrices", lambda t: True)
    monkeypatch.setattr(_conv_gemm, "_unfold", any_unfold)
    monkeypatch.setattr(_conv_gemm, "_fold", lambda *args: None)
    monkeypatch.setattr(_gemm, "gemm", lambda *args, **kw: calls.append(args))
    x, w = nhwc(1, 6, 6, 4 * width), nhwc(4 * width, 3, 3, width)
    dy = nhwc(1, 6, 6, 4 * width)
    for run in (
        lambda: pcr.conv2d(x, w, padding=1, groups=4),
        lambda: pcr.conv2d_dgrad(dy, w, input_size=x.shape, padding=1, groups=4),
        lambda: pcr.conv2d_wgrad(dy, x, weight_size=w.shape, padding=1, groups=4),
    ):
        calls.clear()
        run()
        assert calls  # on the GEMM route: a batched GEMM over the groups
    assert tried == [op for op in (Op.OP_FPROP, Op.OP_DGRAD) if (op, width) in built]


@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
def test_float32_at_fp32_accuracy_runs_as_a_gemm_on_the_unfolded_input(monkeypatch, op):
    """math="ieee" on float32 (no convolution kernel computes at fp32 accuracy): the unfolded
    route with the GEMM's math; the TF32 default stays on the convolution kernels."""
    calls = []

    def gemm(*args, **kw):
        calls.append(kw["math"])
        np_gemm(*args)

    monkeypatch.setattr(_conv_gemm, "_on_gpu", lambda t: True)
    monkeypatch.setattr(_conv_gemm, "_makes_matrices", lambda t: True)
    monkeypatch.setattr(_conv_gemm, "_unfold", any_unfold)
    monkeypatch.setattr(_conv_gemm, "_fold", np_fold)
    monkeypatch.setattr(_gemm, "gemm", gemm)
    rng = np.random.default_rng(1)
    x = rng.integers(-2, 3, (2, 7, 6, 16)).astype(np.float32)
    w = rng.integers(-2, 3, (8, 3, 3, 16)).astype(np.float32)
    dy = rng.integers(-2, 3, (2, 7, 6, 8)).astype(np.float32)
    passes = {
        "fprop": lambda **kw: pcr.conv2d(x, w, padding=1, **kw),
        "dgrad": lambda **kw: pcr.conv2d_dgrad(dy, w, input_size=x.shape, padding=1, **kw),
        "wgrad": lambda **kw: pcr.conv2d_wgrad(dy, x, weight_size=w.shape, padding=1, **kw),
    }
    got = passes[op](math="ieee")
    np.testing.assert_array_equal(got, reference(op, x, w, dy, 1, 1, 1, 1))
    assert calls and set(calls) == {"ieee"}
    calls.clear()
    with pytest.raises((pcr.NoDeviceError, pcr.UnsupportedError, pcr.NoKernelForArchError)):
        passes[op]()  # TF32, cuDNN's default: the convolution kernels
    assert not calls


@pytest.mark.parametrize(
    "op, out, k, c, lags",
    [
        ("fprop", (2, 8, 8), 1280, 1280, True),  # 128 rows x 10 tiles of K, 11520 deep
        ("fprop", (2, 16, 16), 1280, 1280, False),  # 4 x 10 = 40 tiles: enough
        ("fprop", (2, 8, 8), 1280, 64, False),  # 576 deep: nothing to spread
        ("dgrad", (2, 8, 8), 1280, 1280, True),  # dx: 128 rows x 10 tiles of C
        ("dgrad", (2, 8, 8), 1280, 2560, False),  # 20 tiles of C
        ("wgrad", (2, 8, 8), 1280, 1280, False),  # wgrad kernels split K themselves
    ],
)
def test_too_few_output_tiles_over_a_long_reduction_is_where_the_kernels_lag(
    monkeypatch, op, out, k, c, lags
):
    """The lagging rule on a 132-SM GPU: fewer 128 x 128 output tiles than 1/8 of the SMs
    over a reduction of >= 1024; off with UNFOLD_LAGGING."""
    monkeypatch.setattr(_conv_gemm, "_sm_count", lambda device: 132)
    geo = _conv_tensors.Geometry(Op[f"OP_{op.upper()}"], (1, 1), (1, 1), (1, 1), 1)
    image = nhwc(*out, c if op != "fprop" else k)
    views = (None, nhwc(k, 3, 3, c), None, image)  # filters (K, R, S, C); the output
    assert _conv_gemm._kernels_lag(geo, views, image) == lags
    monkeypatch.setattr(_conv_gemm, "UNFOLD_LAGGING", False)
    assert not _conv_gemm._kernels_lag(geo, views, image)


def test_new_torch_outputs_and_scratch_are_made_channels_last_without_a_copy():
    """Outputs (out=None) and the GEMM routes' scratch are allocated in their final layout:
    no NCHW tensor converted afterwards, whose conversion would be a transposing copy as
    large as the tensor on every call."""
    torch = pytest.importorskip("torch")
    like = torch.zeros(1, 2, 3, 4).contiguous(memory_format=torch.channels_last)
    with torch.autograd.profiler.profile() as prof:
        t, view = _conv_tensors.empty_like_producer(like, (2, 5, 6, 7), torch.float16, "out")
        m = _conv_gemm._matrix(like, 30, 8)
    assert not [e.name for e in prof.function_events if "copy" in e.name]
    assert t.shape == (2, 7, 5, 6) and t.is_contiguous(memory_format=torch.channels_last)
    assert view.shape == (2, 5, 6, 7) and view.is_contiguous()
    assert m.shape == (30, 8) and m.is_contiguous()


# ---- depthwise fprop --------------------------------------------------------------------


def depthwise_problem(lib, c, k=None, bias=True):
    """The C describe step's problem of a depthwise fprop (3x3, stride 2, padding 1) on
    numpy NHWC arrays, fused bias and ReLU: (status, problem); NO_DEVICE still fills it."""
    k = k or c
    x, w, y = nhwc(3, 9, 7, c), nhwc(k, 3, 3, 1), nhwc(3, 5, 4, k)
    geo = _conv_tensors.geometry(Op.OP_FPROP, 2, 1, 1, c)
    b = np.zeros(k, np.float16) if bias else None
    call = _conv.prepare(geo, (x, w, None, y), 1.0, 0.0, b, "relu", None, None, None)
    p = _lib.Problem()
    objs = call.objs
    st = lib.pcr_py_describe(*objs[:4], 1.0, 0.0, call.extra, ctypes.byref(p), None, 0)
    return st, p


def built_depthwise(dtype="float16", op="fprop"):
    """The build's depthwise kernels of ``dtype`` for pass ``op``."""
    return [
        k for k in pcr.kernels() if k.schedule == "depthwise" and k.dtype_a == dtype and k.op == op
    ]


def test_a_depthwise_fprop_is_one_filter_per_channel_of_an_implicit_gemm(lib):
    """A depthwise fprop is described as the implicit GEMM N*P*Q x C x R*S with C groups
    and the fused epilogue; without a device, every float16 depthwise kernel of the build
    takes it (the other fprop kernels refuse groups in CUTLASS's can_implement, on a GPU)."""
    st, p = depthwise_problem(lib, 16)
    if st == errors.ERR_UNSUPPORTED:  # a build without float16 bias/activation fprop kernels
        assert "no kernel in this build computes" in lib.last_error()
        return
    assert st in (0, errors.ERR_NO_DEVICE), lib.last_error()
    assert (p.op, p.m, p.n, p.k) == (Op.OP_FPROP, 3 * 5 * 4, 16, 9)
    assert (p.conv.groups, p.conv.c, p.conv.k, p.conv.r, p.conv.s) == (16, 16, 16, 3, 3)
    assert p.epilogue == Epilogue.EPI_BIASACT and p.align_a == 16
    p.device = -1  # the problem alone: no device to ask whether the kernels run on it
    verdicts = _call.judge(lib, p).verdicts
    for k in built_depthwise():
        assert verdicts[k.index] == (0, ""), (k.name, verdicts[k.index])
    for k in built_depthwise(op="dgrad") + built_depthwise(op="wgrad"):  # another pass's
        status, why = verdicts[k.index]
        assert status == errors.ERR_UNSUPPORTED and f"convolution {k.op} kernel" in why, why


def test_depthwise_channels_short_of_a_vector_are_refused_before_any_launch(lib):
    """12 float16 channels (24 bytes) are no whole 16-byte vectors: each depthwise kernel's
    verdict on the problem refuses them as misaligned, which the selector's refusal (an
    UnsupportedError naming every kernel's reason) is made of."""
    st, p = depthwise_problem(lib, 12)
    if st == errors.ERR_UNSUPPORTED:
        return  # as above
    assert st in (0, errors.ERR_NO_DEVICE), lib.last_error()
    verdicts = _call.judge(lib, p).verdicts
    for k in built_depthwise():
        status, why = verdicts[k.index]
        assert status == errors.ERR_MISALIGNED and "16-byte alignment of a" in why, why


@pytest.mark.parametrize(
    "call, match",
    [
        # w holds 2 channels per group where x's 16 channels in 16 groups leave 1
        (lambda y: pcr.conv2d(nhwc(1, 8, 8, 16), nhwc(16, 3, 3, 2), groups=16, out=y), "per group"),
        (
            lambda y: pcr.conv2d(
                nhwc(1, 8, 8, 16), nhwc(16, 3, 3, 1), np.zeros(8, np.float16), groups=16, out=y
            ),
            "bias must be a contiguous vector of the 16 output channels",
        ),
        (
            lambda y: pcr.conv2d(nhwc(1, 8, 8, 16), nhwc(16, 3, 3, 1), padding=2, groups=16, out=y),
            r"must hold \(1, 10, 10, 16\)",
        ),
    ],
)
def test_depthwise_argument_errors_write_nothing(call, match):
    """A depthwise call's malformed arguments raise InvalidArgumentError before anything
    runs, and its output keeps what it held."""
    y = np.full((1, 6, 6, 16), 7, np.float16)
    with pytest.raises(pcr.InvalidArgumentError, match=match):
        call(y)
    assert (y == 7).all()


def depthwise_info(i, r, s, stride):
    """A depthwise kernel as the build reports one (float16; (0, 0, 0): the generic one)."""
    word = f"f{r}x{s}s{stride}" if r else "fany"
    return KernelInfo(
        i,
        f"sm80_fprop_f16_f16_f32_f16_nhwc_{word}_depthwise_biasact_a8",
        80,
        "float16",
        "float16",
        "float32",
        "float16",
        "nhwc",
        (r, s, stride),
        (1, 1, 1),
        (0, 0, 0),
        0,
        "depthwise",
        "biasact",
        "none",
        (8, 1, 8),
        op="fprop",
    )


@pytest.mark.parametrize("cc, sms", [(90, 132), (80, 108)])
def test_the_model_ranks_a_depthwise_kernel_built_for_the_filter_ahead_of_the_generic(cc, sms):
    """Among depthwise kernels that take a problem, the model puts those built for a filter
    and stride ahead of the generic one (which loads each input once per tap), on Hopper
    (whose own family has none) and on the sm80 family alike."""
    generic, fixed = depthwise_info(0, 0, 0, 0), depthwise_info(1, 3, 3, 1)
    for n, c, hw in [(32, 32, 112), (1, 960, 7)]:  # MobileNet-V2's first and last layers
        problem = types.SimpleNamespace(
            m=n * hw * hw, n=c, k=9, sm_count=sms, cc=cc, op=Op.OP_FPROP
        )
        order = _select.families_for(cc)
        ranked = _select.ranked(problem, [generic, fixed], order)
        assert [k.name for k, _, _ in ranked] == [fixed.name, generic.name]
        assert 0 < ranked[0][2] < ranked[1][2]
