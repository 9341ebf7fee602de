"""The kernel record and its name: the words a name is made of and what each means.

Every kernel the library can contain is one ``Kernel`` record. Its procedural ``name``
encodes every parameter and is its identity everywhere (build filter, registry, selection
tables, tests, logs). The tables here map each word of a name to what it stands for in
C++ and in the C ABI (the ``PCR_`` constants), so that a name, a record and the emitted
``KernelInfo`` say the same thing; C++ that only code generation needs is in ``sources``.
"""

from __future__ import annotations

import dataclasses
import re

from .archs import TMA_FAMILIES
from .tiers import in_default_build

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
    "coopfa": "PCR_SCHED_COOPFA",
    "pingpongfa": "PCR_SCHED_PINGPONGFA",
    "depthwise": "PCR_SCHED_DEPTHWISE",
    "direct": "PCR_SCHED_DIRECT",
}
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
#: op -> pcr_op: a GEMM, or a 2-D convolution's pass run as an implicit GEMM
OPS = {
    "gemm": "PCR_OP_GEMM",
    "fprop": "PCR_OP_FPROP",
    "dgrad": "PCR_OP_DGRAD",
    "wgrad": "PCR_OP_WGRAD",
}
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
    #: tn layout, D in the layer's output dtype: see tiers.py); "extended": not
    tier: str = "extended"
    #: "gemm", or a convolution's implicit GEMM (OPS): its layout is "nhwc" (packed NHWC
    #: activations, KRSC filters) and its name carries the op after the family
    op: str = "gemm"
    #: a block-scaled fp8 mainloop: a's then b's scale kind (BLOCK_SCALES letters, problem
    #: terms: "gb" is DeepSeek-V3's per-token a, 128x128-block b); "" for none
    block: str = ""
    #: a direct grouped kernel (schedule "direct"): the channels per group (C / groups = K /
    #: groups) it is built for; 0 for every other kernel
    group: int = 0

    @property
    def default(self) -> bool:
        """Whether the default build (kernel filter ``default``) holds this kernel."""
        return in_default_build(self.tier, self.layout, self.a, self.d)

    @property
    def depthwise(self) -> bool:
        """A direct depthwise kernel (native/kernels/depthwise.cuh), no implicit GEMM: its
        tile is the filter (R, S) and stride it is built for, (0, 0, 0) for any."""
        return self.schedule == "depthwise"

    @property
    def direct(self) -> bool:
        """A direct convolution on CUDA cores, no implicit GEMM: a depthwise kernel, or a
        grouped one (native/kernels/grouped_direct.cuh; ``group`` channels per group), its
        tile the filter (R, S) and stride it is built for."""
        return self.schedule in ("depthwise", "direct")

    @property
    def name(self) -> str:
        tile = "x".join(map(str, self.tile))
        op = [self.op] if self.conv else []
        parts = [self.family, *op, self.a, self.b, self.acc, self.d, self.layout, tile]
        if self.direct:
            # the filter and stride word ("f3x3s2", "fany"; "f3x3s1g8": also 8 channels per
            # group), then the schedule's
            r, s, stride = self.tile
            word = f"f{r}x{s}s{stride}" if r else "fany"
            parts[-1:] = [word + (f"g{self.group}" if self.group else ""), self.schedule]
        elif self.family in TMA_FAMILIES:
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
        into amax and multiplies D by scale_d: every family's dequantizing epilogue
        (tma_gemm.cuh's QuantizedOutput, mma_gemm.cuh's ScaledTree), and the sm90a/sm100a
        linear ones that read scale tensors or block scales; not the grouped ones."""
        return not self.grouped and (
            self.epilogue == "scaled"
            or (self.family in TMA_FAMILIES and (self.tensor_scales or bool(self.block)))
        )

    def block_granularity(self) -> tuple[int, int]:
        """A block-scaled kernel's rows and columns per scale along the CUTLASS kernel's M
        and N (swapped for swap-AB kernels), (0, 0) for others."""
        if not self.block:
            return 0, 0
        m, n = (BLOCK_SCALES[x][1] for x in self.block)
        return (n, m) if self.swap else (m, n)

    @property
    def align_b(self) -> int:
        """B's alignment in elements: a depthwise kernel stages its filters (one value per
        channel and tap) through shared memory element by element, and its wgrad reads x
        (B) in channel vectors, whose alignment its A (dy) has too."""
        if self.direct:
            return self.align if self.op == "wgrad" else 1
        return self.align

    @property
    def align_c(self) -> int:
        """C's and D's alignment in elements: a depthwise wgrad writes dw (C x R x S, rows
        of R * S taps) element by element."""
        if self.depthwise and self.op == "wgrad":
            return 1
        if self.conv:  # the output's channels: the inputs' alignment (same element size)
            return self.align
        return 1 if self.align == 1 else 16 // DTYPES[self.d][2]

    @property
    def ident(self) -> str:
        return re.sub(r"\W", "_", self.name)
