// The one interface every kernel in the library implements, whatever its family.
//
// Generated translation units (one per kernel, see native/catalog.py) instantiate a
// family template and publish a KernelEntry; the runtime only ever sees KernelEntry.
#pragma once

#include <cstddef>
#include <atomic>
#include <cstdint>

#include <cuda_runtime.h>

#include "pycutlass_rt.h"

namespace pcr {

// One GEMM in the library's canonical form:
//   D (m x n, row-major, leading dimension ldd) = act(alpha * A (m x k) * B (k x n)
//                                                     + beta * C + bias)
// A and B are row- or column-major as the kernel's layouts say; C has D's layout and
// dtype and is never null (it points at D when beta == 0, and is then never read).
// `batch` > 1 repeats the GEMM over matrices `batch_*` elements apart (0: shared).
// Bias and activation exist in PCR_EPI_BIASACT, PCR_EPI_AUX (which also store the
// pre-activation to `aux`, D's shape, and max |D| to `amax`) and PCR_EPI_SCALED kernels only,
// scales in PCR_EPI_SCALED ones and, per tensor, in the linear kernels whose descriptor sets
// tensor_scales (tma_gemm.cuh, TensorScaledLinear). Grouped kernels read
// `groups` problems from `group` (GPU arrays) instead of m, n, k and the operand fields.
struct GroupArrays {
  int (*shape)[3];  // {m, n, k} per group (CUTLASS's GemmCoord and Shape<int,int,int>)
  const void** a;
  const void** b;
  const void** c;
  void** d;
  int64_t *lda, *ldb, *ldc, *ldd;
};

// The per-group factors of a grouped kernel's bias/activation or dequantizing epilogue
// (tma_grouped.cuh's GroupedTree): GPU arrays of `groups` pointers, each array null where
// the call has none (a scale then reads as 1, the bias as 0). scale_a, scale_b: one float
// each per group (per-tensor scales, e.g. an expert's weight scale); row_scales: the
// group's per-row vector of canonical D (a's per-token scales); col_scales: its per-column
// vector (b's per-channel scales); bias_n: its per-column bias in D's dtype;
// scale_grid_a, scale_grid_b: a block-scaled kernel's grids, each group's packed
// (tma_grouped.cuh, BlockGrids).
struct GroupEpilogue {
  const float** scale_a;
  const float** scale_b;
  const float** row_scales;
  const float** col_scales;
  const void** bias_n;
  const float** scale_grid_a;
  const float** scale_grid_b;
};

// A fused epilogue's activation, chosen per launch: its pcr_activation and parameters
// (pcr_extras' activation_alpha and activation_beta).
struct ActivationArgs {
  int kind = PCR_ACT_NONE;
  double alpha = 0.0, beta = 0.0;  // converted once per fragment to the epilogue's type
};

// A 2-D convolution run as an implicit GEMM (pcr_conv): its geometry as pcr_problem.conv
// holds it, every tensor packed, activations NHWC (n x h x w x c), filters KRSC
// (k x r x s x c/groups), outputs NPQK. GemmArgs' a, b and c/d are CUTLASS's operands of
// the kind (fprop: x, w, y; dgrad: dy, w, dx; wgrad: dy, x, dw) and m, n, k its implicit
// GEMM's extents; leading dimensions and batch fields are unused.
struct ConvArgs : pcr_conv_shape {
  int kind;  // pcr_op: PCR_OP_GEMM in a GEMM's GemmArgs
};

struct GemmArgs {
  int m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  const void* c;
  int64_t ldc;
  void* d;
  int64_t ldd;
  double alpha, beta;
  int batch;
  int64_t batch_a, batch_b, batch_c, batch_d;
  const void* bias_n;  // D's dtype, one value per column (length n), or null
  const void* bias_m;  // D's dtype, one value per row (length m), or null
  ActivationArgs activation;
  // PCR_EPI_SCALED kernels: float32 factors of acc, on the GPU (null: 1). scale_a applies
  // to rows (m values, or one for all when !scale_a_per_row), scale_b to columns.
  // Block-scaled kernels (pcr_kernel_desc scale_m / scale_n): scale_a and scale_b are the
  // float32 grids of a's and b's block scales, scale_a's one value per group of rows (1 or
  // 128) and K-block (128 of K), scale_b's per group of columns and K-block, with these
  // element strides between groups and between K-blocks.
  const void* scale_a;
  const void* scale_b;
  bool scale_a_per_row, scale_b_per_col;
  int64_t scale_a_group_stride, scale_a_kblock_stride;
  int64_t scale_b_group_stride, scale_b_kblock_stride;
  int groups;
  GroupArrays group;
  ConvArgs conv;
  int device;    // CUDA ordinal the launch goes to (already current)
  int sm_count;  // multiprocessors of that device
  // PCR_EPI_AUX kernels: where the pre-activation goes (D's dtype and layout), and where
  // max |D| goes (one float holding +0 before the launch); each may be null
  void* aux;
  int64_t ldaux, batch_aux;
  float* amax;
  // Kernels whose descriptor sets out_scale (quantized inputs' epilogues): max |D| before
  // the output scale into amax (when given), then D multiplied by *scale_d (null: 1),
  // saturating for fp8 D.
  const float* scale_d;
  // Grouped kernels with a bias/activation or dequantizing epilogue: their per-group
  // factors (their activation: `activation` above)
  GroupEpilogue group_epilogue;
};

// Where a dequantizing (PCR_EPI_SCALED) epilogue reads its factors: the per-tensor scales
// and the per-row / per-column vectors, each null where the call has none (read as 1).
struct Dequant {
  const float *scale_a, *scale_b;        // one value each
  const float *row_scales, *col_scales;  // m and n values
};
inline Dequant dequant_of(const GemmArgs& p) {
  const auto* sa = static_cast<const float*>(p.scale_a);
  const auto* sb = static_cast<const float*>(p.scale_b);
  return {p.scale_a_per_row ? nullptr : sa, p.scale_b_per_col ? nullptr : sb,
          p.scale_a_per_row ? sa : nullptr, p.scale_b_per_col ? sb : nullptr};
}

// Launch parameters a kernel builds from GemmArgs (CUTLASS's Params, TMA descriptors
// included) live in an opaque, aligned blob of at most this many bytes, so that a
// bound plan or a repeated call can launch without rebuilding them.
constexpr size_t kMaxPrepared = 4096;
constexpr size_t kPreparedAlign = 128;  // TMA descriptors need 64-byte alignment

struct KernelOps {
  // PCR_OK, or PCR_ERR_UNSUPPORTED with the reason in the thread's error message.
  int (*can_implement)(const GemmArgs&);
  size_t (*workspace_size)(const GemmArgs&);
  // Builds the launch parameters for `workspace` into `prepared` (kMaxPrepared bytes,
  // kPreparedAlign-aligned). Host work only: no allocation, no GPU work.
  int (*prepare)(const GemmArgs&, void* workspace, void* prepared);
  // Resets the workspace's per-launch state (stream-K / split-K barriers) and enqueues
  // the kernel on `stream`; never allocates or synchronizes. `programmatic`: launch it as
  // a programmatic dependent (see programmatic_dependent) if it was built to be one.
  int (*launch)(const void* prepared, void* workspace, int device, cudaStream_t stream,
                bool programmatic);
  // The __global__ function, used to ask the driver whether an image runs on a device.
  const void* (*device_function)();
};

struct KernelEntry {
  pcr_kernel_desc info;
  KernelOps ops;
};

// Sets the calling thread's error message (see pcr_last_error) and returns `status`.
int set_error(int status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Whether `g` has work for a kernel: every extent positive, and a group count exactly when
// the kernel is a grouped one. CUTLASS's host code (can_implement, get_workspace_size,
// to_underlying_arguments) divides by these extents: an empty batch that once reached
// can_implement killed the process with SIGFPE. The runtime launches no kernel for an empty
// problem; this check makes that an invariant every kernel family inherits (ops_of).
inline int check_extents(const GemmArgs& g, bool grouped) {
  if (g.m > 0 && g.n > 0 && g.k > 0 && g.batch > 0 && (grouped ? g.groups > 0 : g.groups == 0))
    return PCR_OK;
  return set_error(PCR_ERR_INTERNAL,
                   "a kernel was handed a problem without work (m %d, n %d, k %d, batch %d, "
                   "groups %d); such problems launch no kernel, so this is a library bug",
                   g.m, g.n, g.k, g.batch, g.groups);
}

// A family's operations behind check_extents: nothing with an empty extent reaches CUTLASS.
template <class Op, bool kGrouped>
struct Guarded {
  static int can_implement(const GemmArgs& g) {
    int st = check_extents(g, kGrouped);
    return st != PCR_OK ? st : Op::can_implement(g);
  }
  static size_t workspace_size(const GemmArgs& g) {
    return check_extents(g, kGrouped) == PCR_OK ? Op::workspace_size(g) : 0;
  }
  static int prepare(const GemmArgs& g, void* workspace, void* prepared) {
    int st = check_extents(g, kGrouped);
    return st != PCR_OK ? st : Op::prepare(g, workspace, prepared);
  }
};

// The KernelOps of a family template instantiation (static members of the same names),
// guarded against empty extents.
template <class Op, bool kGrouped>
constexpr KernelOps ops_of() {
  static_assert(sizeof(typename Op::Prepared) <= kMaxPrepared, "raise kMaxPrepared");
  static_assert(alignof(typename Op::Prepared) <= kPreparedAlign, "raise kPreparedAlign");
  using G = Guarded<Op, kGrouped>;
  return {&G::can_implement, &G::workspace_size, &G::prepare, &Op::launch, &Op::device_function};
}

// The launch attribute of a programmatic dependent (PDL): the launch may start while the
// previous kernel in the stream drains, and waits in-kernel, at griddepcontrol.wait, before
// touching global memory. Only kernels built with that wait (Op::kProgrammatic) take it;
// the runtime decides per prepared launch (prepared.cpp, programmatic_suits).
inline cudaLaunchAttribute programmatic_dependent() {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

// Raises a kernel's dynamic shared memory limit once per device (the call is not free and
// must not happen inside stream capture more than needed).
int ensure_smem_limit(const void* func, int device, int bytes, std::atomic<uint64_t>* done_mask);

}  // namespace pcr
