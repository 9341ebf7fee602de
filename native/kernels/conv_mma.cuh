// CUTLASS 2.x implicit-GEMM 2-D convolutions on mma.sync (sm80 family: one sm_80 source for
// sm_80/86/89/90 SASS and later GPUs' PTX), on the multistage (cp.async) or the 2-stage
// pipelined mainloop: fprop, dgrad and wgrad of packed NHWC activations and KRSC filters in
// cross-correlation mode (torch's conv2d).
// Loads of A and B (Align elements: 16 bytes, or fewer for channel counts that are not whole
// 16-byte vectors; under 4 bytes only on the 2-stage mainloop, as cp.async moves 4 to 16) take
// CUTLASS's optimized iterators, except fprop's narrower-than-16-byte ones: the few-channels
// iterators walk R*S*C as one dense GEMM K, so that a C = 3 stem spends no MMA on padding channels.
// The epilogue is CUTLASS's linear combination or, for fprop, BiasAct: act(alpha * acc +
// beta * C + bias[k]) on the broadcast epilogue, its activation chosen per launch.
// Split-K (for wgrad, whose few output tiles face K = N*P*Q) is CUTLASS's parallel split-K:
// the slices write fp32 partials into the workspace and a second kernel adds them up in
// slice order, so results are deterministic. Grouped fprop is CUTLASS's single-group mode.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/conv/kernel/default_conv2d_dgrad.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"
#include "cutlass/conv/kernel/default_conv2d_fprop_with_broadcast.h"
#include "cutlass/conv/kernel/default_conv2d_group_fprop.h"
#include "cutlass/conv/kernel/default_conv2d_wgrad.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/reduction/kernel/reduce_split_k.h"
#include "cutlass/reduction/thread/reduction_operators.h"

#include <algorithm>
#include <new>

#include "activation.h"
#include "kernel.h"
#include "mma_gemm.cuh"

namespace pcr::conv {

// The fused fprop epilogue's output operator (the concept of CUTLASS's EpilogueWithBroadcast,
// as LinearCombinationBiasElementwise implements it): D = act(alpha * acc + beta * C + bias),
// the bias one value per output channel (a column of the implicit GEMM, read as 0 when null).
// The activation applies to a whole fragment: a switch per element costs more than the GEMM.
template <class ElementD, int N>
struct BiasAct {
  using ElementOutput = ElementD;
  using ElementAccumulator = float;
  using ElementCompute = float;
  using ElementZ = ElementD;
  using ElementT = ElementD;
  using ElementVector = ElementD;
  static constexpr int kElementsPerAccess = N;
  static constexpr int kCount = N;
  static constexpr bool kIsSingleSource = true;
  static constexpr bool kStoreZ = true;   // Z is D
  static constexpr bool kStoreT = false;  // no pre-activation tensor
  using FragmentAccumulator = cutlass::Array<float, N>;
  using FragmentCompute = cutlass::Array<float, N>;
  using FragmentC = cutlass::Array<ElementD, N>;
  using FragmentZ = cutlass::Array<ElementD, N>;
  using FragmentT = cutlass::Array<ElementD, N>;

  struct Params {
    float alpha, beta;
    ActivationArgs activation;
  };
  Params params;

  CUTLASS_HOST_DEVICE BiasAct(Params const& p) : params(p) {}
  CUTLASS_HOST_DEVICE bool is_source_needed() const { return params.beta != 0.0f; }
  // for serial split-K, which these kernels never run
  CUTLASS_HOST_DEVICE void set_k_partition(int, int) {}

  CUTLASS_HOST_DEVICE void operator()(FragmentZ& z, FragmentT&, FragmentAccumulator const& acc,
                                      FragmentC const& c, FragmentCompute const& bias) const {
    cutlass::NumericArrayConverter<float, ElementD, N> to_float;
    const FragmentCompute source = to_float(c);
    FragmentCompute y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) y[i] = params.alpha * acc[i] + params.beta * source[i] + bias[i];
    z = cutlass::NumericArrayConverter<ElementD, float, N>()(activate(params.activation, y));
  }
  CUTLASS_HOST_DEVICE void operator()(FragmentZ& z, FragmentT&, FragmentAccumulator const& acc,
                                      FragmentCompute const& bias) const {
    FragmentCompute y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) y[i] = params.alpha * acc[i] + bias[i];
    z = cutlass::NumericArrayConverter<ElementD, float, N>()(activate(params.activation, y));
  }
};

inline const char* op_name(int kind) {
  return kind == PCR_OP_FPROP   ? "fprop"
         : kind == PCR_OP_DGRAD ? "dgrad"
         : kind == PCR_OP_WGRAD ? "wgrad"
                                : "GEMM";
}

// Kind: PCR_OP_FPROP/DGRAD/WGRAD; ElementA: every input's dtype (half_t, bfloat16_t, or float
// on TF32 tensor cores); ElementD: the output's; Align: elements per load of A and B (16 bytes
// or less), AlignC per store of D; Epilogue: PCR_EPI_LINEAR, or PCR_EPI_BIASACT (fprop);
// Math: the MMA's operator tag; Split: 1 for parallel split-K; Grouped: a grouped fprop.
template <class Family, int Kind, class ElementA, class ElementD, class TileShape, class WarpShape,
          class Instruction, int Stages, int Align, int AlignC, int Epilogue, class Math, int Split,
          bool Grouped = false>
struct Conv2x
    : mma::Kernel2x<Conv2x<Family, Kind, ElementA, ElementD, TileShape, WarpShape, Instruction,
                           Stages, Align, AlignC, Epilogue, Math, Split, Grouped>> {
  static constexpr bool kFused = Epilogue == PCR_EPI_BIASACT;
  static_assert(!kFused || (Kind == PCR_OP_FPROP && !Grouped && !Split),
                "the bias epilogue exists for ungrouped, unsplit fprop only");
  static_assert(!Grouped || (Kind == PCR_OP_FPROP && !Split), "only fprop is grouped, unsplit");
  static_assert(Stages == 2 || Align * cutlass::sizeof_bits<ElementA>::value >= 32,
                "cp.async moves 4, 8 or 16 bytes: narrower loads need the 2-stage mainloop");

  static constexpr cutlass::conv::Operator kOp =
      Kind == PCR_OP_FPROP   ? cutlass::conv::Operator::kFprop
      : Kind == PCR_OP_DGRAD ? cutlass::conv::Operator::kDgrad
                             : cutlass::conv::Operator::kWgrad;
  static constexpr bool kWide = Align * cutlass::sizeof_bits<ElementA>::value == 128;
  // Narrow loads: fprop's few-channels iterators; dgrad's analytic ones (its optimized
  // strided iterators at alignment 1 gave wrong dx on the H200: stride 2, C = 3, K = 5).
  static constexpr cutlass::conv::IteratorAlgorithm kAlgorithm =
      kWide || Grouped || Kind == PCR_OP_WGRAD ? cutlass::conv::IteratorAlgorithm::kOptimized
      : Kind == PCR_OP_FPROP                   ? cutlass::conv::IteratorAlgorithm::kFewChannels
                                               : cutlass::conv::IteratorAlgorithm::kAnalytic;
  // the few-channels iterators step through R*S*C whole, not slice by slice
  static_assert(!Split || kAlgorithm == cutlass::conv::IteratorAlgorithm::kOptimized,
                "split-K needs 16-byte fprop loads");

  using Layout = cutlass::layout::TensorNHWC;
  using TensorOp = cutlass::arch::OpClassTensorOp;
  using Arch = typename Family::Arch;
  using ElementC = cute::conditional_t<Split != 0, float, ElementD>;  // split-K: fp32 partials
  using Linear = cutlass::epilogue::thread::LinearCombination<ElementC, AlignC, float, float>;
  // strided dgrad tiles dx by stride phase (the pixels one filter position reaches), which
  // its own swizzle counts
  using Swizzle =
      cute::conditional_t<Kind == PCR_OP_DGRAD,
                          cutlass::conv::threadblock::StridedDgradIdentityThreadblockSwizzle<1>,
                          cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<4>>;

  // the kernel of (kind, fused, grouped); the dummy parameter keeps the specializations
  // partial, which class scope allows
  template <int K, bool F, bool G, class = void>
  struct Pick;
  template <class D>
  struct Pick<PCR_OP_FPROP, false, false, D> {
    using Kernel = typename cutlass::conv::kernel::DefaultConv2dFprop<
        ElementA, Layout, ElementA, Layout, ElementC, Layout, float, TensorOp, Arch, TileShape,
        WarpShape, Instruction, Linear, Swizzle, Stages, Math, kAlgorithm,
        cutlass::conv::StrideSupport::kUnity, Align, Align>::Kernel;
  };
  template <class D>
  struct Pick<PCR_OP_FPROP, true, false, D> {
    using Kernel = typename cutlass::conv::kernel::DefaultConv2dFpropWithBroadcast<
        ElementA, Layout, ElementA, Layout, ElementD, Layout, float, TensorOp, Arch, TileShape,
        WarpShape, Instruction, BiasAct<ElementD, AlignC>, Swizzle, Stages, Math, kAlgorithm,
        cutlass::conv::StrideSupport::kUnity, Align, Align>::Kernel;
  };
  template <class D>
  struct Pick<PCR_OP_FPROP, false, true, D> {
    using Kernel = typename cutlass::conv::kernel::DefaultConv2dGroupFprop<
        ElementA, Layout, ElementA, Layout, ElementC, Layout, float, TensorOp, Arch, TileShape,
        WarpShape, Instruction, Linear, Swizzle, Stages, Math,
        cutlass::conv::GroupMode::kSingleGroup, kAlgorithm, cutlass::conv::StrideSupport::kUnity,
        Align, Align>::Kernel;
  };
  template <class D>
  struct Pick<PCR_OP_DGRAD, false, false, D> {
    using Kernel = typename cutlass::conv::kernel::DefaultConv2dDgrad<
        ElementA, Layout, ElementA, Layout, ElementC, Layout, float, TensorOp, Arch, TileShape,
        WarpShape, Instruction, Linear, Swizzle, Stages, Math, kAlgorithm,
        cutlass::conv::StrideSupport::kStrided, Align, Align>::Kernel;
  };
  template <class D>
  struct Pick<PCR_OP_WGRAD, false, false, D> {
    using Kernel = typename cutlass::conv::kernel::DefaultConv2dWgrad<
        ElementA, Layout, ElementA, Layout, ElementC, Layout, float, TensorOp, Arch, TileShape,
        WarpShape, Instruction, Linear, Swizzle, Stages, Math, kAlgorithm,
        cutlass::conv::StrideSupport::kStrided, Align, Align>::Kernel;
  };
  using GemmKernel = typename Pick<Kind, kFused, Grouped>::Kernel;
  using Device = cutlass::conv::device::ImplicitGemmConvolution<GemmKernel>;
  using Arguments = typename Device::Arguments;
  // D = alpha * (the partials' sum in slice order) + beta * C, 4 rows x 32 stores per block
  using Reduction = cutlass::reduction::kernel::ReduceSplitK<
      cutlass::MatrixShape<4, 32 * AlignC>,
      cutlass::epilogue::thread::LinearCombination<ElementD, AlignC, float, float>,
      cutlass::reduction::thread::ReduceAdd<float, float, AlignC>>;

  static cutlass::conv::Conv2dProblemSize problem(const GemmArgs& g, int slices) {
    const ConvArgs& v = g.conv;
    return {{v.n, v.h, v.w, v.c},
            {v.k, v.r, v.s, v.c / v.groups},
            {v.pad_h, v.pad_h, v.pad_w, v.pad_w},  // symmetric
            {v.stride_h, v.stride_w},
            {v.dilation_h, v.dilation_w},
            {v.n, v.p, v.q, v.k},
            cutlass::conv::Mode::kCrossCorrelation,
            slices,
            v.groups};
  }

  // Split-K slices: enough for the output tiles to cover every SM once (so at most about two
  // waves' worth of CTAs), at most one per K tile of the split dimension (fprop C, dgrad K,
  // wgrad N*P*Q), each slice keeping at least kMinIterations K iterations. CUTLASS splits
  // strided dgrad not at all.
  static constexpr int kMinIterations = 4, kMaxSlices = 128;
  static int slices(const GemmArgs& g) {
    const ConvArgs& v = g.conv;
    if (!Split || (Kind == PCR_OP_DGRAD && (v.stride_h > 1 || v.stride_w > 1))) return 1;
    const cutlass::conv::Conv2dProblemSize ps = problem(g, 1);
    const cutlass::gemm::GemmCoord mnk = cutlass::conv::implicit_gemm_problem_size(kOp, ps);
    const int64_t tiles = int64_t((mnk.m() + TileShape::kM - 1) / TileShape::kM) *
                          ((mnk.n() + TileShape::kN - 1) / TileShape::kN);
    const int64_t split = Kind == PCR_OP_FPROP   ? v.c
                          : Kind == PCR_OP_DGRAD ? v.k
                                                 : int64_t(v.n) * v.p * v.q;
    const int iterations =
        cutlass::conv::implicit_gemm_k_iterations(kOp, TileShape::kK, ps, kAlgorithm);
    const int64_t s = std::min<int64_t>({(g.sm_count + tiles - 1) / tiles,
                                         (split + TileShape::kK - 1) / TileShape::kK,
                                         iterations / kMinIterations, kMaxSlices});
    return int(std::max<int64_t>(s, 1));
  }

  // CUTLASS's arguments; with split-K, C and D are the fp32 partials at `partials`.
  static Arguments arguments(const GemmArgs& g, void* partials = nullptr) {
    using OutputParams = typename GemmKernel::EpilogueOutputOp::Params;
    const cutlass::conv::Conv2dProblemSize ps = problem(g, slices(g));
    const Layout a = Layout::packed(cutlass::conv::implicit_gemm_tensor_a_extent(kOp, ps));
    const Layout b = Layout::packed(cutlass::conv::implicit_gemm_tensor_b_extent(kOp, ps));
    const Layout c = Layout::packed(cutlass::conv::implicit_gemm_tensor_c_extent(kOp, ps));
    OutputParams output;
    if constexpr (kFused)
      output = OutputParams{float(g.alpha), float(g.beta), g.activation};
    else  // the reduction applies alpha and beta to the partials' sum
      output = Split ? OutputParams(1.0f, 0.0f) : OutputParams(float(g.alpha), float(g.beta));
    Arguments args(
        ps, {static_cast<ElementA*>(const_cast<void*>(g.a)), a},
        {static_cast<ElementA*>(const_cast<void*>(g.b)), b},
        {static_cast<ElementC*>(Split ? partials : const_cast<void*>(g.c)), c},
        {static_cast<ElementC*>(Split ? partials : g.d), c}, output,
        Split ? cutlass::conv::SplitKMode::kParallel : cutlass::conv::SplitKMode::kSerial);
    if constexpr (kFused) args.ptr_Vector = const_cast<void*>(g.bias_n);
    return args;
  }

  static int can_implement(const GemmArgs& g) {
    const ConvArgs& v = g.conv;
    if (v.kind != Kind)
      return set_error(PCR_ERR_UNSUPPORTED, "a %s kernel cannot run a %s", op_name(Kind),
                       op_name(v.kind));
    if (Grouped && (v.c % v.groups || v.k % v.groups || (v.c / v.groups) % TileShape::kK ||
                    (v.k / v.groups) % TileShape::kN))
      return set_error(PCR_ERR_UNSUPPORTED,
                       "a grouped kernel needs whole groups of input channels in multiples of "
                       "its tile's K (%d) and of output channels in multiples of its tile's N "
                       "(%d); C %d, K %d, %d groups",
                       TileShape::kK, TileShape::kN, v.c, v.k, v.groups);
    if (!Grouped && v.groups != 1)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "%d groups: this kernel runs ungrouped convolutions (grouped fprop "
                       "kernels run groups; grouped dgrad and wgrad are not supported)",
                       v.groups);
    const bool aligned = Kind == PCR_OP_FPROP
                             ? (v.c / v.groups) % Align == 0 && v.k % AlignC == 0
                             : v.c % Align == 0 && v.k % Align == 0 && v.c % AlignC == 0;
    if (!aligned)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "channel counts C %d, K %d (groups %d) are not multiples of this %s "
                       "kernel's alignment (%d elements per load, %d per store)",
                       v.c, v.k, v.groups, op_name(Kind), Align, AlignC);
    if (Kind == PCR_OP_DGRAD && (v.dilation_h > 1 || v.dilation_w > 1))
      return set_error(PCR_ERR_UNSUPPORTED,
                       "dilated dgrad is not supported (CUTLASS's strided dgrad)");
    return mma::Kernel2x<Conv2x>::can_implement(g);
  }

  static const void* device_function() {
    return reinterpret_cast<const void*>(cutlass::Kernel<GemmKernel>);
  }

  // The kernel's Params and grid, built on the host (the device-level operator keeps its
  // Params private and would memset the workspace when preparing), and with split-K the
  // reduction's. Parallel split-K writes every partial, so the workspace needs no reset.
  struct NoReduction {};
  struct Prepared {
    typename GemmKernel::Params params;
    dim3 grid;
    cute::conditional_t<Split != 0, typename Reduction::Params, NoReduction> reduction;

    cutlass::Status start(void*, cudaStream_t stream) {
      cutlass::Kernel<GemmKernel>
          <<<grid, 32 * Device::kWarpCount, int(sizeof(typename GemmKernel::SharedStorage)),
             stream>>>(params);
      if constexpr (Split != 0) {
        if (cudaPeekAtLastError() == cudaSuccess)
          cutlass::Kernel<Reduction><<<Reduction::grid_shape(reduction.problem_size),
                                       Reduction::block_shape(), 0, stream>>>(reduction);
      }
      // peek: Kernel2x::launch reads (and clears) the error for its message
      return cudaPeekAtLastError() == cudaSuccess ? cutlass::Status::kSuccess
                                                  : cutlass::Status::kErrorInternal;
    }
  };

  static int prepare(const GemmArgs& g, void* workspace, void* out) {
    auto* prep = new (out) Prepared{};
    const Arguments args = arguments(g, workspace);
    prep->params = typename GemmKernel::Params(args);
    // the fused kernel counts K iterations as the analytic iterators do, not as few-channels
    if constexpr (kFused)
      prep->params.gemm_k_iterations = cutlass::conv::implicit_gemm_k_iterations(
          kOp, TileShape::kK, args.problem_size, kAlgorithm);
    prep->grid = Swizzle().get_grid_shape(prep->params.grid_tiled_shape);
    if constexpr (Split != 0) {
      const cutlass::MatrixCoord mn =
          cutlass::conv::implicit_gemm_problem_size(kOp, args.problem_size).mn();
      const int64_t ld = mn.column();  // packed tensors: C's GEMM rows are N elements apart
      prep->reduction = typename Reduction::Params(
          mn, args.problem_size.split_k_slices, size_t(mn.row()) * mn.column(),
          {static_cast<float*>(workspace), ld}, {static_cast<ElementD*>(g.d), ld},
          {static_cast<ElementD*>(const_cast<void*>(g.c)), ld}, {float(g.alpha), float(g.beta)});
    }
    return PCR_OK;
  }
};

}  // namespace pcr::conv
