"""Convolutions on the GPU: every conv kernel of the build forced by name against a float64
reference (exact-in-float inputs), and pycutlass_rt.conv2d / conv2d_dgrad / conv2d_wgrad
against torch over stride, padding and dilation."""

import pytest
from helpers import (
    DEPTHWISE_SHAPES,
    depthwise_geometry,
    depthwise_gradient_cases,
    require,
    runnable_kernels,
    torch_dtype,
)

torch = pytest.importorskip("torch")
F = torch.nn.functional
import pycutlass_rt as pcr  # noqa: E402

CONV = runnable_kernels(op=None)
DEPTHWISE = runnable_kernels(op="fprop", depthwise=True)
DEPTHWISE_GRADIENTS = [k for k in runnable_kernels(op=None, depthwise=True) if k.op != "fprop"]
GROUPED_DIRECT = runnable_kernels(op="fprop", direct=True)
GROUPED_DIRECT_DGRAD = runnable_kernels(op="dgrad", direct=True)
CL = torch.channels_last


def nchw(n, c, h, w, dtype, *, low=-1, high=2, seed=0):
    """An integer-valued channels_last tensor: products and sums stay exact in fp16/bf16."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    t = torch.randint(low, high, (n, c, h, w), generator=g).to(dtype)
    return t.cuda().contiguous(memory_format=CL)


def problem_for(k):
    """A small geometry the kernel takes: channel counts its alignment and family allow
    (16-byte multiples, or odd ones for alignment 1), unit stride for sm90a dgrad."""
    aligned = k.align[0] > 1
    c, kk = (16, 24) if aligned else (3, 5)
    stride = 1 if (k.family == 90 and k.op == "dgrad") else 2
    return dict(n=2, c=c, h=9, w=7, k=kk, r=3, s=3, stride=stride, padding=1)


def reference(op, x, w, dy, geo):
    """The pass's float64 result on the CPU (torch's own convolution and its gradients)."""
    x64, w64 = x.double().cpu(), w.double().cpu()
    if op == "fprop":
        return F.conv2d(x64, w64, stride=geo["stride"], padding=geo["padding"])
    dy64 = dy.double().cpu()
    if op == "dgrad":
        return torch.nn.grad.conv2d_input(
            x.shape, w64, dy64, stride=geo["stride"], padding=geo["padding"]
        )
    return torch.nn.grad.conv2d_weight(
        x64, w.shape, dy64, stride=geo["stride"], padding=geo["padding"]
    )


@pytest.mark.parametrize("name", [k.name for k in CONV])
def test_conv_kernel(name):
    """Each conv kernel, forced by name, equals the float64 reference exactly (integer
    inputs whose sums fit the output's mantissa); fused kernels add a bias and a ReLU."""
    k = pcr._kernels.by_name(name)
    dt = torch_dtype(k.dtype_a)
    math = "tf32" if k.dtype_a == "tfloat32" else None
    geo = problem_for(k)
    n, c, h, w_, kk = geo["n"], geo["c"], geo["h"], geo["w"], geo["k"]
    x = nchw(n, c, h, w_, dt, seed=1)
    w = nchw(kk, c, geo["r"], geo["s"], dt, seed=2)
    y_shape = F.conv2d(x.float(), w.float(), stride=geo["stride"], padding=geo["padding"]).shape
    dy = nchw(*y_shape, dt, seed=3)
    kw = dict(stride=geo["stride"], padding=geo["padding"], kernel=name, math=math)
    ref = reference(k.op, x, w, dy, geo)
    if k.op == "fprop" and k.epilogue == "biasact":
        bias = torch.arange(kk, device="cuda").to(dt) - kk // 2
        got = pcr.conv2d(x, w, bias, activation="relu", **kw)
        ref = torch.relu(ref + bias.double().cpu()[None, :, None, None])
    elif k.op == "fprop":
        got = pcr.conv2d(x, w, **kw)
    elif k.op == "dgrad":
        got = pcr.conv2d_dgrad(dy, w, input_size=x.shape, **kw)
    else:
        got = pcr.conv2d_wgrad(dy, x, weight_size=w.shape, **kw)
    assert got.is_contiguous(memory_format=CL)
    torch.testing.assert_close(got.double().cpu(), ref, rtol=0, atol=0)


def need(op, epilogue="linear"):
    require(torch.float16, epilogue=epilogue, op=op)


#: the canonical layout of the GEMM that runs a pass as a GEMM (pointwise, or on the
#: unfolded operands), its matrices packed: fprop x (or its unfolding) @ w^T ("tn"), dgrad
#: dy @ w ("tt"), wgrad dy^T @ x (or its unfolding) ("nt")
GEMM_LAYOUT = {"fprop": "tn", "dgrad": "tt", "wgrad": "nt"}


def need_gemm(op, dtype=torch.float16, epilogue="linear", any_alignment=False):
    """Skips unless the build holds a GEMM kernel that runs ``op``'s GEMM form here (asked
    of the kernel list before the call: a refusal past this fails the test). An unbatched
    GEMM's misaligned operands are staged through aligned scratch, so any kernel of the
    layout takes it; a batched one (groups) with misaligned groups needs ``any_alignment``."""
    require(dtype, layout=GEMM_LAYOUT[op], epilogue=epilogue, any_alignment=any_alignment)


@pytest.mark.parametrize(
    "stride,padding,dilation",
    [(1, 0, 1), (1, 1, 1), (2, 1, 1), (2, 3, 1), ((1, 2), (0, 2), 1), (1, 2, 2), (3, 0, 1)],
)
@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
def test_against_torch(op, stride, padding, dilation):
    """Selected kernels against torch's convolution (float32 math on fp16 inputs) over
    stride, padding and dilation."""
    need(op)
    g = torch.Generator(device="cpu").manual_seed(7)
    x = torch.randn(3, 32, 15, 13, generator=g).half().cuda().contiguous(memory_format=CL)
    w = torch.randn(40, 32, 3, 3, generator=g).half().cuda().contiguous(memory_format=CL) / 8
    geo = dict(stride=stride, padding=padding, dilation=dilation)
    y = F.conv2d(x.float(), w.float(), **geo)
    dy = torch.randn(y.shape, generator=g).half().cuda().contiguous(memory_format=CL)
    got, ref = pass_and_reference(op, x, w, dy, **geo)
    err = (got.double() - ref).norm() / ref.norm()
    assert err < 2e-3, err


def pass_and_reference(op, x, w, dy, math=None, **geo):
    """The library's result of one pass, and torch's in float64."""
    if op == "fprop":
        return pcr.conv2d(x, w, math=math, **geo), F.conv2d(x.double(), w.double(), **geo)
    if op == "dgrad":
        got = pcr.conv2d_dgrad(dy, w, input_size=x.shape, math=math, **geo)
        return got, torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), **geo)
    got = pcr.conv2d_wgrad(dy, x, weight_size=w.shape, math=math, **geo)
    return got, torch.nn.grad.conv2d_weight(x.double(), w.shape, dy.double(), **geo)


def explained_pass(op, x, w, dy, **geo):
    """(explain()'s account of one pass, the library's result, torch's in float64)."""
    if op == "fprop":
        told = pcr.conv2d(x, w, explain=True, **geo)
    elif op == "dgrad":
        told = pcr.conv2d_dgrad(dy, w, input_size=x.shape, explain=True, **geo)
    else:
        told = pcr.conv2d_wgrad(dy, x, weight_size=w.shape, explain=True, **geo)
    return (told, *pass_and_reference(op, x, w, dy, **geo))


def test_bias_activation_and_residual_fuse():
    """y = act(alpha * conv + beta * c + bias) in one call, as torch computes it."""
    need("fprop", epilogue="biasact")
    g = torch.Generator(device="cpu").manual_seed(3)
    x = torch.randn(2, 64, 10, 10, generator=g).half().cuda().contiguous(memory_format=CL)
    w = torch.randn(32, 64, 3, 3, generator=g).half().cuda().contiguous(memory_format=CL) / 8
    bias = torch.randn(32, generator=g).half().cuda()
    c = torch.randn(2, 32, 10, 10, generator=g).half().cuda().contiguous(memory_format=CL)
    got = pcr.conv2d(x, w, bias, padding=1, activation="silu", alpha=0.5, beta=2.0, c=c)
    ref = F.silu(
        0.5 * F.conv2d(x.float(), w.float(), padding=1)
        + 2 * c.float()
        + bias.float()[:, None, None]
    )
    torch.testing.assert_close(got.float(), ref, rtol=2e-2, atol=2e-2)


def test_nhwc_arrays_of_other_producers():
    """cupy arrays are NHWC / KRSC as they lie, and the output is made with cupy."""
    cp = pytest.importorskip("cupy")
    need("fprop")
    g = torch.Generator(device="cpu").manual_seed(5)
    x = torch.randn(2, 16, 8, 8, generator=g).half().cuda().contiguous(memory_format=CL)
    w = torch.randn(24, 16, 3, 3, generator=g).half().cuda().contiguous(memory_format=CL)
    xc = cp.asarray(x.permute(0, 2, 3, 1).contiguous().cpu().numpy())
    wc = cp.asarray(w.permute(0, 2, 3, 1).contiguous().cpu().numpy())
    got = pcr.conv2d(xc, wc, padding=1)
    assert isinstance(got, cp.ndarray) and got.shape == (2, 8, 8, 24)
    ref = F.conv2d(x.float(), w.float(), padding=1).permute(0, 2, 3, 1).cpu()
    torch.testing.assert_close(torch.from_numpy(cp.asnumpy(got)).float(), ref, rtol=2e-3, atol=2e-2)


def test_refusals_name_the_fix():
    """Tensors that are not channels_last, a depthwise convolution with a channel multiplier
    (no kernel or GEMM form), mismatched shapes."""
    need("fprop")
    x = torch.randn(1, 16, 8, 8, device="cuda", dtype=torch.float16)  # NCHW-contiguous
    w = torch.randn(8, 16, 3, 3, device="cuda", dtype=torch.float16).contiguous(memory_format=CL)
    with pytest.raises(pcr.InvalidArgumentError, match="channels_last"):
        pcr.conv2d(x, w)
    x = x.contiguous(memory_format=CL)
    multiplier = torch.randn(32, 1, 3, 3, device="cuda", dtype=torch.float16)
    with pytest.raises(pcr.UnsupportedError, match="groups"):
        pcr.conv2d(x, multiplier.contiguous(memory_format=CL), groups=16)
    out = torch.empty(1, 8, 7, 7, device="cuda", dtype=torch.float16).contiguous(memory_format=CL)
    with pytest.raises(pcr.InvalidArgumentError, match=r"\(1, 8, 8, 8\)"):
        pcr.conv2d(x, w, padding=1, out=out)


def test_graph_capture_replays_the_call():
    """A captured conv2d replays into its output like the eager call."""
    need("fprop")
    x = torch.randn(4, 32, 14, 14, device="cuda", dtype=torch.float16).contiguous(memory_format=CL)
    w = torch.randn(64, 32, 3, 3, device="cuda", dtype=torch.float16).contiguous(memory_format=CL)
    y = pcr.conv2d(x, w, padding=1)
    eager = y.clone()
    y.zero_()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        pcr.conv2d(x, w, padding=1, out=y)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        pcr.conv2d(x, w, padding=1, out=y)
    y.zero_()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, eager, rtol=0, atol=0)


@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
def test_pointwise_convolutions_run_on_gemm_kernels(op):
    """1x1 convolutions at unit stride are GEMMs on the flat NHWC views: a GEMM kernel runs
    them (explain says so), with torch's results."""
    need_gemm(op)
    g = torch.Generator(device="cpu").manual_seed(11)
    x = torch.randn(4, 64, 12, 10, generator=g).half().cuda().contiguous(memory_format=CL)
    w = torch.randn(96, 64, 1, 1, generator=g).half().cuda().contiguous(memory_format=CL) / 8
    dy = torch.randn(4, 96, 12, 10, generator=g).half().cuda().contiguous(memory_format=CL)
    if op == "fprop":
        told = pcr.conv2d(x, w, explain=True)
        got, ref = pcr.conv2d(x, w), F.conv2d(x.float(), w.float())
    elif op == "dgrad":
        told = pcr.conv2d_dgrad(dy, w, input_size=x.shape, explain=True)
        got = pcr.conv2d_dgrad(dy, w, input_size=x.shape)
        ref = torch.nn.grad.conv2d_input(x.shape, w.float(), dy.float())
    else:
        told = pcr.conv2d_wgrad(dy, x, weight_size=w.shape, explain=True)
        got = pcr.conv2d_wgrad(dy, x, weight_size=w.shape)
        ref = torch.nn.grad.conv2d_weight(x.float(), w.shape, dy.float())
    assert told.kernel and f"_{op}_" not in told.kernel, told
    assert any("pointwise" in note for note in told.notes)
    assert (got.float() - ref).norm() / ref.norm() < 2e-3


FEW_CHANNELS = {  # (c, h, w, k, r, s, stride, padding): stems and a patch embedding
    "resnet stem": (3, 32, 30, 64, 7, 7, 2, 3),
    "latent conv_in": (4, 16, 16, 32, 3, 3, 1, 1),
    "vit patches": (3, 32, 32, 48, 8, 8, 8, 0),
}


@pytest.mark.parametrize("case", FEW_CHANNELS)
@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_few_channel_convolutions_run_as_a_gemm_on_the_unfolded_input(case, op, dtype):
    """Channels short of 16 bytes: the input unfolded (im2col) on the GPU, one GEMM kernel
    (explain says so), torch's results; fprop with its bias and activation fused."""
    need_gemm(op, dtype, epilogue="biasact" if op == "fprop" else "linear")
    c, h, w_, k, r, s, stride, padding = FEW_CHANNELS[case]
    x = nchw(2, c, h, w_, dtype, seed=5)
    w = nchw(k, c, r, s, dtype, seed=6)
    bias = torch.arange(k, device="cuda").to(dtype) / 8
    geo = dict(stride=stride, padding=padding)
    y_ref = F.conv2d(x.double(), w.double(), **geo)
    dy = nchw(*y_ref.shape, dtype, seed=7)
    if op == "fprop":
        told = pcr.conv2d(x, w, bias, activation="relu", explain=True, **geo)
        got = pcr.conv2d(x, w, bias, activation="relu", **geo)
        ref = torch.relu(y_ref + bias.double()[None, :, None, None])
    elif op == "dgrad":
        told = pcr.conv2d_dgrad(dy, w, input_size=x.shape, explain=True, **geo)
        got = pcr.conv2d_dgrad(dy, w, input_size=x.shape, alpha=2.0, beta=1.0, c=x, **geo)
        ref = 2 * torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), **geo) + x
    else:
        told = pcr.conv2d_wgrad(dy, x, weight_size=w.shape, explain=True, **geo)
        got = pcr.conv2d_wgrad(dy, x, weight_size=w.shape, **geo)
        ref = torch.nn.grad.conv2d_weight(x.double(), w.shape, dy.double(), **geo)
    assert told.kernel and f"_{op}_" not in told.kernel, told
    assert any("im2col" in note for note in told.notes), told.notes
    err = (got.double() - ref).norm() / ref.norm()
    assert err < 1e-2, err  # the products are exact; fp32 accumulation, 16-bit output


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_strided_dilated_dgrad_runs_as_a_gemm_folded_back(dtype):
    """dgrad both strided and dilated (no convolution kernel takes it): dy @ w into the
    unfolded gradient, folded back into dx (col2im), torch's result."""
    need_gemm("dgrad", dtype)
    x = nchw(2, 16, 17, 15, dtype, seed=8)
    w = nchw(24, 16, 3, 3, dtype, seed=9)
    geo = dict(stride=2, padding=2, dilation=2)
    dy = nchw(*F.conv2d(x.double(), w.double(), **geo).shape, dtype, seed=10)
    got, ref = pass_and_reference("dgrad", x, w, dy, **geo)
    assert (got.double() - ref).norm() / ref.norm() < 1e-2


@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
@pytest.mark.parametrize("groups", [2, 4])
def test_grouped_convolutions_run_as_batched_gemms(op, groups):
    """groups > 1 (not depthwise): one GEMM per group in a batch on the unfolded input
    (dgrad: folded back), torch's results. A batch is never staged: where a group's 48 /
    groups filters fall short of 16 bytes, its matrices are misaligned, which the
    any-alignment kernels read."""
    need_gemm(op, any_alignment=(48 // groups * 2) % 16 != 0)
    x = nchw(2, 32, 10, 9, torch.float16, seed=12)
    w = nchw(48, 32 // groups, 3, 3, torch.float16, seed=13)
    geo = dict(stride=1, padding=1, groups=groups)
    dy = nchw(*F.conv2d(x.double(), w.double(), **geo).shape, torch.float16, seed=14)
    got, ref = pass_and_reference(op, x, w, dy, **geo)
    assert (got.double() - ref).norm() / ref.norm() < 1e-2


@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
def test_float32_at_fp32_accuracy(op):
    """math="ieee": float32 convolutions through the GEMM's 3xTF32 kernels on the unfolded
    input, at fp32 accuracy (TF32 alone would be ~1e-3 off)."""
    need_gemm(op, torch.float32)
    g = torch.Generator(device="cpu").manual_seed(15)
    x = torch.randn(2, 16, 11, 9, generator=g).cuda().contiguous(memory_format=CL)
    w = torch.randn(24, 16, 3, 3, generator=g).cuda().contiguous(memory_format=CL)
    geo = dict(stride=2, padding=1)
    dy = torch.randn(F.conv2d(x, w, **geo).shape, generator=g).cuda().contiguous(memory_format=CL)
    got, ref = pass_and_reference(op, x, w, dy, math="ieee", **geo)
    assert (got.double() - ref).norm() / ref.norm() < 1e-5


LAGGING = {  # (c, h, w, k, stride, op), 3x3 filters, padding 1: too few output tiles
    "deep and small fprop": (256, 8, 8, 320, 1, "fprop"),  # 128 output rows: 3 tiles
    "deep and small dgrad": (256, 8, 8, 320, 1, "dgrad"),  # 128 rows of dx: 2 tiles
}


@pytest.mark.parametrize("case", LAGGING)
@pytest.mark.parametrize("lagging", [True, False])
def test_layers_the_conv_kernels_lag_on_run_as_gemms_on_unfolded_operands(
    case, lagging, monkeypatch
):
    """A long reduction over too few output tiles runs as a GEMM on the unfolded operands
    (explain says so), torch's result; with the choice turned off (the benchmark's A/B), on
    the convolution kernels, the same result."""
    from pycutlass_rt import _conv_gemm

    monkeypatch.setattr(_conv_gemm, "UNFOLD_LAGGING", lagging)
    c, h, w_, k, stride, op = LAGGING[case]
    if lagging:
        need_gemm(op)
    else:
        need(op)
    x = nchw(2, c, h, w_, torch.float16, seed=16)
    w = nchw(k, c, 3, 3, torch.float16, seed=17)
    geo = dict(stride=stride, padding=1)
    dy = nchw(*F.conv2d(x.double(), w.double(), **geo).shape, torch.float16, seed=18)
    told, got, ref = explained_pass(op, x, w, dy, **geo)
    unfolded = any("im2col" in note for note in told.notes)
    assert unfolded == lagging, told
    assert (got.double() - ref).norm() / ref.norm() < 1e-2


@pytest.mark.parametrize("op", ["fprop", "wgrad"])
def test_few_filters_run_as_a_gemm_on_the_unfolded_input(op):
    """Filters short of 16 bytes (a UNet's 320 -> 4 output convolution): y and dy have rows
    the convolution kernels read element by element; as a GEMM on the unfolded input the
    misaligned matrix is staged around a fast kernel (explain says so), torch's result."""
    need_gemm(op)
    x = nchw(2, 64, 16, 16, torch.float16, seed=19)
    w = nchw(4, 64, 3, 3, torch.float16, seed=20)
    geo = dict(stride=1, padding=1)
    dy = nchw(*F.conv2d(x.double(), w.double(), **geo).shape, torch.float16, seed=21)
    told, got, ref = explained_pass(op, x, w, dy, **geo)
    assert any("im2col" in note for note in told.notes), told.notes
    assert (got.double() - ref).norm() / ref.norm() < 1e-2


# ---- depthwise fprop (groups = C = K): the direct kernels --------------------------------


def depthwise_case(dtype, n, c, h, w_, filt, *, seed):
    """Integer-valued x, w (C, 1, R, S) and bias (C): every sum exact in 16-bit outputs."""
    x = nchw(n, c, h, w_, dtype, seed=seed)
    w = nchw(c, 1, *filt, dtype, seed=seed + 1)
    bias = (torch.arange(c, device="cuda") % 9 - 4).to(dtype)
    return x, w, bias


def depthwise_reference(x, w, bias, stride, padding, dilation, activation=None):
    """torch's depthwise convolution in float64 on the CPU, with the activation after."""
    b = None if bias is None else bias.double().cpu()
    y = F.conv2d(x.double().cpu(), w.double().cpu(), b, stride, padding, dilation, x.shape[1])
    return y if activation is None else TORCH_ACTIVATIONS[activation](y)


TORCH_ACTIVATIONS = {"relu": torch.relu, "silu": F.silu, "clamp": lambda y: y.clamp(0, 6)}


@pytest.mark.parametrize("padding", [0, 1, 2, 3])
@pytest.mark.parametrize("name", [k.name for k in DEPTHWISE])
def test_depthwise_kernel(name, padding):
    """Each depthwise kernel, forced by name, equals torch's float64 depthwise convolution
    exactly (integer inputs) at odd N, H and W and padding 0 to 3, with its bias and a ReLU
    fused, and without them (the linear call it also serves)."""
    k = pcr._kernels.by_name(name)
    dt = torch_dtype(k.dtype_a)
    filt, stride, dilation = depthwise_geometry(k.tile)
    x, w, bias = depthwise_case(dt, 3, 24, 13, 11, filt, seed=20)
    geo = dict(stride=stride, padding=padding, dilation=dilation, groups=24, kernel=name)
    got = pcr.conv2d(x, w, bias, activation="relu", **geo)
    assert got.is_contiguous(memory_format=CL)
    ref = depthwise_reference(x, w, bias, stride, padding, dilation, "relu")
    torch.testing.assert_close(got.double().cpu(), ref, rtol=0, atol=0)
    got = pcr.conv2d(x, w, **geo)
    ref = depthwise_reference(x, w, None, stride, padding, dilation)
    torch.testing.assert_close(got.double().cpu(), ref, rtol=0, atol=0)


@pytest.mark.parametrize("shape", DEPTHWISE_SHAPES, ids=str)
@pytest.mark.parametrize("name", [k.name for k in DEPTHWISE])
def test_depthwise_kernel_shapes(name, shape):
    """Each depthwise kernel over channel counts that fill several CTAs' chunks or part of
    one, a single output row or column, odd sizes: torch's result exactly."""
    k = pcr._kernels.by_name(name)
    n, c, h, w_ = shape
    filt, stride, dilation = depthwise_geometry(k.tile)
    padding = tuple(d * (f - 1) // 2 for d, f in zip(dilation, filt))  # "same" at stride 1
    x, w, bias = depthwise_case(torch_dtype(k.dtype_a), n, c, h, w_, filt, seed=30)
    geo = dict(stride=stride, padding=padding, dilation=dilation, groups=c)
    got = pcr.conv2d(x, w, bias, kernel=name, **geo)
    ref = depthwise_reference(x, w, bias, **{g: geo[g] for g in ("stride", "padding", "dilation")})
    torch.testing.assert_close(got.double().cpu(), ref, rtol=0, atol=0)


@pytest.mark.parametrize("activation", ["silu", "clamp"])
@pytest.mark.parametrize("name", [k.name for k in DEPTHWISE])
def test_depthwise_epilogue(name, activation):
    """alpha, beta * c (a residual) and an activation with parameters (ReLU6 as clamp),
    fused, against torch on random inputs (fp32 accumulation, one 16-bit rounding)."""
    k = pcr._kernels.by_name(name)
    dt = torch_dtype(k.dtype_a)
    filt, stride, dilation = depthwise_geometry(k.tile)
    g = torch.Generator(device="cpu").manual_seed(40)
    x = torch.randn(2, 32, 15, 12, generator=g).to(dt).cuda().contiguous(memory_format=CL)
    w = torch.randn(32, 1, *filt, generator=g).to(dt).cuda().contiguous(memory_format=CL) / 4
    bias = torch.randn(32, generator=g).to(dt).cuda()
    geo = dict(stride=stride, padding=1, dilation=dilation)
    y = depthwise_reference(x, w, None, **geo)
    c = torch.randn(y.shape, generator=g).to(dt).cuda().contiguous(memory_format=CL)
    act = ("clamp", 0.0, 6.0) if activation == "clamp" else activation
    got = pcr.conv2d(x, w, bias, **geo, groups=32, activation=act, alpha=0.5, beta=2.0, c=c)
    pre = 0.5 * y + 2.0 * c.double().cpu() + bias.double().cpu()[None, :, None, None]
    ref = TORCH_ACTIVATIONS[activation](pre)
    tol = 1e-2 if dt == torch.float16 else 4e-2
    torch.testing.assert_close(got.double().cpu(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "name, geometry",
    [(k.name, g) for k in DEPTHWISE_GRADIENTS for g in depthwise_gradient_cases(k.tile)],
    ids=str,
)
def test_depthwise_gradient_kernel(name, geometry):
    """Each depthwise dgrad and wgrad kernel, forced by name, equals torch's float64
    gradient rounded once to the output's dtype (integer inputs: every sum exact), and
    unforced the selector takes a depthwise kernel of the pass and explain() names it."""
    k = pcr._kernels.by_name(name)
    dt = torch_dtype(k.dtype_a)
    n, c, h, w_, filt, stride, padding, dilation = geometry
    x, w, _ = depthwise_case(dt, n, c, h, w_, filt, seed=60)
    args = (stride, padding, dilation, c)
    y = F.conv2d(x.double().cpu(), w.double().cpu(), None, *args)
    dy = nchw(*y.shape, dt, seed=61)
    geo = dict(stride=stride, padding=padding, dilation=dilation, groups=c)
    if k.op == "dgrad":
        run = lambda **kw: pcr.conv2d_dgrad(dy, w, tuple(x.shape), **geo, **kw)  # noqa: E731
        ref = torch.nn.grad.conv2d_input(x.shape, w.double().cpu(), dy.double().cpu(), *args)
    else:
        run = lambda **kw: pcr.conv2d_wgrad(dy, x, tuple(w.shape), **geo, **kw)  # noqa: E731
        ref = torch.nn.grad.conv2d_weight(x.double().cpu(), w.shape, dy.double().cpu(), *args)
    got = run(kernel=name)
    torch.testing.assert_close(got.double().cpu(), ref.to(dt).double(), rtol=0, atol=0)
    told = run(explain=True)
    assert told.kernel and f"_{k.op}_" in told.kernel and "_depthwise_" in told.kernel, told


#: MobileNet-V2's and ConvNeXt-T's depthwise layers (c, h, r, stride) at batch 2
NETWORK_LAYERS = [(32, 56, 3, 1), (144, 28, 3, 2), (576, 14, 3, 1), (96, 28, 7, 1), (768, 7, 7, 1)]


@pytest.mark.parametrize("layer", NETWORK_LAYERS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_depthwise_layers_are_chosen_and_explained(layer, dtype):
    """Unforced, the selector runs a depthwise kernel (the one built for the filter and
    stride where the build holds it), explain() names it, and the result is torch's."""
    require(dtype, epilogue="biasact", op="fprop", depthwise=True)
    c, h, r, stride = layer
    x, w, bias = depthwise_case(dtype, 2, c, h, h, (r, r), seed=50)
    geo = dict(stride=stride, padding=r // 2, groups=c)
    told = pcr.conv2d(x, w, bias, activation="relu", explain=True, **geo)
    assert told.kernel and "_depthwise_" in told.kernel, told
    fixed = told.kernel.replace("_fany_", f"_f{r}x{r}s{stride}_")  # the same dtypes
    built = {k.name for k in DEPTHWISE}
    assert fixed == told.kernel or fixed not in built, f"{told.kernel} ran ahead of {fixed}"
    got = pcr.conv2d(x, w, bias, activation="relu", **geo)
    ref = depthwise_reference(x, w, bias, (stride, stride), r // 2, 1, "relu")
    torch.testing.assert_close(got.double().cpu(), ref, rtol=0, atol=0)


def test_depthwise_refusals():
    """What no depthwise kernel serves raises UnsupportedError before anything is written:
    channels short of whole 16-byte vectors, a channel multiplier; a kernel forced onto a
    filter or stride it is not built for says which it is built for."""
    require(torch.float16, epilogue="biasact", op="fprop", depthwise=True)
    for c, k in ((12, 12), (16, 32)):
        x = nchw(1, c, 8, 8, torch.float16, seed=60)
        w = nchw(k, 1, 3, 3, torch.float16, seed=61)
        out = torch.full((1, k, 8, 8), 7.0, device="cuda", dtype=torch.float16)
        out = out.contiguous(memory_format=CL)
        with pytest.raises(pcr.UnsupportedError, match="depthwise"):
            pcr.conv2d(x, w, padding=1, groups=c, out=out)
        assert bool((out == 7).all()), "a refused call wrote its output"
    fixed = [k for k in DEPTHWISE if k.dtype_a == "float16" and k.tile[0]]
    if fixed:
        k = fixed[0]
        x = nchw(1, 16, 12, 12, torch.float16, seed=62)
        w = nchw(16, 1, k.tile[0] + 2, k.tile[1], torch.float16, seed=63)
        with pytest.raises(pcr.UnsupportedError, match="built for"):
            pcr.conv2d(x, w, stride=k.tile[2], groups=16, kernel=k.name)


def test_depthwise_graph_capture_replays_the_call():
    """A captured depthwise conv2d (bias and activation fused) replays like the eager call."""
    require(torch.float16, epilogue="biasact", op="fprop", depthwise=True)
    x, w, bias = depthwise_case(torch.float16, 4, 64, 14, 14, (3, 3), seed=70)
    kw = dict(stride=1, padding=1, groups=64, activation="relu")
    y = pcr.conv2d(x, w, bias, **kw)
    eager = y.clone()
    y.zero_()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        pcr.conv2d(x, w, bias, out=y, **kw)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        pcr.conv2d(x, w, bias, out=y, **kw)
    y.zero_()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, eager, rtol=0, atol=0)


# ---- grouped fprop, a few channels per group: the direct kernels ------------------------


def grouped_reference(x, w, bias, stride, padding, groups):
    """torch's grouped convolution in float64 on the CPU, ReLU after."""
    b = None if bias is None else bias.double().cpu()
    return F.conv2d(x.double().cpu(), w.double().cpu(), b, stride, padding, 1, groups).relu()


@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("name", [k.name for k in GROUPED_DIRECT])
def test_grouped_direct_kernel(name, padding):
    """Each direct grouped kernel, forced by name, equals torch's float64 grouped
    convolution exactly (integer inputs) at odd N, H and W over channels in several CTA chunks,
    its bias and a ReLU fused; unforced, the selector takes a direct kernel and explain()
    names it."""
    k = pcr._kernels.by_name(name)
    dt = torch_dtype(k.dtype_a)
    r, s, stride = k.tile
    c = 17 * 32  # 136 vectors of 4 output channels: several chunks
    groups = c // k.group_width
    x = nchw(3, c, 13, 11, dt, seed=80)
    w = nchw(c, k.group_width, r, s, dt, seed=81)
    bias = (torch.arange(c, device="cuda") % 9 - 4).to(dt)
    geo = dict(stride=stride, padding=padding, groups=groups)
    got = pcr.conv2d(x, w, bias, activation="relu", kernel=name, **geo)
    ref = grouped_reference(x, w, bias, stride, padding, groups)
    torch.testing.assert_close(got.double().cpu(), ref, rtol=0, atol=0)
    told = pcr.conv2d(x, w, bias, activation="relu", explain=True, **geo)
    assert told.kernel and "_direct_" in told.kernel, told


#: ResNeXt-50 32x4d's grouped 3x3s (c, h, stride) at batch 2
RESNEXT_LAYERS = [
    (128, 28, 1),
    (256, 28, 2),
    (256, 14, 1),
    (512, 14, 2),
    (512, 7, 1),
    (1024, 14, 2),
    (1024, 7, 1),
]


@pytest.mark.parametrize("layer", RESNEXT_LAYERS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_resnext_layers_run_on_a_direct_kernel_where_the_build_has_one(layer, dtype):
    """Unforced, a grouped convolution of 4 to 32 channels per group runs on the direct
    kernel built for it where the build holds one (explain() names it), else as GEMMs on
    the unfolded input; torch's result either way."""
    c, h, stride = layer
    width = c // 32
    x = nchw(2, c, h, h, dtype, seed=90)
    w = nchw(c, width, 3, 3, dtype, seed=91)
    geo = dict(stride=stride, padding=1, groups=32)
    told = pcr.conv2d(x, w, explain=True, **geo)
    dtype_word = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
    direct = [
        k.name
        for k in GROUPED_DIRECT
        if k.tile == (3, 3, stride) and k.group_width == width and f"_{dtype_word}_" in k.name
    ]
    if direct:
        assert told.kernel in direct, told
    else:
        assert told.kernel and "_direct_" not in told.kernel, told
    got = pcr.conv2d(x, w, **geo)
    ref = F.conv2d(x.double().cpu(), w.double().cpu(), None, stride, 1, 1, 32)
    torch.testing.assert_close(got.double().cpu(), ref, rtol=0, atol=0)


@pytest.mark.parametrize("padding", [0, 1, 2])
@pytest.mark.parametrize("name", [k.name for k in GROUPED_DIRECT_DGRAD])
def test_grouped_direct_dgrad_kernel(name, padding):
    """Each direct grouped dgrad kernel, forced by name, equals torch's float64 input
    gradient rounded once to the output's dtype (integer inputs: every sum exact), plus beta
    * c; unforced, the selector takes a direct kernel and explain() names it."""
    k = pcr._kernels.by_name(name)
    dt = torch_dtype(k.dtype_a)
    c = 17 * 32
    groups = c // k.group_width
    x = nchw(3, c, 13, 11, dt, seed=100)
    w = nchw(c, k.group_width, 3, 3, dt, seed=101)
    dy = nchw(3, c, 11 + 2 * padding, 9 + 2 * padding, dt, seed=102)
    prior = nchw(3, c, 13, 11, dt, seed=103)
    geo = dict(stride=1, padding=padding, groups=groups)
    got = pcr.conv2d_dgrad(dy, w, tuple(x.shape), beta=1.0, c=prior, kernel=name, **geo)
    ref = torch.nn.grad.conv2d_input(x.shape, w.double().cpu(), dy.double().cpu(), **geo)
    want = (ref.to(dt).double() + prior.double().cpu()).to(dt).double()
    torch.testing.assert_close(got.double().cpu(), want, rtol=0, atol=0)
    told = pcr.conv2d_dgrad(dy, w, tuple(x.shape), explain=True, **geo)
    assert told.kernel and "_dgrad_" in told.kernel and "_direct_" in told.kernel, told
