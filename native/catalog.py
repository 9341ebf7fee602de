#!/usr/bin/env python3
"""The kernel catalogue: one declarative list, and the generator that builds from it.

Every kernel the library can contain is one ``Kernel`` record below. Its procedural
``name`` encodes every parameter and is its identity everywhere (build filter, registry,
selection tables, tests, logs). The generator turns the selected records into one
``.cu`` file per kernel, the translation units that compile them several at a time (they
share the headers' parsing and most instantiations: ``units``), the registry table and a
CMake fragment::

    python native/catalog.py --list --archs all            # every kernel name, no compiling
    python native/catalog.py --list --kernels 'sm90_bf16*'
    python native/catalog.py --emit build/gen --archs '80;90a' --kernels default

Arch tokens (``PYCUTLASS_RT_ARCHS``): ``70`` the sm70 family (CUDA 12.x and older only),
``75`` the sm75 family, ``80 86 89 90`` SASS targets of the sm80 family (``90`` also of
sm75 and sm70, to test them on Hopper), ``90a`` the sm90a family, ``100a`` the sm100a family;
``native`` asks nvidia-smi, ``all`` takes every token, ``default`` is ``80;86;89;90;90a``;
unset (``auto``): ``native`` where nvidia-smi lists a GPU, else ``default``.
Kernel filter (``PYCUTLASS_RT_KERNELS``): ``default`` (the core tier; what ``--emit``
builds), ``all`` (what ``--list`` prints), or ``;``/``,``-separated wildcards on names
(``!pat`` excludes).
Kernels per translation unit (``PYCUTLASS_RT_UNIT_SIZE``): a number, or ``auto`` (unset):
three units per core, at most eight (``unit_size``).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import itertools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable

# ---------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------

#: dtype name -> (CUTLASS C++ type, pcr_dtype enum name, bytes). As an input, "f32"
#: means fp32 at fp32 accuracy (3xTF32) and "tf32" fp32 tensors on TF32 math.
DTYPES = {
    "f16": ("cutlass::half_t", "PCR_F16", 2),
    "bf16": ("cutlass::bfloat16_t", "PCR_BF16", 2),
    "f32": ("float", "PCR_F32", 4),
    "tf32": ("float", "PCR_TF32", 4),
    "f64": ("double", "PCR_F64", 8),
    "s8": ("int8_t", "PCR_S8", 1),
    "s32": ("int32_t", "PCR_S32", 4),
    "e4m3": ("cutlass::float_e4m3_t", "PCR_E4M3", 1),
    "e5m2": ("cutlass::float_e5m2_t", "PCR_E5M2", 1),
}
#: input dtype -> accumulator dtype (fp32 otherwise)
ACCUMULATORS = {"f64": "f64", "s8": "s32"}
#: CUTLASS 2.x: (family, input dtype) -> mma.sync instruction shape
INSTRUCTIONS = {
    ("sm70", "f16"): (8, 8, 4),
    ("sm75", "f16"): (16, 8, 8),
    **{("sm80", a): (16, 8, 16) for a in ("f16", "bf16")},
    **{("sm80", a): (16, 8, 8) for a in ("tf32", "f32")},
    ("sm80", "f64"): (8, 8, 4),
    ("sm80", "s8"): (16, 8, 32),
    ("sm75", "s8"): (8, 8, 16),
    # 1x1x1: SIMT (CUDA-core FMA), fp32 and fp64 where the tensor cores lack them
    **{(f, a): (1, 1, 1) for f in ("sm70", "sm75") for a in ("f32", "f64")},
    **{("sm89", a): (16, 8, 32) for a in ("e4m3", "e5m2")},
}
#: CUTLASS 2.x: input dtype -> MMA operator tag (OpMultiplyAdd otherwise); fp32 inputs
#: take 3xTF32 (each operand split into a TF32 pair: fp32 accuracy on tensor cores)
MATH_OPERATORS = {
    "f32": "cutlass::arch::OpMultiplyAddFastF32",
    "s8": "cutlass::arch::OpMultiplyAddSaturate",
}
#: layout letter (CUTLASS/BLAS naming: t = row-major, n = column-major)
LAYOUTS = {
    "t": ("cutlass::layout::RowMajor", "PCR_ROW_MAJOR"),
    "n": ("cutlass::layout::ColumnMajor", "PCR_COL_MAJOR"),
}
#: schedule -> pcr_schedule. A name's words are the C constants' own (PCR_SCHED_<WORD>), as
#: for splits (PCR_SPLIT_) and epilogues (PCR_EPI_): KernelInfo decodes them back through
#: the generated pycutlass_rt/_abi.py (tests/cpu/test_abi.py holds the two together).
SCHEDULES = {
    "multistage": "PCR_SCHED_MULTISTAGE",
    "pipelined": "PCR_SCHED_PIPELINED",
    "coop": "PCR_SCHED_COOP",
    "pingpong": "PCR_SCHED_PINGPONG",
    "1sm": "PCR_SCHED_1SM",
    "2sm": "PCR_SCHED_2SM",
    "ws": "PCR_SCHED_WS",
}
#: schedule -> the tag struct of native/kernels/tma_gemm.cuh
TMA_SCHEDULES = {
    "coop": "Sm90Cooperative",
    "pingpong": "Sm90Pingpong",
    "1sm": "Sm100OneSm",
    "2sm": "Sm100TwoSm",
}
#: schedule -> the pointer-array (grouped) tag struct of native/kernels/tma_gemm.cuh
TMA_GROUPED_SCHEDULES = {"coop": "Sm90GroupedCooperative", "pingpong": "Sm90GroupedPingpong"}
#: work decomposition -> (pcr_split, CUTLASS 3.x tile scheduler, CUTLASS 2.x swizzle).
#: "streamk": CUTLASS's stream-K, whose heuristic spreads the K loop of too few output
#: tiles over every SM (stream-K or split-K), with a deterministic fp32 fix-up.
#: "splitk": parallel split-K, K cut into equal slices that run as one batched GEMM (the
#: family's own kernel, fp32 output, under this translation unit's own scheduler or
#: swizzle tag) into partials summed by a second kernel (native/kernels/split_k.cuh).
SPLITS = {
    "none": ("PCR_SPLIT_NONE", "void", "pcr::mma::DataParallel"),
    "streamk": ("PCR_SPLIT_STREAMK", "pcr::tma::StreamK", "pcr::mma::StreamK"),
    # the tags of a split-K kernel's unsplit inner kernel
    "splitk": (
        "PCR_SPLIT_SPLITK",
        "pcr::split::Local<cutlass::gemm::PersistentScheduler>",
        "pcr::split::Local<pcr::mma::DataParallel>",
    ),
}
#: family header -> the split-K header its split-K kernels include too
SPLIT_K_HEADERS = {"tma_gemm.cuh": "split_k_tma.cuh", "mma_gemm.cuh": "split_k.cuh"}
#: op -> pcr_op: a GEMM, or a 2-D convolution's pass run as an implicit GEMM
OPS = {
    "gemm": "PCR_OP_GEMM",
    "fprop": "PCR_OP_FPROP",
    "dgrad": "PCR_OP_DGRAD",
    "wgrad": "PCR_OP_WGRAD",
}
#: family -> the header of its convolution template (implicit GEMM)
CONV_HEADERS = {"sm80": "conv_mma.cuh", "sm90": "conv_tma.cuh"}
#: epilogue -> pcr_epilogue. "biasact": act(alpha * acc + beta * C + bias), with the bias
#: (per row or per column) and the activation chosen per call, fused in the epilogue.
#: "scaled" (quantized inputs): the same after scaling acc by per-tensor, per-row and
#: per-column factors. "aux": "biasact" that also stores the activation's input (the
#: pre-activation, what a backward pass needs) to a second, D-shaped output, and reduces
#: max |D| into a float (amax, an fp8 recipe's next scale), each when asked.
EPILOGUES = {
    "linear": "PCR_EPI_LINEAR",
    "biasact": "PCR_EPI_BIASACT",
    "scaled": "PCR_EPI_SCALED",
    "aux": "PCR_EPI_AUX",
}
#: a block-scaled fp8 mainloop's scale kind per operand, the letters of its name word
#: ("blkgb": a's scales per row, b's per 128x128 block): letter -> (pcr_scale_kind, rows or
#: columns per scale). Every kind is per 128 of K.
BLOCK_SCALES = {"g": ("PCR_SCALE_GROUPS", 1), "b": ("PCR_SCALE_BLOCKS", 128)}


@dataclasses.dataclass(frozen=True)
class Family:
    """An arch family: one kernel template, compiled for the family's targets."""

    name: str
    header: str
    #: arch tokens whose SASS this family's kernels are compiled to
    tokens: tuple[str, ...]
    #: virtual arch the PTX / front end is built for
    virtual: str
    #: whether PTX is embedded for GPUs newer than every SASS target
    ptx: bool
    #: oldest CUDA toolkit that can build it
    min_cuda: tuple[int, int]
    #: newest CUDA toolkit that still can (None: no limit)
    max_cuda: tuple[int, int] | None = None
    #: (token, virtual arch): SASS of another GPU built from this front end, so that the
    #: family's templates run in tests there (never chosen by selection on that GPU)
    test: tuple[tuple[str, str], ...] = ()

    def virtual_for(self, token: str) -> str:
        """The front end (virtual arch) that builds ``token``'s SASS."""
        return (
            dict(self.test).get(token, self.virtual) if token not in self.tokens else self.virtual
        )


FAMILIES = {
    # Volta (V100): CUDA 13 dropped sm_70, so only a CUDA 12.x (or older) toolkit builds
    # it. Its sm_90 SASS (from the compute_75 front end, which CUDA 13 still has; Hopper
    # emulates m8n8k4) lets the H200 check the template's logic.
    "sm70": Family(
        "sm70", "mma_gemm.cuh", ("70",), "70", False, (11, 0), (12, 9), test=(("90", "75"),)
    ),
    # Turing; its SASS for sm_90 lets Hopper run these templates in tests. The sm80
    # family's PTX, not this one's, serves GPUs newer than every SASS target.
    "sm75": Family("sm75", "mma_gemm.cuh", ("75",), "75", False, (11, 0), test=(("90", "75"),)),
    "sm80": Family("sm80", "mma_gemm.cuh", ("80", "86", "89", "90"), "80", True, (11, 0)),
    # Ada's fp8 mma.sync; Hopper has the instruction too, so its sm_90 SASS runs in tests
    "sm89": Family("sm89", "mma_gemm.cuh", ("89",), "89", False, (12, 4), test=(("90", "89"),)),
    "sm90": Family("sm90", "tma_gemm.cuh", ("90a",), "90a", False, (12, 3)),
    "sm100": Family("sm100", "tma_gemm.cuh", ("100a",), "100a", False, (12, 8)),
}
TMA_FAMILIES = ("sm90", "sm100")  # CUTLASS 3.x families: tile, cluster and schedule
#: CUTLASS 2.x families (tile, warps, stages) -> the tag struct of native/kernels/mma_gemm.cuh
MMA_FAMILIES = {"sm70": "Sm70", "sm75": "Sm75", "sm80": "Sm80", "sm89": "Sm89"}
ALL_TOKENS = tuple(
    dict.fromkeys(t for f in FAMILIES.values() for t in f.tokens + tuple(t for t, _ in f.test))
)
DEFAULT_ARCHS = "80;86;89;90;90a"


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One GEMM kernel: D (row-major) = act(alpha * A @ B + beta * C + bias), C like D."""

    family: str
    a: str
    b: str
    d: str
    layout: str  # A then B, e.g. "tn"
    tile: tuple[int, int, int]
    schedule: str
    cluster: tuple[int, int, int] = (1, 1, 1)
    warps: tuple[int, int, int] = (0, 0, 0)
    stages: int = 0
    align: int = 8  # elements of A and B; C/D take 16 bytes (1 element when align == 1)
    acc: str = "f32"
    epilogue: str = "linear"
    split: str = "none"
    #: computes D^T = B^T A^T (a column-major D' of the swapped problem): the problem's
    #: small M lands on the MMA's N side. Tile and cluster stay in problem terms.
    swap: bool = False
    #: a grouped kernel: many problems of their own sizes in one launch (sizes, pointers
    #: and leading dimensions read from GPU arrays)
    grouped: bool = False
    #: "core": in the default build; "linear": in it for a linear layer's problem only (the
    #: tn layout, D in the layer's output dtype: see LINEAR_OUTPUT); "extended": not
    tier: str = "extended"
    #: "gemm", or a convolution's implicit GEMM (OPS): its layout is "nhwc" (packed NHWC
    #: activations, KRSC filters) and its name carries the op after the family
    op: str = "gemm"
    #: a block-scaled fp8 mainloop: a's then b's scale kind (BLOCK_SCALES letters, problem
    #: terms: "gb" is DeepSeek-V3's per-token a, 128x128-block b); "" for none
    block: str = ""

    @property
    def default(self) -> bool:
        """Whether the default build (kernel filter ``default``) holds this kernel."""
        if self.tier == "linear":
            return self.layout == "tn" and self.d == LINEAR_OUTPUT.get(self.a, self.a)
        return self.tier == "core"

    @property
    def name(self) -> str:
        tile = "x".join(map(str, self.tile))
        op = [self.op] if self.conv else []
        parts = [self.family, *op, self.a, self.b, self.acc, self.d, self.layout, tile]
        if self.family in TMA_FAMILIES:
            parts += ["c{}x{}".format(*self.cluster[:2]), self.schedule]
        else:
            parts += ["w{}x{}".format(*self.warps[:2]), f"s{self.stages}"]
        if self.block:
            parts.append(f"blk{self.block}")
        if self.epilogue != "linear":
            parts.append(self.epilogue)
        if self.split != "none":
            parts.append(self.split)
        if self.swap:
            parts.append("swapab")
        if self.grouped:
            parts.append("grouped")
        parts.append(f"a{self.align}")
        return "_".join(parts)

    @property
    def fused(self) -> bool:
        return self.epilogue != "linear"

    @property
    def conv(self) -> bool:
        return self.op != "gemm"

    @property
    def tensor_scales(self) -> bool:
        """The linear epilogue also multiplies by per-tensor scale_a/scale_b tensors."""
        return (
            self.family in TMA_FAMILIES
            and self.epilogue == "linear"
            and not self.grouped
            and not self.block
            and DTYPES[self.a][2] == 1
            and self.d != "s32"
        )  # quantized inputs

    @property
    def out_scale(self) -> bool:
        """The epilogue of quantized inputs (or scaled 16-bit ones) also reduces max |D|
        into amax and multiplies D by scale_d (tma_gemm.cuh, QuantizedOutput)."""
        return self.family in TMA_FAMILIES and (
            self.tensor_scales or self.epilogue == "scaled" or bool(self.block)
        )

    def block_granularity(self) -> tuple[int, int]:
        """A block-scaled kernel's rows and columns per scale along the CUTLASS kernel's M
        and N (swapped for swap-AB kernels), (0, 0) for others."""
        if not self.block:
            return 0, 0
        m, n = (BLOCK_SCALES[x][1] for x in self.block)
        return (n, m) if self.swap else (m, n)

    @property
    def align_c(self) -> int:
        if self.conv:  # the output's channels: the inputs' alignment (same element size)
            return self.align
        return 1 if self.align == 1 else 16 // DTYPES[self.d][2]

    @property
    def ident(self) -> str:
        return re.sub(r"\W", "_", self.name)


# ---------------------------------------------------------------------------------
# The list
# ---------------------------------------------------------------------------------

#: (input dtype, output dtype); accumulation is fp32 throughout
GEMM_TYPES = [("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32")]
AB_LAYOUTS = ["tn", "nn", "nt", "tt"]

#: the output dtype of a linear layer on each input dtype (the "linear" tier's D): 16-bit
#: inputs give their own dtype, fp8 e4m3 bf16 (torch._scaled_mm's usual out_dtype); e5m2
#: (gradients, mostly) is left out: its "linear" kernels stay extended
LINEAR_OUTPUT = {"e4m3": "bf16", "e5m2": None}
#: Tiers were chosen by heuristics/tier.py: greedy by measured coverage per compile-second
#: over the H200 sweeps of the shape corpus's fit part, judged on its held-out part (bf16
#: tn: the tier's best kernel at 0.883 of the whole catalogue's with the core tier alone,
#: 0.990 with the "linear" additions; fp8 -> bf16: 0.925 and 0.999). The shipped table
#: choosing among the default kernels gets 0.992 (bf16) and 0.999 (fp8) of its choice among
#: the whole catalogue's there (heuristics/README.md).
#: sm90a configurations: (tile, cluster, schedule, split, tier, fused). Large cooperative
#: tiles for big problems; 64-row and 64-column ping-pong tiles for small M or N;
#: stream-K (cooperative only, in CUTLASS) for problems with fewer tiles than SMs.
#: `fused`: also built with the bias/activation epilogue (FUSED_TYPES, FUSED_TMA_LAYOUTS),
#: in the configuration's tier. The fused tiles were chosen by heuristics/tier.py on the
#: fit part's sweep, plain timings standing in (heuristics/README.md).
SM90_CONFIGS = [
    ((128, 256, 64), (2, 1, 1), "coop", "none", "core", True),
    ((128, 128, 64), (1, 2, 1), "coop", "none", "extended", True),
    ((256, 128, 64), (1, 2, 1), "coop", "none", "extended", True),
    ((64, 128, 64), (1, 1, 1), "pingpong", "none", "linear", True),
    ((128, 128, 64), (2, 1, 1), "pingpong", "none", "extended", True),
    ((64, 256, 64), (1, 1, 1), "pingpong", "none", "linear", True),
    # mid-size M (300-3000) against N of 1-5K, where even the best of the tiles above ran
    # at 0.66-0.84x cuBLAS on the held-out sweep: 192 columns come closer to whole waves
    # (769x3072: 112 tiles of 128x192 for 132 SMs, 84 of 128x256). tier.py's first pick
    # over the default tiles on the fit part (2026-12-04): the held-out bf16 best-of-set
    # 0.979 -> 0.986 of the catalogue's, up to 1.27x faster (769x3072x4096)
    ((128, 192, 64), (1, 1, 1), "coop", "none", "linear", False),
    ((64, 64, 128), (1, 1, 1), "pingpong", "none", "extended", False),
    # decode (M <= 64, large N and K): narrow tiles put a CTA on every SM
    ((64, 32, 128), (1, 1, 1), "pingpong", "none", "extended", False),
    ((64, 16, 256), (1, 1, 1), "pingpong", "none", "extended", False),
    ((128, 64, 64), (1, 1, 1), "coop", "streamk", "extended", False),
    ((128, 128, 64), (1, 1, 1), "coop", "streamk", "extended", True),
    ((128, 256, 64), (1, 1, 1), "coop", "streamk", "linear", False),
    # few output tiles, very long K (256x256x65536): slices run side by side, no serial fix-up
    ((128, 128, 64), (1, 1, 1), "coop", "splitk", "core", False),
]
#: sm90a swap-AB configurations for decode (M <= 64 against large weights), in problem
#: terms: the weights' N takes the MMA's 64 or 128 rows, M its narrow N side. Stream-K
#: spreads the long K loop of few 128-row tiles over every SM, at the cost of a serial
#: fix-up chain; the 64-row ping-pong tiles put twice as many CTAs on the weights without
#: one, and read the activations in boxes of M's own size (TMA boxes mostly out of bounds,
#: as a 64-row tile's are at M = 1, load slowly).
SM90_SWAP_CONFIGS = [
    ((16, 128, 128), (1, 1, 1), "coop", "streamk", "extended", False),
    ((32, 128, 128), (1, 1, 1), "coop", "streamk", "extended", True),
    ((64, 128, 128), (1, 1, 1), "coop", "streamk", "extended", False),
    ((16, 64, 128), (1, 1, 1), "pingpong", "none", "core", True),
    ((32, 64, 128), (1, 1, 1), "pingpong", "none", "linear", True),
]
#: the layouts swap-AB kernels are built for: activations row-major, weights K-major
#: (a torch Linear's weight.t())
SWAP_LAYOUTS = ["tn"]
#: sm100a configurations (compiled, not yet run on hardware here): 1-SM tiles, and 2-SM
#: tiles whose M spans the CTA pair of an even cluster
SM100_CONFIGS = [
    ((128, 128, 64), (1, 1, 1), "1sm", "none", "extended", False),
    ((128, 256, 64), (1, 1, 1), "1sm", "none", "extended", True),
    ((256, 128, 64), (2, 1, 1), "2sm", "none", "extended", True),
    ((256, 256, 64), (2, 1, 1), "2sm", "none", "extended", False),
]
#: sm70 (Volta, fp16 only): the 2-stage mainloop, also as the any-alignment fallback
SM70_TYPES = [("f16", "f16"), ("f16", "f32")]
SM70_CONFIGS = [
    ((128, 128, 32), (2, 2, 1), 2, 8, "none", "extended", False),
    ((64, 64, 32), (2, 2, 1), 2, 1, "none", "extended", False),
]
#: sm75 (Turing, fp16 only): the 2-stage mainloop, also as the any-alignment fallback
SM75_TYPES = [("f16", "f16"), ("f16", "f32")]
SM75_CONFIGS = [
    ((128, 128, 32), (2, 2, 1), 2, 8, "none", "extended", False),
    ((64, 64, 32), (2, 2, 1), 2, 1, "none", "extended", False),
]
#: sm80-family configurations: (tile, warps, stages, alignment, split, tier, fused)
SM80_CONFIGS = [
    ((128, 128, 32), (2, 2, 1), 4, 8, "none", "core", True),
    ((128, 256, 32), (2, 4, 1), 3, 8, "none", "extended", False),
    ((64, 64, 32), (2, 2, 1), 6, 8, "none", "extended", True),
    ((256, 128, 32), (4, 2, 1), 3, 8, "none", "extended", False),
    ((128, 128, 32), (2, 2, 1), 4, 8, "streamk", "extended", True),
    ((128, 128, 32), (2, 2, 1), 4, 8, "splitk", "extended", False),
    # alignment fallback: 2-stage register-staged loads accept any address and stride
    ((64, 64, 32), (2, 2, 1), 2, 1, "none", "core", True),
]
#: fused bias/activation kernels: outputs whose dtype the bias shares, and for sm90a the
#: layouts of linear layers (activations row-major; weights K-major "tn" or N-major "tt")
#: (input, output) dtypes built with the bias/activation epilogue -> the most a fused
#: kernel's tier may be (None: its configuration's): fp32 outputs of 16-bit inputs (a
#: model's logits, mixed-precision training) stay out of the default build
FUSED_TYPES = {
    ("f16", "f16"): None,
    ("bf16", "bf16"): None,
    ("f16", "f32"): "extended",
    ("bf16", "f32"): "extended",
}
FUSED_TMA_LAYOUTS = ["tn", "tt"]
#: grouped kernels (pcr_grouped_gemm, pcr_moe_gemm): (tile, cluster, schedule, tier) on
#: sm90a, for tn and tt (a MoE layer's weights either way); (tile, warps, stages, tier) on
#: the sm80 family, every layout. Cooperative tiles for large groups, 64-row ping-pong
#: tiles for the many small groups of skewed MoE routing.
GROUPED_TYPES = [("f16", "f16"), ("bf16", "bf16")]
SM90_GROUPED_CONFIGS = [
    ((128, 128, 64), (1, 1, 1), "coop", "core"),
    ((64, 128, 64), (1, 1, 1), "pingpong", "extended"),
]
SM80_GROUPED_CONFIGS = [
    ((128, 128, 32), (2, 2, 1), 4, "core"),
    ((64, 64, 32), (2, 2, 1), 6, "extended"),
]

#: Convolutions (pcr.conv2d, conv2d_dgrad, conv2d_wgrad): (input, output) dtypes; tf32
#: (fp32 tensors on TF32 tensor cores, as cuDNN runs fp32 convolutions by default) takes
#: tiles of half the K depth (its MMA is m16n8k8)
CONV_TYPES = [("f16", "f16"), ("bf16", "bf16"), ("tf32", "f32")]
CONV_OPS = ("fprop", "dgrad", "wgrad")
#: sm80 family: (ops, tile, warps, stages, align, split, tier, epilogues); bias/activation
#: fuse into fprop only. Alignment 8 (16-bit; 4 for tf32) takes channel counts that are
#: multiples of 8 through CUTLASS's optimized iterators; alignment 1 any count (an RGB
#: stem's 3: fprop's few-channels iterators), in 2 stages (cp.async moves 4 to 16 bytes).
#: wgrad's implicit GEMM has few output tiles and a K of N*P*Q: split-K spreads it over
#: the GPU.
SM80_CONV_CONFIGS = [
    (("fprop", "dgrad"), (128, 128, 32), (2, 2, 1), 3, 8, "none", "core", ("linear", "biasact")),
    (("wgrad",), (128, 128, 32), (2, 2, 1), 3, 8, "none", "extended", ("linear",)),
    (("fprop", "dgrad"), (64, 64, 32), (2, 2, 1), 4, 8, "none", "extended", ("linear", "biasact")),
    (("wgrad",), (128, 128, 32), (2, 2, 1), 3, 8, "splitk", "core", ("linear",)),
    (("fprop", "wgrad"), (64, 64, 32), (2, 2, 1), 2, 1, "none", "core", ("linear", "biasact")),
    # dgrad's 2-stage kernels at alignment 1 gave wrong dx on the H200 (16-bit, optimized
    # and analytic iterators alike): even channel counts through 4-byte cp.async instead
    (("dgrad",), (64, 64, 32), (2, 2, 1), 3, 2, "none", "core", ("linear",)),
]
#: sm90a: (ops, tile, cluster, schedule, tier, epilogues); TMA im2col needs 16-byte channel
#: counts (the sm80 family's alignment-1 kernels take the rest). CUTLASS 4.2's sm90
#: convolutions have one schedule ("ws": one producer and one consumer warp group, a CTA per
#: output tile; its persistent ones refuse conv problems), so M tiles stop at 128.
SM90_CONV_CONFIGS = [
    (CONV_OPS, (128, 128, 64), (1, 1, 1), "ws", "core", ("linear", "biasact")),
    (("fprop", "dgrad"), (128, 128, 64), (2, 1, 1), "ws", "extended", ("linear", "biasact")),
    (("fprop", "dgrad"), (64, 128, 64), (1, 1, 1), "ws", "extended", ("linear", "biasact")),
]
#: schedule -> the tag struct of native/kernels/conv_tma.cuh
CONV_SCHEDULES = {"ws": "pcr::conv::Sm90WarpSpecialized"}


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


#: The other dtypes: (family, input, outputs, layouts, configs[, "swap"]), configs as the
#: lists above with the epilogues to build in place of `fused`; "swap": swap-AB kernels.
#: Quantized and TF32 inputs are K-major ("tn": the layout wgmma and int8/fp8 mma.sync take).
#: fp32 operands need no register-staged fallback: cp.async copies 4-byte elements, so the
#: multistage mainloop takes any alignment (and the 2-stage one would not run 3xTF32)
SM80_TF32_CONFIGS = [
    ((128, 128, 32), (2, 2, 1), 3, 4, "none", "core", ("linear", "biasact")),
    ((64, 64, 32), (2, 2, 1), 4, 4, "none", "extended", ("linear",)),
    ((64, 64, 16), (2, 2, 1), 3, 1, "none", "core", ("linear",)),
]
SM80_F32_CONFIGS = [  # 3xTF32: three MMAs per product, warp tiles half as wide
    ((128, 64, 16), (2, 2, 1), 4, 4, "none", "core", ("linear", "biasact")),
    ((64, 64, 16), (2, 2, 1), 3, 1, "none", "core", ("linear",)),
]
SM80_F64_CONFIGS = [  # the fused epilogue computes in double (mma_gemm.cuh's ComputeOf)
    ((128, 128, 16), (4, 2, 1), 3, 1, "none", "core", ("linear",)),
    ((64, 64, 16), (2, 2, 1), 4, 1, "none", "extended", ("linear",)),
    # float64 with a bias or activation in the default build (~0.5 min more on 2 cores):
    # every layout ran on the H200 against float64 torch, every activation (2026-12-04)
    ((64, 64, 16), (2, 2, 1), 4, 1, "none", "core", ("biasact",)),
]
#: int8 -> int32 with a bias or activation computes in int32, exactly (relu and clamp)
SM80_S8_CONFIGS = [
    ((128, 128, 64), (2, 2, 1), 3, 16, "none", "core", ("linear", "biasact")),
    ((64, 64, 64), (2, 2, 1), 4, 16, "none", "extended", ("linear",)),
]
#: the dequantizing epilogue on the sm80/sm89 families (A100/L40-class GPUs)
SM80_S8_SCALED_CONFIGS = [((128, 128, 64), (2, 2, 1), 3, 16, "none", "core", ("scaled",))]
SM89_FP8_CONFIGS = [((128, 64, 128), (2, 2, 1), 3, 16, "none", "core", ("linear", "scaled"))]
#: Volta and Turing: SIMT fp32 (IEEE, as cuBLAS's sgemm) and fp64 (those GPUs' fp64 runs on
#: CUDA cores), any alignment; Turing's int8 IMMA (m8n8k16), K-major
SIMT_F32_CONFIGS = [
    ((128, 128, 8), (4, 2, 1), 2, 1, "none", "extended", ("linear",)),
    ((64, 64, 8), (2, 2, 1), 2, 1, "none", "extended", ("linear",)),
]
SIMT_F64_CONFIGS = [((64, 64, 8), (2, 2, 1), 2, 1, "none", "extended", ("linear",))]
SM75_S8_CONFIGS = [
    ((128, 128, 64), (2, 2, 1), 2, 16, "none", "extended", ("linear",)),
    ((64, 64, 64), (2, 2, 1), 2, 16, "none", "extended", ("linear",)),
]
SM90_TF32_CONFIGS = [
    ((128, 128, 32), (2, 1, 1), "coop", "none", "core", ("linear", "biasact")),
    ((128, 128, 32), (1, 1, 1), "coop", "none", "extended", ("linear",)),
    ((64, 128, 32), (1, 1, 1), "pingpong", "none", "extended", ("linear",)),
]
SM90_S8_CONFIGS = [
    ((128, 128, 128), (1, 1, 1), "coop", "none", "core", ("linear", "biasact")),
    ((64, 128, 128), (1, 1, 1), "pingpong", "none", "extended", ("linear",)),
]
SM90_S8_SCALED_CONFIGS = [((128, 128, 128), (1, 1, 1), "coop", "none", "core", ("scaled",))]
#: fp8 adds the MMA's partial sums into fp32 every 128 of K, as cuBLAS does without fast
#: accumulation, from a second (here a third: kernels/fp8_mainloop.cuh) register set: a
#: 128x256 tile spills (0.33x cuBLAS on the H200); 128x128 with the overlapped promotion
#: runs at 0.95-1.0x at 4096^3-8192^3
SM90_FP8_CONFIGS = [
    ((128, 128, 128), (2, 1, 1), "coop", "none", "core", ("linear", "scaled")),
    ((128, 128, 128), (1, 1, 1), "coop", "none", "linear", ("linear", "scaled")),
    ((64, 128, 128), (1, 1, 1), "pingpong", "none", "linear", ("linear", "scaled")),
    # M = 128 against a long K (128x4096x14336): twice the CTAs of 64x128, each reading
    # a third fewer bytes
    ((64, 64, 128), (1, 1, 1), "pingpong", "none", "linear", ("linear", "scaled")),
]
#: fp8 decode (M <= 64 against large weights): SM90_SWAP_CONFIGS' tiles and tiers, with
#: the dequantizing epilogue too (scale_a/scale_b at decode: 0.62-0.81x torch._scaled_mm
#: on the H200 through the unswapped tiles alone)
SM90_FP8_SWAP_CONFIGS = [
    (tile, cluster, schedule, split, tier, ("linear", "scaled"))
    for tile, cluster, schedule, split, tier, _ in SM90_SWAP_CONFIGS
]
#: fp8 outputs (an fp8 recipe's next layer's input: d = saturate(scale_d * result), amax
#: of the result): e4m3 -> e4m3 in the default build, the rest outside it
SM90_FP8_OUT_CONFIGS = [
    ((128, 128, 128), (2, 1, 1), "coop", "none", "core", ("linear",)),
    ((64, 128, 128), (1, 1, 1), "pingpong", "none", "core", ("linear",)),
]
SM100_FP8_CONFIGS = [  # tcgen05 accumulates fp8 products in fp32: no promotion needed
    ((128, 128, 128), (1, 1, 1), "1sm", "none", "extended", ("linear", "scaled")),
    ((256, 128, 128), (2, 1, 1), "2sm", "none", "extended", ("linear", "scaled")),
]
#: block-scaled fp8 (scale grids applied per 128 of K in the mainloop,
#: kernels/block_scaled_mainloop.cuh): "gb", DeepSeek-V3's and Qwen3-FP8's linear layers (a's
#: per-token scales, the weights' per 128x128 block); "gg" (both per row / column) and "bg"
#: (a column-major d's, transposed) outside the default build. A tile's side takes whole
#: blocks of 128 where its scales are per block (swap-AB: the weights' N on the MMA's 128
#: rows, decode's few tokens on its narrow N side).
SM90_BLOCK_CONFIGS = [
    ((128, 128, 128), (1, 1, 1), "coop", "none", "linear", ("linear", "biasact")),
    ((128, 128, 128), (2, 1, 1), "coop", "none", "extended", ("linear",)),
    ((64, 128, 128), (1, 1, 1), "pingpong", "none", "linear", ("linear", "biasact")),
]
SM90_BLOCK_SWAP_CONFIGS = [
    ((16, 128, 128), (1, 1, 1), "pingpong", "none", "linear", ("linear", "biasact")),
    ((32, 128, 128), (1, 1, 1), "pingpong", "none", "extended", ("linear",)),
    ((64, 128, 128), (1, 1, 1), "coop", "none", "linear", ("linear", "biasact")),
]
#: sm100a (compiled, SASS checked; no sm100 hardware here): CUTLASS's block-scaled tcgen05
#: mainloop
SM100_BLOCK_CONFIGS = [((128, 128, 128), (1, 1, 1), "1sm", "none", "extended", ("linear",))]
#: block kinds -> the tier they may have at most (None: the configuration's)
BLOCK_KINDS = {"gb": None, "gg": "extended", "bg": "extended"}
FP8 = ("e4m3", "e5m2")
#: the second outputs ("aux": the pre-activation, amax), for a Linear's forward pass (tn),
#: on the default fused tiles of each family. The sm90a ping-pong tile serves M <= ~1024:
#: bf16 + GELU at 512x4096x4096 in 32.6 us without storing z, where the 128x256 tile took
#: 59.2 storing it (the store cost 1-4% on other shapes; H200, 2026-12-04)
AUX_CONFIGS = {
    "sm90": [
        ((128, 256, 64), (2, 1, 1), "coop", "none", "core", ("aux",)),
        ((64, 128, 64), (1, 1, 1), "pingpong", "none", "core", ("aux",)),
    ],
    "sm80": [((128, 128, 32), (2, 2, 1), 4, 8, "none", "core", ("aux",))],
}
#: per-row / per-column scale vectors (or scale tensors) on 16-bit inputs, a normalization's
#: or a dequantized layer's factors folded into the GEMM: the dequantizing epilogue on one
#: tile per family, tn, outside the default build
SCALED_16BIT_CONFIGS = {
    "sm90": [((128, 256, 64), (2, 1, 1), "coop", "none", "extended", ("scaled",))],
    "sm80": [((128, 128, 32), (2, 2, 1), 4, 8, "none", "extended", ("scaled",))],
}
MORE_TYPES = [
    *[
        (f, a, (a,), AB_LAYOUTS, configs)
        for f in ("sm70", "sm75")
        for a, configs in (("f32", SIMT_F32_CONFIGS), ("f64", SIMT_F64_CONFIGS))
    ],
    ("sm75", "s8", ("s32",), ("tn",), SM75_S8_CONFIGS),
    ("sm80", "tf32", ("f32",), AB_LAYOUTS, SM80_TF32_CONFIGS),
    ("sm80", "f32", ("f32",), AB_LAYOUTS, SM80_F32_CONFIGS),
    ("sm80", "f64", ("f64",), AB_LAYOUTS, SM80_F64_CONFIGS),
    ("sm80", "s8", ("s32",), ("tn",), SM80_S8_CONFIGS),
    ("sm80", "s8", ("bf16", "f16", "s8"), ("tn",), SM80_S8_SCALED_CONFIGS),
    *[("sm89", a, ("bf16", "f16", "f32"), ("tn",), SM89_FP8_CONFIGS) for a in FP8],
    ("sm90", "tf32", ("f32",), ("tn",), SM90_TF32_CONFIGS),
    ("sm90", "s8", ("s32",), ("tn",), SM90_S8_CONFIGS),
    ("sm90", "s8", ("bf16", "f16", "s8"), ("tn",), SM90_S8_SCALED_CONFIGS),
    *[("sm90", a, ("bf16", "f16", "f32"), ("tn",), SM90_FP8_CONFIGS) for a in FP8],
    *[("sm90", a, ("bf16", "f16", "f32"), ("tn",), SM90_FP8_SWAP_CONFIGS, "swap") for a in FP8],
    ("sm90", "e4m3", ("e4m3",), ("tn",), SM90_FP8_OUT_CONFIGS),
    *[
        ("sm90", a, (d,), ("tn",), [c[:4] + ("extended",) + c[5:] for c in SM90_FP8_OUT_CONFIGS])
        for a, d in (("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2"))
    ],
    *[("sm100", a, ("bf16", "f16", "f32"), ("tn",), SM100_FP8_CONFIGS) for a in FP8],
    *[
        (f, a, (a,), ("tn",), configs[f])
        for configs in (SCALED_16BIT_CONFIGS, AUX_CONFIGS)
        for f in ("sm90", "sm80")
        for a in ("f16", "bf16")
    ],
]


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
                for tile, cluster, schedule, tier in SM90_GROUPED_CONFIGS:
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
    out += _conv_kernels()
    names = [k.name for k in out]
    assert len(names) == len(set(names)), "kernel names must be unique"
    return out


# ---------------------------------------------------------------------------------
# Selection of what to build
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


def auto_tokens() -> list[str]:
    """The archs of an unset ``PYCUTLASS_RT_ARCHS``: the GPUs nvidia-smi lists (a build on
    a machine with a GPU is for that GPU, and several times faster), else ``default``."""
    try:
        tokens = native_tokens()
    except SystemExit:
        return parse_archs("default")
    print(
        f"pycutlass_rt: archs {';'.join(tokens)}, this machine's GPUs "
        "(PYCUTLASS_RT_ARCHS=default builds the portable set, all every arch)",
        file=sys.stderr,
    )
    return tokens


def native_tokens() -> list[str]:
    """Arch tokens for the GPUs of this machine (nvidia-smi), e.g. ['90', '90a']."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise SystemExit(
            f"PYCUTLASS_RT_ARCHS=native: cannot query the GPUs ({e}); "
            "name the archs, e.g. PYCUTLASS_RT_ARCHS='80;90a'"
        ) from None
    tokens: list[str] = []
    for line in out.split():
        cc = line.strip().replace(".", "")
        if cc:
            tokens.append(cc)
            if cc in ("90", "100"):  # arch-specific features: wgmma, tcgen05
                tokens.append(cc + "a")
    if not tokens:
        raise SystemExit("PYCUTLASS_RT_ARCHS=native: nvidia-smi lists no GPU")
    return list(dict.fromkeys(tokens))


def parse_archs(spec: str) -> list[str]:
    """Arch tokens of a ``PYCUTLASS_RT_ARCHS`` value (see the module's docstring).

    >>> parse_archs("80;sm_90a"), parse_archs("default")[:2]
    (['80', '90a'], ['80', '86'])
    """
    spec = (spec or "auto").strip()
    if spec == "auto":  # unset: this machine's GPUs, else the portable set
        return auto_tokens()
    if spec == "default":
        spec = DEFAULT_ARCHS
    if spec == "all":
        return list(ALL_TOKENS)
    if spec == "native":
        return native_tokens()
    tokens = [
        t.strip().replace("sm_", "").replace("sm", "")
        for t in re.split(r"[;, ]", spec)
        if t.strip()
    ]
    unknown = [t for t in tokens if t not in ALL_TOKENS and not t.isdigit()]
    if unknown:
        raise SystemExit(
            f"PYCUTLASS_RT_ARCHS: unknown arch token(s) {unknown}; "
            f"known: {', '.join(ALL_TOKENS)}, native, all"
        )
    return tokens


def plan(archs: list[str], toolkit_codes: set[str] | None, cuda_version: tuple[int, int] | None):
    """Maps requested arch tokens onto families.

    Returns (family -> SASS tokens to build, notes about skipped tokens).
    """
    notes = []
    per_family: dict[str, list[str]] = {}
    for token in archs:
        fams = [f for f in FAMILIES.values() if token in f.tokens or token in dict(f.test)]
        if not fams:
            notes.append(f"sm_{token}: no kernel family in this catalogue targets it; skipped")
            continue
        for fam in fams:
            own = token in fam.tokens  # else a test target, built from another front end
            if own and cuda_version and fam.max_cuda and cuda_version > fam.max_cuda:
                notes.append(
                    f"sm_{token}: the {fam.name} family is built by CUDA "
                    f"{fam.max_cuda[0]}.x and older only; CUDA "
                    f"{cuda_version[0]}.{cuda_version[1]} dropped sm_{token} (its nvcc "
                    f"cannot generate that code), so it is skipped: build with a CUDA "
                    f"{fam.max_cuda[0]}.x toolkit to include it"
                )
                continue
            if cuda_version and cuda_version < fam.min_cuda:
                notes.append(
                    f"sm_{token}: the {fam.name} family needs CUDA >= "
                    f"{fam.min_cuda[0]}.{fam.min_cuda[1]}; skipped"
                )
                continue
            # nvcc lists base archs only: sm_90 stands for sm_90a too
            if toolkit_codes is not None and f"sm_{token.rstrip('af')}" not in toolkit_codes:
                notes.append(f"sm_{token}: this nvcc cannot generate code for it; skipped")
                continue
            per_family.setdefault(fam.name, []).append(token)
    for name, tokens in per_family.items():
        covered = [t for t in tokens if _sass_covers(tokens, t)]
        if covered:
            per_family[name] = [t for t in tokens if t not in covered]
            notes.append(
                f"{', '.join('sm_' + t for t in covered)}: the {name} family's SASS for an "
                "older GPU of the same major version runs there; not compiled again"
            )
    return per_family, notes


def _sass_covers(tokens: list[str], token: str) -> bool:
    """Whether another of ``tokens`` gives SASS that runs on ``token``'s GPUs: an older
    plain (not arch-specific) target of the same major version (sm_80 SASS runs on 8.6
    and 8.9; sm_90a's does not run elsewhere).

    >>> _sass_covers(["80", "86", "90"], "86"), _sass_covers(["80", "90"], "90")
    (True, False)
    """
    if not token.isdigit():
        return False
    return any(t.isdigit() and t[:-1] == token[:-1] and int(t) < int(token) for t in tokens)


#: compile cost, in seconds of one core with CUDA 13.0: a kernel's translation unit (front
#: end and host code) plus each SASS target's device compile. Fitted to the default build
#: (2026-12: 36.8 min on 2 cores, 6.3 min on 16, with sm_86 and sm_89 SASS of the sm80
#: family, no longer built) and nvcc --time of single kernels, where cicc takes 64% of an
#: sm90a kernel.
COMPILE_SECONDS = {"unit": 8.0, "target": 4.0, "arch_specific": 40.0}

#: Kernels compiled as one translation unit share the parsing of their headers and most
#: template instantiations, which is where their time goes (nvcc --time: the front ends,
#: not SASS generation). On a 2-core machine, two compiles at once, CUDA 13.0: eight sm90a
#: bf16 kernels in one unit 97 s and 5.9 GB at peak, against 334 s one by one (each 37-46 s,
#: 3.4 GB); four 67 s, 4.9 GB; eight sm80 ones 35-38 s against 117 s. Their SASS is the
#: same either way (cuobjdump). So a unit's kernels after its first cost FOLLOWER_SHARE of
#: their own time, a unit holds at most MAX_UNIT (its memory), and ``auto`` sizing leaves
#: UNITS_PER_CORE units per core, so that many cores still share the work evenly.
FOLLOWER_SHARE = 0.22
MAX_UNIT = 8
UNITS_PER_CORE = 3
#: an sm90a unit's peak memory in GB: its first kernel, and each further one
UNIT_PEAK_GB = (3.4, 0.35)


def kernel_seconds(k: Kernel, per_family: dict[str, list[str]]) -> float:
    """Core-seconds that compiling ``k`` alone for ``per_family``'s SASS targets takes."""
    c = COMPILE_SECONDS
    targets = len(per_family.get(k.family, []))
    if k.family in TMA_FAMILIES:
        return c["arch_specific"] * max(targets, 1)
    return c["unit"] + c["target"] * targets


def compile_seconds(
    kernels: list[Kernel], per_family: dict[str, list[str]], size: int = 1
) -> float:
    """Core-seconds that compiling ``kernels`` for ``per_family``'s SASS targets takes,
    ``size`` kernels per translation unit."""
    seconds = 0.0
    for _, members, _ in units(kernels, per_family, size):
        costs = sorted((kernel_seconds(k, per_family) for k in members), reverse=True)
        seconds += costs[0] + FOLLOWER_SHARE * sum(costs[1:])
    return seconds


def unit_size(spec: str | None, kernels: int, cores: int) -> int:
    """Kernels per translation unit: ``spec`` (``PYCUTLASS_RT_UNIT_SIZE``) a number, or
    ``auto`` (unset): as many as leave UNITS_PER_CORE units per core, 1 to MAX_UNIT.

    >>> [unit_size("auto", 234, 2), unit_size("auto", 234, 16), unit_size(None, 5, 2)]
    [8, 4, 1]
    >>> unit_size("1", 234, 2)
    1
    """
    spec = (spec or "auto").strip()
    if spec == "auto":
        return max(1, min(MAX_UNIT, kernels // (UNITS_PER_CORE * max(cores, 1))))
    if not spec.isdigit() or int(spec) < 1:
        raise SystemExit(f"PYCUTLASS_RT_UNIT_SIZE={spec}: expected auto or a whole number >= 1")
    return int(spec)


def unit_jobs(size: int, cores: int, memory_gb: float) -> int:
    """How many units compile at once: one per core, fewer where their peak memory would
    pass three quarters of ``memory_gb``.

    >>> [unit_jobs(8, 2, 23), unit_jobs(8, 16, 64), unit_jobs(1, 16, 256)]
    [2, 8, 16]
    """
    first, further = UNIT_PEAK_GB
    fits = int(0.75 * memory_gb // (first + further * (size - 1)))
    return max(1, min(cores, fits))


def units(
    kernels: list[Kernel], per_family: dict[str, list[str]], size: int
) -> list[tuple[str, list[Kernel], list[str]]]:
    """The translation units that compile ``kernels``: (name, kernels, gencode flags).

    A unit's kernels share a header and gencode flags, and are neighbours in name order
    (same family, dtypes and layout first), so that they share the most instantiations. A
    one-kernel unit is named after its kernel.

    >>> ks = [k for k in catalogue() if k.name.startswith("sm90_bf16_bf16_f32_bf16_tn_128")]
    >>> [(n, len(m)) for n, m, _ in units(ks[:5], {"sm90": ["90a"]}, 2)][:2]
    [('sm90_tma_gemm_000', 2), ('sm90_tma_gemm_001', 2)]
    >>> units(ks[:1], {"sm90": ["90a"]}, 2)[0][0] == ks[0].name
    True
    """
    groups: dict[tuple, list[Kernel]] = {}
    for k in sorted(kernels, key=lambda k: k.name):
        flags = gencode_flags(FAMILIES[k.family], per_family.get(k.family, []))
        groups.setdefault((k.family, _header(k), tuple(flags)), []).append(k)
    out = []
    for (family, header, flags), members in groups.items():
        stem = f"{family}_{header.split('.')[0]}"
        for i in range(0, len(members), size):
            chunk = members[i : i + size]
            name = chunk[0].name if len(chunk) == 1 else f"{stem}_{i // size:03d}"
            out.append((name, chunk, list(flags)))
    return out


def estimate_minutes(
    kernels: list[Kernel], per_family: dict[str, list[str]], cores: int, size: int = 1
):
    """(core-minutes, wall minutes on ``cores``) that compiling ``kernels`` takes, ``size``
    kernels per translation unit.

    An sm90a/sm100a (CUTLASS 3.x) kernel costs ``arch_specific`` seconds; a CUTLASS 2.x
    kernel a ``unit`` plus a ``target`` per SASS target of its family; in a unit, each
    kernel after the first FOLLOWER_SHARE of that. Rough (+-20%): it is printed before the
    build so that nobody waits blind.

    >>> ks = [k for k in catalogue() if k.name == "sm80_f16_f16_f32_f16_tn_128x128x32_w2x2_s4_a8"]
    >>> estimate_minutes(ks, {"sm80": ["80", "86"]}, cores=1)
    (0.27, 0.27)
    """
    core_minutes = round(compile_seconds(kernels, per_family, size) / 60, 2)
    return core_minutes, round(core_minutes / max(cores, 1), 2)


def gencode_flags(family: Family, tokens: list[str]) -> list[str]:
    """One front-end pass per virtual arch (the family's, and a test target's where it
    differs), SASS for each token, plus the family's PTX."""
    by_front_end: dict[str, list[str]] = {}
    for t in tokens:
        by_front_end.setdefault(family.virtual_for(t), []).append(f"sm_{t}")
    if family.ptx and family.virtual in by_front_end:
        by_front_end[family.virtual].append(f"compute_{family.virtual}")
    return [
        f"-gencode=arch=compute_{v},code=[{','.join(codes)}]" for v, codes in by_front_end.items()
    ]


def runtime_gencode(per_family: dict[str, list[str]]) -> list[str]:
    """The runtime's own small kernels: SASS for every built arch plus PTX of the oldest."""
    bases = sorted({t.rstrip("af") for toks in per_family.values() for t in toks}, key=int)
    if not bases:
        bases = ["80"]
    codes = [f"sm_{b}" for b in bases] + [f"compute_{bases[0]}"]
    return [f"-gencode=arch=compute_{bases[0]},code=[{','.join(codes)}]"]


# ---------------------------------------------------------------------------------
# Code generation
# ---------------------------------------------------------------------------------

BANNER = "// Generated by native/catalog.py from the kernel list. Do not edit.\n"


def _cute_shape(values) -> str:
    return "cute::Shape<{}>".format(", ".join(f"cute::_{v}" for v in values))


def _gemm_shape(values) -> str:
    return "cutlass::gemm::GemmShape<{}, {}, {}>".format(*values)


def _warp_tile(k: Kernel) -> tuple[int, int, int]:
    return tuple(t // w for t, w in zip(k.tile, k.warps))


def _cpp_bool(v: bool) -> str:
    return "true" if v else "false"


def kernel_type(k: Kernel, unsplit: bool = False) -> str:
    """The C++ type of kernel ``k``; ``unsplit``: a split-K kernel's inner (fp32) kernel."""
    # a GEMM's split-K wraps its unsplit twin, which writes fp32 partials (a convolution's
    # template splits by itself)
    if k.split == "splitk" and not unsplit and not k.conv:
        inner = kernel_type(dataclasses.replace(k, d="f32"), unsplit=True)
        tm, tn, tk = k.tile
        return (
            f"pcr::split::SplitK<{inner}, {DTYPES[k.d][0]}, {tm}, {tn}, {tk}, "
            f"{_cpp_bool(k.layout[0] == 't')}, {_cpp_bool(k.layout[1] == 'n')}, {k.align}>"
        )
    ea, eb, ed = (DTYPES[x][0] for x in (k.a, k.b, k.d))
    if k.conv:
        return _conv_type(k, ea, ed)
    la, lb = (LAYOUTS[x][0] for x in k.layout)
    if k.grouped:
        tile = k.tile
        if k.family in TMA_FAMILIES:
            return (
                f"pcr::tma::GroupedGemm<{ea}, {eb}, {ed}, {la}, {lb}, {_cute_shape(tile)}, "
                f"{_cute_shape(k.cluster)}, pcr::tma::{TMA_GROUPED_SCHEDULES[k.schedule]}, "
                f"{k.align}>"
            )
        return (
            f"pcr::mma::GroupedGemm<pcr::mma::{MMA_FAMILIES[k.family]}, {ea}, {eb}, {ed}, "
            f"{la}, {lb}, {_gemm_shape(k.tile)}, {_gemm_shape(_warp_tile(k))}, "
            f"{_gemm_shape(INSTRUCTIONS[k.family, k.a])}, {k.stages}, {k.align}, "
            f"{k.align_c}>"
        )
    if k.family in TMA_FAMILIES:
        tile, cluster = k.tile, k.cluster
        if k.swap:  # CUTLASS sees A' = B^T (layout flipped) and B' = A^T, M' = N, N' = M
            flip = {"t": "n", "n": "t"}
            la, lb = LAYOUTS[flip[k.layout[1]]][0], LAYOUTS[flip[k.layout[0]]][0]
            ea, eb = eb, ea
            tile = (k.tile[1], k.tile[0], k.tile[2])
            cluster = (k.cluster[1], k.cluster[0], k.cluster[2])
        block = ", {}, {}".format(*k.block_granularity()) if k.block else ""
        return (
            f"pcr::tma::Gemm<{ea}, {eb}, {ed}, {la}, {lb}, {_cute_shape(tile)}, "
            f"{_cute_shape(cluster)}, pcr::tma::{TMA_SCHEDULES[k.schedule]}, {k.align}, "
            f"{SPLITS[k.split][1]}, {_cpp_bool(k.swap)}, {EPILOGUES[k.epilogue]}, "
            f"{DTYPES[k.acc][0]}, {_cpp_bool(k.tensor_scales)}{block}>"
        )
    tile, warp = _gemm_shape(k.tile), _gemm_shape(_warp_tile(k))
    math = MATH_OPERATORS.get(k.a, "cutlass::arch::OpMultiplyAdd")
    return (
        f"pcr::mma::Gemm<pcr::mma::{MMA_FAMILIES[k.family]}, {ea}, {eb}, {ed}, {la}, {lb}, "
        f"{tile}, {warp}, {_gemm_shape(INSTRUCTIONS[k.family, k.a])}, {k.stages}, "
        f"{k.align}, {k.align_c}, {SPLITS[k.split][2]}, {EPILOGUES[k.epilogue]}, "
        f"{DTYPES[k.acc][0]}, {math}>"
    )


def _conv_type(k: Kernel, ea: str, ed: str) -> str:
    """The C++ type of a convolution kernel (native/kernels/conv_mma.cuh, conv_tma.cuh)."""
    if k.family in TMA_FAMILIES:
        return (
            f"pcr::conv::Conv3x<{OPS[k.op]}, {ea}, {ed}, {_cute_shape(k.tile)}, "
            f"{_cute_shape(k.cluster)}, {CONV_SCHEDULES[k.schedule]}, {EPILOGUES[k.epilogue]}>"
        )
    math = MATH_OPERATORS.get(k.a, "cutlass::arch::OpMultiplyAdd")
    return (
        f"pcr::conv::Conv2x<pcr::mma::{MMA_FAMILIES[k.family]}, {OPS[k.op]}, {ea}, {ed}, "
        f"{_gemm_shape(k.tile)}, {_gemm_shape(_warp_tile(k))}, "
        f"{_gemm_shape(INSTRUCTIONS[k.family, k.a])}, {k.stages}, {k.align}, {k.align_c}, "
        f"{EPILOGUES[k.epilogue]}, {math}, {int(k.split == 'splitk')}>"
    )


def kernel_info(k: Kernel) -> str:
    fields = [
        f'"{k.name}"',
        k.family[2:],
        DTYPES[k.a][1],
        DTYPES[k.b][1],
        DTYPES[k.acc][1],
        DTYPES[k.d][1],
        *(("PCR_NHWC",) * 2 if k.conv else (LAYOUTS[x][1] for x in k.layout)),
        *k.tile,
        *k.cluster,
        *k.warps,
        k.stages,
        SCHEDULES[k.schedule],
        EPILOGUES[k.epilogue],
        SPLITS[k.split][0],
        k.align,
        k.align,
        k.align_c,
        int(k.swap),
        int(k.grouped),
        int(k.tensor_scales),
        OPS[k.op],
        *(BLOCK_SCALES[x][0] for x in k.block or ()),
        *(("PCR_SCALE_NONE",) * 2 if not k.block else ()),
        int(k.out_scale),
    ]
    return "{" + ", ".join(map(str, fields)) + "}"


def _header(k: Kernel) -> str:
    return CONV_HEADERS[k.family] if k.conv else FAMILIES[k.family].header


def kernel_source(k: Kernel) -> str:
    header = _header(k)
    split = f'#include "{SPLIT_K_HEADERS[header]}"\n' if k.split == "splitk" and not k.conv else ""
    return (
        BANNER + f'#include "{header}"\n{split}\n'
        f"// {k.name}\n"
        f"using Op_{k.ident} = {kernel_type(k)};\n\n"
        f"extern const pcr::KernelEntry pcr_kernel_{k.ident}{{\n"
        f"    {kernel_info(k)},\n"
        f"    pcr::ops_of<Op_{k.ident}, {_cpp_bool(k.grouped)}>()}};\n"
    )


def registry_source(kernels: list[Kernel], build: dict) -> str:
    decls = "".join(f"extern const pcr::KernelEntry pcr_kernel_{k.ident};\n" for k in kernels)
    rows = "".join(f"    &pcr_kernel_{k.ident},\n" for k in kernels)
    build_json = json.dumps(build, sort_keys=True).replace("\\", "\\\\").replace('"', '\\"')
    return (
        BANNER + '#include "kernel.h"\n\n' + decls + "\nnamespace pcr {\n"
        f"extern const KernelEntry* const kKernels[] = {{\n{rows}    nullptr}};\n"
        f"extern const int kKernelCount = {len(kernels)};\n"
        f'extern const char kBuildJson[] = "{build_json}";\n'
        "}  // namespace pcr\n"
    )


def _write_if_changed(path: str, text: str) -> None:
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(text)


def unit_source(members: list[Kernel]) -> str:
    """A translation unit of several kernels: their own sources, included."""
    return BANNER + "".join(f'#include "../kernels/{k.name}.cu"\n' for k in members)


def emit(
    outdir: str,
    kernels: list[Kernel],
    per_family: dict[str, list[str]],
    build: dict,
    size: int = 1,
    jobs: int = 1,
) -> list:
    """Write a source per kernel, the units compiling them ``size`` at a time (at most
    ``jobs`` at once), the registry and kernels.cmake; returns the units."""
    for sub in ("kernels", "units"):
        os.makedirs(os.path.join(outdir, sub), exist_ok=True)
    for k in kernels:
        _write_if_changed(os.path.join(outdir, "kernels", k.name + ".cu"), kernel_source(k))
    cmake = [f"# {BANNER[3:]}set(PCR_KERNEL_SOURCES)", f"set(PCR_UNIT_JOBS {jobs})"]
    compiled = units(kernels, per_family, size)
    for name, members, flags in compiled:
        if len(members) == 1:
            path = os.path.join(outdir, "kernels", name + ".cu")
        else:
            path = os.path.join(outdir, "units", name + ".cu")
            _write_if_changed(path, unit_source(members))
        cmake.append(f'list(APPEND PCR_KERNEL_SOURCES "{path}")')
        cmake.append(
            f'set_source_files_properties("{path}" PROPERTIES COMPILE_OPTIONS "{";".join(flags)}")'
        )
    cmake.append(f'set(PCR_RUNTIME_GENCODE "{";".join(runtime_gencode(per_family))}")')
    _write_if_changed(os.path.join(outdir, "registry.cpp"), registry_source(kernels, build))
    _write_if_changed(os.path.join(outdir, "kernels.cmake"), "\n".join(cmake) + "\n")
    return compiled


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _memory_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 16.0


def toolkit(nvcc: str | None):
    """(set of 'sm_XX' codes nvcc can build, (major, minor)) or (None, None)."""
    if not nvcc:
        return None, None
    try:
        codes = set(
            subprocess.run(
                [nvcc, "--list-gpu-code"], capture_output=True, text=True, check=True
            ).stdout.split()
        )
        ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
        m = re.search(r"release (\d+)\.(\d+)", ver)
        return codes, (int(m.group(1)), int(m.group(2))) if m else None
    except (OSError, subprocess.SubprocessError):
        return None, None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--archs", default=os.environ.get("PYCUTLASS_RT_ARCHS", "default"))
    ap.add_argument(
        "--kernels",
        default=os.environ.get("PYCUTLASS_RT_KERNELS"),
        help="kernel filter (default: the core tier for --emit, all for --list)",
    )
    ap.add_argument("--list", action="store_true", help="print kernel names, one per line")
    ap.add_argument("--json", action="store_true", help="print the selected records as JSON")
    ap.add_argument("--emit", metavar="DIR", help="write sources, registry and kernels.cmake")
    ap.add_argument("--nvcc", help="nvcc to ask which archs it can build")
    ap.add_argument(
        "--unit-size",
        default=os.environ.get("PYCUTLASS_RT_UNIT_SIZE"),
        help="kernels per translation unit: auto (default) or a number",
    )
    args = ap.parse_args(argv)

    if not args.kernels:
        args.kernels = "all" if args.list and not args.emit else "default"
    kernels = select_kernels(catalogue(), args.kernels)
    archs = parse_archs(args.archs)
    codes, cuda = toolkit(args.nvcc) if args.emit else (None, None)
    per_family, notes = plan(archs, codes, cuda)
    kernels = [k for k in kernels if k.family in per_family]
    per_family = {f: t for f, t in per_family.items() if any(k.family == f for k in kernels)}

    if args.list:
        print("\n".join(k.name for k in kernels))
    if args.json:
        print(json.dumps([dict(dataclasses.asdict(k), name=k.name) for k in kernels], indent=1))
    if args.emit:
        for n in notes:
            print(f"pycutlass_rt: {n}", file=sys.stderr)
        build = {
            "archs_requested": archs,
            "families": per_family,
            "skipped": notes,
            "kernel_filter": args.kernels,
            "cuda": "{}.{}".format(*cuda) if cuda else None,
        }
        cores = int(os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or os.cpu_count() or 1)
        size = build["unit_size"] = unit_size(args.unit_size, len(kernels), cores)
        jobs = unit_jobs(size, cores, _memory_gb())
        count = len(emit(args.emit, kernels, per_family, build, size, jobs))
        _, minutes = estimate_minutes(kernels, per_family, min(cores, jobs), size)
        took = f"{minutes:.0f} min" if minutes >= 2 else f"{minutes * 60:.0f} s"
        print(
            f"pycutlass_rt: {_count(len(kernels), 'kernel')} for "
            + ", ".join(f"{f} ({' '.join(t)})" for f, t in per_family.items())
            + f" in {_count(count, 'translation unit')} of up to {size}, {jobs} at once; "
            f"about {took} "
            f"on {cores} cores (progress: ninja's [n/N], which pip shows with -v)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
