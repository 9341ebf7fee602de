"""The dtypes beyond fp16/bf16 through the public API: fp32 (IEEE and math="tf32"), fp64,
int8 and fp8 with per-tensor, per-row and per-column scales, against fp64 references."""

import pytest
from helpers import canonical_layout, math_of, matrix, reference, require, runnable_kernels

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")

FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
OUT = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "int8": torch.int8,
    **FP8,
}
# fp8 MMAs accumulate with fewer bits than fp32: float32 outputs of fp8 inputs get 5e-4;
# fp8 outputs round to 3 (e4m3) or 2 (e5m2) mantissa bits
TOL = {
    torch.bfloat16: 1.6e-2,
    torch.float16: 2e-3,
    torch.float32: 5e-4,
    torch.float8_e4m3fn: 5e-2,
    torch.float8_e5m2: 1e-1,
}


def built(pred):
    return [k for k in runnable_kernels() if pred(k)]


def rel_err(got, ref):
    return ((got.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def needs(pred, what):
    return pytest.mark.skipif(not built(pred), reason=f"no {what} kernel of this build runs here")


@needs(lambda k: k.dtype_a == "float32", "fp32 (3xTF32)")
@needs(lambda k: k.dtype_a == "tfloat32", "TF32")
def test_float32_ieee_by_default_and_tf32_on_request():
    require(torch.float32, layout="tt")
    require("tfloat32", torch.float32, "tt")
    a = torch.randn(512, 1024, device="cuda")
    b = torch.randn(1024, 384, device="cuda")
    ref = a.double() @ b.double()
    d = torch.empty(512, 384, device="cuda")
    pcr.gemm(a, b, None, d)
    ieee = rel_err(d, ref)
    assert ieee < 1e-6, f"float32 default (3xTF32) error {ieee:.1e}: not fp32-accurate"
    assert "_f32_f32_f32_f32_" in pcr.explain(a, b, None, d).kernel
    pcr.gemm(a, b, None, d, math="tf32")
    tf32 = rel_err(d, ref)
    assert 1e-5 < tf32 < 3e-3, f"math='tf32' error {tf32:.1e}: not TF32 arithmetic"
    assert "_tf32_" in pcr.explain(a, b, None, d, math="tf32").kernel
    with pytest.raises(pcr.InvalidArgumentError, match="math"):
        pcr.gemm(a, b, None, d, math="fp16")


@needs(lambda k: k.dtype_a == "float64", "fp64")
def test_float64_any_layout_and_odd_shapes():
    layouts = ("tn", "nt", "tt", "nn")
    for la, lb in layouts:  # every layout it runs, before it runs any
        require(torch.float64, layout=canonical_layout(la, lb))
    for la, lb in layouts:
        a = matrix(301, 129, la, torch.float64)
        b = matrix(129, 77, lb, torch.float64)
        c = torch.randn(301, 77, device="cuda", dtype=torch.float64)
        d = torch.empty_like(c)
        pcr.gemm(a, b, c, d, 0.1, -0.3)  # fp64 alpha and beta reach the kernel unrounded
        ref = 0.1 * (a @ b) - 0.3 * c
        assert rel_err(d, ref) < 1e-13, la + lb


@needs(lambda k: k.dtype_a == "int8" and k.dtype_d == "int32", "int8 -> int32")
def test_int8_to_int32_is_exact_like_torch_int_mm():
    a = torch.randint(-128, 128, (256, 512), device="cuda", dtype=torch.int8)
    w = torch.randint(-128, 128, (320, 512), device="cuda", dtype=torch.int8)
    d = torch.empty(256, 320, device="cuda", dtype=torch.int32)
    pcr.gemm(a, w.t(), None, d)
    assert torch.equal(d, torch._int_mm(a, w.t()))
    pcr.gemm(a, w.t(), d, d, 2, -1)  # d = 2 ab - d: integers, exactly
    assert torch.equal(d, torch._int_mm(a, w.t()))
    with pytest.raises(pcr.InvalidArgumentError, match="integers"):
        pcr.gemm(a, w.t(), None, d, 0.5)


def quantized(m, n, k, dtype):
    if dtype == torch.int8:
        x = torch.randint(-127, 128, (m, k), device="cuda", dtype=torch.int8)
        w = torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8)
    else:
        x = torch.randn(m, k, device="cuda").to(dtype)
        w = torch.randn(n, k, device="cuda").to(dtype)
    return x, w.t()  # w.t(): (K, N) column-major, the "tn" layout of a linear layer


SCALED = built(lambda k: k.epilogue == "scaled")


@pytest.mark.skipif(not SCALED, reason="no dequantizing kernel of this build runs here")
@pytest.mark.parametrize("name", [k.name for k in SCALED])
@pytest.mark.parametrize(
    "kinds",
    [
        ("vector", "vector"),
        ("tensor", "vector"),
        ("vector", "tensor"),
        ("tensor", "tensor"),
        ("float", None),
    ],
)
def test_scaled_kernel(name, kinds):
    k = pcr._kernels.by_name(name)
    # int8 and fp8 dequantized; float16 and bfloat16 scaled per row and column
    in_dt = {**FP8, "float16": torch.float16, "bfloat16": torch.bfloat16}.get(k.dtype_a, torch.int8)
    out_dt = OUT[k.dtype_d]
    m, n, kk = 200, 144, 384  # n: 16-byte rows of an int8 d
    x, w = quantized(m, n, kk, in_dt)
    sa_vec = torch.rand(m, 1, device="cuda") + 0.5
    sb_vec = torch.rand(1, n, device="cuda") + 0.5
    pick = {"vector": (sa_vec, sb_vec), "tensor": (sa_vec[:1, :1].clone(), sb_vec[:1, :1].clone())}
    sa = pick[kinds[0]][0] if kinds[0] in pick else 0.03
    sb = pick[kinds[1]][1] if kinds[1] in pick else None
    small = 1e-4 if in_dt == torch.int8 else 1.0  # int8 products: keep results in range
    d = torch.empty(m, n, device="cuda", dtype=out_dt)
    bias = None if out_dt == torch.int8 else torch.randn(n, device="cuda").to(out_dt)
    act = None if out_dt == torch.int8 else "silu"
    pcr.gemm(
        x,
        w,
        None,
        d,
        small,
        bias=bias,
        activation=act,
        scale_a=sa,
        scale_b=sb,
        math=math_of(k),
        kernel=name,
    )
    torch.cuda.synchronize()
    sa_ref = sa if torch.is_tensor(sa) else torch.tensor(sa, device="cuda")
    sb_ref = sb if sb is not None else torch.tensor(1.0, device="cuda")
    ref = reference(
        sa_ref.double() * x.double(),
        w.double() * sb_ref.double(),
        alpha=small,
        bias=bias,
        activation=act,
    )
    if out_dt == torch.int8:
        assert (d.double() - ref.round().clamp(-128, 127)).abs().max().item() <= 1
    else:
        assert rel_err(d, ref) <= TOL[out_dt], (name, kinds)


#: plain kernels that also apply per-tensor scale tensors (tma_gemm.cuh's TensorScaledLinear)
TENSOR_SCALED = built(lambda k: k.tensor_scales)


@pytest.mark.skipif(not TENSOR_SCALED, reason="no plain kernel reading scale tensors runs here")
@pytest.mark.parametrize("name", [k.name for k in TENSOR_SCALED])
def test_plain_kernel_applies_per_tensor_scale_tensors(name):
    k = pcr._kernels.by_name(name)
    x, w = quantized(200, 144, 384, FP8.get(k.dtype_a, torch.int8))
    d = torch.empty(200, 144, device="cuda", dtype=OUT[k.dtype_d])
    sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")
    for scales, factor in (((sa, sb), 0.125), ((sa, None), 0.5), ((None, sb), 0.25)):
        d.fill_(float("nan"))
        pcr.gemm(
            x, w, None, d, 2.0, scale_a=scales[0], scale_b=scales[1], math=math_of(k), kernel=name
        )
        assert rel_err(d, reference(x, w, alpha=2.0 * factor)) <= TOL[d.dtype], (name, factor)
    sa.fill_(4.0)  # read on the GPU at every launch: a new value needs no new call setup
    pcr.gemm(x, w, None, d, scale_a=sa, scale_b=sb, math=math_of(k), kernel=name)
    assert rel_err(d, reference(x, w, alpha=1.0)) <= TOL[d.dtype], name


@pytest.mark.skipif(not TENSOR_SCALED, reason="no plain kernel reading scale tensors runs here")
def test_per_tensor_scale_tensors_choose_a_plain_kernel():
    k = TENSOR_SCALED[0]
    x, w = quantized(256, 512, 384, FP8.get(k.dtype_a, torch.int8))
    d = torch.empty(256, 512, device="cuda", dtype=OUT[k.dtype_d])
    one = torch.ones(1, device="cuda")
    assert "_scaled_" not in pcr.explain(x, w, None, d, scale_a=one, scale_b=one).kernel
    vec = torch.ones(256, 1, device="cuda")  # a vector needs the dequantizing epilogue
    chosen = pcr.explain(x, w, None, d, scale_a=vec, scale_b=one).kernel
    assert chosen is None or "_scaled_" in chosen


@pytest.mark.skipif(not SCALED, reason="no dequantizing kernel of this build runs here")
def test_scales_follow_a_column_major_output_and_plans():
    k = SCALED[0]
    in_dt, out_dt = FP8.get(k.dtype_a, torch.int8), OUT[k.dtype_d]
    if out_dt == torch.int8:
        pytest.skip("needs a float output")
    m, n, kk = 96, 160, 256
    x, w = quantized(m, n, kk, in_dt)
    sa, sb = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
    ref = (sa[:, None].double() * x.double()) @ (w.double() * sb[None, :].double())
    # d column-major: computed as d^T = w^T x^T, the scales swap roles inside
    dt = torch.empty(n, m, device="cuda", dtype=out_dt).t()
    try:
        pcr.gemm(x, w, None, dt, scale_a=sa, scale_b=sb)
        assert rel_err(dt, ref) <= TOL[out_dt]
    except pcr.UnsupportedError as e:  # only tn kernels: the transposed problem is nt
        assert "layout" in str(e) or "no kernel" in str(e)
    d = torch.empty(m, n, device="cuda", dtype=out_dt)
    plan = pcr.Gemm(x, w, None, d, scale_a=sa, scale_b=sb)
    plan.run()
    assert rel_err(d, ref) <= TOL[out_dt]
    sa2 = sa * 2
    plan(x, w, None, d, scale_a=sa2, scale_b=sb)  # new scales, same problem
    assert rel_err(d, 2 * ref) <= TOL[out_dt]
    with pytest.raises(pcr.InvalidArgumentError, match="another problem"):
        plan(x, w, None, d, scale_a=sa[:1].clone(), scale_b=sb)  # a scalar is another kind


@needs(
    lambda k: (k.dtype_a, k.dtype_d, k.epilogue) == ("float8_e4m3fn", "bfloat16", "linear"),
    "e4m3 -> bf16",
)
@needs(
    lambda k: (k.dtype_a, k.dtype_d, k.epilogue) == ("float8_e4m3fn", "bfloat16", "scaled"),
    "e4m3 -> bf16 dequantizing",
)
def test_fp8_per_tensor_scales_match_torch_scaled_mm():
    x, w = quantized(256, 512, 384, torch.float8_e4m3fn)
    sa = torch.tensor(0.5, device="cuda")
    sb = torch.tensor(0.25, device="cuda")
    d = torch.empty(256, 512, device="cuda", dtype=torch.bfloat16)
    pcr.gemm(x, w, None, d, scale_a=sa, scale_b=sb)
    want = torch._scaled_mm(x, w, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    assert rel_err(d, want.double()) <= 1e-2
    pcr.gemm(x, w, None, d, scale_a=0.5, scale_b=0.25)  # numbers: folded into alpha
    assert rel_err(d, want.double()) <= 1e-2


@needs(
    lambda k: (k.dtype_a, k.dtype_d, k.epilogue) == ("float8_e4m3fn", "bfloat16", "scaled"),
    "e4m3 -> bf16 dequantizing",
)
@pytest.mark.parametrize(
    "m, n, k, kinds",
    [
        (127, 1000, 4097, ("vector", "vector")),  # odd K: a and b staged (K padded with zeros)
        (1000, 1001, 4097, ("vector", "tensor")),  # odd N too: d staged, no vector along N
    ],
)
def test_scaled_misaligned_operands_are_staged(m, n, k, kinds):
    x, w = quantized(m, n, k, torch.float8_e4m3fn)  # odd K: rows not 16-byte aligned
    sa = torch.rand(m, 1, device="cuda") + 0.5
    sb = torch.rand(1, n, device="cuda") + 0.5
    sa, sb = [v if kind == "vector" else v[:1, :1].clone() for v, kind in zip((sa, sb), kinds)]
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    notes = pcr.explain(x, w, None, d, scale_a=sa, scale_b=sb).notes
    assert any("aligned scratch" in note for note in notes), notes
    pcr.gemm(x, w, None, d, scale_a=sa, scale_b=sb)
    assert rel_err(d, reference(sa.double() * x.double(), w.double() * sb.double())) <= 1e-2
    if n % 2:  # a vector along a staged N stays unsupported: it would be read past its end
        with pytest.raises(pcr.UnsupportedError):
            pcr.gemm(x, w, None, d, scale_a=sa, scale_b=torch.rand(1, n, device="cuda"))


def test_unsupported_dtype_combination_lists_what_exists():
    a = torch.randn(64, 64, device="cuda")
    d = torch.empty(64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(pcr.UnsupportedError, match="available"):
        pcr.gemm(a, a, None, d)  # float32 x float32 -> bfloat16 is no kernel's
    with pytest.raises(pcr.UnsupportedError, match="int8, fp8, float16 and bfloat16"):
        pcr.gemm(a, a, None, a.clone(), scale_a=torch.ones(1, device="cuda"))  # float32
