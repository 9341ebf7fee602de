"""The list: every kernel record the tables describe, and the build filter over it.

``catalogue`` expands the configuration tables (``configs``) into ``Kernel`` records in a
stable order (the order ``--list`` prints, and the registry's); ``select_kernels`` applies
a ``PYCUTLASS_RT_KERNELS`` filter to them.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import re
from collections.abc import Iterable

from .archs import TMA_FAMILIES
from .configs import (
    AB_LAYOUTS,
    BLOCK_KINDS,
    CONV_TYPES,
    DEPTHWISE_TYPES,
    FUSED_TMA_LAYOUTS,
    FUSED_TYPES,
    GEMM_TYPES,
    GROUPED_QUANTIZED_TYPES,
    GROUPED_TYPES,
    MORE_TYPES,
    SM70_CONFIGS,
    SM70_TYPES,
    SM75_CONFIGS,
    SM75_TYPES,
    SM80_CONFIGS,
    SM80_CONV_CONFIGS,
    SM80_DEPTHWISE_CONFIGS,
    SM80_DEPTHWISE_GRADIENTS,
    SM80_GROUPED_CONFIGS,
    SM80_GROUPED_DIRECT,
    SM90_BLOCK_CONFIGS,
    SM90_BLOCK_SWAP_CONFIGS,
    SM90_CONFIGS,
    SM90_CONV_CONFIGS,
    SM90_GROUPED_CONFIGS,
    SM90_GROUPED_QUANTIZED_CONFIGS,
    SM90_SWAP_CONFIGS,
    SM100_BLOCK_CONFIGS,
    SM100_CONFIGS,
    SWAP_LAYOUTS,
)
from .kernel import ACCUMULATORS, DTYPES, Kernel


def _mma_schedule(stages: int) -> str:
    """A CUTLASS 2.x kernel's schedule word: 2 stages are the register-staged pipelined
    mainloop, more the cp.async multistage one."""
    return "pipelined" if stages == 2 else "multistage"


def _conv_kernels() -> list[Kernel]:
    """The convolution kernels: every config's ops, dtypes and epilogues (fused: fprop)."""
    out = []
    for (a, d), config in itertools.product(CONV_TYPES, SM80_CONV_CONFIGS):
        ops, tile, warps, stages, align, split, tier, epilogues = config
        if a == "tf32":  # fp32 models are rare at inference: outside the default build
            # 4-byte elements: 16-byte loads at alignment 4, cp.async (multistage) at any
            tile, align, tier = (tile[0], tile[1], tile[2] // 2), 4 if align == 8 else 1, "extended"
            stages = max(stages, 3)
        for op, epi in itertools.product(ops, epilogues):
            if epi == "linear" or op == "fprop":
                out.append(
                    Kernel(
                        "sm80",
                        a,
                        a,
                        d,
                        "nhwc",
                        tile,
                        _mma_schedule(stages),
                        warps=warps,
                        stages=stages,
                        align=align,
                        split=split,
                        epilogue=epi,
                        tier=tier,
                        op=op,
                    )
                )
    for (a, d), config in itertools.product(CONV_TYPES[:2], SM90_CONV_CONFIGS):
        ops, tile, cluster, schedule, tier, epilogues = config
        for op, epi in itertools.product(ops, epilogues):
            if epi == "linear" or op == "fprop":
                out.append(
                    Kernel(
                        "sm90",
                        a,
                        a,
                        d,
                        "nhwc",
                        tile,
                        schedule,
                        cluster=cluster,
                        epilogue=epi,
                        tier=tier,
                        op=op,
                    )
                )
    return out


def _direct_kernels() -> list[Kernel]:
    """The direct kernels: depthwise fprop's for a filter and stride each (tile (R, S,
    stride); zeros: the generic kernel) with the fused epilogue, dgrad's and wgrad's (for a
    filter and generic) with the linear epilogue, 16-byte channel vectors; and the grouped
    ones for a filter, stride and group width (fprop's with the fused epilogue, dgrad's
    with the linear one)."""

    def kernel(a, d, tile, op, epilogue, tier):
        return Kernel(
            "sm80", a, a, d, "nhwc", tile, "depthwise", align=8, epilogue=epilogue, tier=tier, op=op
        )

    fprop = [
        kernel(a, d, (*filt, stride), "fprop", "biasact", tier)
        for (a, d), (filt, stride, tier) in itertools.product(
            DEPTHWISE_TYPES, SM80_DEPTHWISE_CONFIGS
        )
    ]
    gradients = [
        kernel(a, d, (*filt, stride), op, "linear", tier)
        for (a, d), (op, filt, stride, tier) in itertools.product(
            DEPTHWISE_TYPES, SM80_DEPTHWISE_GRADIENTS
        )
    ]
    grouped = [
        Kernel(
            "sm80",
            a,
            a,
            d,
            "nhwc",
            (*filt, stride),
            "direct",
            align=8,
            epilogue="biasact" if op == "fprop" else "linear",
            tier=tier,
            op=op,
            group=group,
        )
        for (a, d), (op, filt, stride, group, tier) in itertools.product(
            DEPTHWISE_TYPES, SM80_GROUPED_DIRECT
        )
    ]
    return fprop + gradients + grouped


def _more_types() -> list[Kernel]:
    out = []
    for family, a, outputs, layouts, configs, *swap in MORE_TYPES:
        acc = ACCUMULATORS.get(a, "f32")
        for d, layout, config in itertools.product(outputs, layouts, configs):
            if family in TMA_FAMILIES:
                tile, cluster, schedule, split, tier, epilogues = config
                extra = dict(cluster=cluster, align=16 // DTYPES[a][2])
            else:
                tile, warps, stages, align, split, tier, epilogues = config
                schedule = _mma_schedule(stages)
                extra = dict(warps=warps, stages=stages, align=align)
            for epi in epilogues:
                if epi == "scaled" and d == "f32" and family not in TMA_FAMILIES:
                    continue
                out.append(
                    Kernel(
                        family,
                        a,
                        a,
                        d,
                        layout,
                        tile,
                        schedule,
                        acc=acc,
                        split=split,
                        epilogue=epi,
                        tier=tier,
                        swap=swap == ["swap"],
                        **extra,
                    )
                )
    return out


def _block_scaled() -> list[Kernel]:
    """The block-scaled fp8 kernels: e4m3 (weights and activations) to 16-bit or fp32 D."""
    out = []
    families = [
        ("sm90", SM90_BLOCK_CONFIGS, False),
        ("sm90", SM90_BLOCK_SWAP_CONFIGS, True),
        ("sm100", SM100_BLOCK_CONFIGS, False),
    ]
    for (family, configs, swap), (block, most), d in itertools.product(
        families, BLOCK_KINDS.items(), ("bf16", "f16", "f32")
    ):
        for tile, cluster, schedule, split, tier, epilogues in configs:
            k = Kernel(
                family,
                "e4m3",
                "e4m3",
                d,
                "tn",
                tile,
                schedule,
                cluster=cluster,
                align=16,
                split=split,
                swap=swap,
                tier=most or tier,
                block=block,
            )
            gm, gn = k.block_granularity()
            kernel_tile = (tile[1], tile[0]) if swap else tile[:2]
            if kernel_tile[0] % gm or kernel_tile[1] % gn:
                continue  # a tile side across part of a scale block
            out += [dataclasses.replace(k, epilogue=epi) for epi in epilogues]
    return out


def _grouped_quantized() -> list[Kernel]:
    """The fp8 grouped kernels (MoE layers): the dequantizing epilogue, or block scales in
    the mainloop and the bias/activation epilogue."""
    return [
        Kernel(
            "sm90",
            a,
            a,
            d,
            "tn",
            tile,
            schedule,
            cluster=cluster,
            align=16,
            grouped=True,
            epilogue="biasact" if block else "scaled",
            tier=tier,
            block=block,
        )
        for (a, d), (tile, cluster, schedule, tier, block) in itertools.product(
            GROUPED_QUANTIZED_TYPES, SM90_GROUPED_QUANTIZED_CONFIGS
        )
    ]


def _epilogues(fused: bool, a: str, d: str, layout: str, family: str, tier: str) -> list:
    """(epilogue, tier) pairs a configuration of ``tier`` is built with for these dtypes and
    layout."""
    fuse = (
        fused
        and (a, d) in FUSED_TYPES
        and (family not in TMA_FAMILIES or layout in FUSED_TMA_LAYOUTS)
    )
    return [("linear", tier)] + ([("biasact", FUSED_TYPES.get((a, d)) or tier)] if fuse else [])


def catalogue() -> list[Kernel]:
    """Every kernel the library knows how to build, in a stable order."""
    out: list[Kernel] = []
    for (a, d), layout in itertools.product(GEMM_TYPES, AB_LAYOUTS):
        tma = [("sm90", SM90_CONFIGS, False), ("sm100", SM100_CONFIGS, False)]
        if layout in SWAP_LAYOUTS:
            tma.append(("sm90", SM90_SWAP_CONFIGS, True))
        for family, configs, swap in tma:
            for tile, cluster, schedule, split, config_tier, fused in configs:
                for epi, tier in _epilogues(fused, a, d, layout, family, config_tier):
                    out.append(
                        Kernel(
                            family,
                            a,
                            a,
                            d,
                            layout,
                            tile,
                            schedule,
                            cluster=cluster,
                            split=split,
                            swap=swap,
                            epilogue=epi,
                            tier=tier,
                        )
                    )
        mma = [("sm80", SM80_CONFIGS)] + ([("sm75", SM75_CONFIGS)] if (a, d) in SM75_TYPES else [])
        mma += [("sm70", SM70_CONFIGS)] if (a, d) in SM70_TYPES else []
        for family, configs in mma:
            for tile, warps, stages, align, split, config_tier, fused in configs:
                for epi, tier in _epilogues(fused, a, d, layout, family, config_tier):
                    out.append(
                        Kernel(
                            family,
                            a,
                            a,
                            d,
                            layout,
                            tile,
                            _mma_schedule(stages),
                            warps=warps,
                            stages=stages,
                            align=align,
                            split=split,
                            epilogue=epi,
                            tier=tier,
                        )
                    )
        if (a, d) in GROUPED_TYPES:
            if layout in FUSED_TMA_LAYOUTS:
                for tile, cluster, schedule, tier, epi in SM90_GROUPED_CONFIGS:
                    out.append(
                        Kernel(
                            "sm90",
                            a,
                            a,
                            d,
                            layout,
                            tile,
                            schedule,
                            cluster=cluster,
                            grouped=True,
                            epilogue=epi,
                            tier=tier,
                        )
                    )
            for tile, warps, stages, tier in SM80_GROUPED_CONFIGS:
                out.append(
                    Kernel(
                        "sm80",
                        a,
                        a,
                        d,
                        layout,
                        tile,
                        "multistage",
                        warps=warps,
                        stages=stages,
                        grouped=True,
                        tier=tier,
                    )
                )
    out += _more_types()
    out += _block_scaled()
    out += _grouped_quantized()
    out += _conv_kernels()
    out += _direct_kernels()
    names = [k.name for k in out]
    assert len(names) == len(set(names)), "kernel names must be unique"
    return out


# ---------------------------------------------------------------------------------
# The build filter
# ---------------------------------------------------------------------------------


def _matches(k: Kernel, pattern: str) -> bool:
    if pattern == "all":
        return True
    if pattern == "default":
        return k.default
    return fnmatch.fnmatchcase(k.name, pattern)


def select_kernels(kernels: Iterable[Kernel], spec: str) -> list[Kernel]:
    """Applies a PYCUTLASS_RT_KERNELS filter: patterns, ``!pattern`` to exclude."""
    pats = [p.strip() for p in re.split(r"[;,]", spec or "default") if p.strip()]
    inc = [p for p in pats if not p.startswith("!")] or ["all"]
    exc = [p[1:] for p in pats if p.startswith("!")]
    return [
        k
        for k in kernels
        if any(_matches(k, p) for p in inc) and not any(_matches(k, p) for p in exc)
    ]
