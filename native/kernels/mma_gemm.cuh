// CUTLASS 2.x mma.sync GEMMs, one template for two arch families:
//   sm80 family: m16n8k16, multistage (cp.async, 16-byte alignment) or the 2-stage
//                pipelined mainloop, whose register-staged loads take any alignment; one
//                source serves sm_80/86/89/90 SASS and the PTX for later GPUs;
//   sm75 family: Turing m16n8k8 (fp16 only), 2-stage pipelined.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_universal.h"

#include "kernel.h"

namespace pcr::mma {

struct Sm80 {
  using Arch = cutlass::arch::Sm80;
  using Instruction = cutlass::gemm::GemmShape<16, 8, 16>;
};
struct Sm75 {
  using Arch = cutlass::arch::Sm75;
  using Instruction = cutlass::gemm::GemmShape<16, 8, 8>;
};

template <class Family, class ElementA, class ElementB, class ElementD, class LayoutA,
          class LayoutB, class TileShape, class WarpShape, int Stages, int AlignAB, int AlignC>
struct Gemm {
  using ElementAcc = float;
  using Epilogue =
      cutlass::epilogue::thread::LinearCombination<ElementD, AlignC, ElementAcc, ElementAcc>;
  using Device = cutlass::gemm::device::GemmUniversal<
      ElementA, LayoutA, ElementB, LayoutB, ElementD, cutlass::layout::RowMajor, ElementAcc,
      cutlass::arch::OpClassTensorOp, typename Family::Arch, TileShape, WarpShape,
      typename Family::Instruction, Epilogue,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, Stages, AlignAB, AlignAB>;
  using GemmKernel = typename Device::GemmKernel;
  using Arguments = typename Device::Arguments;

  static Arguments arguments(const GemmArgs& p) {
    return Arguments(cutlass::gemm::GemmUniversalMode::kGemm, {p.m, p.n, p.k}, /*batch=*/1,
                     {p.alpha, p.beta}, p.a, p.b, p.c, p.d,
                     /*batch strides*/ 0, 0, 0, 0, p.lda, p.ldb, p.ldc, p.ldd);
  }

  static int can_implement(const GemmArgs& p) {
    cutlass::Status s = Device::can_implement(arguments(p));
    if (s == cutlass::Status::kSuccess) return PCR_OK;
    return set_error(PCR_ERR_UNSUPPORTED, "CUTLASS can_implement rejected the problem: %s",
                     cutlassGetStatusString(s));
  }

  static size_t workspace_size(const GemmArgs& p) {
    return Device::get_workspace_size(arguments(p));
  }

  static const void* device_function() {
    return reinterpret_cast<const void*>(cutlass::Kernel2<GemmKernel>);
  }

  static int run(const GemmArgs& p, void* workspace, cudaStream_t stream) {
    static std::atomic<uint64_t> smem_done{0};
    int st = ensure_smem_limit(device_function(), p.device,
                               int(sizeof(typename GemmKernel::SharedStorage)), &smem_done);
    if (st != PCR_OK) return st;
    Device op;
    cutlass::Status s = op.initialize(arguments(p), workspace, stream);
    if (s == cutlass::Status::kSuccess) s = op.run(stream);
    if (s != cutlass::Status::kSuccess) {
      cudaError_t e = cudaGetLastError();
      return set_error(PCR_ERR_CUDA, "kernel launch failed: %s (%s; %s)",
                       cutlassGetStatusString(s), cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return PCR_OK;
  }
};

}  // namespace pcr::mma
