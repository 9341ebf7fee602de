"""The depthwise kernels' device code, run on the CPU (tests/mockgpu): every kernel of the
catalogue, whether this build holds it or not, through its own can_implement, prepare and
launch, against a float64 depthwise convolution; AddressSanitizer watches every operand and
the shared memory, which is poisoned before each CTA, as the output is before the launch.
The GPU suite runs the same cases on the GPU (tests/gpu/test_conv_gpu.py, ``-k depthwise``).
"""

import math

import mockgpu
import numpy as np
import pytest
from catalog import catalogue
from helpers import (
    DEPTHWISE_SHAPES,
    depthwise_geometry,
    depthwise_gradient_cases,
)

DEPTHWISE = [k for k in catalogue() if k.depthwise]
NAMES = [k.name for k in DEPTHWISE if k.op == "fprop"]
GRADIENTS = [k.name for k in DEPTHWISE if k.op != "fprop"]
BY_NAME = {k.name: k for k in DEPTHWISE}


@pytest.fixture(scope="module")
def emulator():
    """The driver built with every depthwise kernel (cached under build/mockgpu)."""
    return mockgpu.driver(DEPTHWISE)


def reference(x, w, bias, stride, padding, dilation):
    """The depthwise convolution of x (N, H, W, C) by w (C, R, S, 1) in float64, plus bias."""
    n, h, w_, c = x.shape
    _, r, s, _ = w.shape
    p = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    q = (w_ + 2 * padding[1] - dilation[1] * (s - 1) - 1) // stride[1] + 1
    xp = np.zeros((n, h + 2 * padding[0], w_ + 2 * padding[1], c))
    xp[:, padding[0] : padding[0] + h, padding[1] : padding[1] + w_] = x
    y = np.zeros((n, p, q, c))
    for i in range(r):
        for j in range(s):
            rows = slice(i * dilation[0], i * dilation[0] + stride[0] * (p - 1) + 1, stride[0])
            cols = slice(j * dilation[1], j * dilation[1] + stride[1] * (q - 1) + 1, stride[1])
            y += xp[:, rows, cols] * w[:, i, j, 0]
    return y if bias is None else y + bias


def integer_case(n, c, h, w_, filt, seed):
    """Integer-valued x, w and bias: every sum exact in 16-bit outputs."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (n, h, w_, c)).astype(np.float64)
    w = rng.integers(-2, 3, (c, *filt, 1)).astype(np.float64)
    return x, w, (np.arange(c) % 9 - 4).astype(np.float64)


def run(exe, name, x, w, tmp_path, **kw):
    """An fprop of x (N, H, W, C) by w (C, R, S, 1), one filter per channel."""
    a = BY_NAME[name].a
    return mockgpu.fprop(exe, name, a, x, w, groups=x.shape[3], workdir=str(tmp_path), **kw)


@pytest.mark.parametrize("padding", [0, 1, 2, 3])
@pytest.mark.parametrize("name", NAMES)
def test_depthwise_kernel(emulator, tmp_path, name, padding):
    """Each kernel equals the float64 convolution exactly (integer inputs) at odd N, H and W
    and padding 0 to 3, with its bias and a ReLU fused, and without them."""
    filt, stride, dilation = depthwise_geometry(BY_NAME[name].tile)
    x, w, bias = integer_case(3, 24, 13, 11, filt, seed=20)
    geo = dict(stride=stride, padding=(padding, padding), dilation=dilation)
    got = run(emulator, name, x, w, tmp_path, bias=bias, activation="relu", **geo)
    np.testing.assert_array_equal(got, np.maximum(reference(x, w, bias, **geo), 0))
    got = run(emulator, name, x, w, tmp_path, **geo)
    np.testing.assert_array_equal(got, reference(x, w, None, **geo))


@pytest.mark.parametrize("shape", DEPTHWISE_SHAPES, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_depthwise_kernel_shapes(emulator, tmp_path, name, shape):
    """Each kernel over channel counts that fill several CTAs' chunks or part of one, a
    single output row or column, odd sizes: the float64 result exactly."""
    n, c, h, w_ = shape
    filt, stride, dilation = depthwise_geometry(BY_NAME[name].tile)
    padding = tuple(d * (f - 1) // 2 for d, f in zip(dilation, filt))  # "same" at stride 1
    x, w, bias = integer_case(n, c, h, w_, filt, seed=30)
    geo = dict(stride=stride, padding=padding, dilation=dilation)
    got = run(emulator, name, x, w, tmp_path, bias=bias, **geo)
    np.testing.assert_array_equal(got, reference(x, w, bias, **geo))


def silu(y):
    return y / (1 + np.exp(-y))


@pytest.mark.parametrize("activation", ["silu", "clamp"])
@pytest.mark.parametrize("name", NAMES)
def test_depthwise_epilogue(emulator, tmp_path, name, activation):
    """alpha, beta * c (a residual) and an activation with parameters (ReLU6 as clamp),
    fused, on random inputs: fp32 accumulation and one rounding to the 16-bit output."""
    k = BY_NAME[name]
    filt, stride, dilation = depthwise_geometry(k.tile)
    rng = np.random.default_rng(40)
    x = mockgpu.decode(mockgpu.encode(rng.standard_normal((2, 11, 10, 32)), k.a), k.a)
    w = mockgpu.decode(mockgpu.encode(rng.standard_normal((32, *filt, 1)), k.a), k.a)
    bias = mockgpu.decode(mockgpu.encode(rng.standard_normal(32), k.a), k.a)
    geo = dict(stride=stride, padding=(1, 1), dilation=dilation)
    ref = reference(x, w, None, **geo)
    c = mockgpu.decode(mockgpu.encode(rng.standard_normal(ref.shape), k.a), k.a)
    act = ("clamp", 0.0, 6.0) if activation == "clamp" else activation
    got = run(
        emulator, name, x, w, tmp_path, bias=bias, c=c, alpha=0.5, beta=-1.5, activation=act, **geo
    )
    y = 0.5 * ref - 1.5 * c + bias
    y = np.clip(y, 0, 6) if activation == "clamp" else silu(y)
    ulp = 2.0 ** (-8 if k.a == "bf16" else -11)  # the output's rounding, relative
    np.testing.assert_allclose(got, y, rtol=2 * ulp, atol=4 * ulp * math.sqrt(filt[0] * filt[1]))


@pytest.mark.parametrize("name", NAMES)
def test_depthwise_refusals(emulator, tmp_path, name):
    """What a kernel does not take, it refuses in can_implement, saying why: channel counts
    that are not multiples of 8, a channel multiplier, and (the kernels built for one
    filter and stride) another filter, stride or any dilation."""
    k = BY_NAME[name]
    filt, stride, dilation = depthwise_geometry(k.tile)
    geo = dict(stride=stride, padding=(1, 1), dilation=dilation)
    x, w, _ = integer_case(1, 12, 9, 9, filt, seed=50)
    with pytest.raises(mockgpu.Refused, match="multiple"):
        run(emulator, name, x, w, tmp_path, **geo)
    x, w, _ = integer_case(1, 16, 17, 17, filt, seed=51)
    with pytest.raises(mockgpu.Refused, match="channel multiplier"):
        w2 = np.concatenate([w, w])
        mockgpu.conv(
            emulator,
            name,
            k.a,
            x,
            w2,
            x_shape=x.shape,
            w_shape=w2.shape,
            groups=16,
            workdir=str(tmp_path),
            **geo,
        )
    if k.tile[0]:
        wider = integer_case(1, 16, 17, 17, (filt[0] + 2, filt[1]), seed=52)[1]
        for w_, g in (
            (wider, geo),
            (w, {**geo, "stride": (stride[0] + 1,) * 2}),
            (w, {**geo, "dilation": (2, 2)}),
        ):
            with pytest.raises(mockgpu.Refused, match="built for"):
                run(emulator, name, x, w_, tmp_path, **g)


# ---- dgrad and wgrad: generic kernels ---------------------------------------------------


def gradients(x, w, dy, stride, padding, dilation):
    """(dx, dw) of the depthwise convolution y = conv(x, w) for the upstream gradient dy, in
    float64: the adjoints of :func:`reference`, tap by tap."""
    n, h, w_, c = x.shape
    _, r, s, _ = w.shape
    _, p, q, _ = dy.shape
    dxp = np.zeros((n, h + 2 * padding[0], w_ + 2 * padding[1], c))
    xp = np.zeros_like(dxp)
    xp[:, padding[0] : padding[0] + h, padding[1] : padding[1] + w_] = x
    dw = np.zeros_like(w)
    for i in range(r):
        for j in range(s):
            rows = slice(i * dilation[0], i * dilation[0] + stride[0] * (p - 1) + 1, stride[0])
            cols = slice(j * dilation[1], j * dilation[1] + stride[1] * (q - 1) + 1, stride[1])
            dxp[:, rows, cols] += dy * w[:, i, j, 0]
            dw[:, i, j, 0] = (dy * xp[:, rows, cols]).sum(axis=(0, 1, 2))
    return dxp[:, padding[0] : padding[0] + h, padding[1] : padding[1] + w_], dw


@pytest.mark.parametrize(
    "name, case",
    [(n, c) for n in GRADIENTS for c in depthwise_gradient_cases(BY_NAME[n].tile)],
    ids=lambda v: str(v),
)
def test_depthwise_gradient(emulator, tmp_path, name, case):
    """dgrad and wgrad kernels equal the float64 adjoints on integer data exactly (every sum
    exact in float32, then one rounding to the 16-bit output), over strides, dilation,
    padding and channel chunks (for the dgrad kernels built for a filter: that filter at
    stride 1), and add beta * c to alpha times the gradient."""
    k = BY_NAME[name]
    n, c, h, w_, filt, stride, padding, dilation = case
    x, w, _ = integer_case(n, c, h, w_, filt, seed=60)
    geo = dict(stride=stride, padding=padding, dilation=dilation)
    p = (h + 2 * padding[0] - dilation[0] * (filt[0] - 1) - 1) // stride[0] + 1
    q = (w_ + 2 * padding[1] - dilation[1] * (filt[1] - 1) - 1) // stride[1] + 1
    dy = np.random.default_rng(61).integers(-2, 3, (n, p, q, c)).astype(np.float64)
    dx, dw = gradients(x, w, dy, **geo)
    kw = dict(x_shape=x.shape, w_shape=w.shape, groups=c, workdir=str(tmp_path), **geo)
    b, want = (w, dx) if k.op == "dgrad" else (x, dw)

    def rounded(v):
        return mockgpu.decode(mockgpu.encode(v, k.a), k.a)

    got = mockgpu.conv(emulator, name, k.a, dy, b, **kw)
    np.testing.assert_array_equal(got, rounded(want))
    prior = np.random.default_rng(62).integers(-4, 5, want.shape).astype(np.float64)
    got = mockgpu.conv(emulator, name, k.a, dy, b, c=prior, alpha=2.0, beta=-1.0, **kw)
    np.testing.assert_array_equal(got, rounded(2.0 * want - prior))


@pytest.mark.parametrize("name", GRADIENTS)
def test_depthwise_gradient_refusals(emulator, tmp_path, name):
    """A gradient kernel refuses channel counts that are not multiples of 8 and a channel
    multiplier, saying why."""
    k = BY_NAME[name]
    x, w, _ = integer_case(1, 16, 9, 9, (3, 3), seed=70)
    dy = np.ones((1, 9, 9, 16))
    kw = dict(x_shape=x.shape, w_shape=w.shape, padding=(1, 1), workdir=str(tmp_path))
    b = w if k.op == "dgrad" else x
    twelve = {**kw, "x_shape": (1, 9, 9, 12), "w_shape": (12, 3, 3, 1)}
    with pytest.raises(mockgpu.Refused, match="multiple"):
        mockgpu.conv(
            emulator,
            name,
            k.a,
            dy[..., :12],
            b[..., :12] if k.op == "wgrad" else b[:12],
            groups=12,
            **twelve,
        )
    doubled = {**kw, "w_shape": (32, 3, 3, 1)}
    dy2 = np.ones((1, 9, 9, 32))
    b2 = np.concatenate([w, w]) if k.op == "dgrad" else x
    with pytest.raises(mockgpu.Refused, match="channel multiplier"):
        mockgpu.conv(emulator, name, k.a, dy2, b2, groups=16, **doubled)


def extent(size, pad, dilation, filt, stride):
    """An output extent of a convolution (torch's formula)."""
    return (size + 2 * pad - dilation * (filt - 1) - 1) // stride + 1


@pytest.mark.parametrize("name", [n for n in GRADIENTS if BY_NAME[n].tile != (0, 0, 0)])
def test_depthwise_gradient_for_a_filter_refuses_the_rest(emulator, tmp_path, name):
    """A gradient kernel built for a filter runs it at its stride, no dilation, and a
    stride-1 dgrad's with padding up to the filter's extent less one: the rest it refuses,
    saying why."""
    k = BY_NAME[name]
    r, s, built = k.tile
    x, w, _ = integer_case(1, 16, 17, 17, (r, s), seed=80)
    kw = dict(x_shape=x.shape, w_shape=w.shape, groups=16, workdir=str(tmp_path))
    b = w if k.op == "dgrad" else x
    refusals = [(built + 1, (1, 1), 1, "built for"), (built, (1, 1), 2, "built for")]
    if k.op == "dgrad" and built == 1:
        refusals.append((1, (r, 0), 1, "padding up to"))
    for stride, padding, dilation, why in refusals:
        p = extent(17, padding[0], dilation, r, stride)
        q = extent(17, padding[1], dilation, s, stride)
        geo = dict(stride=(stride,) * 2, padding=padding, dilation=(dilation,) * 2)
        with pytest.raises(mockgpu.Refused, match=why):
            mockgpu.conv(emulator, name, k.a, np.ones((1, p, q, 16)), b, **kw, **geo)
