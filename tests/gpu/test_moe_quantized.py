"""Grouped and MoE GEMMs with fused epilogues: fp8 layers' scales (per tensor, per token,
per expert, per channel), a bias and every activation, against float64 references that
dequantize first.

Every fp8 grouped kernel of the build that runs here is forced by name; the 16-bit bias /
activation grouped kernels likewise. Scale and bias layouts, graph replays with new
routing, the list form and the errors are checked on the selected kernel.
"""

import pytest
from helpers import check, parametrized_activations, runnable_kernels, torch_activations

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")

E4M3 = "float8_e4m3fn"
FP8_GROUPED = [k.name for k in runnable_kernels(grouped=True) if k.dtype_a == E4M3]
FUSED_GROUPED = [
    k.name
    for k in runnable_kernels(grouped=True)
    if k.dtype_a == "bfloat16" and k.epilogue != "linear" and k.layout == "tn"
]
BLOCK_GROUPED = [k.name for k in runnable_kernels(grouped=True, block_scaled=True)]
needs_fp8 = pytest.mark.skipif(not FP8_GROUPED, reason="no fp8 grouped kernel runs here")
#: fp8 inputs, bfloat16 out: the output's rounding and fp8 products' accumulation
TOL = 1.6e-2
ACTIVATIONS = {**torch_activations(), **parametrized_activations()}


def routing(T, E, seed):
    """Ends of E experts' rows over T tokens: skewed, some experts empty."""
    g = torch.Generator().manual_seed(seed)
    share = torch.rand(E, generator=g) ** 4
    share[torch.randperm(E, generator=g)[: E // 4]] = 0
    counts = (share / share.sum() * T).floor().long()
    counts[0] += T - counts.sum()
    return counts.cumsum(0)


def fp8_layer(T, E, K, N, seed=0):
    """Quantized MoE operands: x (T, K) e4m3 with per-token scales, w (E, N, K) e4m3 viewed
    as (E, K, N) with per-expert per-channel scales, and their float64 dequantized values."""
    torch.manual_seed(seed)
    x = torch.randn(T, K, device="cuda") * 3
    w = torch.randn(E, N, K, device="cuda") / 4
    sx = x.abs().amax(1) / 448
    sw = w.abs().amax(2) / 448
    xq = (x / sx[:, None]).to(torch.float8_e4m3fn)
    wq = (w / sw[:, :, None]).to(torch.float8_e4m3fn)
    return xq, wq.transpose(1, 2), sx, sw


def moe_reference(xd, wd, ends, bias=None, activation=None, alpha=1.0):
    """act(alpha * x rows @ w[e] + bias[e]) per expert, float64; rows of no expert NaN."""
    out = torch.full((xd.shape[0], wd.shape[2]), float("nan"), dtype=torch.float64, device="cuda")
    start = 0
    for e, end in enumerate(ends.tolist()):
        y = alpha * (xd[start:end] @ wd[e])
        if bias is not None:
            y = y + bias[e if bias.shape[0] > 1 else 0].double()
        out[start:end] = ACTIVATIONS[activation](y)
        start = end
    return out


def close(out, want, what):
    rows = ~torch.isnan(want[:, 0])
    check(out[rows], want[rows], what, TOL)


@needs_fp8
@pytest.mark.parametrize("name", FP8_GROUPED)
@pytest.mark.parametrize("T", [1, 37, 2000])
def test_fp8_grouped_kernel(name, T):
    """Each kernel: per-token x scales, per-expert per-channel w scales, a per-expert bias
    and silu, over skewed routing with empty experts."""
    E, K, N = 8, 512, 384
    xq, wq, sx, sw = fp8_layer(T, E, K, N)
    ends = routing(T, E, T)
    bias = torch.randn(E, N, device="cuda").to(torch.bfloat16)
    out = torch.full((T, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(
        xq, wq, ends.cuda(), out, scale_a=sx, scale_b=sw, bias=bias, activation="silu", kernel=name
    )
    xd = xq.double() * sx.double()[:, None]
    wd = wq.double() * sw.double()[:, None, :]
    close(out, moe_reference(xd, wd, ends, bias, "silu"), f"{name} T={T}")


def scale_forms(T, E, N, sx, sw):
    """(label, scale_a, scale_b, dequantized x scale, w scale) in every accepted layout."""
    one_x, one_w = sx.max(), sw.max()
    per_expert = sw.amax(1)
    return [
        ("tensor x tensor", one_x.reshape(1), one_w.reshape(()), one_x, one_w),
        ("number x tensor", float(one_x), one_w.reshape(1, 1), one_x, one_w),
        ("token x expert", sx, per_expert, sx[:, None], per_expert[:, None, None]),
        (
            "token(T,1) x expert(E,1)",
            sx[:, None],
            per_expert[:, None],
            sx[:, None],
            per_expert[:, None, None],
        ),
        ("tensor x channel(1,N)", one_x, sw[0][None], one_x, sw[0][None, None, :]),
        ("token x expert-channel(E,1,N)", sx, sw[:, None, :], sx[:, None], sw[:, None, :]),
    ]


@needs_fp8
@pytest.mark.parametrize("form", range(6))
def test_fp8_moe_scale_layouts(form):
    T, E, K, N = 700, 6, 256, 256
    xq, wq, sx, sw = fp8_layer(T, E, K, N, seed=form)
    label, sa, sb, x_scale, w_scale = scale_forms(T, E, N, sx, sw)[form]
    ends = routing(T, E, form)
    out = torch.full((T, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(
        xq,
        wq,
        torch.cat([torch.zeros(1, dtype=torch.long), ends]).cuda(),
        out,
        alpha=0.5,
        scale_a=sa,
        scale_b=sb,
    )
    xd = xq.double() * torch.as_tensor(x_scale).double()
    wd = wq.double() * torch.as_tensor(w_scale).double()
    close(out, moe_reference(xd, wd, ends, alpha=0.5), label)


@needs_fp8
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_fp8_moe_activations_and_shared_bias(activation):
    T, E, K, N = 300, 4, 128, 128
    xq, wq, sx, sw = fp8_layer(T, E, K, N, seed=3)
    ends = routing(T, E, 3)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    out = torch.full((T, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(xq, wq, ends.cuda(), out, scale_a=sx, scale_b=sw, bias=bias, activation=activation)
    xd = xq.double() * sx.double()[:, None]
    wd = wq.double() * sw.double()[:, None, :]
    close(out, moe_reference(xd, wd, ends, bias[None], activation), str(activation))


@needs_fp8
def test_fp8_moe_graph_replays_new_routing_and_scales():
    """Offsets and scales are read on the GPU at each replay: a new routing and new
    per-token scales (a dynamic quantizer's) take effect without recapture."""
    T, E, K, N = 1024, 8, 256, 512
    xq, wq, sx, sw = fp8_layer(T, E, K, N, seed=5)
    offsets = routing(T, E, 5).to(torch.int32).cuda()
    scale_a = sx.clone()
    out = torch.zeros(T, N, device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(xq, wq, offsets, out, scale_a=scale_a, scale_b=sw, activation="gelu")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        pcr.moe_gemm(xq, wq, offsets, out, scale_a=scale_a, scale_b=sw, activation="gelu")
    wd = wq.double() * sw.double()[:, None, :]
    for seed in (6, 7):
        ends = routing(T, E, seed)
        offsets.copy_(ends.to(torch.int32))
        scale_a.mul_(2)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        xd = xq.double() * scale_a.double()[:, None]
        close(out, moe_reference(xd, wd, ends, activation="gelu"), f"replay {seed}")


@needs_fp8
def test_fp8_grouped_list_form_per_group_scales_and_bias():
    sizes = [(64, 256, 128), (1, 128, 256), (300, 384, 512), (0, 128, 128), (17, 256, 128)]
    As, Bs, Ds, sa, sb, biases, want = [], [], [], [], [], [], []
    for g, (m, n, k) in enumerate(sizes):
        torch.manual_seed(g)
        a = (torch.randn(m, k, device="cuda") * 8).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, device="cuda") * 8).to(torch.float8_e4m3fn).t()  # K-major
        s_a = torch.rand(m, device="cuda") / 64 + 1e-3
        s_b = torch.rand(n, device="cuda") / 64 + 1e-3
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        As.append(a), Bs.append(b), sa.append(s_a), sb.append(s_b), biases.append(bias)
        Ds.append(torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16))
        ref = (a.double() * s_a.double()[:, None]) @ (b.double() * s_b.double()[None])
        want.append(torch.relu(ref + bias.double()))
    pcr.grouped_gemm(As, Bs, None, Ds, bias=biases, scale_a=sa, scale_b=sb, activation="relu")
    for g, (d, ref) in enumerate(zip(Ds, want)):
        if d.numel():
            check(d, ref, f"group {g}", TOL)


@pytest.mark.skipif(not FUSED_GROUPED, reason="no bf16 bias/activation grouped kernel here")
@pytest.mark.parametrize("name", FUSED_GROUPED)
def test_bf16_moe_bias_and_activation(name):
    T, E, K, N = 900, 8, 256, 384
    torch.manual_seed(1)
    x = torch.randn(T, K, device="cuda").to(torch.bfloat16)
    w = (torch.randn(E, N, K, device="cuda") / 16).to(torch.bfloat16).transpose(1, 2)
    bias = torch.randn(E, 1, N, device="cuda").to(torch.bfloat16)
    ends = routing(T, E, 11)
    out = torch.full((T, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(x, w, ends.cuda(), out, bias=bias, activation="gelu_tanh", kernel=name)
    close(out, moe_reference(x.double(), w.double(), ends, bias[:, 0], "gelu_tanh"), name)
    # the list form's bias and activation with C: act(beta * c + a @ b + bias)
    a, b = x[:100], w[0]
    c = torch.randn(100, N, device="cuda").to(torch.bfloat16)
    d = torch.full((100, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.grouped_gemm(
        [a], [b], [c], [d], 1.0, 0.5, bias=[bias[0, 0]], activation="silu", kernel=name
    )
    ref = torch.nn.functional.silu(a.double() @ b.double() + 0.5 * c.double() + bias[0].double())
    check(d, ref, f"{name} list form", 1.6e-2)


@needs_fp8
def test_fp8_moe_errors():
    T, E, K, N = 64, 4, 128, 128
    xq, wq, sx, sw = fp8_layer(T, E, K, N)
    ends = routing(T, E, 0).cuda()
    out = torch.empty(T, N, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(pcr.InvalidArgumentError, match="scale_b for 4 experts of 128 outputs"):
        pcr.moe_gemm(xq, wq, ends, out, scale_a=sx, scale_b=sw[:, :64])
    with pytest.raises(pcr.InvalidArgumentError, match="bias for 4 experts"):
        pcr.moe_gemm(
            xq,
            wq,
            ends,
            out,
            scale_a=sx,
            scale_b=sw,
            bias=torch.zeros(3, N, device="cuda", dtype=torch.bfloat16),
        )
    with pytest.raises(pcr.UnsupportedError, match="K = 0 and a bias or activation"):
        pcr.moe_gemm(xq[:, :0], wq[:, :0], ends, out, activation="relu")
    # block-scale grids (1x128 a, 128x128 b) go to moe_gemm, not the list form
    xq2, wq2, *_ = fp8_layer(T, E, 256, 256)
    grid_a = torch.ones(2, T, device="cuda").t()
    grid_b = torch.ones(2, 2, device="cuda").t()
    with pytest.raises(pcr.UnsupportedError, match="block-scale grids"):
        pcr.grouped_gemm(
            [xq2],
            [wq2[0]],
            None,
            [torch.empty_like(out[:, :1].expand(T, 256))],
            scale_a=[grid_a],
            scale_b=[grid_b],
        )
    with pytest.raises(pcr.UnsupportedError, match="group 0: a grouped GEMM's bias runs along"):
        pcr.grouped_gemm(
            [xq],
            [wq[0]],
            None,
            [out],
            scale_a=[sx],
            scale_b=[sw[0]],
            bias=[torch.zeros(T, 1, device="cuda", dtype=torch.bfloat16)],
        )
    with pytest.raises(pcr.InvalidArgumentError, match="group 1 differs from group 0 in its"):
        pcr.grouped_gemm(
            [xq, xq],
            [wq[0], wq[1]],
            None,
            [out, out.clone()],
            scale_a=[sx, sx],
            scale_b=[sw[0], sw[1]],
            bias=[None, sw[0].bfloat16()],
        )


def block_layer(T, E, K, N, seed=0):
    """DeepSeek-V3's MoE recipe: x quantized per token and 128 of K (an M-major (T, ceil(K/128))
    grid), each expert's (N, K) weight per 128 x 128 block (its weight_scale_inv), as the
    library's quantizer writes them; and both dequantized block by block in float64."""
    torch.manual_seed(seed)
    x = (torch.randn(T, K, device="cuda") * 3).to(torch.bfloat16)
    xq, sx = pcr.quantize(x, granularity="group")
    qs = [
        pcr.quantize((torch.randn(N, K, device="cuda") / 4).to(torch.bfloat16), granularity="block")
        for _ in range(E)
    ]
    wq = torch.stack([q for q, _ in qs])  # (E, N, K)
    sw = torch.stack([s for _, s in qs])  # (E, ceil(N/128), ceil(K/128)): weight_scale_inv
    xd = xq.double() * sx.double().repeat_interleave(128, 1)[:, :K]
    full = sw.double().repeat_interleave(128, 1)[:, :N].repeat_interleave(128, 2)[:, :, :K]
    wd = (wq.double() * full).transpose(1, 2)  # (E, K, N)
    return xq, wq.transpose(1, 2), sx, sw.transpose(1, 2), xd, wd


@pytest.mark.skipif(not BLOCK_GROUPED, reason="no block-scaled grouped kernel runs here")
@pytest.mark.parametrize("name", BLOCK_GROUPED)
@pytest.mark.parametrize(
    "T,K,N", [(1, 512, 384), (37, 640, 256), (2000, 1024, 512), (300, 320, 320)]
)
def test_block_scaled_moe(name, T, K, N):
    """Every block-scaled grouped kernel over odd token counts, partial last blocks of K and
    N, and a bias and activation, against the block-by-block dequantized layer."""
    E = 8
    xq, wq, sx, sw, xd, wd = block_layer(T, E, K, N, seed=T)
    ends = routing(T, E, T + 1)
    bias = torch.randn(E, N, device="cuda").to(torch.bfloat16)
    out = torch.full((T, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(
        xq, wq, ends.cuda(), out, scale_a=sx, scale_b=sw, bias=bias, activation="silu", kernel=name
    )
    close(out, moe_reference(xd, wd, ends, bias, "silu"), f"{name} T={T} K={K} N={N}")


@pytest.mark.skipif(not BLOCK_GROUPED, reason="no block-scaled grouped kernel runs here")
def test_block_scaled_moe_selected_in_a_graph_with_new_routing():
    T, E, K, N = 1024, 16, 1024, 768
    xq, wq, sx, sw, xd, wd = block_layer(T, E, K, N, seed=9)
    offsets = routing(T, E, 9).to(torch.int32).cuda()
    out = torch.zeros(T, N, device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(xq, wq, offsets, out, scale_a=sx, scale_b=sw)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        pcr.moe_gemm(xq, wq, offsets, out, scale_a=sx, scale_b=sw)
    for seed in (10, 11):
        ends = routing(T, E, seed)
        offsets.copy_(ends.to(torch.int32))
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        close(out, moe_reference(xd, wd, ends), f"replay {seed}")


@pytest.mark.skipif(not BLOCK_GROUPED, reason="no block-scaled grouped kernel runs here")
def test_block_scaled_moe_grid_layouts():
    """x's grid in any strides (packed per expert on the GPU); w's must be packed per
    expert with its K blocks contiguous, as checkpoints store weight_scale_inv."""
    T, E, K, N = 300, 4, 384, 256
    xq, wq, sx, sw, xd, wd = block_layer(T, E, K, N)
    ends = routing(T, E, 0)
    out = torch.full((T, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(xq, wq, ends.cuda(), out, scale_a=sx.contiguous(), scale_b=sw)  # row-major
    close(out, moe_reference(xd, wd, ends), "row-major x grid")
    with pytest.raises(pcr.UnsupportedError, match="K blocks contiguous"):
        pcr.moe_gemm(xq, wq, ends.cuda(), out, scale_a=sx, scale_b=sw.contiguous())
