"""Grouped GEMMs and the MoE form, against float64 references.

Every grouped kernel of the build that runs here is forced by name over groups of mixed
sizes (empty, tiny, K = 0, large), with and without C; selection, odd layouts, graph
capture (the MoE offsets change between replays: they are read on the GPU) and errors
are checked on the chosen kernel.
"""

import pytest
from helpers import matrix, runnable_kernels

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")

TORCH_DTYPE = {"float16": torch.float16, "bfloat16": torch.bfloat16}
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
#: the 16-bit grouped kernels (test_moe_quantized.py runs the fp8 ones)
GROUPED = [k.name for k in runnable_kernels(grouped=True) if k.dtype_a in TORCH_DTYPE]
#: (M, N, K) per group: empty, tiny, K = 0, a partial tile, several tiles
SIZES = [
    (0, 64, 64),
    (1, 8, 8),
    (17, 40, 0),
    (130, 72, 96),
    (300, 256, 520),
    (64, 128, 64),
    (5, 512, 1024),
]


def needs_grouped(layout):
    """Skips unless a bf16 -> bf16 grouped kernel of the canonical ``layout`` runs here."""
    have = [
        k
        for k in runnable_kernels(grouped=True)
        if k.layout == layout and k.dtype_a == k.dtype_d == "bfloat16"
    ]
    return pytest.mark.skipif(not have, reason=f"no bf16 {layout} grouped kernel in this build")


def close(got, want, what):
    assert not torch.isnan(got).any(), f"{what}: unwritten (NaN) elements"
    if want.numel() == 0:
        return
    err = ((got.double() - want).norm() / want.norm().clamp_min(1e-30)).item()
    assert err <= TOL[got.dtype], f"{what}: relative error {err:.2e}"


def groups(layout, dtype, sizes=SIZES):
    As = [matrix(m, k, layout[0], dtype) for m, n, k in sizes]
    Bs = [matrix(k, n, layout[1], dtype) for m, n, k in sizes]
    Cs = [matrix(m, n, "t", dtype) for m, n, k in sizes]
    Ds = [torch.full((m, n), float("nan"), device="cuda", dtype=dtype) for m, n, k in sizes]
    return As, Bs, Cs, Ds


def check_groups(As, Bs, Cs, Ds, alpha, beta, what):
    Cs = [None] * len(As) if Cs is None else Cs
    for g, (a, b, c, d) in enumerate(zip(As, Bs, Cs, Ds)):
        want = alpha * (a.double() @ b.double())
        if c is not None and beta:
            want = want + beta * c.double()
        close(d, want, f"{what} group {g} {tuple(a.shape)}x{tuple(b.shape)}")


@pytest.mark.skipif(not GROUPED, reason="no grouped kernel of this build runs on this GPU")
@pytest.mark.parametrize("name", GROUPED)
def test_grouped_kernel(name):
    k = pcr._kernels.by_name(name)
    dt = TORCH_DTYPE[k.dtype_a]
    # 16-byte kernels: every contiguous extent a multiple of 8 elements
    sizes = [(m if k.layout[0] == "t" else -(-m // 8) * 8, n, k_) for m, n, k_ in SIZES]
    As, Bs, Cs, Ds = groups(k.layout, dt, sizes)
    pcr.grouped_gemm(As, Bs, None, Ds, kernel=name)
    check_groups(As, Bs, None, Ds, 1.0, 0.0, name)
    Cs[1] = None  # a group without C reads zeros
    for d in Ds:
        d.fill_(float("nan"))
    pcr.grouped_gemm(As, Bs, Cs, Ds, 0.5, -1.0, kernel=name)
    check_groups(As, Bs, Cs, Ds, 0.5, -1.0, f"{name} with C")


@pytest.mark.skipif(not GROUPED, reason="no grouped kernel here")
@pytest.mark.parametrize("count", [1, 16, 64, 130])
def test_selected_kernel_many_groups(count):
    torch.manual_seed(count)
    ms = torch.randint(0, 200, (count,)).tolist()
    sizes = [(m, 256, 128) for m in ms]
    As, Bs, Cs, Ds = groups("tn", torch.bfloat16, sizes)
    pcr.grouped_gemm(As, Bs, None, Ds)
    check_groups(As, Bs, None, Ds, 1.0, 0.0, f"{count} groups")


@needs_grouped("nn")  # a tt problem with column-major d computes as nn
def test_column_major_outputs_are_oriented_per_group():
    """Column-major outputs run as d^T = b^T a^T, group by group (tt becomes nn)."""
    sizes = [(64, 96, 128), (40, 24, 64)]
    As = [matrix(m, k, "t") for m, n, k in sizes]
    Bs = [matrix(k, n, "t") for m, n, k in sizes]
    Ds = [
        torch.full((n, m), float("nan"), device="cuda", dtype=torch.bfloat16).t()
        for m, n, k in sizes
    ]
    pcr.grouped_gemm(As, Bs, None, Ds)
    check_groups(As, Bs, None, Ds, 1.0, 0.0, "column-major d")
    mixed = [Ds[0], torch.empty(40, 24, device="cuda", dtype=torch.bfloat16)]
    with pytest.raises(pcr.InvalidArgumentError, match="group 1 differs from group 0"):
        pcr.grouped_gemm(As, Bs, None, mixed)


@pytest.mark.skipif(not GROUPED, reason="no grouped kernel here")
def test_grouped_errors():
    a, b = matrix(64, 64, "t"), matrix(64, 64, "t")
    d = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(pcr.InvalidArgumentError, match="one entry per group"):
        pcr.grouped_gemm([a, a], [b], None, [d, d])
    with pytest.raises(pcr.InvalidArgumentError, match="group 1 differs from group 0"):
        pcr.grouped_gemm([a, a], [b, matrix(64, 64, "n")], None, [d, d.clone()])
    with pytest.raises(pcr.InvalidArgumentError, match="group 1: .*shape mismatch"):
        pcr.grouped_gemm([a, a], [b, matrix(32, 64, "t")], None, [d, d.clone()])
    with pytest.raises(pcr.OverlapError, match="group 0"):
        pcr.grouped_gemm([a], [b], None, [a])
    # the groups run at once: two outputs sharing memory would race
    with pytest.raises(pcr.OverlapError, match="group 1's d shares memory with group 0's d"):
        rows = torch.empty(96, 64, device="cuda", dtype=torch.bfloat16)  # two 64-row views
        pcr.grouped_gemm([a, a], [b, b], None, [rows[:64], rows[32:]])
    assert pcr.grouped_gemm([], [], None, []) == []


def moe_inputs(T, E, K, N, weights="kn", seed=0):
    torch.manual_seed(seed)
    x = matrix(T, K, "t")
    if weights == "kn":
        w = (torch.rand(E, K, N, device="cuda") * 2 - 1).to(torch.bfloat16)
    else:  # (E, N, K) Linear weights, viewed as (E, K, N)
        w = (torch.rand(E, N, K, device="cuda") * 2 - 1).to(torch.bfloat16).transpose(1, 2)
    # skewed routing: a few hot experts, some empty
    share = torch.rand(E) ** 4
    share[torch.randperm(E)[: E // 4]] = 0
    counts = (share / share.sum() * T).floor().long()
    counts[0] += T - counts.sum()
    ends = counts.cumsum(0)
    return x, w, ends


def moe_reference(x, w, ends, alpha=1.0):
    out = torch.zeros(x.shape[0], w.shape[2], dtype=torch.float64, device="cuda")
    start = 0
    for e, end in enumerate(ends.tolist()):
        out[start:end] = alpha * (x[start:end].double() @ w[e].double())
        start = end
    return out


@pytest.mark.skipif(not GROUPED, reason="no grouped kernel here")
@pytest.mark.parametrize(
    "weights",
    [  # (E, K, N) weights: a tt problem; (E, N, K) ones viewed as (E, K, N): tn
        pytest.param("kn", marks=needs_grouped("tt")),
        pytest.param("nk", marks=needs_grouped("tn")),
    ],
)
@pytest.mark.parametrize("form", ["ends_int32", "boundaries_int64"])
def test_moe(weights, form):
    x, w, ends = moe_inputs(2000, 16, 512, 384, weights)
    if form == "ends_int32":
        offsets = ends.to(torch.int32).cuda()
    else:
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), ends]).cuda()
    out = torch.full((2000, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(x, w, offsets, out, alpha=0.5)
    close(out, moe_reference(x, w, ends, 0.5), f"moe {weights} {form}")


@needs_grouped("tt")  # (E, K, N) weights
def test_moe_graph_replays_new_routing_without_sync():
    T, E, K, N = 1024, 8, 256, 512
    x, w, ends = moe_inputs(T, E, K, N, seed=1)
    offsets = ends.to(torch.int32).cuda()
    out = torch.zeros(T, N, device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(x, w, offsets, out)  # selection outside capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        pcr.moe_gemm(x, w, offsets, out)
    for seed in (2, 3):
        _, _, new_ends = moe_inputs(T, E, K, N, seed=seed)
        offsets.copy_(new_ends.to(torch.int32))  # the router's new decision, on the GPU
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        close(out, moe_reference(x, w, new_ends), f"replay {seed}")


@needs_grouped("tt")
def test_grouped_gemm_in_a_graph():
    As, Bs, Cs, Ds = groups("tt", torch.bfloat16, SIZES[1:])
    pcr.grouped_gemm(As, Bs, Cs, Ds, 1.0, 1.0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        pcr.grouped_gemm(As, Bs, Cs, Ds, 1.0, 1.0)
    for a in As:
        a.copy_(torch.rand_like(a.float()).to(a.dtype))
    for d in Ds:
        d.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check_groups(As, Bs, Cs, Ds, 1.0, 1.0, "graph replay")


@pytest.mark.skipif(not GROUPED, reason="no grouped kernel here")
def test_moe_errors():
    x, w, ends = moe_inputs(64, 4, 64, 64)
    out = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(pcr.InvalidArgumentError, match="offsets has 3 entries for 4 experts"):
        pcr.moe_gemm(x, w, ends[:3].cuda(), out)
    with pytest.raises(pcr.InvalidArgumentError, match="int32 or int64"):
        pcr.moe_gemm(x, w, ends.float().cuda(), out)
    with pytest.raises(pcr.DeviceMismatchError, match="offsets must be on the GPU"):
        pcr.moe_gemm(x, w, ends, out)
    with pytest.raises(pcr.InvalidArgumentError, match="row-major"):
        pcr.moe_gemm(x, w, ends.cuda(), out.t())
    with pytest.raises(pcr.InvalidArgumentError, match="w must be 3-D"):
        pcr.moe_gemm(x, w[0], ends.cuda(), out)


def test_moe_out_may_not_overlap_any_expert():
    """Every expert's weights are read while out is written, not expert 0's alone."""
    x, w, ends = moe_inputs(64, 4, 64, 64)
    w = w.contiguous()  # (E, K, N), row-major
    with pytest.raises(pcr.OverlapError, match="out overlaps w"):
        pcr.moe_gemm(x, w, ends.cuda(), w[2])  # expert 2's (K, N) = (T, N) storage as out


def test_column_blocks_of_one_output_are_separate_outputs():
    """Groups may write disjoint column blocks of one output (fused Q, K and V projections):
    their byte ranges interleave, but they share no element."""
    x = matrix(64, 64, "t")
    ws = [matrix(64, n, "n") for n in (64, 32, 32)]
    out = torch.full((64, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.grouped_gemm([x] * 3, ws, None, [out[:, :64], out[:, 64:96], out[:, 96:]])
    torch.cuda.synchronize()
    want = torch.cat([x.double() @ w.double() for w in ws], dim=1)
    assert not torch.isnan(out).any()
    assert ((out.double() - want).norm() / want.norm()).item() < 1.6e-2
    with pytest.raises(pcr.OverlapError, match="group 1's d shares memory with group 0's d"):
        pcr.grouped_gemm([x] * 2, ws[1:], None, [out[:, 64:96], out[:, 80:112]])


@needs_grouped("tn")
@pytest.mark.parametrize("form", ["ends", "boundaries"])
def test_moe_offsets_that_decrease_never_write_a_row_twice(form):
    """Offsets are read as their running maximum: expert 1's end (20) before expert 0's
    (40) empties expert 1, and expert 2 starts at 40, so no row has two writers."""
    x, w, _ = moe_inputs(64, 3, 128, 64, "nk")
    ends = torch.tensor([40, 20, 64])
    offsets = ends if form == "ends" else torch.cat([torch.zeros(1, dtype=torch.long), ends])
    out = torch.full((64, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
    pcr.moe_gemm(x, w, offsets.to(torch.int32).cuda(), out)
    torch.cuda.synchronize()
    close(out, moe_reference(x, w, torch.tensor([40, 40, 64])), f"decreasing {form}")


@pytest.mark.skipif(not GROUPED, reason="no grouped kernel here")
def test_an_output_may_not_alias_another_groups_input():
    """The groups run at once: group 1 writing group 0's a would race with its reads."""
    a0, a1, b = matrix(64, 64, "t"), matrix(64, 64, "t"), matrix(64, 64, "t")
    d0 = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    kept = a0.clone()
    with pytest.raises(pcr.OverlapError, match="group 1's d shares memory with group 0's a"):
        pcr.grouped_gemm([a0, a1], [b, b], None, [d0, a0])
    with pytest.raises(pcr.OverlapError, match="group 0's d shares memory with group 1's b"):
        pcr.grouped_gemm([a0, a1], [b, d0], None, [d0, a1.clone()])
    assert torch.equal(a0, kept), "a refused call wrote nothing"
    # one b read by every group is fine: only outputs must be their own
    pcr.grouped_gemm([a0, a1], [b, b], None, [d0, torch.empty_like(d0)])
