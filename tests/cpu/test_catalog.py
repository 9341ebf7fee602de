"""The declarative catalogue, the build filter and the arch plan (no compiler needed)."""

import dataclasses
import doctest
import importlib
import os
import pkgutil
import re
import subprocess
import sys

import catalog
import pytest
from catalog import archs, sources

TYPES = "f16|bf16|tf32|f32|f64|s8|s32|e4m3|e5m2"
#: the GEMM kernels (the convolutions' have tests of their own below)
GEMMS = [k for k in catalog.catalogue() if not k.conv]
NAME = re.compile(
    r"^(?P<fam>sm70|sm75|sm80|sm89|sm90|sm100)_(?:(?P<op>fprop|dgrad|wgrad)_)?"
    rf"(?P<a>{TYPES})_(?P<b>{TYPES})_(?P<acc>f32|f64|s32)_(?P<d>{TYPES})_"
    r"(?P<layout>[tn]{2}|nhwc)_(?:(?P<tile>\d+x\d+x\d+)_(?:c(?P<cl>\d+x\d+)_(?P<sched>coopfa|pingpongfa|coop|pingpong|1sm|2sm|ws)|"
    r"w(?P<warps>\d+x\d+)_s(?P<stages>\d+))|f(?P<filter>\d+x\d+s\d+|any)(?:g(?P<group>\d+))?"
    r"_(?P<direct>depthwise|direct))"
    r"(?:_blk(?P<block>[gb]{2}))?"
    r"(?:_(?P<epi>biasact|scaled|aux))?(?:_(?P<split>streamk|splitk))?"
    r"(?P<swap>_swapab)?(?P<grouped>_grouped)?_a(?P<align>\d+)$"
)


def test_names_unique_and_encode_every_parameter():
    kernels = catalog.catalogue()
    assert len({k.name for k in kernels}) == len(kernels)
    for k in kernels:
        m = NAME.match(k.name)
        assert m, k.name
        assert (m["fam"], m["a"], m["b"], m["d"], m["layout"]) == (
            k.family,
            k.a,
            k.b,
            k.d,
            k.layout,
        )
        assert m["acc"] == k.acc == catalog.ACCUMULATORS.get(k.a, "f32")
        if k.direct:  # the filter and stride it is built for, "any" for the generic one
            assert m["filter"] == ("{}x{}s{}".format(*k.tile) if k.tile[0] else "any")
            assert k.tile == (0, 0, 0) or min(k.tile) > 0
            assert m["direct"] == k.schedule and int(m["group"] or 0) == k.group
            assert (k.group > 0) == (k.schedule == "direct")
            continue
        assert m["tile"] == "x".join(map(str, k.tile))
        assert int(m["align"]) == k.align
        assert (m["split"] or "none") == k.split
        assert bool(m["swap"]) == k.swap
        assert (m["epi"] or "linear") == k.epilogue
        assert bool(m["grouped"]) == k.grouped
        assert (m["block"] or "") == k.block
        assert (m["op"] or "gemm") == k.op and (k.layout == "nhwc") == k.conv
        if k.family in ("sm90", "sm100"):
            assert m["cl"] == "{}x{}".format(*k.cluster[:2]) and m["sched"] == k.schedule
        else:
            assert int(m["stages"]) == k.stages and m["warps"] == "{}x{}".format(*k.warps[:2])


def test_every_dtype_and_layout_combination_in_default_build():
    core = catalog.select_kernels(GEMMS, "default")
    half = [k for k in core if k.a in ("f16", "bf16")]
    for fam in ("sm80", "sm90"):
        combos = {(k.a, k.d, k.layout) for k in half if k.family == fam and k.align == 8}
        assert combos == {(a, d, lay) for a, d in catalog.GEMM_TYPES for lay in catalog.AB_LAYOUTS}
    fallback = {(k.a, k.d, k.layout) for k in half if k.align == 1}
    assert len(fallback) == len(catalog.GEMM_TYPES) * len(catalog.AB_LAYOUTS)
    # fp32 (IEEE and TF32) and fp64 in every layout at any alignment (sm80 family SASS runs
    # on 8.x and 9.x); int8 and fp8 K-major, on sm90a and their sm80/sm89 families
    anyalign = {(k.a, k.layout) for k in core if k.align == 1 and k.family == "sm80"}
    assert {(a, lay) for a in ("tf32", "f32", "f64") for lay in catalog.AB_LAYOUTS} <= anyalign
    quant = {(k.family, k.a, k.d) for k in core if k.a in ("s8", "e4m3")}
    assert {
        ("sm80", "s8", "s32"),
        ("sm90", "s8", "s32"),
        ("sm90", "s8", "bf16"),
        ("sm89", "e4m3", "bf16"),
        ("sm90", "e4m3", "bf16"),
    } <= quant


def test_sm75_is_turing_fp16_int8_simt_and_testable_on_hopper():
    sm75 = [k for k in catalog.catalogue() if k.family == "sm75"]
    assert {k.a for k in sm75} == {"f16", "s8", "f32", "f64"}
    assert {k.schedule for k in sm75} == {"pipelined"}
    assert {k.align for k in sm75} == {16, 8, 1}
    # fp32 and fp64 on CUDA cores (1x1x1 SIMT), any alignment, every layout
    simt = [k for k in sm75 if k.a in ("f32", "f64")]
    assert {catalog.INSTRUCTIONS["sm75", k.a] for k in simt} == {(1, 1, 1)}
    assert {k.align for k in simt} == {1} and {k.layout for k in simt} == set(catalog.AB_LAYOUTS)
    assert {(k.d, k.layout) for k in sm75 if k.a == "s8"} == {("s32", "tn")}
    per_family, _ = catalog.plan(["75", "90"], None, (13, 0))
    assert per_family["sm75"] == ["75", "90"] and per_family["sm80"] == ["90"]


def test_sm70_builds_its_sm90_test_sass_from_a_front_end_cuda13_has():
    """CUDA 13 skips sm_70 itself, but Volta's template still gets sm_90 SASS (from
    compute_75) so the H200 can run it in tests; a CUDA 12 build makes both."""
    per_family, notes = catalog.plan(["70", "90"], {"sm_75", "sm_80", "sm_90"}, (13, 0))
    assert per_family["sm70"] == ["90"] and "dropped sm_70" in notes[0]
    fam = catalog.FAMILIES["sm70"]
    assert catalog.gencode_flags(fam, ["90"]) == ["-gencode=arch=compute_75,code=[sm_90]"]
    assert catalog.gencode_flags(fam, ["70", "90"]) == [
        "-gencode=arch=compute_70,code=[sm_70]",
        "-gencode=arch=compute_75,code=[sm_90]",
    ]
    assert catalog.plan(["70"], {"sm_70"}, (12, 8))[0] == {"sm70": ["70"]}


def test_sm100_one_and_two_sm():
    sm100 = [k for k in catalog.catalogue() if k.family == "sm100"]
    assert {k.schedule for k in sm100} == {"1sm", "2sm"}
    # a 2-SM MMA spans the CTA pair: even cluster M, tile M of 256
    assert all(k.cluster[0] % 2 == 0 and k.tile[0] == 256 for k in sm100 if k.schedule == "2sm")
    assert all(k.tier == "extended" for k in sm100)  # not in the default (2-core) build


def test_the_linear_tier_is_default_for_a_linear_layers_problem_only():
    """ "linear" kernels (chosen by measured coverage of the shape corpus) join the default
    build in the tn layout with the layer's output dtype; elsewhere they stay extended."""
    linear = [k for k in catalog.catalogue() if k.tier == "linear"]
    assert linear and {k.default for k in linear} == {True, False}
    for k in linear:
        layer = k.layout == "tn" and k.d == catalog.LINEAR_OUTPUT.get(k.a, k.a)
        assert k.default == layer, k.name
    held = {k.name for k in linear if k.default}
    assert "sm90_bf16_bf16_f32_bf16_tn_64x128x64_c1x1_pingpong_a8" in held
    assert "sm90_bf16_bf16_f32_f32_tn_64x128x64_c1x1_pingpong_a8" not in held
    assert "sm90_bf16_bf16_f32_bf16_tt_64x128x64_c1x1_pingpong_a8" not in held
    assert "sm90_e4m3_e4m3_f32_bf16_tn_64x128x128_c1x1_pingpong_scaled_a16" in held
    assert not any(k.a == "e5m2" for k in linear if k.default)


def test_stream_k_where_cutlass_supports_it():
    """Stream-K needs CUTLASS's cooperative schedule on sm90 (ping-pong has none)."""
    sk = [k for k in catalog.catalogue() if k.split == "streamk"]
    assert {k.family for k in sk} == {"sm90", "sm80"}
    assert all(k.schedule == "coop" for k in sk if k.family == "sm90")
    src = catalog.kernel_source(sk[0])
    assert "StreamK" in src


def test_swap_ab_kernels_hand_cutlass_the_transposed_problem():
    swapped = [k for k in catalog.catalogue() if k.swap]
    assert swapped and all(k.family == "sm90" for k in swapped)
    # stream-K on 128 weight rows, or ping-pong on 64 without a split; block-scaled ones
    # take whole 128-column blocks of the weights' scales, unsplit
    assert all(
        (k.schedule, k.split, k.tile[1]) in {("coop", "streamk", 128), ("pingpong", "none", 64)}
        for k in swapped
        if not k.block
    )
    assert all(k.tile[1] == 128 and k.split == "none" for k in swapped if k.block)
    assert {k.tile[0] for k in swapped} == {16, 32, 64}  # problem terms: M is the narrow side
    pp = next(k for k in swapped if k.tile == (16, 64, 128) and k.a == "bf16")
    assert "cute::Shape<cute::_64, cute::_16, cute::_128>" in catalog.kernel_type(pp)
    k = next(k for k in swapped if k.tile == (16, 128, 128) and k.layout == "tn")
    t = catalog.kernel_type(k)
    # CUTLASS sees M' = N on the 128-row side: tile 128x16, A' = B^T and B' = A^T, both
    # still K-major for a tn problem, and C/D column-major (the SwapAB flag)
    assert "cute::Shape<cute::_128, cute::_16, cute::_128>" in t and t.endswith(
        "true, PCR_EPI_LINEAR, float, false>"
    )
    assert "RowMajor, cutlass::layout::ColumnMajor" in t
    info = catalog.kernel_info(k)
    assert (
        info.endswith(", 1, 0, 0, PCR_OP_GEMM, PCR_SCALE_NONE, PCR_SCALE_NONE, 0, 0}")
        and "PCR_ROW_MAJOR, PCR_COL_MAJOR, 16, 128, 128" in info
    )  # swap; not grouped, no tensor scales; a GEMM; no block scales, no output scale, no group
    plain = catalog.Kernel("sm90", "bf16", "bf16", "bf16", "tt", (128, 128, 64), "coop")
    assert catalog.kernel_type(plain).endswith(
        "false, PCR_EPI_LINEAR, float, false>"
    ) and catalog.kernel_info(plain).endswith(
        ", 0, 0, 0, PCR_OP_GEMM, PCR_SCALE_NONE, PCR_SCALE_NONE, 0, 0}"
    )
    # a block-scaled swap-AB kernel: CUTLASS's M (the weights' N) takes the 128-blocks
    blk = next(k for k in swapped if k.block == "gb" and k.tile == (16, 128, 128))
    assert catalog.kernel_type(blk).endswith(", false, 128, 1>")
    assert catalog.kernel_info(blk).endswith(
        "PCR_OP_GEMM, PCR_SCALE_GROUPS, PCR_SCALE_BLOCKS, 1, 0}"
    )


def test_sm90_variety():
    sm90 = [k for k in GEMMS if k.family == "sm90"]
    assert {k.schedule for k in sm90} == {"coop", "pingpong", "coopfa", "pingpongfa"}
    assert all(k.a in ("e4m3", "e5m2") for k in sm90 if k.schedule.endswith("fa"))
    assert len({k.tile for k in sm90}) >= 3 and len({k.cluster for k in sm90}) >= 2
    assert len({k.tile for k in catalog.catalogue() if k.family == "sm80"}) >= 3


@pytest.mark.parametrize(
    "spec,check",
    [
        ("all", lambda ks, all_: len(ks) == len(all_)),
        (
            "default",
            lambda ks, all_: ks and ks == [k for k in all_ if k.default] and len(ks) < len(all_),
        ),
        ("sm90_bf16_*", lambda ks, all_: ks and all(k.name.startswith("sm90_bf16_") for k in ks)),
        (
            "sm90_*;!*_pingpong_*",
            lambda ks, all_: (
                ks and all("_pingpong_" not in k.name and k.family == "sm90" for k in ks)
            ),
        ),
        ("!sm80_*", lambda ks, all_: ks and all(k.family != "sm80" for k in ks)),
        ("nothing_matches", lambda ks, all_: ks == []),
    ],
)
def test_filter(spec, check):
    all_ = catalog.catalogue()
    assert check(catalog.select_kernels(all_, spec), all_)


def test_arch_plan():
    assert catalog.parse_archs("default") == ["80", "86", "89", "90", "90a"]
    assert "75" in catalog.parse_archs("all") and "100a" in catalog.parse_archs("all")
    assert catalog.parse_archs("sm_80, 90a") == ["80", "90a"]
    with pytest.raises(SystemExit, match="unknown arch"):
        catalog.parse_archs("80;banana")
    per_family, notes = catalog.plan(["80", "90a"], {"sm_80", "sm_90"}, (13, 0))
    assert per_family == {"sm80": ["80"], "sm90": ["90a"]} and notes == []
    # a toolkit without sm_90 skips the sm90a family and says so
    per_family, notes = catalog.plan(["80", "90a"], {"sm_80"}, (13, 0))
    assert per_family == {"sm80": ["80"]} and "sm_90a" in notes[0]
    # an old toolkit cannot build sm90a
    per_family, notes = catalog.plan(["90a"], None, (12, 0))
    assert per_family == {} and "CUDA >= 12.3" in notes[0]
    per_family, notes = catalog.plan(["100a"], None, (12, 6))
    assert per_family == {} and "CUDA >= 12.8" in notes[0]
    # CUDA 13 dropped sm_70: the Volta family is skipped, saying why and what to do
    per_family, notes = catalog.plan(["70", "80"], None, (13, 0))
    assert per_family == {"sm80": ["80"]}
    assert "CUDA 13.0 dropped sm_70" in notes[0] and "CUDA 12.x toolkit" in notes[0]
    assert catalog.plan(["70"], {"sm_70"}, (12, 4)) == ({"sm70": ["70"]}, [])
    assert {k.a for k in catalog.catalogue() if k.family == "sm70"} == {"f16", "f32", "f64"}


def test_gencode_one_front_end_pass_plus_ptx():
    flags = catalog.gencode_flags(catalog.FAMILIES["sm80"], ["80", "86", "89", "90"])
    assert flags == ["-gencode=arch=compute_80,code=[sm_80,sm_86,sm_89,sm_90,compute_80]"]
    assert catalog.gencode_flags(catalog.FAMILIES["sm90"], ["90a"]) == [
        "-gencode=arch=compute_90a,code=[sm_90a]"
    ]
    assert catalog.gencode_flags(catalog.FAMILIES["sm100"], ["100a"]) == [
        "-gencode=arch=compute_100a,code=[sm_100a]"
    ]


def test_emit(tmp_path):
    ks = catalog.select_kernels(
        catalog.catalogue(), "sm90_bf16_bf16_f32_bf16_tn_*coop*,sm80_f16_f16_f32_f32_nt_*_a1"
    )
    per_family = {"sm80": ["80", "90"], "sm90": ["90a"]}
    catalog.emit(str(tmp_path), ks, per_family, {"x": 1})
    files = sorted(p.name for p in (tmp_path / "kernels").iterdir())
    assert files == sorted(k.name + ".cu" for k in ks)
    for k in ks:
        src = (tmp_path / "kernels" / (k.name + ".cu")).read_text()
        assert src.startswith("// Generated by native/catalog.py") and f'"{k.name}"' in src
    reg = (tmp_path / "registry.cpp").read_text()
    assert all(f"&pcr_kernel_{k.ident}" in reg for k in ks)
    cm = (tmp_path / "kernels.cmake").read_text()
    assert "code=[sm_80,sm_90,compute_80]" in cm and "code=[sm_90a]" in cm


def test_emit_units(tmp_path):
    # several kernels to a translation unit: each kernel in exactly one unit, a unit's
    # kernels sharing their gencode flags; a lone kernel compiles from its own source
    ks = catalog.select_kernels(
        catalog.catalogue(),
        # one grouped kernel left: the only one of its header, so a unit of its own
        "sm90_bf16_bf16_f32_bf16_tn_*,!*pingpong_grouped*,!*biasact_grouped*,sm80_f16_*_nt_*",
    )
    per_family = {"sm80": ["80", "90"], "sm90": ["90a"]}
    catalog.emit(str(tmp_path), ks, per_family, {"x": 1}, size=3, jobs=2)
    by_name = {k.name: k for k in ks}
    cm = (tmp_path / "kernels.cmake").read_text()
    assert "set(PCR_UNIT_JOBS 2)" in cm
    sources = re.findall(r'list\(APPEND PCR_KERNEL_SOURCES "([^"]+)"\)', cm)
    compiled = []
    for src in sources:
        flags = re.search(re.escape(src) + r'" PROPERTIES COMPILE_OPTIONS "([^"]+)"', cm)[1]
        text = open(src).read()
        if "/units/" in src:
            members = re.findall(r'#include "\.\./kernels/(\w+)\.cu"', text)
            assert 2 <= len(members) <= 3
        else:
            members = [os.path.basename(src)[: -len(".cu")]]
        (family,) = {by_name[m].family for m in members}
        assert flags.split(";") == catalog.gencode_flags(
            catalog.FAMILIES[family], per_family[family]
        )
        compiled += members
    assert sorted(compiled) == sorted(k.name for k in ks)
    assert any("/units/" in s for s in sources) and any("/kernels/" in s for s in sources)
    # the estimate counts a unit's followers at a share of their own cost
    alone = catalog.compile_seconds(ks, per_family)
    assert catalog.compile_seconds(ks, per_family, 3) < 0.6 * alone


def test_unit_size_knob_is_checked():
    with pytest.raises(SystemExit, match="PYCUTLASS_RT_UNIT_SIZE=0"):
        catalog.unit_size("0", 100, 2)


def test_pip_install_with_no_knobs_builds_for_this_machines_gpus(monkeypatch):
    # pip passes pyproject's defaults as CMake defines: unset archs must mean what CMake's
    # unset means (this machine's GPUs, else the portable set), not the portable set always
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    root = os.path.dirname(os.path.dirname(os.path.dirname(catalog.__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        defines = tomllib.load(f)["tool"]["scikit-build"]["cmake"]["define"]
    tokens = defines["PYCUTLASS_RT_ARCHS"]["default"]
    monkeypatch.setattr(archs, "native_tokens", lambda: ["90", "90a"])
    assert catalog.parse_archs(tokens) == ["90", "90a"]

    def no_gpu():
        raise SystemExit("no GPU")

    monkeypatch.setattr(archs, "native_tokens", no_gpu)
    assert catalog.parse_archs(tokens) == catalog.parse_archs("default")
    assert catalog.unit_size(defines["PYCUTLASS_RT_UNIT_SIZE"]["default"], 234, 2) == 8


def test_generator_doctests():
    for module in pkgutil.iter_modules(catalog.__path__):
        assert doctest.testmod(importlib.import_module(f"catalog.{module.name}")).failed == 0


def test_list_cli_all_archs():
    # the command: every kernel of the full catalogue, one per line, no compiler
    env = {k: v for k, v in os.environ.items() if k != "PYCUTLASS_RT_KERNELS"}
    native = os.path.dirname(os.path.dirname(catalog.__file__))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [native, env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-m", "catalog", "--list", "--archs", "all"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert out.split() == [k.name for k in catalog.catalogue()]
    assert {k.split("_")[0] for k in out.split()} == {
        "sm70",
        "sm75",
        "sm80",
        "sm89",
        "sm90",
        "sm100",
    }


def test_fused_epilogue_kernels_twin_plain_ones():
    """Every bias/activation kernel has a plain twin of the same name without the suffix
    (what selection tables name), in the dtypes and layouts the catalogue fuses."""
    kernels = GEMMS
    names = {k.name for k in kernels}
    # grouped block-scaled kernels have no plain twin: no table ranks grouped kernels
    assert all(
        k.name.replace("_biasact", "") in names
        for k in kernels
        if k.epilogue == "biasact" and not (k.grouped and k.block)
    )
    fused = [k for k in kernels if k.epilogue == "biasact" and not k.block]
    # MORE_TYPES' configurations that fuse: fp32, fp64 and int8 -> int32 (computed in int32);
    # block-scaled fp8 (test_block_scaled_kernels)
    fp32, fp64, s8 = {("tf32", "f32"), ("f32", "f32")}, {("f64", "f64")}, {("s8", "s32")}
    assert {(k.a, k.d) for k in fused} == set(catalog.FUSED_TYPES) | fp32 | fp64 | s8
    assert {k.layout for k in fused if k.family == "sm90" and (k.a, k.d) not in fp32 | s8} == set(
        catalog.FUSED_TMA_LAYOUTS
    )
    assert {k.layout for k in fused if (k.a, k.d) in s8} == {"tn"}  # int8's only layout
    assert {k.layout for k in fused if k.family == "sm80"} == set(catalog.AB_LAYOUTS)
    # the default build can run every same-dtype fused pair and layout on sm80-family GPUs,
    # any alignment; fp32 outputs of 16-bit inputs stay out of it (FUSED_TYPES' tier cap)
    # (float64's too, since its fused kernels ran on the H200)
    core = catalog.select_kernels(kernels, "default")
    assert {(k.a, k.layout) for k in core if k.epilogue == "biasact" and k.align == 1} == {
        (a, lay)
        for (a, d), cap in list(catalog.FUSED_TYPES.items()) + [(("f64", "f64"), None)]
        if cap is None
        for lay in catalog.AB_LAYOUTS
    }
    assert not any(k.a in ("f16", "bf16") and k.d == "f32" for k in core if k.fused)
    # an fp32 GEMM with a ReLU (CUTLASS's Python interface's own example) runs by default
    assert {(k.a, k.layout) for k in core if k.fused and k.a in ("tf32", "f32")} >= {
        (a, lay) for a in ("tf32", "f32") for lay in catalog.AB_LAYOUTS
    }
    src = catalog.kernel_source(fused[0])
    assert "PCR_EPI_BIASACT, float, false>" in src


def test_tensor_scales_flag_marks_the_plain_quantized_tma_kernels():
    """The one statement of which kernels read per-tensor scale tensors in their linear
    epilogue: the template argument and the registry's descriptor both come from it."""
    kernels = GEMMS
    flagged = [k for k in kernels if k.tensor_scales]
    # int8's linear kernels write exact int32; its float outputs come from _scaled_ kernels
    assert {k.a for k in flagged} == {"e4m3", "e5m2"}
    assert {k.family for k in flagged} == {"sm90", "sm100"}
    assert all(k.epilogue == "linear" and k.d != "s32" and not k.grouped for k in flagged)
    assert len(flagged) == sum(
        1
        for k in kernels
        if k.a in catalog.FP8
        and k.family in catalog.TMA_FAMILIES
        and k.epilogue == "linear"
        and not k.block
    )
    int8_plain = [k for k in kernels if k.a == "s8" and k.d == "s32" and k.family == "sm90"]
    assert int8_plain and not any(k.tensor_scales for k in int8_plain)
    for k in (flagged[0], int8_plain[0]):
        flag = "true" if k.tensor_scales else "false"
        src = catalog.kernel_source(k)
        assert src.count(f", {flag}>;") == 1  # the template's last argument
        assert catalog.kernel_info(k).endswith(
            f", {int(k.tensor_scales)}, PCR_OP_GEMM, PCR_SCALE_NONE, PCR_SCALE_NONE, "
            f"{int(k.out_scale)}, 0}}"
        )


def test_grouped_kernels():
    """Grouped kernels: both families, the grouped templates, in the default build; 16-bit
    ones linear or with a bias/activation (sm90a), fp8 ones dequantizing or block-scaled
    (sm90a, tn), none with an output scale."""
    kernels = GEMMS
    grouped = [k for k in kernels if k.grouped]
    assert {k.family for k in grouped} == {"sm80", "sm90"}
    types = set(catalog.GROUPED_TYPES) | set(catalog.GROUPED_QUANTIZED_TYPES)
    assert {(k.a, k.d) for k in grouped} == types
    assert all(k.split == "none" and not k.swap for k in grouped)
    for k in grouped:
        quantized = (k.a, k.d) in catalog.GROUPED_QUANTIZED_TYPES
        epilogues = {"scaled", "biasact"} if quantized else {"linear", "biasact"}
        assert k.epilogue in epilogues and (k.family == "sm90" or k.epilogue == "linear"), k.name
        assert not quantized or (k.family == "sm90" and k.layout == "tn"), k.name
        assert not quantized or (k.epilogue == "biasact") == bool(k.block), k.name
        t = catalog.kernel_type(k)
        assert t.startswith(
            "pcr::tma::GroupedGemm<" if k.family == "sm90" else "pcr::mma::GroupedGemm<"
        ), t
        # grouped, no tensor scales, a GEMM, block scales where named, no output scale
        grids = (
            "PCR_SCALE_GROUPS, PCR_SCALE_BLOCKS" if k.block else "PCR_SCALE_NONE, PCR_SCALE_NONE"
        )
        assert catalog.kernel_info(k).endswith(f", 1, 0, PCR_OP_GEMM, {grids}, 0, 0}}"), k.name
    core = catalog.select_kernels(kernels, "default")
    assert {(k.family, k.layout) for k in core if k.grouped} >= {("sm90", "tn"), ("sm80", "nn")}
    assert {(k.a, k.epilogue, k.block) for k in core if k.grouped and k.family == "sm90"} == {
        ("f16", "linear", ""),
        ("f16", "biasact", ""),
        ("bf16", "linear", ""),
        ("bf16", "biasact", ""),
        ("e4m3", "scaled", ""),
        ("e4m3", "biasact", "gb"),
    }


def test_split_k_kernels_wrap_their_unsplit_fp32_twin():
    """A split-K kernel's source instantiates the same kernel with fp32 output and no split,
    inside pcr::split::SplitK with its tile and K-majorness (native/kernels/split_k.cuh)."""
    kernels = {k.name: k for k in GEMMS}
    for name, k in kernels.items():
        if k.split != "splitk":
            continue
        inner = catalog.kernel_type(dataclasses.replace(k, d="f32"), unsplit=True)
        src = catalog.kernel_source(k)
        tm, tn, tk = k.tile
        k_major = [sources._cpp_bool(k.layout[0] == "t"), sources._cpp_bool(k.layout[1] == "n")]
        assert (
            f"pcr::split::SplitK<{inner}, {catalog.DTYPES[k.d][0]}, {tm}, {tn}, {tk}, "
            f"{k_major[0]}, {k_major[1]}, {k.align}>" in src
        ), name
        assert '#include "split_k' in src and "PCR_SPLIT_SPLITK" in src
        assert "pcr::split::Local<" in inner  # this translation unit's own instantiation
    assert {k.family for k in kernels.values() if k.split == "splitk"} == {"sm80", "sm90"}


def test_sass_of_an_older_gpu_of_the_same_major_is_not_compiled_again():
    """sm_80 SASS runs on 8.6 and 8.9: the default archs compile the sm80 family for sm_80
    and sm_90 only, and say so; asked alone, 86 is still built."""
    per_family, notes = catalog.plan(catalog.parse_archs("default"), None, (13, 0))
    assert per_family["sm80"] == ["80", "90"] and per_family["sm89"] == ["89", "90"]
    assert any("sm_86, sm_89" in n and "not compiled again" in n for n in notes)
    assert catalog.plan(["86"], None, (13, 0))[0] == {"sm80": ["86"]}
    assert catalog.plan(["90", "90a"], None, (13, 0))[0]["sm90"] == ["90a"]


def test_unset_archs_build_for_this_machines_gpus_else_the_portable_set(monkeypatch, capsys):
    monkeypatch.setattr(archs, "native_tokens", lambda: ["90", "90a"])
    assert catalog.parse_archs("") == ["90", "90a"] and catalog.parse_archs("auto") == ["90", "90a"]
    assert "this machine's GPUs" in capsys.readouterr().err
    assert catalog.parse_archs("default") == ["80", "86", "89", "90", "90a"]  # asked for: kept

    def no_gpu():
        raise SystemExit("PYCUTLASS_RT_ARCHS=native: nvidia-smi lists no GPU")

    monkeypatch.setattr(archs, "native_tokens", no_gpu)
    assert catalog.parse_archs("") == catalog.parse_archs("default")


def test_convolutions_in_the_default_build():
    """conv2d, its dgrad and its wgrad run from a default build on the sm80 family (channel
    counts that are not multiples of 8 included) and on sm90a, for float16 and bfloat16;
    bias/activation fuse into fprop only."""
    kernels = [k for k in catalog.catalogue() if k.conv]
    default = {(k.family, k.op, k.a, k.align < 8) for k in kernels if k.default}
    for fam, op, a, any_align in [
        (f, o, a, any_align)
        for f in ("sm80", "sm90")
        for o in catalog.CONV_OPS
        for a in ("f16", "bf16")
        for any_align in ((False, True) if f == "sm80" else (False,))
    ]:
        assert (fam, op, a, any_align) in default, (fam, op, a, any_align)
    assert all(k.op == "fprop" for k in kernels if k.epilogue == "biasact")
    assert all(not k.default for k in kernels if k.a == "tf32")
    # generated sources name the conv templates, with the op's constant
    k = next(k for k in kernels if k.family == "sm90" and k.op == "wgrad")
    src = catalog.kernel_source(k)
    assert '#include "conv_tma.cuh"' in src and "pcr::conv::Conv3x<PCR_OP_WGRAD" in src
    assert src.rstrip().endswith("pcr::ops_of<Op_" + k.ident + ", false>()};")


def test_depthwise_kernels():
    """Depthwise: direct kernels of the sm80 family for float16 and bfloat16, fprop's one
    per filter and stride and a generic one, each with the fused epilogue (which serves
    linear calls), and dgrad and wgrad (per filter and stride, and generic) with the linear one; 16-byte channel vectors, filters read element
    by element; none in the default build until they match cuDNN."""
    dw = [k for k in catalog.catalogue() if k.depthwise]
    got = {(k.family, k.op, k.layout, k.epilogue, k.align, k.align_b, k.align_c) for k in dw}
    assert got == {  # wgrad: x read in vectors, dw (rows of R * S taps) written one by one
        ("sm80", "fprop", "nhwc", "biasact", 8, 1, 8),
        ("sm80", "dgrad", "nhwc", "linear", 8, 1, 8),
        ("sm80", "wgrad", "nhwc", "linear", 8, 8, 1),
    }
    assert {(k.a, k.d) for k in dw} == {("f16", "f16"), ("bf16", "bf16")}
    assert not any(k.default for k in dw)
    for a in ("f16", "bf16"):
        fprop = {k.tile: k for k in dw if k.a == a and k.op == "fprop"}
        assert (0, 0, 0) in fprop and len(fprop) == 7
        dgrad = {k.tile for k in dw if k.a == a and k.op == "dgrad"}
        assert dgrad == {(3, 3, 1), (5, 5, 1), (7, 7, 1), (3, 3, 2), (5, 5, 2), (0, 0, 0)}
        wgrad = {k.tile for k in dw if k.a == a and k.op == "wgrad"}
        assert wgrad == {(3, 3, 1), (3, 3, 2), (5, 5, 1), (5, 5, 2), (7, 7, 1), (0, 0, 0)}
    k = next(k for k in dw if k.tile == (7, 7, 1) and k.a == "bf16")
    assert k.name == "sm80_fprop_bf16_bf16_f32_bf16_nhwc_f7x7s1_depthwise_biasact_a8"
    src = catalog.kernel_source(k)
    assert '#include "depthwise.cuh"' in src
    want = (
        "pcr::depthwise::Direct<PCR_OP_FPROP, cutlass::bfloat16_t, cutlass::bfloat16_t, 7, 7, 1, "
    )
    assert want in src
    assert "PCR_SCHED_DEPTHWISE" in catalog.kernel_info(k)
    generic = next(k for k in dw if k.tile == (0, 0, 0) and k.a == "f16" and k.op == "fprop")
    assert generic.name == "sm80_fprop_f16_f16_f32_f16_nhwc_fany_depthwise_biasact_a8"
    wgrad = next(k for k in dw if k.op == "wgrad" and k.a == "bf16" and k.tile == (0, 0, 0))
    assert wgrad.name == "sm80_wgrad_bf16_bf16_f32_bf16_nhwc_fany_depthwise_a8"
    assert (
        "Direct<PCR_OP_WGRAD, cutlass::bfloat16_t, cutlass::bfloat16_t, 0, 0, 0, PCR_EPI_LINEAR>"
        in (catalog.kernel_source(wgrad))
    )
    # the implicit-GEMM convolutions' patterns take none of them
    assert not catalog.select_kernels(dw, "sm80_fprop_*_w*")
    assert not catalog.select_kernels(dw, "sm80_*grad_*_w*")


def test_block_scaled_kernels():
    """fp8 e4m3 block-scaled kernels: each tile side takes whole scale blocks, the kind
    word names the grids (problem terms), the default build holds DeepSeek-V3's ("gb")
    for bfloat16 outputs, and CUTLASS gets the granularities in its own terms."""
    blk = [k for k in GEMMS if k.block and not k.grouped]  # test_grouped_kernels: the others
    assert {k.block for k in blk} == set(catalog.BLOCK_KINDS)
    assert all(k.a == k.b == "e4m3" and k.layout == "tn" for k in blk)
    for k in blk:
        gm, gn = k.block_granularity()
        tile = (k.tile[1], k.tile[0]) if k.swap else k.tile[:2]
        assert tile[0] % gm == 0 and tile[1] % gn == 0, k.name
        assert k.out_scale and not k.tensor_scales
        assert catalog.kernel_type(k).endswith(f", {gm}, {gn}>")
    core = catalog.select_kernels(blk, "default")
    assert {(k.block, k.d) for k in core} == {("gb", "bf16")}
    assert {k.family for k in core} == {"sm90"} and any(k.swap for k in core)
    assert {k.epilogue for k in core} == {"linear", "biasact"}
    assert {k.family for k in blk} == {"sm90", "sm100"}


def test_grouped_direct_kernels():
    """Grouped convolutions with 4 to 32 channels per group (ResNeXt's four stages): direct
    kernels of the sm80 family for float16 and bfloat16, fprop 3x3 at strides 1 and 2 with
    the fused epilogue, dgrad 3x3 at stride 1 (fprop's kernel with the filters flipped) with
    the linear one, filters read element by element, outside the default build; the
    descriptor carries the group width."""
    direct = [k for k in catalog.catalogue() if k.schedule == "direct"]
    got = {(k.family, k.op, k.layout, k.epilogue, k.align, k.align_b, k.align_c) for k in direct}
    assert got == {
        ("sm80", "fprop", "nhwc", "biasact", 8, 1, 8),
        ("sm80", "dgrad", "nhwc", "linear", 8, 1, 8),
    }
    assert {(k.a, k.d) for k in direct} == {("f16", "f16"), ("bf16", "bf16")}
    assert {(k.op, k.tile, k.group) for k in direct} == {
        *(("fprop", (3, 3, s), g) for s in (1, 2) for g in (4, 8, 16, 32)),
        *(("dgrad", (3, 3, 1), g) for g in (4, 8, 16, 32)),
    }
    assert not any(k.default or k.depthwise for k in direct) and all(k.direct for k in direct)
    k = direct[0]
    assert catalog.kernel_type(k) == (
        "pcr::depthwise::GroupedDirect<PCR_OP_FPROP, cutlass::half_t, cutlass::half_t, 3, 3, 1, 4>"
    )
    assert sources.header_of(k) == "grouped_direct.cuh"
    info = sources.kernel_info(k)
    assert "PCR_SCHED_DIRECT" in info and info.endswith(", 0, 4}")  # no out_scale, 4 a group
