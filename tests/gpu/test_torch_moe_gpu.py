"""pycutlass_rt::scaled_grouped_mm (the fp8 MoE layer's GEMM) on the GPU: against a float64
reference that dequantizes first and against the CPU operator, in each scale layout with a
bias and activations; under torch.compile(fullgraph=True) (dynamic shapes, and the
quantize + GEMM layer in one graph), mode="reduce-overhead", and a captured CUDA graph
whose replays follow new routings and scales (rows no expert covers stay zeros).
DeepSeek-V3's block scales (x's (T, ceil(K/128)) grid, w's (E, ceil(K/128), ceil(N/128))
grids) against a block-by-block float64 reference and the CPU operator.

Skips, saying so, unless the build has an fp8 grouped kernel (for block scales: a
block-scaled one) that runs here.
"""

import pytest
from helpers import runnable_kernels, torch_activations

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")
pt = pytest.importorskip("pycutlass_rt.torch")

ops = torch.ops.pycutlass_rt
BF16, F64, I32 = torch.bfloat16, torch.float64, torch.int32
E4M3 = torch.float8_e4m3fn
#: fp8 inputs, bfloat16 out: the output's rounding and the fp8 products' accumulation
TOL = 1.6e-2
TORCH_ACT = torch_activations()


def fp8_grouped_kernels():
    """The build's fp8 grouped kernels (e4m3 -> bfloat16) that run here."""
    return [
        k
        for k in runnable_kernels(grouped=True)
        if k.dtype_a == "float8_e4m3fn" and k.dtype_d == "bfloat16"
    ]


def needs_fp8_grouped():
    """Skips unless the build has an fp8 grouped kernel that runs here."""
    if not fp8_grouped_kernels():
        pytest.skip("no fp8 grouped kernel (e4m3 -> bfloat16) of this build runs here")


def layer(T, E, K, N, seed=0):
    """A quantized MoE layer: x (T, K) e4m3 with per-token scales (T,), w (E, K, N) e4m3
    K-major (an (E, N, K) stack transposed) with per-expert per-channel scales (E, N)."""
    torch.manual_seed(seed)
    x = torch.randn(T, K, device="cuda") * 3
    w = torch.randn(E, N, K, device="cuda") / 4
    sx = x.abs().amax(1).clamp_min(1e-6) / 448
    sw = w.abs().amax(2) / 448
    xq = (x / sx[:, None]).to(E4M3)
    wq = (w / sw[:, :, None]).to(E4M3)
    return xq, wq.transpose(1, 2), sx, sw


def routing(T, E, seed, tail=0):
    """E end offsets (int32, on the GPU) over the first T - tail rows: skewed, some
    experts empty; rows T - tail.. belong to no expert."""
    g = torch.Generator().manual_seed(seed)
    share = torch.rand(E, generator=g) ** 4
    share[torch.randperm(E, generator=g)[: E // 4]] = 0
    counts = (share / share.sum() * (T - tail)).floor().long()
    counts[0] += T - tail - counts.sum()
    return counts.cumsum(0).to(I32).cuda()


def reference(x, w, sx, sw, offs, bias=None, act=None):
    """float64: each expert's rows dequantized, ``act((x * sx) @ (w[e] * sw[e]) + bias[e])``;
    rows of no expert: zeros."""
    T, N = x.shape[0], w.shape[2]
    out = torch.zeros(T, N, dtype=F64, device=x.device)
    xd = x.double() * (sx.double().reshape(-1, 1) if sx.numel() > 1 else sx.double().reshape(()))
    swd = sw.double()
    start = 0
    for e, end in enumerate(offs.tolist()):
        end = min(max(end, start), T)
        s = swd.reshape(()) if swd.numel() == 1 else swd[e] if swd.dim() == 1 else swd[e][None]
        y = xd[start:end] @ (w[e].double() * s)
        if bias is not None:
            y = y + (bias.double() if bias.dim() == 1 else bias[e].double())
        out[start:end] = TORCH_ACT[act](y)
        start = end
    return out


def moe_bias(kind, E, N):
    """None, one bias for every expert ("shared", (N,)) or one per expert ("expert")."""
    shape = {None: None, "shared": (N,), "expert": (E, N)}[kind]
    return None if shape is None else torch.randn(shape, device="cuda").to(BF16)


def close(got, want, what, tol=TOL):
    assert got.dtype == BF16 and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    assert not torch.isnan(got).any(), f"{what}: NaN elements"
    err = ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()
    assert err <= tol, f"{what}: relative error {err:.2e} > {tol:.1e}"


FORMS = (
    "tensor x tensor",
    "token x expert",
    "token x expert-channel",
    "token(T,1) x expert-channel",
    "tensor(1,) x expert-channel",
)


def scale_forms(sx, sw):
    """label (of FORMS) -> (scale_x, scale_w) in the layouts the operator takes."""
    return {
        "tensor x tensor": (sx.max().reshape(()), sw.max().reshape(1)),
        "token x expert": (sx, sw.amax(1)),
        "token x expert-channel": (sx, sw),
        "token(T,1) x expert-channel": (sx[:, None], sw),
        "tensor(1,) x expert-channel": (sx.max().reshape(1), sw),
    }


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("bias", [None, "shared", "expert"])
@pytest.mark.parametrize("T", [1, 37, 1000])
def test_against_the_reference_and_the_cpu_op(form, bias, T):
    needs_fp8_grouped()
    E, K, N = 8, 256, 384
    xq, wq, sx, sw = layer(T, E, K, N, seed=T)
    scale_x, scale_w = scale_forms(sx, sw)[form]
    tail = T // 10
    offs = routing(T, E, seed=T, tail=tail)
    b = moe_bias(bias, E, N)
    y = pt.scaled_grouped_mm(xq, wq, scale_x, scale_w, offs, b)
    want = reference(xq, wq, scale_x, scale_w, offs, b)
    close(y, want, f"{form}, bias {bias}, T={T}")
    assert (y[T - tail :] == 0).all(), "rows no expert covers are zeros"
    # the CPU operator (a float64 reference in torch) agrees to bf16 rounding
    cpu = [t if t is None else t.cpu() for t in (xq, wq, scale_x, scale_w, offs, b)]
    close(y.cpu(), pt.scaled_grouped_mm(*cpu).double(), f"CPU op, {form}")


@pytest.mark.parametrize("act", list(TORCH_ACT))
def test_activations_and_int64_offsets(act):
    needs_fp8_grouped()
    T, E, K, N = 300, 4, 128, 128
    xq, wq, sx, sw = layer(T, E, K, N, seed=3)
    offs = routing(T, E, seed=3, tail=20)
    b = torch.randn(E, N, device="cuda").to(BF16)
    want = reference(xq, wq, sx, sw, offs, b, act)
    for o in (offs, offs.long()):
        y = ops.scaled_grouped_mm(xq, wq, sx, sw, o, b, BF16, act)
        close(y, want, f"{act}, offs {o.dtype}")
        assert (y[T - 20 :] == 0).all()


def test_errors():
    needs_fp8_grouped()
    T, E, K, N = 64, 4, 128, 128
    xq, wq, sx, sw = layer(T, E, K, N)
    offs = routing(T, E, seed=0)
    with pytest.raises(RuntimeError, match="scale_w holds one value"):
        pt.scaled_grouped_mm(xq, wq, sx, sw[:, :64], offs)
    with pytest.raises(RuntimeError, match="tensors on cuda:0 and cpu"):
        pt.scaled_grouped_mm(xq, wq, sx, sw, offs.cpu())
    if not any(k.layout == "tt" for k in fp8_grouped_kernels()):
        # w row-major per expert (not K-major): no fp8 grouped kernel takes it
        with pytest.raises(pcr.UnsupportedError):
            pt.scaled_grouped_mm(xq, wq.contiguous(), sx, sw, offs)
    with pytest.raises(NotImplementedError, match="scaled_grouped_mm has no backward"):
        pt.scaled_grouped_mm(xq, wq, sx, sw.requires_grad_(), offs).float().sum().backward()


# ---- torch.compile and CUDA graphs ------------------------------------------------------------


def moe_layer(x, wq, sw, offs, b):
    """The fp8 MoE layer as a model runs it: x quantized per token, then the GEMM with the
    bias and silu fused."""
    xq, sx = pt.quantize(x, granularity="token")
    return pt.scaled_grouped_mm(xq, wq, sx, sw, offs, b, None, "silu")


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph(dynamic):
    """torch.compile(fullgraph=True) traces the operator (and the quantize before it)
    without a graph break; the compiled results are the eager ones."""
    needs_fp8_grouped()
    torch._dynamo.reset()
    E, K, N = 8, 256, 256
    op = torch.compile(pt.scaled_grouped_mm, fullgraph=True, dynamic=dynamic)
    lay = torch.compile(moe_layer, fullgraph=True, dynamic=dynamic)
    for T in (16, 200, 777):
        xq, wq, sx, sw = layer(T, E, K, N, seed=T)
        offs = routing(T, E, seed=T, tail=5)
        b = torch.randn(E, N, device="cuda").to(BF16)
        y = op(xq, wq, sx, sw, offs, b, None, "gelu")
        close(y, reference(xq, wq, sx, sw, offs, b, "gelu"), f"compiled op T={T}")
        assert (y[T - 5 :] == 0).all()
        x = torch.randn(T, K, device="cuda", dtype=BF16)
        got, eager = lay(x, wq, sw, offs, b), moe_layer(x, wq, sw, offs, b)
        close(got, eager.double(), f"compiled layer T={T}", tol=1e-3)


def test_reduce_overhead_follows_new_routings():
    """mode="reduce-overhead" captures the operator in its CUDA graphs (no skips); replays
    follow each routing and each new x and per-token scales."""
    needs_fp8_grouped()
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    f = torch.compile(
        lambda x, w, sx, sw, offs: pt.scaled_grouped_mm(x, w, sx, sw, offs, None, None, "relu"),
        mode="reduce-overhead",
        fullgraph=True,
        dynamic=False,
    )
    T, E, K, N = 1000, 8, 256, 512
    _, wq, _, sw = layer(T, E, K, N, seed=0)
    for seed in range(5):
        xq, _, sx, _ = layer(T, E, K, N, seed=seed + 1)
        offs = routing(T, E, seed, tail=7 * (seed % 2))
        y = f(xq, wq, sx, sw, offs)
        close(y, reference(xq, wq, sx, sw, offs, None, "relu"), f"routing {seed}")
        assert (y[T - 7 * (seed % 2) :] == 0).all()
    assert counters["inductor"].get("cudagraph_skips", 0) == 0, "CUDA graphs skipped"


def test_cuda_graph_replays_new_routings_and_scales():
    """A captured call reads offs, x and the scales from the GPU at each replay, and zeros
    its output in the graph: rows a new routing leaves uncovered read zeros again."""
    needs_fp8_grouped()
    T, E, K, N = 1024, 8, 256, 384
    xq, wq, sx, sw = layer(T, E, K, N, seed=10)
    b = torch.randn(N, device="cuda").to(BF16)
    offs = routing(T, E, seed=10)  # every row covered at capture
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up off the capture, as torch advises
        pt.scaled_grouped_mm(xq, wq, sx, sw, offs, b, None, "silu")
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = pt.scaled_grouped_mm(xq, wq, sx, sw, offs, b, None, "silu")
    for seed in (11, 12, 13):
        tail = 100 * (seed - 10)
        new_x, _, new_sx, _ = layer(T, E, K, N, seed=seed)
        xq.copy_(new_x)
        sx.copy_(new_sx)
        offs.copy_(routing(T, E, seed, tail=tail))
        g.replay()
        torch.cuda.synchronize()
        close(y, reference(xq, wq, sx, sw, offs, b, "silu"), f"replay {seed}")
        assert (y[T - tail :] == 0).all(), f"replay {seed}: uncovered rows not zeroed"


# ---- DeepSeek-V3's block scales ---------------------------------------------------------------


def block_scaled_grouped_kernels():
    """The build's block-scaled fp8 grouped kernels that run here."""
    return [
        k
        for k in runnable_kernels(grouped=True, block_scaled=True)
        if k.grouped and k.dtype_a == "float8_e4m3fn" and k.scale_m != "none"
    ]


def needs_block_scaled_grouped():
    """Skips unless the build has a block-scaled fp8 grouped kernel that runs here."""
    if not block_scaled_grouped_kernels():
        pytest.skip("no block-scaled fp8 grouped kernel of this build runs here")


def block_layer(T, E, K, N, seed=0):
    """DeepSeek-V3's quantized MoE layer, as pycutlass_rt.quantize writes it: x per token
    and 128 of K (an M-major (T, ceil(K/128)) grid), each expert's (N, K) weight per
    128 x 128 block (its weight_scale_inv (ceil(N/128), ceil(K/128))), stacked: w (E, K, N)
    K-major and its grids (E, ceil(K/128), ceil(N/128)), each the transposed stack."""
    torch.manual_seed(seed)
    x = (torch.randn(T, K, device="cuda") * 3).to(BF16)
    xq, sx = pcr.quantize(x, granularity="group")
    qs = [
        pcr.quantize((torch.randn(N, K, device="cuda") / 4).to(BF16), granularity="block")
        for _ in range(E)
    ]
    wq = torch.stack([q for q, _ in qs])  # (E, N, K)
    sw = torch.stack([g for _, g in qs])  # (E, ceil(N/128), ceil(K/128)), contiguous
    return xq, wq.transpose(1, 2), sx, sw.transpose(1, 2)


def block_reference(x, w, sx, sw, offs, bias=None, act=None):
    """float64: x and each expert's w dequantized block by block (each scale over its
    128 of K, and of N; the last blocks partial), then as :func:`reference`."""
    K, N = x.shape[1], w.shape[2]
    xd = x.double() * sx.double().repeat_interleave(128, 1)[:, :K]
    full = sw.double().repeat_interleave(128, 1)[:, :K].repeat_interleave(128, 2)[:, :, :N]
    one = torch.ones((), dtype=torch.float32, device=x.device)
    return reference(xd, w.double() * full, one, one, offs, bias, act)


@pytest.mark.parametrize(
    "T, K, N",
    [(1, 512, 384), (37, 320, 200), (300, 640, 256), (1000, 1024, 512)],
)
@pytest.mark.parametrize("bias, act", [(None, None), ("expert", "silu"), ("shared", "gelu")])
def test_block_scales_against_the_reference_and_the_cpu_op(T, K, N, bias, act):
    needs_block_scaled_grouped()
    E = 8
    xq, wq, sx, sw = block_layer(T, E, K, N, seed=T)
    assert sx.shape == (T, -(-K // 128)) and sw.shape == (E, -(-K // 128), -(-N // 128))
    tail = T // 10
    offs = routing(T, E, seed=T, tail=tail)
    b = moe_bias(bias, E, N)
    y = pt.scaled_grouped_mm(xq, wq, sx, sw, offs, b, None, act)
    want = block_reference(xq, wq, sx, sw, offs, b, act)
    close(y, want, f"block scales T={T} K={K} N={N}, bias {bias}, {act}")
    assert (y[T - tail :] == 0).all(), "rows no expert covers are zeros"
    cpu = [t if t is None else t.cpu() for t in (xq, wq, sx, sw, offs, b)]
    close(y.cpu(), pt.scaled_grouped_mm(*cpu, None, act).double(), f"CPU op T={T}")
    # x's grid in any strides: row-major too
    close(pt.scaled_grouped_mm(xq, wq, sx.contiguous(), sw, offs, b, None, act), want, "row-major")


@pytest.mark.parametrize("K, N", [(128, 256), (256, 128), (96, 320), (320, 64)])
def test_block_scales_one_block_along_k_or_n(K, N):
    """One 128-block along K (x's grid (T, 1)) or along N (w's grids (E, Kb, 1)): the
    layouts whose size-1 dimensions carry no strides."""
    needs_block_scaled_grouped()
    T, E = 200, 4
    xq, wq, sx, sw = block_layer(T, E, K, N, seed=K + N)
    offs = routing(T, E, seed=1, tail=10)
    y = pt.scaled_grouped_mm(xq, wq, sx, sw, offs)
    close(y, block_reference(xq, wq, sx, sw, offs), f"K={K} N={N}")


def test_block_scales_errors():
    needs_block_scaled_grouped()
    T, E, K, N = 64, 4, 384, 256
    xq, wq, sx, sw = block_layer(T, E, K, N)
    offs = routing(T, E, seed=0)
    # the checkpoint's grid untransposed: a shape error; transposed but not packed (a
    # contiguous copy of the transposed view): UnsupportedError naming the fix
    with pytest.raises(RuntimeError, match=r"scale_w as a block-scale grid is"):
        pt.scaled_grouped_mm(xq, wq, sx, sw.transpose(1, 2), offs)
    with pytest.raises(pcr.UnsupportedError, match=r"weight_scale_inv\.transpose\(1, 2\)"):
        pt.scaled_grouped_mm(xq, wq, sx, sw.contiguous(), offs)
    with pytest.raises(RuntimeError, match="block-scale grid but scale_x of shape"):
        pt.scaled_grouped_mm(xq, wq, sx[:, 0].contiguous(), sw, offs)


@pytest.mark.parametrize("dynamic", [False, True])
def test_block_scales_compile_fullgraph(dynamic):
    """The block-scaled layer (quantize per 128 of K, then the GEMM) traced without a graph
    break; the compiled results are the eager ones."""
    needs_block_scaled_grouped()
    torch._dynamo.reset()
    E, K, N = 8, 512, 384

    def layer_fn(x, wq, sw, offs, b):
        xq, sx = pt.quantize(x, granularity="group")
        return pt.scaled_grouped_mm(xq, wq, sx, sw, offs, b, None, "silu")

    f = torch.compile(layer_fn, fullgraph=True, dynamic=dynamic)
    _, wq, _, sw = block_layer(16, E, K, N, seed=5)
    for T in (16, 200, 777):
        x = torch.randn(T, K, device="cuda", dtype=BF16)
        offs = routing(T, E, seed=T, tail=5)
        b = torch.randn(E, N, device="cuda").to(BF16)
        got, eager = f(x, wq, sw, offs, b), layer_fn(x, wq, sw, offs, b)
        close(got, eager.double(), f"compiled block-scaled layer T={T}", tol=1e-3)
        assert (got[T - 5 :] == 0).all()
