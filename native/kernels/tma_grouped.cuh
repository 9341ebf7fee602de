// CUTLASS 3.x grouped (pointer-array) GEMMs on sm90a: GemmArgs::groups problems whose
// sizes, pointers and leading dimensions live in GPU arrays (GemmArgs::group), written
// there by the runtime's fill kernels (native/src/grouped.cu) and never read on the host.
// Per-group TMA descriptors are rewritten on the GPU as each CTA moves to a new group.
//
// The mainloop is CUTLASS's, block-scaled where the kernel takes fp8 block scales (DeepSeek-
// V3's MoE recipe: BlockGrids). The epilogue is CUTLASS's linear combination, or
// GroupedTree: a bias, an activation and dequantizing scales (fp8 MoE layers: per-tensor,
// per-token and per-channel ones), each per group through GemmArgs::group_epilogue's
// pointer arrays.
#pragma once

#include "cutlass/gemm/group_array_problem_shape.hpp"

#include "tma_gemm.cuh"

namespace pcr::tma {

// BlockScaledMainloop: the schedule of a block-scaled fp8 mainloop (CUTLASS's: scale grids
// per 128 of K read beside A and B, each group's through a pointer array; BlockGrids)
struct Sm90GroupedCooperative {
  using Arch = cutlass::arch::Sm90;
  using Mainloop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using BlockScaledMainloop =
      cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
struct Sm90GroupedPingpong {
  using Arch = cutlass::arch::Sm90;
  using Mainloop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using BlockScaledMainloop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

// Block-scaled grouped kernels' scale grids (DeepSeek-V3's MoE recipe), as CUTLASS 4.2's
// pointer-array block-scaled mainloop reads them: each group's own grids, packed (it makes
// their layouts from the group's size, ignoring the layout arguments): a's M-major, one
// scale per ScaleM rows and 128 of K, K-blocks the group's rows apart; b's K-major, one per
// ScaleN columns and 128 of K, column blocks ceil(K/128) apart (a checkpoint's
// weight_scale_inv). The runtime packs a MoE layer's x grid per expert (grouped.cu).
template <int ScaleM, int ScaleN>
struct BlockGrids {
  using Config =
      cutlass::detail::Sm90BlockwiseScaleConfig<ScaleM, ScaleN, 128, cute::GMMA::Major::MN,
                                                cute::GMMA::Major::K>;
  using LayoutSFA = decltype(Config::deduce_layoutSFA());
  using LayoutSFB = decltype(Config::deduce_layoutSFB());
};

namespace evt {

// A grouped kernel's bias/activation and dequantizing epilogue, per group g:
//   D = act(beta * C + (sm_g[m] * (sn_g[n] * (alpha * sa_g * sb_g * acc)) + bias_g[n]))
// sa_g, sb_g per-group scalars, sm_g and sn_g per-row and per-column float vectors, bias_g
// a per-column vector in D's dtype, each read through a GroupEpilogue pointer array (null
// array: 1, or 0 for the bias); C is not loaded when beta == 0. The broadcast nodes take
// group g's pointer from the array at the tile's L coordinate, which the pointer-array
// kernels set to the group.
template <class TileShape, class ElementD>
struct GroupedTree {
  using L0 = Stride<_0, _0, int64_t>;
  using Scalars = Sm90ScalarBroadcastPtrArray<float, L0, 3>;  // alpha, sa_g, sb_g
  using Scalar = Sm90ScalarBroadcast<float, L0>;
  using RowScale = Sm90RowBroadcast<0, TileShape, float*, float, Stride<_0, _1, int64_t>>;
  // a group's rows start anywhere in a MoE layer's per-token scales: element loads
  using ColScale = Sm90ColBroadcast<0, TileShape, float*, float, Stride<_1, _0, int64_t>, 1>;
  using RowBias = Sm90RowBroadcast<0, TileShape, ElementD*, float, Stride<_0, _1, int64_t>>;
  using Times = Sm90Compute<cutlass::multiplies, float, float, kRound>;
  using Fma = Sm90Compute<cutlass::homogeneous_multiply_add, float, float, kRound>;
  using ScaledAcc = Sm90EVT<Times, Scalars, Sm90AccFetch>;
  using RowScaled = Sm90EVT<Times, RowScale, ScaledAcc>;
  using ColScaledPlusBias = Sm90EVT<Fma, ColScale, RowScaled, RowBias>;
  using BetaC = Sm90EVT<Fma, Scalar, Sm90SrcFetch<ElementD>, ColScaledPlusBias>;
  using Type = Sm90EVT<Sm90Compute<Activation, ElementD, float, kRound>, BetaC>;

  static typename Type::Arguments arguments(const GemmArgs& p) {
    const GroupEpilogue& e = p.group_epilogue;
    typename Scalars::Arguments scalars{};
    scalars.scalars[0] = float(p.alpha);
    scalars.scalars[1] = scalars.scalars[2] = 1.0f;
    scalars.scalar_ptr_arrays[1] = e.scale_a;
    scalars.scalar_ptr_arrays[2] = e.scale_b;
    auto bias = reinterpret_cast<const ElementD* const*>(e.bias_n);
    return {{{{float(p.beta)}},
             {},
             {{e.row_scales, 1.0f, {}},
              {{e.col_scales, 1.0f, {}}, {scalars, {}, {}}, {}},
              {bias, ElementD(0), {}},
              {}},
             {}},
            {p.activation}};
  }
};

}  // namespace evt

// A grouped GEMM (C and D row-major). Epilogue: PCR_EPI_LINEAR (CUTLASS's linear
// combination), or PCR_EPI_BIASACT / PCR_EPI_SCALED (GroupedTree; which of the two only
// says what the kernel is listed to serve: 16-bit inputs' bias and activation, quantized
// inputs' scales too).
// ScaleM, ScaleN: a block-scaled fp8 mainloop's rows and columns per scale (BlockGrids),
// 0: none.
template <class ElementA, class ElementB, class ElementD, class LayoutA, class LayoutB,
          class TileShape, class ClusterShape, class Schedule, int AlignAB,
          int Epilogue = PCR_EPI_LINEAR, int ScaleM = 0, int ScaleN = 0>
struct GroupedGemm
    : Kernel3x<GroupedGemm<ElementA, ElementB, ElementD, LayoutA, LayoutB, TileShape, ClusterShape,
                           Schedule, AlignAB, Epilogue, ScaleM, ScaleN>> {
  static_assert(Epilogue == PCR_EPI_LINEAR || Epilogue == PCR_EPI_BIASACT ||
                    Epilogue == PCR_EPI_SCALED,
                "grouped kernels have linear, bias/activation and dequantizing epilogues");
  static constexpr bool kBlockScaled = ScaleM != 0;
  using Grids = BlockGrids<kBlockScaled ? ScaleM : 1, kBlockScaled ? ScaleN : 128>;
  using LayoutSFA = typename Grids::LayoutSFA;
  using LayoutSFB = typename Grids::LayoutSFB;
  using GmemA = cute::conditional_t<kBlockScaled, cute::tuple<LayoutA*, LayoutSFA*>, LayoutA*>;
  using GmemB = cute::conditional_t<kBlockScaled, cute::tuple<LayoutB*, LayoutSFB*>, LayoutB*>;
  using MainloopSchedule = cute::conditional_t<kBlockScaled, typename Schedule::BlockScaledMainloop,
                                               typename Schedule::Mainloop>;
  using Cluster = ClusterShape;
  // CUTLASS's grouped kernels have no dependency wait, and every warp reads the group
  // sizes from GPU memory to schedule its tiles: never launched as a dependent.
  static constexpr bool kProgrammatic = false;
  using ElementAcc = float;
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  using LayoutD = cutlass::layout::RowMajor;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
  using Tree = evt::GroupedTree<TileShape, ElementD>;
  using Linear =
      cutlass::epilogue::fusion::LinearCombination<ElementD, ElementAcc, ElementD, ElementAcc>;
  using Fusion = cute::conditional_t<Epilogue == PCR_EPI_LINEAR, Linear, typename Tree::Type>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      typename Schedule::Arch, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc, ElementD, LayoutD*,
      kAlignD, ElementD, LayoutD*, kAlignD, typename Schedule::Epilogue, Fusion>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      typename Schedule::Arch, cutlass::arch::OpClassTensorOp, ElementA, GmemA, AlignAB, ElementB,
      GmemB, AlignAB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Arguments = typename GemmKernel::Arguments;

  // The runtime writes each group's leading dimension as an int64_t: the kernel's
  // per-group strides must be exactly that (one dynamic mode, the others static).
  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideC = typename GemmKernel::InternalStrideC;
  using StrideD = typename GemmKernel::InternalStrideD;
  static_assert(sizeof(StrideA) == 8 && sizeof(StrideB) == 8 && sizeof(StrideC) == 8 &&
                    sizeof(StrideD) == 8,
                "grouped strides must be one int64_t");
  static_assert(sizeof(typename ProblemShape::UnderlyingProblemShape) == 3 * sizeof(int));

  static auto thread_arguments(const GemmArgs& p) {
    if constexpr (Epilogue == PCR_EPI_LINEAR) {
      typename CollectiveEpilogue::FusionCallbacks::Arguments thread{};
      thread.alpha = float(p.alpha);
      thread.beta = float(p.beta);
      return thread;
    } else {
      return Tree::arguments(p);
    }
  }

  static typename CollectiveMainloop::Arguments mainloop_arguments(const GemmArgs& p) {
    const GroupArrays& g = p.group;
    auto* a = reinterpret_cast<const ElementA**>(g.a);
    auto* b = reinterpret_cast<const ElementB**>(g.b);
    auto* lda = reinterpret_cast<StrideA*>(g.lda);
    auto* ldb = reinterpret_cast<StrideB*>(g.ldb);
    if constexpr (kBlockScaled) {
      const GroupEpilogue& e = p.group_epilogue;  // grids packed: no layout arrays
      return {a,
              lda,
              b,
              ldb,
              const_cast<const float**>(e.scale_grid_a),
              nullptr,
              const_cast<const float**>(e.scale_grid_b),
              nullptr};
    } else {
      return {a, lda, b, ldb};
    }
  }

  static Arguments arguments(const GemmArgs& p) {
    const GroupArrays& g = p.group;
    Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {p.groups, reinterpret_cast<typename ProblemShape::UnderlyingProblemShape*>(g.shape),
         nullptr},  // sizes on the GPU only
        mainloop_arguments(p),
        {thread_arguments(p), reinterpret_cast<const ElementD**>(g.c),
         reinterpret_cast<StrideC*>(g.ldc), reinterpret_cast<ElementD**>(g.d),
         reinterpret_cast<StrideD*>(g.ldd)}};
    args.hw_info.device_id = p.device;
    args.hw_info.sm_count = p.sm_count;
    return args;
  }
};

}  // namespace pcr::tma
