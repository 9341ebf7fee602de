// CUTLASS 3.x TMA warp-specialized GEMMs, one template for two arch families:
//   sm90a  (wgmma): cooperative and ping-pong schedules;
//   sm100a (tcgen05/UMMA): 1-SM and 2-SM schedules.
// The collective builders pick the instructions from the arch tag and the schedule.
// The tile scheduler is CUTLASS's persistent data-parallel one, or stream-K
// (StreamK below, CUTLASS's; cooperative and sm100 schedules only), whose
// heuristic decomposition spreads the K loop of too few output tiles over every SM
// (stream-K or split-K) with a deterministic fp32 fix-up in the workspace.
// fp8 without fast accumulation runs fp8_mainloop.cuh's overlapped promotion; block-scaled
// fp8 (scale grids per 128 of K) block_scaled_mainloop.cuh's.
// The epilogue is CUTLASS's linear combination, or an epilogue visitor tree: BiasAct
// computes act(alpha * acc + beta * C + row bias + column bias), Scaled (quantized
// inputs) scales acc by per-tensor, per-row and per-column factors first.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/arch/grid_dependency_control.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"  // device_kernel
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#include <algorithm>
#include <new>

#include "activation.h"
#include "amax.h"
#include "block_scaled_mainloop.cuh"
#include "fp8_mainloop.cuh"
#include "kernel.h"

namespace pcr::tma {

namespace evt {
using namespace cutlass::epilogue::fusion;
using cute::_0;
using cute::_1;
using cute::Stride;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// max |d| into GemmArgs::amax where not null (amax.h), passing its input on: CUTLASS's
// scalar reduction node with one atomic per warp and tile rather than one per thread.
struct AmaxReduction : Sm90ScalarReduction<cutlass::maximum_absolute_value_reduction,
                                           cutlass::atomic_maximum, float, float, kRound> {
  using Base = Sm90ScalarReduction<cutlass::maximum_absolute_value_reduction,
                                   cutlass::atomic_maximum, float, float, kRound>;
  using Base::Base;

  // The runtime zeroes amax on the stream before the launch (CUTLASS's own fill would call
  // the driver API, which the library does not link).
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*,
                                              cudaStream_t, cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  template <class CTensor, class ThrResidue>
  struct Callbacks : EmptyConsumerStoreCallbacks {
    CTensor tCcD;  // each element's (m, n) coordinate
    ThrResidue residue;
    float* amax;
    uint32_t bits;

    template <class ElementAcc, class ElementInput, int N>
    CUTLASS_DEVICE auto visit(cutlass::Array<ElementAcc, N> const&, int epi_v, int epi_m, int epi_n,
                              cutlass::Array<ElementInput, N> const& x) {
      if (amax) {
        auto c = tCcD(cute::_, cute::_, cute::_, epi_m, epi_n);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i)
          if (cute::elem_less(c(epi_v * N + i), residue)) bits = amax_bits(bits, float(x[i]));
      }
      return x;
    }
    CUTLASS_DEVICE void end() {
      if (amax) commit_amax(amax, bits);
    }
  };

  template <bool ReferenceSrc, class... Args>
  CUTLASS_DEVICE auto get_consumer_store_callbacks(ConsumerStoreArgs<Args...> const& args) {
    return Callbacks<decltype(args.tCcD), decltype(args.residue_tCcD)>{
        {}, args.tCcD, args.residue_tCcD, this->params.ptr_scalar, 0u};
  }
};

// D = act(beta * C + ((alpha * acc + row[n]) + col[m])), in the kernel's own M and N and
// in ComputeOf<ElementD>; null biases read as 0, and C is not loaded when beta == 0.
// With an AuxStore node (PreActivationStore: PCR_EPI_AUX), the activation's input is also
// stored there, and max |D| reduced into GemmArgs::amax.
template <class TileShape, class ElementD, class AuxStore = void>
struct BiasActTree {
  using Compute = ComputeOf<ElementD>;
  using Scalar = Sm90ScalarBroadcast<Compute, Stride<_0, _0, int64_t>>;
  using Row = Sm90RowBroadcast<0, TileShape, ElementD, Compute, Stride<_0, _1, int64_t>>;
  using Col = Sm90ColBroadcast<0, TileShape, ElementD, Compute, Stride<_1, _0, int64_t>>;
  template <template <class> class Op>
  using Node = Sm90Compute<Op, Compute, Compute, kRound>;
  using AlphaAccRow = Sm90EVT<Node<cutlass::homogeneous_multiply_add>, Scalar, Sm90AccFetch, Row>;
  using PlusCol = Sm90EVT<Node<cutlass::plus>, AlphaAccRow, Col>;
  using BetaC =
      Sm90EVT<Node<cutlass::homogeneous_multiply_add>, Scalar, Sm90SrcFetch<ElementD>, PlusCol>;
  static constexpr bool kAux = !std::is_void_v<AuxStore>;
  using Stored = cute::conditional_t<kAux, Sm90EVT<AuxStore, BetaC>, BetaC>;
  using Activated = Sm90EVT<Sm90Compute<Activation, ElementD, Compute, kRound>, Stored>;
  using Type = cute::conditional_t<kAux, Sm90EVT<AmaxReduction, Activated>, Activated>;

  static typename Type::Arguments arguments(const GemmArgs& p, const void* row, const void* col) {
    typename BetaC::Arguments z{
        {{Compute(p.beta)}},
        {},
        {{{{Compute(p.alpha)}}, {}, {static_cast<const ElementD*>(row), ElementD(0), {}}, {}},
         {static_cast<const ElementD*>(col), ElementD(0), {}},
         {}},
        {}};
    if constexpr (kAux)
      return {{{z, {static_cast<ElementD*>(p.aux), {p.ldaux, _1{}, p.batch_aux}}}, {p.activation}},
              {p.amax}};
    else
      return {z, {p.activation}};
  }
};

// The node storing the pre-activation of a bias/activation epilogue (PCR_EPI_AUX) into a
// row-major D-shaped tensor through TMA, staged in shared memory as D is: CUTLASS's own
// descriptors give the epilogue tile and copy atoms its collective builder picks for D.
template <class TileShape, class ElementD, class EpilogueSchedule>
struct PreActivationStore {
  using Epi = cutlass::epilogue::collective::detail::EpilogueDescriptor<
      TileShape, cutlass::epilogue::collective::EpilogueTileAuto, ElementD, ElementD,
      EpilogueSchedule>;
  using Desc =
      cutlass::epilogue::collective::detail::AuxStoreDescriptor<Epi, cutlass::layout::RowMajor,
                                                                ElementD>;
  using Type =
      Sm90AuxStore<Desc::Stages, typename Desc::EpilogueTile, ElementD, kRound,
                   typename Desc::Stride, typename Desc::SmemLayoutAtom, typename Desc::CopyOpR2S>;
};

// The fusion of an epilogue kind (pcr_epilogue): `Tree` builds its arguments (void: the
// linear combination, `Linear`).
template <int Epilogue, class CtaTile, class TileShape, class ElementD, class EpilogueSchedule,
          class Linear>
struct FusionOf {
  using Tree = void;
  using Type = Linear;
};
template <class CtaTile, class TileShape, class ElementD, class EpilogueSchedule, class Linear>
struct FusionOf<PCR_EPI_BIASACT, CtaTile, TileShape, ElementD, EpilogueSchedule, Linear> {
  using Tree = BiasActTree<CtaTile, ElementD>;
  using Type = typename Tree::Type;
};
template <class CtaTile, class TileShape, class ElementD, class EpilogueSchedule, class Linear>
struct FusionOf<PCR_EPI_AUX, CtaTile, TileShape, ElementD, EpilogueSchedule, Linear> {
  using Tree =
      BiasActTree<CtaTile, ElementD,
                  typename PreActivationStore<TileShape, ElementD, EpilogueSchedule>::Type>;
  using Type = typename Tree::Type;
};
// A scalar broadcast that reads its scalars after the grid dependency wait. CUTLASS's
// reads them when constructed, which consumer warps do before any wait: in a
// programmatic launch, a scale the previous kernel writes could be read too early.
struct WaitForPrimary {
  CUTLASS_HOST_DEVICE WaitForPrimary() {
#if defined(__CUDA_ARCH__)
    cutlass::arch::wait_on_dependent_grids();
#endif
  }
};
template <class Element, class StrideMNL, int Count>
struct ScalarsAfterWait : WaitForPrimary, Sm90ScalarBroadcast<Element, StrideMNL, Count> {
  using Base = Sm90ScalarBroadcast<Element, StrideMNL, Count>;
  CUTLASS_HOST_DEVICE ScalarsAfterWait() {}
  CUTLASS_HOST_DEVICE ScalarsAfterWait(typename Base::Params const& params,
                                       typename Base::SharedStorage const& storage)
      : WaitForPrimary(), Base(params, storage) {}
};

// The tail of a quantized inputs' epilogue (the catalogue's out_scale): max |x| reduced
// into GemmArgs::amax where given, then x times the output scale GemmArgs::scale_d (null:
// 1), converted to D (saturating for fp8). An fp8 recipe's next scale is the amax before
// this layer's output scale.
template <class ElementD, class Node>
struct QuantizedOutput {
  using ScaleD = ScalarsAfterWait<float, Stride<_0, _0, int64_t>, 1>;
  using Type = Sm90EVT<Sm90Compute<cutlass::multiplies, ElementD, float, kRound>, ScaleD,
                       Sm90EVT<AmaxReduction, Node>>;

  static typename Type::Arguments arguments(const GemmArgs& p,
                                            typename Node::Arguments const& node) {
    return {{{1.0f}, {p.scale_d}}, {node, {p.amax}}, {}};
  }
};

// The linear epilogue of quantized inputs with float outputs: D = beta * C + (alpha * sa *
// sb) * acc, sa and sb per-tensor scales read from the GPU after the grid dependency wait
// (null: 1): CUTLASS's LinearCombination with two more scalars, so a call with per-tensor
// scale tensors runs at the plain kernel's speed; C is not loaded when beta == 0. Then the
// quantized output's tail. `dequant` false: no per-tensor scales (block-scaled kernels,
// whose scales apply in the mainloop).
template <class ElementD>
struct TensorScaledLinear {
  using Scalars = ScalarsAfterWait<float, Stride<_0, _0, int64_t>, 3>;  // alpha, sa, sb
  using Scalar = Sm90ScalarBroadcast<float, Stride<_0, _0, int64_t>>;
  using ScaledAcc =
      Sm90EVT<Sm90Compute<cutlass::multiplies, float, float, kRound>, Scalars, Sm90AccFetch>;
  using Linear = Sm90EVT<Sm90Compute<cutlass::homogeneous_multiply_add, float, float, kRound>,
                         Scalar, Sm90SrcFetch<ElementD>, ScaledAcc>;
  using Output = QuantizedOutput<ElementD, Linear>;
  using Type = typename Output::Type;

  static typename Type::Arguments arguments(const GemmArgs& p, bool dequant = true) {
    const Dequant q = dequant ? dequant_of(p) : Dequant{};
    typename Scalars::Arguments scalars{{float(p.alpha), 1.0f, 1.0f},
                                        {nullptr, q.scale_a, q.scale_b}};
    return Output::arguments(p, {{{float(p.beta)}}, {}, {scalars, {}, {}}, {}});
  }
};

// The dequantizing epilogue of quantized inputs (fp8, int8), in the kernel's M and N:
//   D = act(beta * C + (sa_m[m] * (sb_n[n] * (alpha * sa * sb * acc)) + bias_n[n]) + bias_m[m])
// sa and sb are per-tensor scales read from the GPU (null: 1), sa_m and sb_n per-row and
// per-column float vectors (null: 1), biases in D's dtype (null: 0); then the quantized
// output's tail (amax, scale_d). Block-scaled kernels take it for their bias/activation
// epilogue with every factor unset (`dequant` false).
template <class TileShape, class ElementD>
struct ScaledTree {
  using Scalars = ScalarsAfterWait<float, Stride<_0, _0, int64_t>, 3>;  // alpha, sa, sb
  using Scalar = Sm90ScalarBroadcast<float, Stride<_0, _0, int64_t>>;
  using RowScale = Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, _1, int64_t>>;
  using ColScale = Sm90ColBroadcast<0, TileShape, float, float, Stride<_1, _0, int64_t>>;
  using RowBias = Sm90RowBroadcast<0, TileShape, ElementD, float, Stride<_0, _1, int64_t>>;
  using ColBias = Sm90ColBroadcast<0, TileShape, ElementD, float, Stride<_1, _0, int64_t>>;
  using Times = Sm90Compute<cutlass::multiplies, float, float, kRound>;
  using Fma = Sm90Compute<cutlass::homogeneous_multiply_add, float, float, kRound>;
  using ScaledAcc = Sm90EVT<Times, Scalars, Sm90AccFetch>;
  using RowScaled = Sm90EVT<Times, RowScale, ScaledAcc>;
  using ColScaledPlusRow = Sm90EVT<Fma, ColScale, RowScaled, RowBias>;
  using PlusCol =
      Sm90EVT<Sm90Compute<cutlass::plus, float, float, kRound>, ColScaledPlusRow, ColBias>;
  using BetaC = Sm90EVT<Fma, Scalar, Sm90SrcFetch<ElementD>, PlusCol>;
  using Activated = Sm90EVT<Sm90Compute<Activation, float, float, kRound>, BetaC>;
  using Output = QuantizedOutput<ElementD, Activated>;
  using Type = typename Output::Type;

  // swap: the kernel's rows are the problem's columns (swap-AB kernels)
  static typename Type::Arguments arguments(const GemmArgs& p, bool swap, bool dequant = true) {
    const Dequant q = dequant ? dequant_of(p) : Dequant{};
    const float* per_m = swap ? q.col_scales : q.row_scales;  // along the kernel's M and N
    const float* per_n = swap ? q.row_scales : q.col_scales;
    const void* bias_m = swap ? p.bias_n : p.bias_m;
    const void* bias_n = swap ? p.bias_m : p.bias_n;
    typename Scalars::Arguments scalars{{float(p.alpha), 1.0f, 1.0f},
                                        {nullptr, q.scale_a, q.scale_b}};
    return Output::arguments(p, {{{{float(p.beta)}},
                                  {},
                                  {{{per_m, 1.0f, {}},
                                    {{per_n, 1.0f, {}}, {scalars, {}, {}}, {}},
                                    {static_cast<const ElementD*>(bias_n), ElementD(0), {}},
                                    {}},
                                   {static_cast<const ElementD*>(bias_m), ElementD(0), {}},
                                   {}},
                                  {}},
                                 {p.activation}});
  }
};
template <class CtaTile, class TileShape, class ElementD, class EpilogueSchedule, class Linear>
struct FusionOf<PCR_EPI_SCALED, CtaTile, TileShape, ElementD, EpilogueSchedule, Linear> {
  using Tree = ScaledTree<CtaTile, ElementD>;
  using Type = typename Tree::Type;
};
}  // namespace evt

// The stream-K tile scheduler tag of the library's sm90a kernels: CUTLASS's scheduler but
// for is_last_tile, which CUTLASS 4.2's does not compile with CUTLASS_ENABLE_GDC_FOR_SM90
// (a const member function binds a member to a non-const reference). It only tells the
// kernel when to let its dependents launch early; "never" lets them launch when the
// kernel exits, as after a plain kernel. The kernels still wait for their predecessor.
struct StreamK {};
template <class TileShape, class ClusterShape>
struct StreamKScheduler
    : cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape> {
  using cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<
      TileShape, ClusterShape>::PersistentTileSchedulerSm90StreamK;
  template <class WorkTileInfo>
  CUTLASS_DEVICE bool is_last_tile(WorkTileInfo const&, uint32_t = 1) const {
    return false;
  }
};

// kSmsPerMma: how many SMs (CTAs) one MMA tile spans along M; the epilogue works per CTA.
// BlockScaledMainloop: the schedule of a block-scaled fp8 mainloop (scale grids per 128 of
// K read beside A and B).
struct Sm90Cooperative {
  static constexpr int kSmsPerMma = 1;
  using Arch = cutlass::arch::Sm90;
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using BlockScaledMainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
struct Sm90Pingpong {
  static constexpr int kSmsPerMma = 1;
  using Arch = cutlass::arch::Sm90;
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using BlockScaledMainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};
// fp8 with fast accumulation: CUTLASS's FP8FastAccum schedules take the plain mainloop (no
// promotion into fp32 every 128 of K), so WithOverlappedPromotion leaves them alone
struct Sm90CooperativeFastAccum : Sm90Cooperative {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum;
};
struct Sm90PingpongFastAccum : Sm90Pingpong {
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum;
};
struct Sm100OneSm {
  static constexpr int kSmsPerMma = 1;
  using Arch = cutlass::arch::Sm100;
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecialized1SmSm100;
  using BlockScaledMainloop = cutlass::gemm::KernelTmaWarpSpecializedBlockwise1SmSm100;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized1Sm;
};
struct Sm100TwoSm {  // a CTA pair shares each MMA: tile M spans both SMs, cluster M even
  static constexpr int kSmsPerMma = 2;
  using Arch = cutlass::arch::Sm100;
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecialized2SmSm100;
  using BlockScaledMainloop = cutlass::gemm::KernelTmaWarpSpecializedBlockwise2SmSm100;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized2Sm;
};

// The mainloop collective CUTLASS's builder makes for a schedule, with the library's
// consumer where it has one (sm90a: fp8's overlapped promotion, block-scaled fp8's
// overlapped scaling). ScaleM, ScaleN: a block-scaled mainloop's rows (columns) per scale
// along the kernel's M (N), 1 or 128, each per 128 of K; 0: not block-scaled.
template <class Schedule, class ElementA, class LayoutA, class ElementB, class LayoutB, int AlignAB,
          class ElementAcc, class TileShape, class ClusterShape, int Carveout, int ScaleM,
          int ScaleN, bool kBlockScaled = (ScaleM != 0)>
struct MainloopOf {
  using Type = WithOverlappedPromotion<typename cutlass::gemm::collective::CollectiveBuilder<
      typename Schedule::Arch, cutlass::arch::OpClassTensorOp, ElementA, LayoutA, AlignAB, ElementB,
      LayoutB, AlignAB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<Carveout>,
      typename Schedule::Mainloop>::CollectiveOp>;
};
template <class Schedule, class ElementA, class LayoutA, class ElementB, class LayoutB, int AlignAB,
          class ElementAcc, class TileShape, class ClusterShape, int Carveout, int ScaleM,
          int ScaleN>
struct MainloopOf<Schedule, ElementA, LayoutA, ElementB, LayoutB, AlignAB, ElementAcc, TileShape,
                  ClusterShape, Carveout, ScaleM, ScaleN, true> {
  static_assert(ScaleN != 0 && sizeof(ElementA) == 1, "block scales: fp8, both operands");
  using Built = typename cutlass::gemm::collective::CollectiveBuilder<
      typename Schedule::Arch, cutlass::arch::OpClassTensorOp, ElementA,
      cute::tuple<LayoutA, ScaleLayout<ScaleM>>, AlignAB, ElementB,
      cute::tuple<LayoutB, ScaleLayout<ScaleN>>, AlignAB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<Carveout>,
      typename Schedule::BlockScaledMainloop>::CollectiveOp;
  using Type = cute::conditional_t<cute::is_same_v<typename Schedule::Arch, cutlass::arch::Sm90>,
                                   OverlappedBlockScaling<Built>, Built>;
};

// The persistent tile schedulers' swizzle: when A and B overflow L2 (Hopper's is 50 MB),
// consecutive CTAs walk output tiles in groups of up to 8, so they share A and B tiles in
// L2 (fp8 8192^3 on the H200: 1054 -> 882 us). CUTLASS pads the tile grid to the group
// size times the cluster in both directions, so a group size is taken only where that
// padding adds under 3% of empty tiles (fp8 512x8192x8192 with 128-row tiles in 2x1
// clusters would run 8 tile rows for 4: 0.43x cuBLAS). Problems that fit in L2 keep 1.
// m and n are the kernel's (swapped for swap-AB kernels).
template <class TileShape, class ClusterShape>
int tile_swizzle(int m, int n, int k, size_t element_bytes) {
  if ((double(m) + n) * k * element_bytes <= 48.0 * (1 << 20)) return 1;  // one batch entry
  const int tiles_m = (m + cute::size<0>(TileShape{}) - 1) / cute::size<0>(TileShape{});
  const int tiles_n = (n + cute::size<1>(TileShape{}) - 1) / cute::size<1>(TileShape{});
  auto padded = [&](int group) {  // tiles CUTLASS launches for this group size
    auto up = [](int v, int to) { return double((v + to - 1) / to * to); };
    return up(tiles_m, group * cute::size<0>(ClusterShape{})) *
           up(tiles_n, group * cute::size<1>(ClusterShape{}));
  };
  for (int group : {8, 4, 2}) {
    // the group CUTLASS takes for this maximum (get_log_swizzle_size)
    int fewer = std::min(tiles_m, tiles_n);
    int taken = group == 8 && fewer >= 6 ? 8 : group >= 4 && fewer >= 3 ? 4 : fewer >= 2 ? 2 : 1;
    if (taken > 1 && padded(taken) <= 1.03 * padded(1)) return taken;
  }
  return 1;
}

// Fills a CUTLASS 3.x packed-style stride with a leading dimension: the static unit
// mode stays, the dynamic mode gets `ld`, the batch mode gets `batch_stride`.
template <class Stride>
Stride make_stride_ld(int64_t ld, int64_t batch_stride) {
  Stride s{};
  if constexpr (cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<0>(s))>>) {
    cute::get<1>(s) = ld;
  } else {
    cute::get<0>(s) = ld;
  }
  cute::get<2>(s) = batch_stride;
  return s;
}

// What every CUTLASS 3.x kernel of the library does with its Arguments (Op::arguments):
// check them, size the workspace, build the Params once, launch with one
// cudaLaunchKernelExC (Op::Cluster is the launch's cluster shape).
template <class Op>
struct Kernel3x {
  static int can_implement(const GemmArgs& p) {
    if (Op::GemmKernel::can_implement(Op::arguments(p))) return PCR_OK;
    return set_error(PCR_ERR_UNSUPPORTED, "CUTLASS can_implement rejected the problem");
  }

  static size_t workspace_size(const GemmArgs& p) {
    return Op::GemmKernel::get_workspace_size(Op::arguments(p));
  }

  static const void* device_function() {
    return reinterpret_cast<const void*>(cutlass::device_kernel<typename Op::GemmKernel>);
  }

  // Everything a launch needs, computed once: the arguments (for the per-launch
  // workspace reset), CUTLASS's Params and the launch geometry. Launching directly
  // (not through CUTLASS's ClusterLauncher, which sets a function attribute on every
  // launch) keeps a repeated call to one cudaLaunchKernelExC.
  struct Prepared {
    typename Op::Arguments args;
    typename Op::GemmKernel::Params params;
    dim3 grid, block;
  };

  static int prepare(const GemmArgs& p, void* workspace, void* out) {
    auto* prep = new (out) Prepared{Op::arguments(p), {}, {}, {}};
    prep->params = Op::GemmKernel::to_underlying_arguments(prep->args, workspace);
    prep->grid = Op::GemmKernel::get_grid_shape(prep->params);
    prep->block = Op::GemmKernel::get_block_shape();
    return PCR_OK;
  }

  static int launch(const void* prepared, void* workspace, int device, cudaStream_t stream,
                    bool programmatic) {
    static std::atomic<uint64_t> smem_done{0};
    int st =
        ensure_smem_limit(device_function(), device, Op::GemmKernel::SharedStorageSize, &smem_done);
    if (st != PCR_OK) return st;
    auto& prep = *const_cast<Prepared*>(static_cast<const Prepared*>(prepared));
    if (workspace && Op::GemmKernel::initialize_workspace(prep.args, workspace, stream) !=
                         cutlass::Status::kSuccess)
      return set_error(PCR_ERR_CUDA, "workspace initialization failed: %s",
                       cudaGetErrorString(cudaGetLastError()));
    cudaLaunchAttribute attrs[2];
    unsigned n = 0;
    if (cute::size(typename Op::Cluster{}) > 1) {
      attrs[n].id = cudaLaunchAttributeClusterDimension;
      attrs[n].val.clusterDim.x = cute::size<0>(typename Op::Cluster{});
      attrs[n].val.clusterDim.y = cute::size<1>(typename Op::Cluster{});
      attrs[n++].val.clusterDim.z = cute::size<2>(typename Op::Cluster{});
    }
    if (Op::kProgrammatic && programmatic) attrs[n++] = programmatic_dependent();
    cudaLaunchConfig_t config{};
    config.gridDim = prep.grid;
    config.blockDim = prep.block;
    config.dynamicSmemBytes = Op::GemmKernel::SharedStorageSize;
    config.stream = stream;
    config.attrs = attrs;
    config.numAttrs = n;
    void* params[] = {&prep.params};
    cudaError_t e = cudaLaunchKernelExC(&config, device_function(), params);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return set_error(PCR_ERR_CUDA, "kernel launch failed: %s (%s)", cudaGetErrorName(e),
                       cudaGetErrorString(e));
    }
    return PCR_OK;
  }
};

// SwapAB: the kernel computes D^T = B^T A^T, so its operands are (b, a), its problem
// (n, m, k) and its C/D column-major: a small M then sits on the MMA's N side. The
// generator passes A/B element types, layouts, tile and cluster already swapped.
// Epilogue is a pcr_epilogue; ElementAcc is float, or int32_t for int8 inputs (whose
// int32 outputs are then scaled in int32 arithmetic, exactly). TensorScales: the linear
// epilogue also multiplies by per-tensor scale tensors (the catalogue's tensor_scales).
// ScaleM, ScaleN: a block-scaled fp8 mainloop's rows and columns per scale along the
// kernel's M and N (MainloopOf; the generator swaps them for swap-AB kernels), 0: none.
template <class ElementA, class ElementB, class ElementD, class LayoutA, class LayoutB,
          class TileShape, class ClusterShape, class Schedule, int AlignAB,
          class TileScheduler = void, bool SwapAB = false, int Epilogue = PCR_EPI_LINEAR,
          class ElementAcc = float, bool TensorScales = false, int ScaleM = 0, int ScaleN = 0>
struct Gemm : Kernel3x<Gemm<ElementA, ElementB, ElementD, LayoutA, LayoutB, TileShape, ClusterShape,
                            Schedule, AlignAB, TileScheduler, SwapAB, Epilogue, ElementAcc,
                            TensorScales, ScaleM, ScaleN>> {
  static constexpr bool kBlockScaled = ScaleM != 0;
  using Cluster = ClusterShape;
  // sm90a kernels wait at griddepcontrol.wait before their first global load and hint
  // the next launch at their last tile (CUTLASS_ENABLE_GDC_FOR_SM90), so they may launch
  // as programmatic dependents: their prologue then overlaps the previous kernel's tail.
  // sm100a's equivalent is not enabled: no sm100 hardware here to run it on.
#ifdef CUTLASS_ENABLE_GDC_FOR_SM90
  static constexpr bool kProgrammatic =
      cute::is_same_v<typename Schedule::Arch, cutlass::arch::Sm90>;
#else
  static constexpr bool kProgrammatic = false;
#endif
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  using LayoutD =
      cute::conditional_t<SwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using Compute = ComputeOf<ElementD>;
  static_assert(!TensorScales || (Epilogue == PCR_EPI_LINEAR && sizeof(ElementA) == 1 &&
                                  !cute::is_same_v<ElementD, int32_t>),
                "per-tensor scale tensors: a linear epilogue of quantized inputs, non-int32 D");
  using Linear = cute::conditional_t<
      TensorScales || kBlockScaled, typename evt::TensorScaledLinear<ElementD>::Type,
      cutlass::epilogue::fusion::LinearCombination<ElementD, Compute, ElementD, Compute>>;
  // a block-scaled kernel's bias/activation epilogue: the dequantizing tree, factors unset
  static constexpr int kTree =
      kBlockScaled && Epilogue == PCR_EPI_BIASACT ? int(PCR_EPI_SCALED) : Epilogue;
  // The epilogue trees broadcast bias and scale vectors over one CTA's tile
  using CtaTile = decltype(cute::shape_div(
      TileShape{}, cute::Shape<cute::Int<Schedule::kSmsPerMma>, cute::_1, cute::_1>{}));
  static_assert(Epilogue != PCR_EPI_AUX || !SwapAB, "aux is stored row-major: no swap-AB");
  using FusionKind =
      evt::FusionOf<kTree, CtaTile, TileShape, ElementD, typename Schedule::Epilogue, Linear>;
  using Fusion = typename FusionKind::Type;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      typename Schedule::Arch, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementAcc, ElementD, LayoutD,
      kAlignD, ElementD, LayoutD, kAlignD, typename Schedule::Epilogue, Fusion>::CollectiveOp;

  static_assert(!kBlockScaled || (Epilogue == PCR_EPI_LINEAR || Epilogue == PCR_EPI_BIASACT),
                "block-scaled kernels: plain or bias/activation epilogues");
  using CollectiveMainloop = typename MainloopOf<
      Schedule, ElementA, LayoutA, ElementB, LayoutB, AlignAB, ElementAcc, TileShape, ClusterShape,
      static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage)), ScaleM, ScaleN>::Type;

  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                           CollectiveEpilogue, TileScheduler>;
  using Arguments = typename GemmKernel::Arguments;

  static Arguments arguments(const GemmArgs& p) {
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    using StrideC = typename GemmKernel::StrideC;
    using StrideD = typename GemmKernel::StrideD;
    const void* a = SwapAB ? p.b : p.a;
    const void* b = SwapAB ? p.a : p.b;
    typename CollectiveEpilogue::FusionCallbacks::Arguments thread;
    if constexpr (kTree == PCR_EPI_BIASACT || kTree == PCR_EPI_AUX)
      // kernel rows are problem columns if swapped
      thread = FusionKind::Tree::arguments(p, SwapAB ? p.bias_m : p.bias_n,
                                           SwapAB ? p.bias_n : p.bias_m);
    else if constexpr (kTree == PCR_EPI_SCALED)
      thread = FusionKind::Tree::arguments(p, SwapAB, !kBlockScaled);
    else if constexpr (TensorScales || kBlockScaled)
      thread = evt::TensorScaledLinear<ElementD>::arguments(p, !kBlockScaled);
    else
      thread = {Compute(p.alpha), Compute(p.beta)};
    const auto dA = make_stride_ld<StrideA>(SwapAB ? p.ldb : p.lda, SwapAB ? p.batch_b : p.batch_a);
    const auto dB = make_stride_ld<StrideB>(SwapAB ? p.lda : p.ldb, SwapAB ? p.batch_a : p.batch_b);
    typename CollectiveMainloop::Arguments mainloop;
    if constexpr (kBlockScaled)
      mainloop = block_scaled_mainloop(p, static_cast<const ElementA*>(a), dA,
                                       static_cast<const ElementB*>(b), dB);
    else
      mainloop = {static_cast<const ElementA*>(a), dA, static_cast<const ElementB*>(b), dB};
    Arguments args{
        p.batch > 1 ? cutlass::gemm::GemmUniversalMode::kBatched
                    : cutlass::gemm::GemmUniversalMode::kGemm,
        {SwapAB ? p.n : p.m, SwapAB ? p.m : p.n, p.k, p.batch},
        mainloop,
        {thread, static_cast<const ElementD*>(p.c), make_stride_ld<StrideC>(p.ldc, p.batch_c),
         static_cast<ElementD*>(p.d), make_stride_ld<StrideD>(p.ldd, p.batch_d)}};
    args.hw_info.device_id = p.device;
    args.hw_info.sm_count = p.sm_count;
    args.scheduler.max_swizzle_size = tile_swizzle<TileShape, ClusterShape>(
        SwapAB ? p.n : p.m, SwapAB ? p.m : p.n, p.k, sizeof(ElementA));
    return args;
  }

  // A block-scaled mainloop's arguments: the operands and their scale grids (the kernel's
  // A is the problem's b when swapped, and its scales with it).
  template <class StrideA, class StrideB>
  static typename CollectiveMainloop::Arguments block_scaled_mainloop(const GemmArgs& p,
                                                                      const ElementA* a, StrideA dA,
                                                                      const ElementB* b,
                                                                      StrideB dB) {
    const int rows_a = SwapAB ? p.n : p.m, rows_b = SwapAB ? p.m : p.n;
    const auto* sa = static_cast<const float*>(SwapAB ? p.scale_b : p.scale_a);
    const auto* sb = static_cast<const float*>(SwapAB ? p.scale_a : p.scale_b);
    const int64_t sa_g = SwapAB ? p.scale_b_group_stride : p.scale_a_group_stride;
    const int64_t sa_k = SwapAB ? p.scale_b_kblock_stride : p.scale_a_kblock_stride;
    const int64_t sb_g = SwapAB ? p.scale_a_group_stride : p.scale_b_group_stride;
    const int64_t sb_k = SwapAB ? p.scale_a_kblock_stride : p.scale_b_kblock_stride;
    return {a,  dA,
            b,  dB,
            sa, scale_layout<ScaleM>(rows_a, p.k, sa_g, sa_k),
            sb, scale_layout<ScaleN>(rows_b, p.k, sb_g, sb_k)};
  }
};

}  // namespace pcr::tma

namespace cutlass::gemm::kernel::detail {
template <class ArchTag, class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<pcr::tma::StreamK, ArchTag, TileShape, ClusterShape,
                             SchedulerPipelineStageCount>  // other archs: CUTLASS's own
    : TileSchedulerSelector<StreamKScheduler, ArchTag, TileShape, ClusterShape,
                            SchedulerPipelineStageCount> {};
template <class TileShape, class ClusterShape, uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<pcr::tma::StreamK, arch::Sm90, TileShape, ClusterShape,
                             SchedulerPipelineStageCount> {
  using Scheduler = pcr::tma::StreamKScheduler<TileShape, ClusterShape>;
};
}  // namespace cutlass::gemm::kernel::detail
