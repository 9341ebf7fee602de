"""Every kernel of the build that runs on this GPU, forced by name, against an fp64 reference.

Integer-valued inputs in [-4, 4] give exact products (fp32 accumulation is exact at these
sizes, and every input dtype holds them), so the output must equal the reference rounded to
D's dtype bit for bit; random inputs are checked with per-dtype tolerances, integer
outputs exactly (rounded and saturated). D starts as NaN (or -77) so unwritten elements
show.
"""

import math

import pytest
from helpers import empty, math_of, reference, runnable_kernels, tolerance, torch_dtype
from helpers import matrix as _matrix

import pycutlass_rt as pcr

torch = pytest.importorskip("torch")

#: (alpha, beta) per shape; int32 outputs take integers (computed exactly, in int32)
SCALARS = [(1.0, 0.0), (0.5, 2.0), (1.0, 1.0), (-1.5, 0.25)]
INT_SCALARS = [(1.0, 0.0), (2.0, -1.0), (1.0, 1.0), (-3.0, 2.0)]


KERNELS = [k.name for k in runnable_kernels()]


def matrix(rows, cols, layout, dtype, integer):
    return _matrix(rows, cols, layout, dtype, integer=integer)


def shapes_for(k):
    """Sizes around the kernel's tile and the GPU's wave, rounded where alignment demands."""
    tm, tn, tk = k.tile
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    side = int(math.sqrt(sms))
    raw = [
        (2, 8, 8),
        (tm + 1, tn - 1, tk + 1),
        (tm - 1, tn + 1, 2 * tk - 1),
        (tm * side // 2, tn * side, 3 * tk),
        (int(tm * side * 1.25), tn * side, tk),
        (int(tm * side * 2.5), tn * side // 2, 2 * tk + 3),
        # few tiles, deep K: what stream-K / split-K kernels split across the SMs
        (tm + 5, 2 * tn - 3, 48 * tk + 1),
    ]
    a_al, b_al, d_al = k.align
    out = []
    for m, n, kk in raw:
        # the contiguous extent of each operand must be a multiple of its alignment
        if k.layout[0] == "t":
            kk = -(-kk // a_al) * a_al
        else:
            m = -(-m // a_al) * a_al
        if k.layout[1] == "n":
            kk = -(-kk // b_al) * b_al
        else:
            n = -(-n // b_al) * b_al
        n = -(-n // d_al) * d_al
        out.append((m, n, kk))
    return out


def check(d, ref, exact, what, tol=0.0):
    if d.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # saturating, as the kernels do
        top = torch.finfo(d.dtype).max
        ref = ref.clamp(-top, top)
    if d.dtype.is_floating_point:
        assert not torch.isnan(d.float()).any(), f"{what}: unwritten (NaN) elements"
    else:  # integer outputs: rounded to nearest even and saturated, as the kernels do
        info = torch.iinfo(d.dtype)
        ref = ref.round().clamp(info.min, info.max)
        exact = True
    if exact:
        want = ref.to(d.dtype)
        bad = (d != want).sum().item()
        assert bad == 0, f"{what}: {bad} elements differ from the exact result"
    else:
        err = ((d.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
        assert err <= tol, f"{what}: relative error {err:.2e}"


@pytest.mark.skipif(not KERNELS, reason="no kernel of this build runs on this GPU")
@pytest.mark.parametrize("name", KERNELS)
def test_kernel(name):
    k = pcr._kernels.by_name(name)
    in_dt, out_dt = torch_dtype(k.dtype_a), torch_dtype(k.dtype_d)
    scalars = SCALARS if out_dt.is_floating_point else INT_SCALARS
    for i, (m, n, kk) in enumerate(shapes_for(k)):
        # int8 inputs over their whole range would overflow a float16 output
        integer = i % 2 == 0 or (in_dt == torch.int8 and out_dt == torch.float16)
        a = matrix(m, kk, k.layout[0], in_dt, integer)
        b = matrix(kk, n, k.layout[1], in_dt, integer)
        c = matrix(m, n, "t", out_dt, integer)
        d = empty(m, n, out_dt)
        alpha, beta = scalars[i % 4]
        pcr.gemm(a, b, c, d, alpha, beta, math=math_of(k), kernel=name)
        torch.cuda.synchronize()
        check(
            d,
            reference(a, b, c, alpha, beta),
            integer and alpha * 4 == int(alpha * 4),
            f"{name} {m}x{n}x{kk} alpha={alpha} beta={beta}",
            tolerance(k, out_dt),
        )


@pytest.mark.skipif(not KERNELS, reason="no kernel of this build runs on this GPU")
@pytest.mark.parametrize("name", KERNELS)
def test_kernel_c_is_d_and_k_zero(name):
    k = pcr._kernels.by_name(name)
    in_dt, out_dt = torch_dtype(k.dtype_a), torch_dtype(k.dtype_d)
    m, n, kk = shapes_for(k)[1]
    a = matrix(m, kk, k.layout[0], in_dt, True)
    b = matrix(kk, n, k.layout[1], in_dt, True)
    d = matrix(m, n, "t", out_dt, True)
    ref = reference(a, b, d, 1.0, 1.0)
    pcr.gemm(a, b, d, d, 1.0, 1.0, math=math_of(k), kernel=name)
    check(d, ref, True, f"{name} c is d")
    a0 = matrix(m, 0, "t", in_dt, True)
    b0 = matrix(0, n, "t", in_dt, True)
    c = matrix(m, n, "t", out_dt, True)
    d = empty(m, n, out_dt)
    pcr.gemm(a0, b0, c, d, 1.0, -2.0, math=math_of(k), kernel=name)
    check(d, -2.0 * c.double(), True, f"{name} K=0")
