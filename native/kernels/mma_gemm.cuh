// CUTLASS 2.x mma.sync GEMMs, one template for two arch families:
//   sm80 family: m16n8k16, multistage (cp.async, 16-byte alignment) or the 2-stage
//                pipelined mainloop, whose register-staged loads take any alignment; one
//                source serves sm_80/86/89/90 SASS and the PTX for later GPUs;
//   sm75 family: Turing m16n8k8 (fp16 only), 2-stage pipelined.
// The block swizzle is the data-parallel identity swizzle, or CUTLASS's stream-K swizzle,
// which selects the stream-K kernel: its heuristic spreads the K loop of too few output
// tiles over every SM (stream-K, or split-K when that balances better) and reduces the
// fp32 partials in the workspace in a fixed order, so results stay deterministic.
#pragma once

#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle_streamk.h"

#include <new>

#include "kernel.h"

namespace pcr::mma {

struct Sm80 {
  using Arch = cutlass::arch::Sm80;
  using Instruction = cutlass::gemm::GemmShape<16, 8, 16>;
};
using DataParallel = cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>;
using StreamK = cutlass::gemm::threadblock::ThreadblockSwizzleStreamK;

struct Sm75 {
  using Arch = cutlass::arch::Sm75;
  using Instruction = cutlass::gemm::GemmShape<16, 8, 8>;
};

template <class Family, class ElementA, class ElementB, class ElementD, class LayoutA,
          class LayoutB, class TileShape, class WarpShape, int Stages, int AlignAB, int AlignC, class Swizzle = DataParallel>
struct Gemm {
  using ElementAcc = float;
  using Epilogue =
      cutlass::epilogue::thread::LinearCombination<ElementD, AlignC, ElementAcc, ElementAcc>;
  using Device = cutlass::gemm::device::GemmUniversal<
      ElementA, LayoutA, ElementB, LayoutB, ElementD, cutlass::layout::RowMajor, ElementAcc,
      cutlass::arch::OpClassTensorOp, typename Family::Arch, TileShape, WarpShape,
      typename Family::Instruction, Epilogue,
      Swizzle, Stages, AlignAB, AlignAB>;
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

  // The device-level operator holds the kernel's Params; this view of it builds them
  // without touching the GPU, and re-arms the workspace (split-K semaphores, stream-K
  // barriers) on the launch stream before each launch.
  struct Prepared : Device {
    cutlass::Status setup(const Arguments& args) { return this->init_params(args); }
    cutlass::Status rearm(void* workspace, cudaStream_t stream) {
      return this->params_.init_workspace(workspace, stream);
    }
  };

  static int prepare(const GemmArgs& p, void*, void* out) {
    cutlass::Status s = (new (out) Prepared())->setup(arguments(p));
    if (s != cutlass::Status::kSuccess)
      return set_error(PCR_ERR_INTERNAL, "CUTLASS parameter setup failed: %s",
                       cutlassGetStatusString(s));
    return PCR_OK;
  }

  static int launch(const void* prepared, void* workspace, int device, cudaStream_t stream) {
    static std::atomic<uint64_t> smem_done{0};
    int st = ensure_smem_limit(device_function(), device,
                               int(sizeof(typename GemmKernel::SharedStorage)), &smem_done);
    if (st != PCR_OK) return st;
    // re-arming stores the workspace pointers again (the same ones: they key the cache)
    auto& prep = *const_cast<Prepared*>(static_cast<const Prepared*>(prepared));
    cutlass::Status s = prep.rearm(workspace, stream);
    if (s == cutlass::Status::kSuccess) s = prep.run(stream);
    if (s != cutlass::Status::kSuccess) {
      cudaError_t e = cudaGetLastError();
      return set_error(PCR_ERR_CUDA, "kernel launch failed: %s (%s; %s)",
                       cutlassGetStatusString(s), cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return PCR_OK;
  }
};

}  // namespace pcr::mma
