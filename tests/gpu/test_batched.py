"""Batched GEMM: 3-D operands (L, rows, cols) in one launch, against torch.bmm in float64.

Odd batch strides (gaps between matrices), operands shared across the batch (2-D, batch
of 1, or batch stride 0 from expand), column-major and transposed views, fused epilogues,
plans and graph capture; one kernel of each family, schedule, split, swap and alignment
class is forced by name, and the selected kernel is checked too.
"""

import pytest
from helpers import (
    canonical_layout,
    check,
    math_of,
    require,
    runnable_kernels,
    tolerance,
    torch_dtype,
)

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")


# float outputs (int32 ones run the same batch mode; tests/gpu/test_kernels.py has them)
KINDS = [
    k.name
    for k in runnable_kernels(
        lambda k: (k.family, k.dtype_a, k.schedule, k.split, k.swap_ab, k.align[0] == 1, k.epilogue)
    )
    if torch_dtype(k.dtype_d).is_floating_point
]


def batch(L, rows, cols, layout="t", dtype=torch.bfloat16, gap=0):
    """(L, rows, cols) with each matrix row- ('t') or column-major ('n'), ``gap`` elements
    between consecutive matrices (an odd batch stride)."""
    inner = (rows, cols) if layout == "t" else (cols, rows)
    size = inner[0] * inner[1] + gap
    if dtype.is_floating_point:
        flat = (torch.rand(L * size, device="cuda") * 2 - 1).to(dtype)
    else:  # int8: small integers
        flat = torch.randint(-4, 5, (L * size,), device="cuda").to(dtype)
    x = flat.as_strided((L, *inner), (size, inner[1], 1))
    return x if layout == "t" else x.transpose(1, 2)


def nan_batch(L, m, n, dtype, layout="t", gap=0):
    d = batch(L, m, n, layout, dtype, gap)
    d.fill_(float("nan"))
    return d


@pytest.mark.skipif(not KINDS, reason="no kernel of this build runs on this GPU")
@pytest.mark.parametrize("name", KINDS)
def test_kernel_batched(name):
    k = pcr._kernels.by_name(name)
    in_dt, out_dt = torch_dtype(k.dtype_a), torch_dtype(k.dtype_d)
    tm, tn, tk = k.tile
    al = max(k.align)  # 16-byte kernels: extents and batch strides in 16-byte steps
    m, n, kk = tm + al, tn + al, 2 * tk + al
    L, gap = 3, al if al > 1 else 5
    a = batch(L, m, kk, k.layout[0], in_dt, gap)
    b = batch(L, kk, n, k.layout[1], in_dt, gap)
    c = batch(L, m, n, "t", out_dt, gap)
    d = nan_batch(L, m, n, out_dt, gap=gap)
    fused = k.epilogue != "linear"
    bias = torch.randn(n, device="cuda").to(out_dt) if fused else None
    pcr.gemm(
        a,
        b,
        c,
        d,
        0.5,
        1.0,
        bias=bias,
        activation="relu" if fused else None,
        math=math_of(k),
        kernel=name,
    )
    ref = 0.5 * torch.bmm(a.double(), b.double()) + c.double()
    if fused:
        ref = torch.relu(ref + bias.double())
    check(d, ref, f"{name} L={L} {m}x{n}x{kk}", tolerance(k, out_dt))


@pytest.mark.skipif(not KINDS, reason="no kernel of this build runs on this GPU")
@pytest.mark.parametrize("name", KINDS)
def test_kernel_writes_heads_side_by_side(name):
    """d's matrices interleaved in one buffer's rows, as attention heads are written
    (out.view(M, L, N).transpose(0, 1)): batch stride N, row stride L * N. Each kernel
    must write its matrix's columns and leave its neighbours' alone."""
    k = pcr._kernels.by_name(name)
    in_dt, out_dt = torch_dtype(k.dtype_a), torch_dtype(k.dtype_d)
    tm, tn, tk = k.tile
    al = max(k.align)
    m, n, kk, L = tm + al, tn + al, 2 * tk + al, 3
    a = batch(L, m, kk, k.layout[0], in_dt)
    b = batch(L, kk, n, k.layout[1], in_dt)
    out = torch.full((m, L * n), float("nan"), device="cuda").to(out_dt)
    d = out.view(m, L, n).transpose(0, 1)
    fused = k.epilogue != "linear"
    bias = torch.randn(n, device="cuda").to(out_dt) if fused else None
    act = "relu" if fused else None
    pcr.gemm(a, b, None, d, bias=bias, activation=act, math=math_of(k), kernel=name)
    ref = torch.bmm(a.double(), b.double())
    if fused:
        ref = torch.relu(ref + bias.double())
    check(d, ref, f"{name} heads side by side, L={L} {m}x{n}x{kk}", tolerance(k, out_dt))


@pytest.mark.parametrize("shared", ["a2d", "a_expand", "b_batch1", "c_broadcast"])
def test_shared_operands(shared):
    L, m, n, k = 4, 96, 136, 72
    a, b = batch(L, m, k), batch(L, k, n, "n")
    c = batch(L, m, n)
    if shared == "a2d":
        a = batch(1, m, k)[0]
    elif shared == "a_expand":
        a = batch(1, m, k).expand(L, m, k)  # batch stride 0
    elif shared == "b_batch1":
        b = batch(1, k, n, "n")
    else:
        c = batch(1, 1, n).expand(L, m, n)  # a row broadcast over rows and batch
    d = nan_batch(L, m, n, torch.bfloat16)
    pcr.gemm(a, b, c, d, 1.0, 1.0)
    A = a.double().expand(L, m, k) if a.dim() == 3 else a.double().expand(L, m, k)
    ref = torch.bmm(A, b.double().expand(L, k, n)) + c.double()
    check(d, ref, shared)


def test_column_major_output_and_transposed_views():
    require(torch.bfloat16, layout=canonical_layout("n", "n", "n"))
    L, m, n, k = 5, 120, 80, 64
    a = batch(L, k, m).transpose(1, 2)  # (L, m, k) column-major
    b = batch(L, n, k).transpose(1, 2)  # (L, k, n) column-major: x @ w.t() per batch
    d = nan_batch(L, n, m, torch.bfloat16).transpose(1, 2)  # column-major output
    pcr.gemm(a, b, None, d)
    check(d, torch.bmm(a.double(), b.double()), "column-major d")


@pytest.mark.parametrize("L", [1, 8, 64])
def test_selected_kernel_matches_bmm(L):
    require(torch.bfloat16, layout="tt")
    m, n, k = 256, 512, 384
    a, b = batch(L, m, k), batch(L, k, n)
    d = nan_batch(L, m, n, torch.bfloat16)
    pcr.gemm(a, b, None, d)
    check(d, torch.bmm(a.double(), b.double()), f"L={L}")
    assert pcr.explain(a, b, None, d).problem["batch"] == L


def test_empty_batch_and_k_zero():
    a, b = batch(0, 8, 8), batch(0, 8, 8)
    d = torch.empty(0, 8, 8, device="cuda", dtype=torch.bfloat16)
    pcr.gemm(a, b, None, d)  # nothing to do
    L, m, n = 3, 16, 24
    a, b = batch(L, m, 0), batch(L, 0, n)
    c = batch(L, m, n)
    d = nan_batch(L, m, n, torch.bfloat16)
    pcr.gemm(a, b, c, d, 1.0, -1.0)
    check(d, -c.double(), "K = 0 over a batch")


def test_plan_and_graph_on_a_batch():
    L, m, n, k = 8, 128, 256, 128
    a, b = batch(L, m, k), batch(L, k, n, "n")
    d = nan_batch(L, m, n, torch.bfloat16)
    plan = pcr.Gemm(a, b, None, d)
    plan.run()
    check(d, torch.bmm(a.double(), b.double()), "plan")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        plan.run()
    a.copy_(batch(L, m, k))
    d.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    check(d, torch.bmm(a.double(), b.double()), "graph replay")


def test_batch_errors():
    a, b = batch(3, 8, 8), batch(2, 8, 8)
    d = torch.empty(3, 8, 8, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(pcr.InvalidArgumentError, match="batch mismatch"):
        pcr.gemm(a, b, None, d)
    with pytest.raises(pcr.InvalidArgumentError, match="d holds 1 matrices"):
        pcr.gemm(a, batch(3, 8, 8), None, torch.empty(8, 8, device="cuda", dtype=torch.bfloat16))
    shared_d = torch.empty(1, 8, 8, device="cuda", dtype=torch.bfloat16).expand(3, 8, 8)
    with pytest.raises(pcr.OverlapError, match="d's matrices overlap"):
        pcr.gemm(a, batch(3, 8, 8), None, shared_d)
