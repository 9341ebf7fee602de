"""The configuration tables: which tiles, clusters, schedules and dtypes are built.

Pure data: each table lists configurations of one family and dtype group, with the tier
each is built in (``tiers``) and the epilogues it takes; ``listing.catalogue`` expands them
into ``Kernel`` records. Kept apart from that expansion so that choosing a tile means
editing a table, with the reasons in its comment, and nothing else.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------
# GEMMs of 16-bit dtypes: every family, every layout
# ---------------------------------------------------------------------------------

#: (input dtype, output dtype); accumulation is fp32 throughout
GEMM_TYPES = [("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32")]
AB_LAYOUTS = ["tn", "nn", "nt", "tt"]


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
    # mid-size M (300-3000) against N of 1-5K, where even the best of the tiles above
    # trailed cuBLAS on the held-out sweep: 192 columns come closer to whole waves
    # (769x3072: 112 tiles of 128x192 for 132 SMs, 84 of 128x256); tier.py's first pick
    # over the default tiles on the fit part (its figures: benchmarks/RESULTS.md)
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
#: grouped kernels (pcr_grouped_gemm, pcr_moe_gemm): (tile, cluster, schedule, tier,
#: epilogue) on sm90a, for tn and tt (a MoE layer's weights either way); (tile, warps,
#: stages, tier) on the sm80 family, every layout, linear only. Cooperative tiles for
#: large groups, 64-row ping-pong tiles for the many small groups of skewed MoE routing;
#: "biasact": a MoE layer's bias and activation fused (tma_grouped.cuh's GroupedTree).
GROUPED_TYPES = [("f16", "f16"), ("bf16", "bf16")]
SM90_GROUPED_CONFIGS = [
    ((128, 128, 64), (1, 1, 1), "coop", "core", "linear"),
    ((128, 128, 64), (1, 1, 1), "coop", "core", "biasact"),
    ((64, 128, 64), (1, 1, 1), "pingpong", "extended", "linear"),
]
#: fp8 grouped kernels (fp8 MoE layers): (input, output) dtypes, tn only (the weights
#: K-major, as checkpoints store a Linear's (N, K) weight): (tile, cluster, schedule,
#: tier, block). Without block scales, the dequantizing epilogue (per-tensor, per-expert,
#: per-token and per-channel scales, bias, activation); with them ("gb": per token and
#: 128 of K for x, per 128 x 128 block for each expert's w, DeepSeek-V3's MoE recipe),
#: CUTLASS's block-scaled pointer-array mainloop and the bias/activation epilogue.
GROUPED_QUANTIZED_TYPES = [("e4m3", "bf16")]
SM90_GROUPED_QUANTIZED_CONFIGS = [
    ((128, 128, 128), (1, 1, 1), "coop", "core", ""),
    ((64, 128, 128), (1, 1, 1), "pingpong", "core", ""),
    ((128, 256, 128), (1, 1, 1), "coop", "extended", ""),
    ((128, 128, 128), (1, 1, 1), "coop", "core", "gb"),
    ((64, 128, 128), (1, 1, 1), "pingpong", "core", "gb"),
]
SM80_GROUPED_CONFIGS = [
    ((128, 128, 32), (2, 2, 1), 4, "core"),
    ((64, 64, 32), (2, 2, 1), 6, "extended"),
]

# ---------------------------------------------------------------------------------
# Convolutions (implicit GEMM)
# ---------------------------------------------------------------------------------

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

#: depthwise fprop (groups = C = K: MobileNet's and ConvNeXt's spatial convolutions), direct
#: kernels on CUDA cores (native/kernels/depthwise.cuh), sm80 family (they run on sm90 too):
#: ((R, S), stride, tier), (R, S) and stride (0, 0), 0 for the generic kernel (any filter,
#: stride and dilation). All in the extended tier while they trail cuDNN (they compute
#: right; benchmarks/RESULTS.md has their speed): the default build refuses depthwise
#: convolutions (UnsupportedError; pycutlass_rt.torch runs them on torch). The 3x3 filters
#: of MobileNet-V2/-V3 and EfficientNet at both strides, ConvNeXt's 7x7 and the generic one
#: are meant for the core tier once they match it. Each is built with the fused epilogue
#: alone: without a bias or activation it computes the linear one.
DEPTHWISE_TYPES = [("f16", "f16"), ("bf16", "bf16")]
SM80_DEPTHWISE_CONFIGS = [
    ((3, 3), 1, "extended"),
    ((3, 3), 2, "extended"),
    ((7, 7), 1, "extended"),
    ((0, 0), 0, "extended"),
    ((5, 5), 1, "extended"),
    ((5, 5), 2, "extended"),
    ((7, 7), 2, "extended"),
]
#: depthwise dgrad and wgrad, the linear epilogue (alpha, beta * c), extended as the fprop
#: ones: (op, (R, S), stride, tier) as above. A stride-1 dgrad built for a filter is
#: fprop's kernel for it on dy with the filters rotated (reusing inputs along W); the
#: stride-2 ones and the generic dgrad gather tap by tap (the former with the taps
#: unrolled and the stride's divisions as shifts). wgrad sums over N * P * Q in CTA
#: slices into fp32 partials (the workspace) added up in a fixed order; one built for a
#: filter gives each thread a run of outputs along W for one filter row, reusing inputs as
#: fprop's, and a CTA all filter rows of its runs (one, for small problems).
SM80_DEPTHWISE_GRADIENTS = [
    ("dgrad", (3, 3), 1, "extended"),
    ("dgrad", (5, 5), 1, "extended"),
    ("dgrad", (7, 7), 1, "extended"),
    ("dgrad", (3, 3), 2, "extended"),
    ("dgrad", (5, 5), 2, "extended"),
    ("dgrad", (0, 0), 0, "extended"),
    ("wgrad", (3, 3), 1, "extended"),
    ("wgrad", (3, 3), 2, "extended"),
    ("wgrad", (5, 5), 1, "extended"),
    ("wgrad", (5, 5), 2, "extended"),
    ("wgrad", (7, 7), 1, "extended"),
    ("wgrad", (0, 0), 0, "extended"),
]
#: grouped convolutions with few channels per group (C = K: ResNeXt's 3x3s, 32 groups of 4,
#: 8, 16 and 32 channels in its four stages), direct kernels on CUDA cores
#: (native/kernels/grouped_direct.cuh), sm80 family: (op, (R, S), stride, channels per
#: group, tier); fprop with the fused epilogue, a stride-1 dgrad (fprop's kernel on dy with
#: the filters flipped) with the linear one. Where none takes a grouped convolution, it
#: runs as one GEMM per group on the unfolded input (pycutlass_rt/_conv_gemm.py). Extended
#: until they have run against cuDNN.
SM80_GROUPED_DIRECT = [
    ("fprop", (3, 3), 1, 4, "extended"),
    ("fprop", (3, 3), 2, 4, "extended"),
    ("fprop", (3, 3), 1, 8, "extended"),
    ("fprop", (3, 3), 2, 8, "extended"),
    ("fprop", (3, 3), 1, 16, "extended"),
    ("fprop", (3, 3), 2, 16, "extended"),
    ("fprop", (3, 3), 1, 32, "extended"),
    ("fprop", (3, 3), 2, 32, "extended"),
    ("dgrad", (3, 3), 1, 4, "extended"),
    ("dgrad", (3, 3), 1, 8, "extended"),
    ("dgrad", (3, 3), 1, 16, "extended"),
    ("dgrad", (3, 3), 1, 32, "extended"),
]

# ---------------------------------------------------------------------------------
# The other dtypes, the second outputs and the block-scaled kernels
# ---------------------------------------------------------------------------------

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
    # float64 with a bias or activation in the default build: a small build cost for a
    # dtype torch users fuse too (its GPU runs: docs/verification.md)
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
#: fp8 with fast accumulation (pcr_math FAST_ACCUM; torch._scaled_mm's use_fast_accum): no
#: promotion, so no third register set, and the 128x256 tile the promotion spills fits
#: again. One of each schedule; no sweep has timed them yet, so the table and tier leave
#: them to the model
SM90_FP8_FASTACCUM_CONFIGS = [
    ((128, 256, 128), (2, 1, 1), "coopfa", "none", "linear", ("linear", "scaled")),
    ((64, 128, 128), (1, 1, 1), "pingpongfa", "none", "linear", ("linear", "scaled")),
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
#: rows, decode's few tokens on its narrow N side). The swap-AB 64x128 cooperative tile
#: trailed the 64x128 ping-pong on every fit-part shape timed (benchmarks/RESULTS.md):
#: not in the default build.
SM90_BLOCK_CONFIGS = [
    ((128, 128, 128), (1, 1, 1), "coop", "none", "linear", ("linear", "biasact")),
    ((128, 128, 128), (2, 1, 1), "coop", "none", "extended", ("linear",)),
    ((128, 128, 128), (1, 2, 1), "coop", "none", "extended", ("linear",)),
    ((128, 128, 128), (1, 1, 1), "coop", "streamk", "extended", ("linear",)),
    ((64, 128, 128), (1, 1, 1), "pingpong", "none", "linear", ("linear", "biasact")),
    ((64, 128, 128), (2, 1, 1), "pingpong", "none", "extended", ("linear",)),
    ((64, 128, 128), (1, 2, 1), "pingpong", "none", "extended", ("linear",)),
]
SM90_BLOCK_SWAP_CONFIGS = [
    ((16, 128, 128), (1, 1, 1), "pingpong", "none", "linear", ("linear", "biasact")),
    ((32, 128, 128), (1, 1, 1), "pingpong", "none", "extended", ("linear",)),
    ((64, 128, 128), (1, 1, 1), "coop", "none", "extended", ("linear", "biasact")),
]
#: sm100a (compiled, SASS checked; no sm100 hardware here): CUTLASS's block-scaled tcgen05
#: mainloop
SM100_BLOCK_CONFIGS = [((128, 128, 128), (1, 1, 1), "1sm", "none", "extended", ("linear",))]
#: block kinds -> the tier they may have at most (None: the configuration's)
BLOCK_KINDS = {"gb": None, "gg": "extended", "bg": "extended"}
FP8 = ("e4m3", "e5m2")
#: the second outputs ("aux": the pre-activation, amax), for a Linear's forward pass (tn),
#: on the default fused tiles of each family. The sm90a ping-pong tile serves M <= ~1024,
#: where the large tile's store of z cost more than the tile gained (benchmarks/RESULTS.md,
#: "A Linear + GELU keeping the pre-activation")
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
    *[("sm90", a, ("bf16", "f16", "f32"), ("tn",), SM90_FP8_FASTACCUM_CONFIGS) for a in FP8],
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
