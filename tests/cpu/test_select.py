"""Kernel choice: table rules, the analytic model, family order, and the C-side memo."""
import ctypes
import types

import numpy as np
import pytest

import pycutlass_rt as pcr
from pycutlass_rt import _lib, _select, errors
from pycutlass_rt._kernels import KernelInfo


def kern(i, name, family, tile, schedule, layout="tn", dtype="bfloat16", out="bfloat16", align=8):
    return KernelInfo(i, name, family, dtype, dtype, "float32", out, layout, tile, (1, 1, 1),
                      (0, 0, 0), 0, schedule, "linear", "none", (align, align, align))


FAKE = [
    kern(0, "sm90_bf16_bf16_f32_bf16_tn_128x256x64_c2x1_coop_a8", 90, (128, 256, 64), "cooperative"),
    kern(1, "sm90_bf16_bf16_f32_bf16_tn_64x128x64_c1x1_pingpong_a8", 90, (64, 128, 64), "pingpong"),
    kern(2, "sm80_bf16_bf16_f32_bf16_tn_128x128x32_w2x2_s4_a8", 80, (128, 128, 32), "multistage"),
    kern(3, "sm80_bf16_bf16_f32_bf16_tn_64x64x32_w2x2_s2_a1", 80, (64, 64, 32), "pipelined", align=1),
]


def prob(m, n, k, sms=132):
    return types.SimpleNamespace(m=m, n=n, k=k, sm_count=sms)


def test_families_for():
    assert _select.families_for(90) == [90, 80, 75] and _select.families_for(100) == [100, 80, 75]
    assert _select.families_for(86) == [80, 75] and _select.families_for(120) == [80, 75]
    assert _select.families_for(75) == [75] and _select.families_for(70) == []


def test_table_is_shipped_and_well_formed():
    t = _select.table()
    assert t["format"] == 1 and set(t["families"]) >= {"sm80", "sm90"}
    for rules in t["families"].values():
        assert not {"max_m", "max_n", "max_k"} & rules[-1].keys(), "the last rule must match every shape"


def test_large_problems_take_the_big_cooperative_tile():
    c = _select.rank(prob(8192, 8192, 8192), FAKE, [90, 80])
    assert c.ranked[0][0].name == FAKE[0].name and "table rule" in c.ranked[0][1]
    assert [k.family for k, _ in c.ranked] == [90, 90, 80, 80]  # sm90a first on Hopper


def test_small_m_prefers_64_row_pingpong():
    c = _select.rank(prob(16, 4096, 4096), FAKE, [90, 80])
    assert c.ranked[0][0].name == FAKE[1].name


def test_model_orders_what_the_table_does_not_name():
    only_80 = [FAKE[2], FAKE[3]]
    c = _select.rank(prob(4096, 4096, 4096), only_80, [80])
    assert c.ranked[0][0].name == FAKE[2].name  # multistage beats the 2-stage fallback
    assert _select.model_time(FAKE[3], 4096, 4096, 4096, 132) > _select.model_time(FAKE[2], 4096, 4096, 4096, 132)


def test_model_counts_waves():
    # 132 tiles of 128x256 fit one wave; 133 need two
    t1 = _select.model_time(FAKE[0], 128 * 132, 256, 64, 132)
    t2 = _select.model_time(FAKE[0], 128 * 133, 256, 64, 132)
    assert t2 == pytest.approx(2 * t1)


def test_choose_checks_through_the_library(lib):
    """Candidates come from the real build; the C side rejects misaligned ones."""
    ks = pcr.kernels()
    k0 = ks[0]
    code = {"float16": 1, "bfloat16": 2, "float32": 3}
    p = _lib.Problem(m=127, n=1000, k=4097, dtype_a=code[k0.dtype_a], dtype_b=code[k0.dtype_b],
                     dtype_d=code[k0.dtype_d], layout_a="tn".index(k0.layout[0]),
                     layout_b="tn".index(k0.layout[1]), align_a=2, align_b=16, align_c=16,
                     align_d=16, device=-1, cc=90, sm_count=132)
    choice = _select.choose(lib, p, ks)
    for k, why in choice.ranked:
        assert k.align[0] == 1, f"{k.name} accepted a 2-byte-aligned A"
    misaligned = [why for k, why in choice.rejected if k.align[0] == 8 and k.family in (90, 80)
                  and "dtypes" not in why and "layout" not in why]
    assert all("alignment" in w for w in misaligned)
    assert all("do not run on compute 9.0" in why for k, why in choice.rejected if k.family == 100)


def test_select_memo_round_trip(lib):
    p = _lib.Problem(m=1, n=2, k=3, dtype_a=2, dtype_b=2, dtype_d=2, cc=90)
    ids = (ctypes.c_int32 * 1)(0)
    assert lib.pcr_select_put(ctypes.byref(p), ids, 1) == 0
    bad = (ctypes.c_int32 * 1)(10 ** 6)
    assert lib.pcr_select_put(ctypes.byref(p), bad, 1) == errors.ERR_KERNEL_NOT_FOUND
    assert lib.pcr_select_clear() == 0


def test_no_kernel_for_this_arch_names_the_built_archs(lib):
    p = _lib.Problem(m=64, n=64, k=64, dtype_a=2, dtype_b=2, dtype_d=2, cc=70, sm_count=80)
    choice = _select.choose(lib, p, pcr.kernels())
    assert choice.ranked == []
    e = pcr._no_candidates(lib, p, choice)
    assert isinstance(e, pcr.NoKernelForArchError) and "compute 7.0" in str(e)
    assert all(f"sm{k.family}" in str(e) for k in pcr.kernels())
