"""The direct grouped kernels' device code, run on the CPU (tests/mockgpu): every one of
the catalogue, whether this build holds it or not, through its own can_implement, prepare
and launch, against a float64 grouped convolution (fprop) or its adjoint (dgrad),
AddressSanitizer watching every operand and the shared memory. The GPU suite runs them too
(tests/gpu/test_conv_gpu.py, ``-k grouped_direct``).
"""

import math

import mockgpu
import numpy as np
import pytest
from catalog import catalogue

GROUPED = [k for k in catalogue() if k.schedule == "direct"]
NAMES = [k.name for k in GROUPED if k.op == "fprop"]
DGRADS = [k.name for k in GROUPED if k.op == "dgrad"]
BY_NAME = {k.name: k for k in GROUPED}

#: (n, groups, h, w): odd sizes, one output column (unpadded), and channels in several CTA
#: chunks (36 groups: 144, 288 or 576 channels, 36 to 144 vectors of 4 output channels in
#: chunks of at most 32, or fewer where shared memory holds fewer vectors' filters)
SHAPES = [(3, 8, 13, 11), (1, 2, 6, 3), (2, 36, 9, 7), (1, 10, 5, 17)]


@pytest.fixture(scope="module")
def emulator():
    """The driver built with every direct grouped kernel (cached under build/mockgpu)."""
    return mockgpu.driver(GROUPED)


def reference(x, w, bias, groups, stride, padding):
    """The grouped convolution of x (N, H, W, C) by w (K, R, S, C / groups) in float64,
    plus bias (K)."""
    n, h, w_, c = x.shape
    k, r, s, cg = w.shape
    kg = k // groups
    p = (h + 2 * padding - r) // stride + 1
    q = (w_ + 2 * padding - s) // stride + 1
    xp = np.zeros((n, h + 2 * padding, w_ + 2 * padding, c))
    xp[:, padding : padding + h, padding : padding + w_] = x
    y = np.zeros((n, p, q, k))
    for g in range(groups):
        ins, outs = slice(g * cg, (g + 1) * cg), slice(g * kg, (g + 1) * kg)
        for i in range(r):
            for j in range(s):
                rows = slice(i, i + stride * (p - 1) + 1, stride)
                cols = slice(j, j + stride * (q - 1) + 1, stride)
                y[..., outs] += xp[:, rows, cols, ins] @ w[outs, i, j, :].T
    return y if bias is None else y + bias


def integer_case(n, c, h, w_, kernel, seed):
    """Integer-valued x, w and bias for ``kernel``'s filter and group width: every sum
    exact in 16-bit outputs."""
    rng = np.random.default_rng(seed)
    r, s, _ = kernel.tile
    x = rng.integers(-3, 4, (n, h, w_, c)).astype(np.float64)
    w = rng.integers(-2, 3, (c, r, s, kernel.group)).astype(np.float64)
    return x, w, (np.arange(c) % 9 - 4).astype(np.float64)


def run(exe, name, x, w, tmp_path, groups, **kw):
    """An fprop of x (N, H, W, C) by w (C, R, S, C / groups) in ``groups`` groups."""
    a = BY_NAME[name].a
    return mockgpu.fprop(exe, name, a, x, w, groups=groups, workdir=str(tmp_path), **kw)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("name", NAMES)
def test_grouped_direct_kernel(emulator, tmp_path, name, padding, shape):
    """Each kernel equals the float64 grouped convolution exactly (integer inputs) over odd
    sizes, padding 0 to 2 and channels in one or two CTA chunks, with its bias and a ReLU
    fused, and without them."""
    k = BY_NAME[name]
    n, groups, h, w_ = shape
    x, w, bias = integer_case(n, groups * k.group, h, w_, k, seed=20)
    stride = k.tile[2]
    geo = dict(stride=(stride,) * 2, padding=(padding,) * 2)
    want = reference(x, w, bias, groups, stride, padding)
    got = run(emulator, name, x, w, tmp_path, groups, bias=bias, activation="relu", **geo)
    np.testing.assert_array_equal(got, np.maximum(want, 0))
    got = run(emulator, name, x, w, tmp_path, groups, **geo)
    np.testing.assert_array_equal(got, reference(x, w, None, groups, stride, padding))


@pytest.mark.parametrize("name", NAMES)
def test_grouped_direct_epilogue(emulator, tmp_path, name):
    """alpha, beta * c (a residual) and SiLU fused, on random inputs: fp32 accumulation and
    one rounding to the 16-bit output."""
    k = BY_NAME[name]
    rng = np.random.default_rng(40)
    c, stride = 64, k.tile[2]
    x = mockgpu.decode(mockgpu.encode(rng.standard_normal((2, 11, 10, c)), k.a), k.a)
    w = mockgpu.decode(mockgpu.encode(rng.standard_normal((c, 3, 3, k.group)), k.a), k.a)
    bias = mockgpu.decode(mockgpu.encode(rng.standard_normal(c), k.a), k.a)
    groups = c // k.group
    ref = reference(x, w, None, groups, stride, 1)
    r = mockgpu.decode(mockgpu.encode(rng.standard_normal(ref.shape), k.a), k.a)
    geo = dict(stride=(stride,) * 2, padding=(1, 1))
    got = run(
        emulator,
        name,
        x,
        w,
        tmp_path,
        groups,
        bias=bias,
        c=r,
        alpha=0.5,
        beta=-1.5,
        activation="silu",
        **geo,
    )
    y = 0.5 * ref - 1.5 * r + bias
    y = y / (1 + np.exp(-y))
    ulp = 2.0 ** (-8 if k.a == "bf16" else -11)  # the output's rounding, relative
    np.testing.assert_allclose(got, y, rtol=2 * ulp, atol=4 * ulp * math.sqrt(9 * k.group))


@pytest.mark.parametrize("name", NAMES)
def test_grouped_direct_refusals(emulator, tmp_path, name):
    """What a kernel does not take, it refuses in can_implement, saying why: another group
    width, more filters than channels, channel counts not in 16-byte rows (4 channels a
    group, an odd number of groups), another filter, stride or any dilation."""
    k = BY_NAME[name]
    stride = k.tile[2]
    geo = dict(stride=(stride,) * 2, padding=(1, 1))
    x, w, _ = integer_case(1, 64, 9, 9, k, seed=50)
    other = 8 if k.group == 4 else 4  # another group width, 64 / other groups
    w2 = np.ones((64, 3, 3, other))
    with pytest.raises(mockgpu.Refused, match="channels per group"):
        run(emulator, name, x, w2, tmp_path, 64 // other, **geo)
    w3 = np.concatenate([w, w])  # K = 2C
    with pytest.raises(mockgpu.Refused, match="as many out as in"):
        run(emulator, name, x, w3, tmp_path, 64 // k.group, **geo)
    if k.group == 4:  # 3 groups: 12 channels, rows of 24 bytes (8 or more a group: never)
        x12, w12, _ = integer_case(1, 12, 9, 9, k, seed=51)
        with pytest.raises(mockgpu.Refused, match="16-byte"):
            run(emulator, name, x12, w12, tmp_path, 3, **geo)
    for g in ({**geo, "stride": (stride + 1,) * 2}, {**geo, "dilation": (2, 2)}):
        with pytest.raises(mockgpu.Refused, match="built for"):
            run(emulator, name, x, w, tmp_path, 64 // k.group, **g)
    w5 = np.ones((64, 5, 5, k.group))
    with pytest.raises(mockgpu.Refused, match="built for"):
        run(emulator, name, x, w5, tmp_path, 64 // k.group, **geo)


def dgrad_reference(dy, w, groups, padding, h, w_):
    """dx (N, H, W, C) of the stride-1 grouped convolution by w (K, R, S, C / groups) for
    the upstream gradient dy (N, P, Q, K), in float64."""
    n, p, q, k = dy.shape
    _, r, s, cg = w.shape
    kg = k // groups
    dxp = np.zeros((n, h + 2 * padding, w_ + 2 * padding, cg * groups))
    for g in range(groups):
        ins, outs = slice(g * cg, (g + 1) * cg), slice(g * kg, (g + 1) * kg)
        for i in range(r):
            for j in range(s):
                dxp[:, i : i + p, j : j + q, ins] += dy[..., outs] @ w[outs, i, j, :]
    return dxp[:, padding : padding + h, padding : padding + w_]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("name", DGRADS)
def test_grouped_direct_dgrad(emulator, tmp_path, name, padding, shape):
    """Each dgrad kernel (fprop's on dy, each group's filters flipped) equals the float64
    adjoint exactly on integer data, rounded once to the 16-bit output, over odd sizes,
    padding 0 to the filter's extent less one and two CTA chunks; and adds beta * c to
    alpha times it."""
    k = BY_NAME[name]
    n, groups, h, w_ = shape
    c = groups * k.group
    x, w, _ = integer_case(n, c, h, w_, k, seed=60)
    p, q = h + 2 * padding - 2, w_ + 2 * padding - 2
    dy = np.random.default_rng(61).integers(-2, 3, (n, p, q, c)).astype(np.float64)
    want = dgrad_reference(dy, w, groups, padding, h, w_)
    kw = dict(x_shape=x.shape, w_shape=w.shape, groups=groups, padding=(padding,) * 2)

    def rounded(v):
        return mockgpu.decode(mockgpu.encode(v, k.a), k.a)

    got = mockgpu.conv(emulator, name, k.a, dy, w, workdir=str(tmp_path), **kw)
    np.testing.assert_array_equal(got, rounded(want))
    prior = np.random.default_rng(62).integers(-4, 5, want.shape).astype(np.float64)
    got = mockgpu.conv(
        emulator, name, k.a, dy, w, c=prior, alpha=2.0, beta=-1.0, workdir=str(tmp_path), **kw
    )
    np.testing.assert_array_equal(got, rounded(2.0 * want - prior))


@pytest.mark.parametrize("name", DGRADS)
def test_grouped_direct_dgrad_refusals(emulator, tmp_path, name):
    """A dgrad kernel takes stride 1 and padding up to the filter's extent less one: the
    rest it refuses, saying why."""
    k = BY_NAME[name]
    x, w, _ = integer_case(1, 64, 9, 9, k, seed=70)
    kw = dict(x_shape=x.shape, w_shape=w.shape, groups=64 // k.group, workdir=str(tmp_path))
    for stride, padding, why in ((2, 1, "built for"), (1, 3, "padding up to")):
        p = (9 + 2 * padding - 3) // stride + 1
        with pytest.raises(mockgpu.Refused, match=why):
            mockgpu.conv(
                emulator,
                name,
                k.a,
                np.ones((1, p, p, 64)),
                w,
                stride=(stride,) * 2,
                padding=(padding,) * 2,
                **kw,
            )
