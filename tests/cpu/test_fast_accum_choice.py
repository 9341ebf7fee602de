"""fp8 fast accumulation (pcr_math FAST_ACCUM, torch._scaled_mm's use_fast_accum): what a
call asks for, which kernels may take it, and how selection prefers them. The GPU side:
tests/gpu/test_fast_accum.py (test modules need distinct basenames: pytest imports them by it)."""

import ctypes

import pytest

import pycutlass_rt as pcr
from pycutlass_rt import _cache, _call, _lib, _select, errors
from pycutlass_rt._abi import DLDataTypeCode, DLDeviceType, Math

E4M3 = (DLDataTypeCode.Float8_e4m3fn, 8)
BF16 = (DLDataTypeCode.Bfloat, 16)
_next = [0x10000000]


def view(shape, strides, dtype):
    """A hand-built DLTensor on cuda:0 (describe reads its shape and address only)."""
    _next[0] += 1 << 28
    t = _lib.DLTensor()
    t.data, t.ndim = _next[0], len(shape)
    t.device.device_type, t.device.device_id = DLDeviceType.CUDA, 0
    t.dtype.code, t.dtype.bits, t.dtype.lanes = *dtype, 1
    t.shape = (ctypes.c_int64 * len(shape))(*shape)
    t.strides = (ctypes.c_int64 * len(shape))(*strides)
    t._keep = (t.shape, t.strides)
    return t


def described(lib, math, ab=E4M3, m=256, n=1024, k=4096):
    """The problem of an (m x k) @ (k x n) tn GEMM into bf16 with ``math``, as pcr_describe
    fills it (without a GPU it stops at the device: ERR_NO_DEVICE, the problem filled)."""
    a, b = view((m, k), (k, 1), ab), view((k, n), (1, k), ab)
    d = view((m, n), (n, 1), BF16)
    x = _lib.Extras()
    x.math = math
    p = _lib.Problem()
    st = lib.pcr_describe(a, b, None, d, 1.0, 0.0, ctypes.byref(x), ctypes.byref(p), None, 0)
    return st, p


def test_fast_accumulation_is_asked_for_fp8_and_ignored_elsewhere(lib):
    st, p = described(lib, Math.MATH_FAST_ACCUM)
    assert st in (0, errors.ERR_NO_DEVICE) and p.fast_accum == 1
    st, p = described(lib, Math.MATH_IEEE)
    assert p.fast_accum == 0
    st, p = described(lib, Math.MATH_FAST_ACCUM, ab=BF16)  # 16-bit inputs: nothing to allow
    assert p.fast_accum == 0
    st, _ = described(lib, 3)
    assert st == errors.ERR_INVALID_ARGUMENT and "unknown math code 3" in lib.last_error()


def test_the_python_spelling_and_the_problem_key():
    assert _call.math_code("fast_accum") == Math.MATH_FAST_ACCUM
    with pytest.raises(pcr.InvalidArgumentError, match="'fast_accum'"):
        _call.math_code("fast")
    p = _lib.Problem(m=8, n=16, k=32, batch=1, dtype_a=9, dtype_b=9, dtype_d=2, layout_b=1, cc=90)
    plain = _cache.problem_key(p)
    p.fast_accum = 1
    fast = _cache.problem_key(p)
    assert "fast_accum" not in plain and fast == plain + " fast_accum=1"  # old keys stay
    assert _cache.identity_of(fast) == _cache._identity_values(p)


def fa_kernels():
    return [k for k in pcr.kernels() if k.schedule in ("coopfa", "pingpongfa")]


def test_only_a_call_that_allows_it_takes_a_fast_accumulation_kernel(lib):
    """Each FA kernel refuses a problem that did not ask for fast accumulation, saying so;
    with it asked, the library ranks the FA kernels only (where one takes the problem)."""
    if not fa_kernels():
        pytest.skip("no fast-accumulation kernel in this build")
    _, p = described(lib, Math.MATH_IEEE)
    p.device, p.cc, p.sm_count = -1, 90, 132
    judged = _call.judge(lib, p)
    for k in fa_kernels():
        status, why = judged.verdicts[k.index]
        if k.dtype_d == "bfloat16" and k.epilogue == "linear":
            assert status and "fast accumulation" in why, (k.name, why)
    precise = _select.ranking(lib, p)
    assert precise and all(k.schedule not in ("coopfa", "pingpongfa") for k, _ in precise)
    p.fast_accum = 1
    fast = _select.ranking(lib, p)
    assert fast and all(k.schedule in ("coopfa", "pingpongfa") for k, _ in fast)


def test_the_catalogue_holds_one_of_each_schedule_for_e4m3_to_bf16_in_the_default_build():
    import catalog

    fa = [k for k in catalog.catalogue() if k.schedule in ("coopfa", "pingpongfa")]
    default = sorted(k.name for k in fa if k.default)
    assert default == sorted(
        f"sm90_e4m3_e4m3_f32_bf16_tn_{t}_{s}{e}_a16"
        for t, s in (("128x256x128_c2x1", "coopfa"), ("64x128x128_c1x1", "pingpongfa"))
        for e in ("", "_scaled")
    )
    assert all(k.family == "sm90" and k.a in ("e4m3", "e5m2") for k in fa)


def test_the_library_says_which_kernels_fast_accumulation_leaves_out(lib):
    """With fast accumulation allowed, the kernels that take the problem without it are left
    out, the library saying so (pcr_select_passed_over)."""
    if not fa_kernels():
        pytest.skip("no fast-accumulation kernel in this build")
    _, p = described(lib, Math.MATH_FAST_ACCUM)
    p.device, p.cc, p.sm_count = -1, 90, 132
    judged = _call.judge(lib, p)
    fast = {k.index for k, _ in _select.ranking(lib, p, judged.array)}
    passed = _select.passed_over(lib, p, judged.array)
    precise = [
        k
        for k in pcr.kernels()
        if not judged.verdicts[k.index][0]
        and k.family in (90, 80, 75)
        and k.schedule not in ("coopfa", "pingpongfa")
    ]
    assert fast and all(passed[i] == (0, "") for i in fast)
    for k in precise:
        assert passed[k.index] == (
            errors.ERR_UNSUPPORTED,
            "fp8 fast accumulation allowed: a fast-accumulating kernel runs it",
        )
