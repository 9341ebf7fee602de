// CUTLASS 2.x mma.sync GEMMs, one template for four arch families:
//   sm80 family: multistage (cp.async, 16-byte alignment) or the 2-stage pipelined
//                mainloop, whose register-staged loads take any alignment; fp16/bf16
//                (m16n8k16), tf32 and 3xTF32 fp32 (m16n8k8), fp64 (DMMA m8n8k4), int8
//                (m16n8k32); one source serves sm_80/86/89/90 SASS and later GPUs' PTX;
//   sm89 family: Ada's fp8 (m16n8k32), on the same mainloops;
//   sm75 family: Turing m16n8k8 (fp16) and m8n8k16 (int8), 2-stage pipelined;
//   sm70 family: Volta m8n8k4 (fp16), 2-stage pipelined;
//   sm70/sm75 also SIMT fp32 and fp64 (CUDA-core FMA), 2-stage pipelined.
// The block swizzle is the data-parallel identity swizzle, or CUTLASS's stream-K swizzle,
// which selects the stream-K kernel: its heuristic spreads the K loop of too few output
// tiles over every SM (stream-K, or split-K when that balances better) and reduces the
// fp32 partials in the workspace in a fixed order, so results stay deterministic.
// The epilogue is CUTLASS's linear combination, or an epilogue visitor tree in registers:
// BiasAct computes act(alpha * acc + beta * C + row bias + column bias), Scaled (quantized
// inputs) scales acc by per-tensor, per-row and per-column factors first.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/device/gemm_grouped.h"
#include "cutlass/gemm/device/gemm_universal_base.h"
#include "cutlass/gemm/kernel/default_gemm_grouped.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle_streamk.h"
// after the gemm headers: the visitors name cutlass::gemm types unqualified
#include "cutlass/epilogue/threadblock/fusion/visitors.hpp"
#include "cutlass/gemm/kernel/default_gemm_universal_with_visitor.h"

#include <algorithm>
#include <new>

#include "activation.h"
#include "amax.h"
#include "kernel.h"

namespace pcr::mma {

namespace evt {
using namespace cutlass::epilogue::threadblock;
using cute::_0;
using cute::_1;
using cute::Stride;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// An AuxLoad that reads nothing when its pointer is null (C with beta == 0: D may hold
// anything, NaN included, and 0 * NaN is not 0).
template <class ThreadMap, class Element, class StrideMNL>
struct OptionalAuxLoad : VisitorAuxLoad<ThreadMap, Element, StrideMNL> {
  using Base = VisitorAuxLoad<ThreadMap, Element, StrideMNL>;
  using Base::Base;

  template <class Impl>
  struct Callbacks : Impl {
    bool skip;
    CUTLASS_DEVICE void begin_step(int step_idx) {
      if (skip)
        cute::clear(this->tC_rAux(cute::_, cute::_, cute::_, step_idx % Base::Stages));
      else
        Impl::begin_step(step_idx);
    }
  };

  template <class ProblemShape>
  CUTLASS_DEVICE auto get_callbacks(cutlass::gemm::GemmCoord tile, int thread_idx,
                                    ProblemShape problem_shape) {
    auto impl = Base::get_callbacks(tile, thread_idx, problem_shape);
    return Callbacks<decltype(impl)>{cute::move(impl), this->params_ptr->ptr_aux == nullptr};
  }
};

// What CUTLASS's visitor interface asks of a node whose parameters are its per-launch
// arguments as given (no workspace, no shared memory).
template <class Args>
struct ArgumentsOnlyNode {
  using Arguments = Args;
  using Params = Args;
  struct SharedStorage {};

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args,
                                                  void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
};

// The activation node (pcr::activate, chosen per launch), converting to the output type.
template <class ElementOutput>
struct ActivationNode : ArgumentsOnlyNode<ActivationArgs> {
  CUTLASS_HOST_DEVICE ActivationNode() {}
  CUTLASS_HOST_DEVICE ActivationNode(Params const& params, SharedStorage const&) : args(params) {}
  ActivationArgs args;

  struct Callbacks : EmptyCallbacks {
    ActivationArgs args;
    template <class ElementAcc, class ElementInput, int N>
    CUTLASS_DEVICE cutlass::Array<ElementOutput, N> visit(
        int, int, int, int, cutlass::Array<ElementAcc, N> const&,
        cutlass::Array<ElementInput, N> const& x) {
      using Compute = ComputeOf<ElementOutput>;
      cutlass::NumericArrayConverter<Compute, ElementInput, N, kRound> to_compute;
      cutlass::NumericArrayConverter<ElementOutput, Compute, N, kRound> to_output;
      return to_output(activate(args, to_compute(x)));
    }
  };

  template <class ProblemShape>
  CUTLASS_DEVICE auto get_callbacks(cutlass::gemm::GemmCoord, int, ProblemShape) {
    return Callbacks{{}, args};
  }
};

// An AuxStore that writes nothing when its pointer is null (an aux kernel serving a call
// without aux).
template <class ThreadMap, class Element, class StrideMNL>
struct OptionalAuxStore : VisitorAuxStore<ThreadMap, Element, kRound, StrideMNL> {
  using Base = VisitorAuxStore<ThreadMap, Element, kRound, StrideMNL>;
  using Base::Base;

  template <class Impl>
  struct Callbacks : Impl {
    bool skip;
    CUTLASS_DEVICE void end_step(int step_idx) {
      if (!skip) Impl::end_step(step_idx);
    }
  };

  template <class ProblemShape>
  CUTLASS_DEVICE auto get_callbacks(cutlass::gemm::GemmCoord tile, int thread_idx,
                                    ProblemShape problem_shape) {
    auto impl = Base::get_callbacks(tile, thread_idx, problem_shape);
    return Callbacks<decltype(impl)>{cute::move(impl), this->params_ptr->ptr_aux == nullptr};
  }
};

// max |d| into GemmArgs::amax where not null (amax.h), passing its input on: CUTLASS's
// scalar reduction visitor with an address per launch and bits reduced as amax.h says.
struct AmaxArgs {
  float* amax = nullptr;
};
template <class ThreadMap>
struct AmaxReduction : ArgumentsOnlyNode<AmaxArgs> {
  CUTLASS_HOST_DEVICE AmaxReduction() {}
  CUTLASS_HOST_DEVICE AmaxReduction(Params const& params, SharedStorage const&)
      : amax(params.amax) {}
  float* amax;

  template <class CTensor, class ProblemShape>
  struct Callbacks : EmptyCallbacks {
    CTensor tC_cD;  // each fragment's (m, n) coordinate
    ProblemShape problem_shape;
    float* amax;
    uint32_t bits;

    template <class ElementAcc, class ElementInput, int N>
    CUTLASS_DEVICE auto visit(int iter_idx, int row_idx, int column_idx, int,
                              cutlass::Array<ElementAcc, N> const&,
                              cutlass::Array<ElementInput, N> const& x) {
      if (amax && cute::elem_less(tC_cD(column_idx, row_idx, iter_idx), problem_shape)) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < N; ++i) bits = amax_bits(bits, float(x[i]));
      }
      return x;
    }
    CUTLASS_DEVICE void end_epilogue() {
      if (amax) commit_amax(amax, bits);
    }
  };

  template <class ProblemShape>
  CUTLASS_DEVICE auto get_callbacks(cutlass::gemm::GemmCoord tile, int thread_idx,
                                    ProblemShape problem_shape) {
    auto cD = cute::make_identity_tensor(problem_shape);
    // (FRAGMENT_COL, FRAGMENT_ROW, ITERATIONS): coordinates as VisitorScalarReduction's
    auto tC_cD = cute::group_modes<2, 5>(ThreadMap::partition(cD, thread_idx, tile)(
        _0{}, cute::_, cute::_, cute::_, cute::_, cute::_));
    return Callbacks<decltype(tC_cD), ProblemShape>{{}, tC_cD, problem_shape, amax, 0u};
  }
};

// D = act(beta * C + (alpha * acc + bias_row[n]) + bias_col[m]); null biases read as 0.
// Aux (PCR_EPI_AUX): the activation's input is also stored to GemmArgs::aux, and max |D|
// reduced into GemmArgs::amax, each where not null.
template <class ThreadMap, class ElementD, bool Aux = false>
struct BiasActTree {
  using Compute = ComputeOf<ElementD>;
  using Scalar = VisitorScalarBroadcast<Compute>;
  using StrideMat = Stride<int64_t, _1, int64_t>;
  using Row = VisitorRowBroadcast<ThreadMap, ElementD, Stride<_0, _1, int32_t>>;
  using Col = VisitorColBroadcast<ThreadMap, ElementD, Stride<_1, _0, int32_t>>;
  template <template <class> class Op>
  using Node = VisitorCompute<Op, Compute, Compute, kRound>;
  using AlphaAccRow =
      Sm80EVT<Node<cutlass::homogeneous_multiply_add>, Scalar, VisitorAccFetch, Row>;
  using PlusCol = Sm80EVT<Node<cutlass::plus>, AlphaAccRow, Col>;
  using BetaC = Sm80EVT<Node<cutlass::homogeneous_multiply_add>, Scalar,
                        OptionalAuxLoad<ThreadMap, ElementD, StrideMat>, PlusCol>;
  using Store = VisitorAuxStore<ThreadMap, ElementD, kRound, StrideMat>;
  using AuxStore = OptionalAuxStore<ThreadMap, ElementD, StrideMat>;
  using Stored = cute::conditional_t<Aux, Sm80EVT<AuxStore, BetaC>, BetaC>;
  using Act = Sm80EVT<ActivationNode<ElementD>, Stored>;
  using Checked = cute::conditional_t<Aux, Sm80EVT<AmaxReduction<ThreadMap>, Act>, Act>;
  using Type = Sm80EVT<Store, Checked>;

  static typename Type::Arguments arguments(const GemmArgs& p) {
    auto* c = p.beta == 0.0 ? nullptr : static_cast<ElementD*>(const_cast<void*>(p.c));
    const Compute alpha(p.alpha), beta(p.beta);
    typename BetaC::Arguments z{
        // beta*C + Z
        {{beta}},
        {c, ElementD(0), {p.ldc, _1{}, p.batch_c}},
        {// Z + col
         {{{alpha}}, {}, {static_cast<const ElementD*>(p.bias_n), ElementD(0), {}}, {}},
         {static_cast<const ElementD*>(p.bias_m), ElementD(0), {}},
         {}},
        {}};
    typename Store::Arguments d{static_cast<ElementD*>(p.d), {p.ldd, _1{}, p.batch_d}};
    if constexpr (Aux)
      return {{{{z, {static_cast<ElementD*>(p.aux), {p.ldaux, _1{}, p.batch_aux}}}, {p.activation}},
               {p.amax}},
              d};
    else
      return {{z, {p.activation}}, d};
  }
};
// The dequantizing epilogue of quantized inputs (int8, fp8), as tma_gemm.cuh's:
//   R = act(beta * C + (sa_m[m] * (sb_n[n] * (alpha * sa * sb * acc)) + bias_n[n]) + bias_m[m])
//   D = scale_d * R, with max |R| reduced into GemmArgs::amax
// sa and sb are per-tensor scales read from the GPU (null: 1), sa_m and sb_n per-row and
// per-column float vectors (null: 1), biases in D's dtype (null: 0), amax and scale_d as
// tma_gemm.cuh's QuantizedOutput takes them (null: none, and 1).
template <class ThreadMap, class ElementD>
struct ScaledTree {
  using Scalars = VisitorScalarBroadcast<float, Stride<_0, _0, _0>, 3>;  // alpha, sa, sb
  using Scalar = VisitorScalarBroadcast<float>;
  using StrideMat = Stride<int64_t, _1, int64_t>;
  using RowScale = VisitorRowBroadcast<ThreadMap, float, Stride<_0, _1, int32_t>>;
  using ColScale = VisitorColBroadcast<ThreadMap, float, Stride<_1, _0, int32_t>>;
  using RowBias = VisitorRowBroadcast<ThreadMap, ElementD, Stride<_0, _1, int32_t>>;
  using ColBias = VisitorColBroadcast<ThreadMap, ElementD, Stride<_1, _0, int32_t>>;
  using Times = VisitorCompute<cutlass::multiplies, float, float, kRound>;
  using Fma = VisitorCompute<cutlass::homogeneous_multiply_add, float, float, kRound>;
  using ScaledAcc = Sm80EVT<Times, Scalars, VisitorAccFetch>;
  using RowScaled = Sm80EVT<Times, RowScale, ScaledAcc>;
  using ColScaledPlusRow = Sm80EVT<Fma, ColScale, RowScaled, RowBias>;
  using PlusCol =
      Sm80EVT<VisitorCompute<cutlass::plus, float, float, kRound>, ColScaledPlusRow, ColBias>;
  using BetaC = Sm80EVT<Fma, Scalar, OptionalAuxLoad<ThreadMap, ElementD, StrideMat>, PlusCol>;
  // in float up to the store: amax sees R itself, and D is rounded once (after scale_d)
  using Act = Sm80EVT<ActivationNode<float>, BetaC>;
  using Checked = Sm80EVT<AmaxReduction<ThreadMap>, Act>;
  using OutScaled = Sm80EVT<Times, Scalar, Checked>;
  using Type = Sm80EVT<VisitorAuxStore<ThreadMap, ElementD, kRound, StrideMat>, OutScaled>;

  static typename Type::Arguments arguments(const GemmArgs& p) {
    auto* c = p.beta == 0.0 ? nullptr : static_cast<ElementD*>(const_cast<void*>(p.c));
    const Dequant q = dequant_of(p);
    typename Scalars::Arguments scalars{{float(p.alpha), 1.0f, 1.0f},
                                        {nullptr, q.scale_a, q.scale_b}};
    return {{{{1.0f}, {p.scale_d}},  // scale_d * max|.|-checked act(...)
             {{                      // act(...)
               {                     // beta*C + Z
                {{float(p.beta)}},
                {c, ElementD(0), {p.ldc, _1{}, p.batch_c}},
                { // Z + col bias
                 {// sa_m*Y + row bias
                  {q.row_scales, 1.0f, {}},
                  {{q.col_scales, 1.0f, {}}, {scalars, {}, {}}, {}},
                  {static_cast<const ElementD*>(p.bias_n), ElementD(0), {}},
                  {}},
                 {static_cast<const ElementD*>(p.bias_m), ElementD(0), {}},
                 {}},
                {}},
               {p.activation}},
              {p.amax}},
             {}},
            {static_cast<ElementD*>(p.d), {p.ldd, _1{}, p.batch_d}}};
  }
};
}  // namespace evt

// Arch tags; each kernel names its MMA instruction shape (it depends on the dtype).
struct Sm80 {
  using Arch = cutlass::arch::Sm80;
};
// Ada: the sm80 family's kernels plus fp8 mma.sync m16n8k32
struct Sm89 {
  using Arch = cutlass::arch::Sm89;
};
using DataParallel = cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>;
using StreamK = cutlass::gemm::threadblock::ThreadblockSwizzleStreamK;

// Volta: mma.sync m8n8k4 (fp16), 2-stage; built only by CUDA 12.x and older
struct Sm70 {
  using Arch = cutlass::arch::Sm70;
};

struct Sm75 {
  using Arch = cutlass::arch::Sm75;
};

// What every CUTLASS 2.x kernel of the library does with its device-level operator
// (Op::Device) and Arguments (Op::arguments): check them, size the workspace, and launch
// through the prepared operator (Op::Prepared) with the shared-memory limit raised.
template <class Op>
struct Kernel2x {
  static constexpr bool kProgrammatic = false;  // no grid dependency wait in these kernels

  static int can_implement(const GemmArgs& p) {
    cutlass::Status s = Op::Device::can_implement(Op::arguments(p));
    if (s == cutlass::Status::kSuccess) return PCR_OK;
    return set_error(PCR_ERR_UNSUPPORTED, "CUTLASS can_implement rejected the problem: %s",
                     cutlassGetStatusString(s));
  }

  static size_t workspace_size(const GemmArgs& p) {
    return Op::Device::get_workspace_size(Op::arguments(p));
  }

  static int prepare(const GemmArgs& p, void* workspace, void* out) {
    cutlass::Status s = (new (out) typename Op::Prepared())->setup(Op::arguments(p), workspace);
    if (s != cutlass::Status::kSuccess)
      return set_error(PCR_ERR_INTERNAL, "CUTLASS parameter setup failed: %s",
                       cutlassGetStatusString(s));
    return PCR_OK;
  }

  static int launch(const void* prepared, void* workspace, int device, cudaStream_t stream,
                    bool /*programmatic: never, see kProgrammatic*/) {
    static std::atomic<uint64_t> smem_done{0};
    int st = ensure_smem_limit(Op::device_function(), device,
                               int(sizeof(typename Op::GemmKernel::SharedStorage)), &smem_done);
    if (st != PCR_OK) return st;
    auto& prep =
        *const_cast<typename Op::Prepared*>(static_cast<const typename Op::Prepared*>(prepared));
    cutlass::Status s = prep.start(workspace, stream);
    if (s != cutlass::Status::kSuccess) {
      cudaError_t e = cudaGetLastError();
      return set_error(PCR_ERR_CUDA, "kernel launch failed: %s (%s; %s)", cutlassGetStatusString(s),
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return PCR_OK;
  }
};

// Instruction is the MMA's shape; 1x1x1 makes a SIMT kernel (CUDA-core FMA: fp32 and
// fp64 on Volta and Turing, whose tensor cores lack them).
template <class Instruction>
using OpClassOf =
    cute::conditional_t<Instruction::kM == 1 && Instruction::kN == 1 && Instruction::kK == 1,
                        cutlass::arch::OpClassSimt, cutlass::arch::OpClassTensorOp>;

// Math is the MMA's operator tag: OpMultiplyAdd, OpMultiplyAddFastF32 (3xTF32: fp32
// inputs at fp32 accuracy on TF32 tensor cores), OpMultiplyAddSaturate (int8). The
// epilogue computes in ElementAcc's type (fp32, fp64, or int32 for exact int32 outputs).
template <class Family, class ElementA, class ElementB, class ElementD, class LayoutA,
          class LayoutB, class TileShape, class WarpShape, class Instruction, int Stages,
          int AlignAB, int AlignC, class Swizzle = DataParallel, int Epilogue = PCR_EPI_LINEAR,
          class ElementAcc = float, class Math = cutlass::arch::OpMultiplyAdd>
struct Gemm
    : Kernel2x<Gemm<Family, ElementA, ElementB, ElementD, LayoutA, LayoutB, TileShape, WarpShape,
                    Instruction, Stages, AlignAB, AlignC, Swizzle, Epilogue, ElementAcc, Math>> {
  using Linear =
      cutlass::epilogue::thread::LinearCombination<ElementD, AlignC, ElementAcc, ElementAcc>;
  using ThreadMap =
      cutlass::epilogue::threadblock::OutputTileThreadLayout<TileShape, WarpShape, ElementD, AlignC,
                                                             /*epilogue stages*/ 1>;
  using Tree = cute::conditional_t<Epilogue == PCR_EPI_SCALED, evt::ScaledTree<ThreadMap, ElementD>,
                                   evt::BiasActTree<ThreadMap, ElementD, Epilogue == PCR_EPI_AUX>>;
  template <bool Fused, class = void>
  struct Select {
    using Device = cutlass::gemm::device::GemmUniversal<
        ElementA, LayoutA, ElementB, LayoutB, ElementD, cutlass::layout::RowMajor, ElementAcc,
        OpClassOf<Instruction>, typename Family::Arch, TileShape, WarpShape, Instruction, Linear,
        Swizzle, Stages, AlignAB, AlignAB, Math>;
    static typename Linear::Params epilogue(const GemmArgs& p) {
      return {ElementAcc(p.alpha), ElementAcc(p.beta)};
    }
  };
  template <class Dummy>
  struct Select<true, Dummy> {
    using Kernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
        ElementA, LayoutA, cutlass::ComplexTransform::kNone, AlignAB, ElementB, LayoutB,
        cutlass::ComplexTransform::kNone, AlignAB, ElementD, cutlass::layout::RowMajor, AlignC,
        ElementAcc, /*epilogue math*/ float, OpClassOf<Instruction>, typename Family::Arch,
        TileShape, WarpShape, Instruction, typename Tree::Type, Swizzle, Stages, Math,
        /*epilogue stages*/ 1>::GemmKernel;
    using Device = cutlass::gemm::device::GemmUniversalBase<Kernel>;
    static typename Tree::Type::Arguments epilogue(const GemmArgs& p) { return Tree::arguments(p); }
  };
  static constexpr bool kVisitor = Epilogue != PCR_EPI_LINEAR;
  using Device = typename Select<kVisitor>::Device;
  using GemmKernel = typename Device::GemmKernel;
  using Arguments = typename Device::Arguments;

  static Arguments arguments(const GemmArgs& p) {
    return Arguments(p.batch > 1 ? cutlass::gemm::GemmUniversalMode::kBatched
                                 : cutlass::gemm::GemmUniversalMode::kGemm,
                     {p.m, p.n, p.k}, p.batch, Select<kVisitor>::epilogue(p), p.a, p.b, p.c, p.d,
                     p.batch_a, p.batch_b, p.batch_c, p.batch_d, p.lda, p.ldb, p.ldc, p.ldd);
  }

  static const void* device_function() {
    return reinterpret_cast<const void*>(cutlass::Kernel2<GemmKernel>);
  }

  // The device-level operator holds the kernel's Params; this view of it builds them
  // without touching the GPU, and re-arms the workspace (split-K semaphores, stream-K
  // barriers) on the launch stream before each launch (storing the same pointers again:
  // they key the prepared-launch cache).
  struct Prepared : Device {
    cutlass::Status setup(const Arguments& args, void*) { return this->init_params(args); }
    cutlass::Status start(void* workspace, cudaStream_t stream) {
      cutlass::Status s = this->params_.init_workspace(workspace, stream);
      return s == cutlass::Status::kSuccess ? this->run(stream) : s;
    }
  };
};

// A grouped GEMM (CUTLASS 2.x GemmGrouped): GemmArgs::groups problems whose sizes,
// pointers and leading dimensions live in GPU arrays (GemmArgs::group); the problem
// visitor reads the sizes on the GPU (kDeviceOnly), so the host never needs them.
template <class Family, class ElementA, class ElementB, class ElementD, class LayoutA,
          class LayoutB, class TileShape, class WarpShape, class Instruction, int Stages,
          int AlignAB, int AlignC>
struct GroupedGemm
    : Kernel2x<GroupedGemm<Family, ElementA, ElementB, ElementD, LayoutA, LayoutB, TileShape,
                           WarpShape, Instruction, Stages, AlignAB, AlignC>> {
  using ElementAcc = float;
  using Epilogue =
      cutlass::epilogue::thread::LinearCombination<ElementD, AlignC, ElementAcc, ElementAcc>;
  using GemmKernel = typename cutlass::gemm::kernel::DefaultGemmGrouped<
      ElementA, LayoutA, cutlass::ComplexTransform::kNone, AlignAB, ElementB, LayoutB,
      cutlass::ComplexTransform::kNone, AlignAB, ElementD, cutlass::layout::RowMajor, ElementAcc,
      cutlass::arch::OpClassTensorOp, typename Family::Arch, TileShape, WarpShape, Instruction,
      Epilogue, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<1>, Stages,
      cutlass::gemm::kernel::GroupScheduleMode::kDeviceOnly>::GemmKernel;
  using Device = cutlass::gemm::device::GemmGrouped<GemmKernel>;
  using Arguments = typename Device::Arguments;

  static Arguments arguments(const GemmArgs& p) {
    // a persistent grid: as many CTAs as fit on the GPU at once walk every group's tiles
    static const int per_sm = std::max(1, Device::maximum_active_blocks());
    const GroupArrays& g = p.group;
    return Arguments(reinterpret_cast<cutlass::gemm::GemmCoord*>(g.shape), p.groups,
                     p.sm_count * per_sm, {float(p.alpha), float(p.beta)},
                     reinterpret_cast<ElementA**>(const_cast<void**>(g.a)),
                     reinterpret_cast<ElementB**>(const_cast<void**>(g.b)),
                     reinterpret_cast<ElementD**>(const_cast<void**>(g.c)),
                     reinterpret_cast<ElementD**>(g.d), g.lda, g.ldb, g.ldc, g.ldd);
  }

  static const void* device_function() {
    return reinterpret_cast<const void*>(cutlass::Kernel<GemmKernel>);
  }

  struct Prepared : Device {
    cutlass::Status setup(const Arguments& args, void* workspace) {
      return this->initialize(args, workspace);
    }
    cutlass::Status start(void*, cudaStream_t stream) { return this->run(stream); }
  };
};

}  // namespace pcr::mma
