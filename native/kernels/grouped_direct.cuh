// Grouped 2-D convolutions with few channels per group (C = K, kG = 4 to 32 channels a
// group: ResNeXt's 32 groups in all four stages), fprop and a stride-1 dgrad, direct on
// CUDA cores: the depthwise kernels' pieces (Params, runs of outputs along W, channel chunks
// per CTA, the fused epilogue) with each output channel summing its group's kG input
// channels per tap. As one GEMM per group such a convolution is N = K / groups wide, far
// narrower than any tensor-core tile. A stride-1 dgrad is the same kernel run on dy with
// each group's filters rotated by 180 degrees and transposed (dx's channel c takes dy's
// channel k of its group through w[k][R-1-r][S-1-s][c]), the padding R - 1 - pad.
//
// A thread holds 4 output channels (kG is 4 or a multiple of 8, so they lie in one group)
// of kOutputs consecutive outputs along W. For each tap, 8 input channels at a time, it
// reads its 4 x 8 weights from shared memory once, then for each output those input
// channels at that tap's column (8- or 16-byte loads, mostly from L1: the run's outputs
// and the CTA's neighbouring runs share columns) and adds 4 x 8 products.
#pragma once

#include "depthwise.cuh"

namespace pcr::depthwise {

constexpr int kGroupVec = 4;  // output channels per thread

// The CTA's chunk of output channels' filters (w: K x R x S x kG) in shared memory as
// floats, so that a warp's lanes (consecutive channel vectors) read consecutive 16 bytes:
// float4 [tap][q][i][lane] holds the weights of output channel 4 * lane + i for input
// channels 4q .. 4q + 3 of its group at tap. kFlip: a dgrad's, w rotated by 180 degrees
// and transposed within each group (output channel o, input channel c of its group g at
// tap t: w[g * kG + c][taps - 1 - t][o - g * kG]).
template <class T, int kG, bool kFlip = false>
__device__ __forceinline__ const float4* stage_group_filters(const Params& prm, int taps) {
  float* filters = reinterpret_cast<float*>(shared_bytes());
  const int cv = prm.chunk_vectors, chunk_channels = cv * kGroupVec;
  const int o0 = blockIdx.y * chunk_channels;
  const T* w = static_cast<const T*>(prm.w);
  const int count = min(chunk_channels, prm.ch - o0) * taps * kG;
  for (int e = threadIdx.x; e < count; e += kThreads) {  // the chunk's order: o, tap, c
    const int c = e % kG, tap = e / kG % taps, o = e / (kG * taps);
    const int from = o0 + o, group = from / kG * kG;
    const int64_t at = kFlip ? (int64_t(group + c) * taps + taps - 1 - tap) * kG + from - group
                             : int64_t(o0) * taps * kG + e;
    const int lane = o / kGroupVec, i = o % kGroupVec;
    filters[(((tap * (kG / 4) + c / 4) * kGroupVec + i) * cv + lane) * 4 + c % 4] = float(w[at]);
  }
  __syncthreads();
  return reinterpret_cast<const float4*>(filters);
}

// fprop of a kR x kS filter at stride kStride (dilation 1), kG channels per group, C = K;
// kFlip: the filters rotated and transposed within their group (a stride-1 dgrad).
template <class T, class D, int kR, int kS, int kStride, int kG, bool kFlip = false>
__global__ void __launch_bounds__(kThreads, kMinCtas) grouped_fprop(const Params prm) {
  static_assert(kG == 4 || kG % kVector == 0, "4 channels per group, or whole 16-byte rows");
  constexpr int kLoad = kG < kVector ? kG : kVector;  // input channels per load (16 bytes)
  constexpr int kQ = kG / 4;  // float4s of one output channel's weights at a tap
  using A = AccN<kGroupVec>;
  const int cv = prm.chunk_vectors;
  const float4* filters = stage_group_filters<T, kG, kFlip>(prm, kR * kS);

  Run run;
  if (!run_of(prm, prm.p, run)) return;
  const int channel = run.vector * kGroupVec;  // the thread's first output channel
  const int ch = prm.ch, width = prm.w_;
  // its group's first input channel
  const T* x =
      static_cast<const T*>(prm.x) + int64_t(run.n) * prm.h * width * ch + channel / kG * kG;
  const float4* f = filters + run.lane;

  A acc[kOutputs];
  CUTLASS_PRAGMA_UNROLL
  for (int t = 0; t < kOutputs; ++t) acc[t].fill(0.0f);
  // the input columns of the run's windows; a run whose columns all lie inside the row
  // (most) reads them without bounds checks
  constexpr int kSpan = (kOutputs - 1) * kStride + kS;
  const int iw0 = run.col0 * kStride - prm.pad_w;
  auto rows = [&](auto checked) {
    CUTLASS_PRAGMA_NO_UNROLL
    for (int r = 0; r < kR; ++r) {
      const int ih = run.row * kStride - prm.pad_h + r;
      if (ih < 0 || ih >= prm.h) continue;
      const T* in = x + (int64_t(ih) * width + iw0) * ch;  // column iw0 (maybe padding)
      CUTLASS_PRAGMA_UNROLL
      for (int s = 0; s < kS; ++s) {
        // a block of kLoad input channels at a time: its weights (output channel i, input
        // channel c0 + c), then each output's inputs of the block; the blocks in turn (16 or
        // more channels a group: unrolled, their loads hoisted past the registers)
        CUTLASS_PRAGMA_NO_UNROLL
        for (int c0 = 0; c0 < kG; c0 += kLoad) {
          float w[kGroupVec][kLoad];
          CUTLASS_PRAGMA_UNROLL
          for (int i = 0; i < kGroupVec; ++i) {
            CUTLASS_PRAGMA_UNROLL
            for (int q = 0; q < kLoad / 4; ++q) {
              const float4 v = f[(((r * kS + s) * kQ + c0 / 4 + q) * kGroupVec + i) * cv];
              w[i][4 * q] = v.x, w[i][4 * q + 1] = v.y, w[i][4 * q + 2] = v.z;
              w[i][4 * q + 3] = v.w;
            }
          }
          CUTLASS_PRAGMA_UNROLL
          for (int t = 0; t < kOutputs; ++t) {
            const int j = t * kStride + s;  // the column output t reads at tap s
            if (decltype(checked)::value && (iw0 + j < 0 || iw0 + j >= width))
              continue;  // padding (or an output past the row's end)
            const AccN<kLoad> xv = load_vector<T, kLoad>(in + j * ch + c0);
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < kGroupVec; ++i) {
              CUTLASS_PRAGMA_UNROLL
              for (int c = 0; c < kLoad; ++c) acc[t][i] = fmaf(xv[c], w[i][c], acc[t][i]);
            }
          }
        }
      }
    }
  };
  if (iw0 >= 0 && iw0 + kSpan <= width)
    rows(std::false_type{});
  else
    rows(std::true_type{});
  store_run<D, kGroupVec, kOutputs>(prm, acc, (int64_t(run.n) * prm.p + run.row) * prm.q, run.col0,
                                    prm.q, channel);
}

// The KernelOps (kernel.h) of a direct grouped kernel of pass kOp (fprop, or a stride-1
// dgrad: fprop's kernel on dy with the filters flipped): ElementA the inputs' dtype (half_t
// or bfloat16_t), ElementD the output's (the same); built for a kR x kS filter at stride
// kStride and kG channels per group. fprop's epilogue is the fused one (PCR_EPI_BIASACT),
// dgrad's the linear one.
template <int kOp, class ElementA, class ElementD, int kR, int kS, int kStride, int kG>
struct GroupedDirect {
  static_assert(sizeof(ElementA) == 2 && sizeof(ElementD) == 2, "16-bit inputs and outputs");
  static_assert(kOp == PCR_OP_FPROP || (kOp == PCR_OP_DGRAD && kStride == 1),
                "fprop, or a stride-1 dgrad");
  static constexpr bool kFlip = kOp == PCR_OP_DGRAD;
  static constexpr bool kProgrammatic = false;
  static constexpr int kFilterBytes = kR * kS * kGroupVec * kG * int(sizeof(float));  // a vector's

  struct Prepared {
    Params params;
    dim3 grid;
    int smem;
  };

  // Output channel vectors per CTA (equal_chunks): up to kMaxVectors, as many as shared
  // memory holds the filters of.
  static int chunk_vectors(const ConvArgs& v) {
    return equal_chunks(v.c / kGroupVec, std::min(kMaxVectors, kMaxSmem / kFilterBytes));
  }

  static int can_implement(const GemmArgs& g) {
    const ConvArgs& v = g.conv;
    if (v.kind != kOp)
      return set_error(PCR_ERR_UNSUPPORTED, "a grouped %s kernel cannot run a %s", op_words(kOp),
                       op_words(v.kind));
    if (v.groups < 2 || v.k != v.c || v.c != v.groups * kG)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "this kernel runs grouped convolutions of %d channels per group, as "
                       "many out as in; got C %d, K %d, %d groups",
                       kG, v.c, v.k, v.groups);
    if (v.c % kVector)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "grouped direct kernels read channels in 16-byte rows; C %d is not a "
                       "multiple of %d",
                       v.c, kVector);
    if (refuse_other_filter(v, kR, kS, kStride) != PCR_OK) return PCR_ERR_UNSUPPORTED;
    if (kFlip && refuse_flipped_padding(v, kR, kS) != PCR_OK) return PCR_ERR_UNSUPPORTED;
    const auto [height, width] = kFlip ? std::pair{v.h, v.w} : std::pair{v.p, v.q};
    return refuse_wide_grid(v.n, height, width, kOutputs, chunk_vectors(v));
  }

  static size_t workspace_size(const GemmArgs&) { return 0; }

  static int prepare(const GemmArgs& g, void*, void* out) {
    const ConvArgs& v = g.conv;
    auto* prep = new (out) Prepared{};
    Params& p = prep->params;
    p.x = g.a, p.w = g.b;  // dgrad: dy, w
    common_params(g, kGroupVec, chunk_vectors(v), p);
    if (kFlip) as_flipped_fprop(v, kR, kS, p);  // fprop's kernel from dy (P x Q) to dx (H x W)
    p.runs = (p.q + kOutputs - 1) / kOutputs;
    p.items = int64_t(v.n) * p.p * p.runs;
    const int chunks = (p.vectors + p.chunk_vectors - 1) / p.chunk_vectors;
    prep->grid = spread_runs(p, chunks, g.sm_count);
    prep->smem = p.chunk_vectors * kFilterBytes;
    return PCR_OK;
  }

  static auto kernel() { return &grouped_fprop<ElementA, ElementD, kR, kS, kStride, kG, kFlip>; }

  static int launch(const void* prepared, void*, int, cudaStream_t stream,
                    bool /*programmatic: never, see kProgrammatic*/) {
    const auto& prep = *static_cast<const Prepared*>(prepared);
    return start(kernel(), prep.grid, prep.smem, stream, prep.params);
  }

  static const void* device_function() { return reinterpret_cast<const void*>(kernel()); }
};

}  // namespace pcr::depthwise
