// CUTLASS 3.x implicit-GEMM 2-D convolutions for sm90a: fprop, dgrad and wgrad on packed
// NHWC / KRSC tensors, no im2col buffer in memory. TMA's im2col mode gathers the activation
// patches straight into shared memory (fprop and dgrad: operand A, wgrad: operand B), wgmma
// multiplies, and a producer warp group feeds one consumer warp group that owns one output
// tile: CUTLASS 4.2's only sm90 convolution kernel (its dispatch policy rejects the
// persistent cooperative and ping-pong schedules, and only this kernel takes a convolution's
// problem shape). The launch, the prepared parameters and the epilogues are tma_gemm.cuh's:
// linear, or BiasAct (fprop) with one bias per output channel, a column of the implicit GEMM.
#pragma once

#include "tma_gemm.cuh"  // first: CUTLASS's conv headers lean on the GEMM headers it includes

#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"

namespace pcr::conv {

// That kernel's schedule tags: one output tile per CTA, the epilogue storing through TMA
struct Sm90WarpSpecialized {
  using Mainloop = cutlass::conv::KernelImplicitTmaWarpSpecializedSm90;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};

// Kind: PCR_OP_FPROP, DGRAD or WGRAD. ElementA: both operands' type (half, bfloat16, or float
// run as TF32); ElementD: C's and D's (ElementA or float); accumulation in float. TileShape
// and ClusterShape as tma_gemm.cuh's, over the implicit GEMM (see pcr_problem's m, n, k).
template <int Kind, class ElementA, class ElementD, class TileShape, class ClusterShape,
          class Schedule, int Epilogue = PCR_EPI_LINEAR>
struct Conv3x
    : tma::Kernel3x<Conv3x<Kind, ElementA, ElementD, TileShape, ClusterShape, Schedule, Epilogue>> {
  static_assert(Kind == PCR_OP_FPROP || Kind == PCR_OP_DGRAD || Kind == PCR_OP_WGRAD);
  static_assert(Epilogue == PCR_EPI_LINEAR || (Epilogue == PCR_EPI_BIASACT && Kind == PCR_OP_FPROP),
                "bias and activation are an fprop's");
  static_assert(cute::is_same_v<ElementD, ElementA> || cute::is_same_v<ElementD, float>);
  static constexpr auto kOp = Kind == PCR_OP_FPROP   ? cutlass::conv::Operator::kFprop
                              : Kind == PCR_OP_DGRAD ? cutlass::conv::Operator::kDgrad
                                                     : cutlass::conv::Operator::kWgrad;
  using Cluster = ClusterShape;
  // The kernel waits at griddepcontrol.wait before its first global load, as tma::Gemm's
#ifdef CUTLASS_ENABLE_GDC_FOR_SM90
  static constexpr bool kProgrammatic = true;
#else
  static constexpr bool kProgrammatic = false;
#endif
  // TMA moves 16-byte-aligned rows: every channel count a multiple of kAlign (the output's
  // channels are K or C too, and ElementD is no narrower than ElementA)
  static constexpr int kAlign = 16 / sizeof(ElementA);
  static constexpr int kAlignD = 16 / sizeof(ElementD);

  // CUTLASS's convolution tiles: the reduction (and wgrad's N, which spans C, S and R) is a
  // nested mode
  using TileN = decltype(cute::size<1>(TileShape{}));
  using Tile = cute::Shape<decltype(cute::size<0>(TileShape{})),
                           cute::conditional_t<Kind == PCR_OP_WGRAD, cute::Shape<TileN>, TileN>,
                           cute::Shape<decltype(cute::size<2>(TileShape{}))>>;
  using LayoutAB = cutlass::layout::TensorNHWC;
  using LayoutD = cute::conditional_t<Kind == PCR_OP_WGRAD, cutlass::layout::TensorKCSR, LayoutAB>;
  using BiasActTree = tma::evt::BiasActTree<Tile, ElementD>;
  using Fusion = cute::conditional_t<
      Epilogue == PCR_EPI_BIASACT, typename BiasActTree::Type,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, ElementD, float>>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, ElementD, LayoutD, kAlignD,
      ElementD, LayoutD, kAlignD, typename Schedule::Epilogue, Fusion>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, kOp, ElementA, LayoutAB, kAlign,
      ElementA, LayoutAB, kAlign, float, Tile, ClusterShape,
      cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Schedule::Mainloop>::CollectiveOp;
  using ProblemShape = cutlass::conv::ConvProblemShape<kOp, 2>;
  // Named as tma::Kernel3x expects. The scheduler tag is CUTLASS's default spelled out: with
  // void, CUTLASS 2.x's GemmUniversal (tma_gemm.cuh includes it) matches a conv problem shape
  // as well and the kernel is ambiguous.
  using GemmKernel =
      cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue,
                                           cutlass::gemm::PersistentScheduler>;
  using Arguments = typename GemmKernel::Arguments;

  // CUTLASS derives each kind's A, B and C extents (P and Q included) from x's and w's
  static ProblemShape problem(const ConvArgs& c) {
    using Extent = typename ProblemShape::TensorExtent;
    using Spatial = typename ProblemShape::SpatialExtent;
    return ProblemShape(cutlass::conv::Mode::kCrossCorrelation, Extent{c.n, c.h, c.w, c.c},
                        Extent{c.k, c.r, c.s, c.c}, Spatial{c.pad_h, c.pad_w},
                        Spatial{c.pad_h, c.pad_w}, Spatial{c.stride_h, c.stride_w},
                        Spatial{c.dilation_h, c.dilation_w}, c.groups);
  }

  static Arguments arguments(const GemmArgs& p) {
    const ProblemShape shape = problem(p.conv);
    typename GemmKernel::StrideC stride{};  // C's and D's: packed, as shape says
    if constexpr (Kind == PCR_OP_WGRAD) {
      stride = cutlass::make_cute_packed_stride(stride, shape.shape_C, shape.stride_C, kOp);
    } else {  // ((w, h, n), _1, _0)
      cute::for_each(cute::make_seq<3>{},
                     [&](auto i) { cute::get<0, i>(stride) = shape.stride_C[2 - i]; });
    }
    typename CollectiveEpilogue::FusionCallbacks::Arguments thread;
    if constexpr (Epilogue == PCR_EPI_BIASACT)
      thread = BiasActTree::arguments(p, p.bias_n, nullptr);
    else
      thread = {float(p.alpha), float(p.beta)};
    return {
        shape,
        {static_cast<const ElementA*>(p.a), static_cast<const ElementA*>(p.b)},
        {thread, static_cast<const ElementD*>(p.c), stride, static_cast<ElementD*>(p.d), stride}};
  }

  static int can_implement(const GemmArgs& p) {
    const ConvArgs& c = p.conv;
    if (c.kind != Kind)
      return set_error(PCR_ERR_INTERNAL, "a convolution kernel of kind %d was handed kind %d", Kind,
                       c.kind);
    if (c.groups != 1)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "sm90a TMA convolutions are ungrouped (groups %d); CUTLASS 4.2 has no "
                       "grouped sm90 convolution",
                       c.groups);
    if (c.c % kAlign || c.k % kAlign)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "TMA im2col needs 16-byte channel rows: C (%d) and K (%d) multiples of %d",
                       c.c, c.k, kAlign);
    if (Kind == PCR_OP_DGRAD && (c.stride_h != 1 || c.stride_w != 1))
      return set_error(PCR_ERR_UNSUPPORTED,
                       "CUTLASS's sm90 dgrad takes unit strides only (stride %dx%d)", c.stride_h,
                       c.stride_w);
    const ProblemShape shape = problem(c);
    const auto& y = Kind == PCR_OP_FPROP ? shape.shape_C : shape.shape_A;  // n, p, q, k
    if (y[1] != c.p || y[2] != c.q)
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "output %dx%d disagrees with the convolution's geometry (%dx%d)", c.p, c.q,
                       y[1], y[2]);
    if (!GemmKernel::can_implement(arguments(p)))
      return set_error(PCR_ERR_UNSUPPORTED,
                       "outside TMA im2col's range: per axis padding <= 128, (R-1)*dilation - "
                       "padding <= 128 and (R-1)*dilation < 255; N*P*Q under 2^31");
    return PCR_OK;
  }
};

}  // namespace pcr::conv
