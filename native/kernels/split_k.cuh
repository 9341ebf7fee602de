// Parallel split-K, for any family's kernel: K is cut into S equal slices that run as one
// batched GEMM (batch index = slice, the slices' A and B a slice's K apart) into fp32
// partials in the workspace; a second kernel adds the partials up in slice order and
// writes D = alpha * sum + beta * C. For a few output tiles against a long K (256 x 256 x
// 65536 is four 128 x 128 tiles), where CUTLASS 4.2's stream-K can only fix its split
// tiles up serially, one peer after another (~2 us each on the H200), and its separate
// reduction is disabled. Deterministic: the same S and the same order for a given problem.
// Linear epilogue only; a batch of problems is not split (it runs unsplit, through fp32
// partials).
#pragma once

#include <algorithm>
#include <new>

#include "cutlass/arch/grid_dependency_control.h"

#include "kernel.h"

namespace pcr::split {

// A family's tag type (a CUTLASS 2.x swizzle, a CUTLASS 3.x tile scheduler tag) renamed
// for this translation unit alone (Tag lives in an anonymous namespace): the unsplit
// kernel a split-K kernel runs is then its own instantiation, never the one another
// translation unit has of the same CUTLASS template (as a catalogue kernel of the same
// tile with fp32 output would). On the H200, sm80 split-K kernels whose inner kernel was
// also a catalogue kernel failed to launch (CUTLASS: "Error Internal").
namespace {
struct Tag {};
}  // namespace
template <class Base, class = Tag>
struct Local : Base {};

// The partials' sum: D = alpha * (sum of a batch entry's slices, in slice order) + beta * C.
// A block is 32 four-column chunks (one 16-byte load per slice each: partial rows are
// padded to four floats) by 8 slice groups, whose sums meet in shared memory in a fixed
// order; one thread per chunk with every slice in turn was latency-bound (128 x 128 x
// 65536 in 64 slices: 20 us against cuBLAS's 11).
constexpr int kChunks = 32, kGroups = 8;

template <class ElementD>
struct Sum {
  const float* partial;
  int slices, m, n, batch;
  int64_t slice_stride, ldw;
  float alpha, beta;
  const ElementD* c;
  int64_t ldc, batch_c;
  ElementD* d;
  int64_t ldd, batch_d;
};

template <class ElementD>
__global__ void __launch_bounds__(kChunks* kGroups) sum_slices(Sum<ElementD> a) {
  // Launched as the slices' programmatic dependent (sm90a): wait for their partials (a
  // no-op elsewhere). No early trigger of its own: a next GEMM's resident CTAs would take
  // the shared memory the remaining blocks of this grid need.
  cutlass::arch::wait_on_dependent_grids();
  __shared__ float4 part[kGroups][kChunks];
  const int tx = threadIdx.x % kChunks, ty = threadIdx.x / kChunks;
  const int64_t chunks = a.ldw / 4;
  const int64_t q = blockIdx.x * int64_t(kChunks) + tx;
  const bool live = q < a.m * chunks;
  const int64_t row = live ? q / chunks : 0, col = live ? (q % chunks) * 4 : 0;
  for (int b = blockIdx.y; b < a.batch; b += gridDim.y) {
    const float* p = a.partial + (int64_t(b) * a.slices) * a.slice_stride + row * a.ldw + col;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    if (live) {
#pragma unroll 4
      for (int s = ty; s < a.slices; s += kGroups) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(p + s * a.slice_stride));
        acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
      }
    }
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && live) {
      for (int g = 1; g < kGroups; ++g) {
        const float4 v = part[g][tx];
        acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
      }
      const float sum[4] = {acc.x, acc.y, acc.z, acc.w};
      const ElementD* c = a.c + b * a.batch_c + row * a.ldc;
      ElementD* d = a.d + b * a.batch_d + row * a.ldd;
      for (int j = 0; j < 4 && col + j < a.n; ++j) {
        float out = a.alpha * sum[j];
        if (a.beta != 0.f) out += a.beta * float(c[col + j]);
        d[col + j] = ElementD(out);
      }
    }
    __syncthreads();
  }
}

// Inner: the family's kernel of the same inputs, layouts and tile with fp32 output, linear
// epilogue and no split of its own; ElementD: the problem's output. K-major operands (A
// row-major, B column-major) step to the next slice by kc elements, the others by kc
// leading dimensions; AlignK: the elements a slice's start must be a multiple of.
template <class Inner, class ElementD, int kTileM, int kTileN, int kTileK, bool kKMajorA,
          bool kKMajorB, int kAlignK>
struct SplitK {
  static constexpr int kMinTilesPerSlice =
      4;  // shorter slices spend more on partials than they save
  static constexpr int kMaxSlices = 128;

  // S: the most slices that keep one wave (output tiles x S <= SMs) and at least
  // kMinTilesPerSlice K tiles per slice, among the counts that cut K into equal slices of
  // whole K tiles (of kAlignK elements when K is not whole tiles); 1 for a batch or when
  // none does (the kernel still runs, unsplit, through the partials). The selection's
  // model mirrors this (pycutlass_rt/_select.py, split_slices).
  static int slices(const GemmArgs& p) {
    const int64_t tiles = int64_t((p.m + kTileM - 1) / kTileM) * ((p.n + kTileN - 1) / kTileN);
    const int unit = p.k % kTileK == 0 ? kTileK : kAlignK;
    if (p.batch > 1 || tiles <= 0 || p.k % unit) return 1;
    const int64_t cap =
        std::min<int64_t>({p.sm_count / tiles, p.k / (kMinTilesPerSlice * kTileK), kMaxSlices});
    for (int64_t s = cap; s >= 2; --s)
      if ((p.k / unit) % s == 0) return int(s);
    return 1;
  }

  static int64_t ldw(const GemmArgs& p) { return (int64_t(p.n) + 3) / 4 * 4; }
  static size_t partial_bytes(const GemmArgs& p, int s) {
    return (size_t(s) * p.batch * p.m * ldw(p) * sizeof(float) + 255) / 256 * 256;
  }

  // The GEMM of the slices (or of a batch, unsplit), writing fp32 partials at `partial`:
  // batch entry b's slice s is inner batch entry b * S + s.
  static GemmArgs inner(const GemmArgs& p, void* partial, int s) {
    GemmArgs g = p;
    const int64_t kc = p.k / s;
    if (s > 1) {  // the next slice starts kc columns of A (rows of B) further
      g.k = int(kc);
      g.batch = s;
      g.batch_a = kKMajorA ? kc : kc * p.lda;
      g.batch_b = kKMajorB ? kc : kc * p.ldb;
    }
    g.c = g.d = partial;
    g.ldc = g.ldd = ldw(p);
    g.batch_c = g.batch_d = int64_t(p.m) * ldw(p);
    g.alpha = 1.0;
    g.beta = 0.0;
    return g;
  }

  // Unsplit, the partials are pure cost: past this size (a problem whose output tiles fill
  // the GPU) a data-parallel kernel runs it without them, and a sweep timing every kernel
  // would hold GBs of partials per captured graph.
  static constexpr size_t kMaxUnsplitPartials = size_t(64) << 20;

  static int can_implement(const GemmArgs& p) {
    const int s = slices(p);
    if (s == 1 && partial_bytes(p, 1) > kMaxUnsplitPartials)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "split-K would not split this problem (its output tiles fill the GPU, "
                       "or K is short) and would keep %zu MB of fp32 partials; a data-parallel "
                       "kernel runs it",
                       partial_bytes(p, 1) >> 20);
    // CUTLASS judges strides and extents, not addresses: any 16-byte aligned partials do
    return Inner::can_implement(inner(p, reinterpret_cast<void*>(256), s));
  }

  static size_t workspace_size(const GemmArgs& p) {
    const int s = slices(p);
    return partial_bytes(p, s) + Inner::workspace_size(inner(p, nullptr, s));
  }

  struct Prepared {
    typename Inner::Prepared inner;
    void* inner_workspace;
    Sum<ElementD> sum;
    dim3 grid;
  };

  static int prepare(const GemmArgs& p, void* workspace, void* out) {
    const int s = slices(p);
    char* ws = static_cast<char*>(workspace);
    const GemmArgs g = inner(p, ws, s);
    auto* prep = new (out) Prepared{};
    prep->inner_workspace = Inner::workspace_size(g) ? ws + partial_bytes(p, s) : nullptr;
    int st = Inner::prepare(g, prep->inner_workspace, &prep->inner);
    if (st != PCR_OK) return st;
    prep->sum = {reinterpret_cast<const float*>(ws),
                 s,
                 p.m,
                 p.n,
                 p.batch,
                 g.batch_d,
                 g.ldd,
                 float(p.alpha),
                 float(p.beta),
                 static_cast<const ElementD*>(p.c),
                 p.ldc,
                 p.batch_c,
                 static_cast<ElementD*>(p.d),
                 p.ldd,
                 p.batch_d};
    const int64_t chunks = int64_t(p.m) * (g.ldd / 4);
    prep->grid =
        dim3(unsigned((chunks + kChunks - 1) / kChunks), unsigned(std::min(p.batch, 65535)));
    return PCR_OK;
  }

  static int launch(const void* prepared, void* workspace, int device, cudaStream_t stream,
                    bool programmatic) {
    (void)workspace;  // the partials' and the inner kernel's places are in the prepared launch
    const auto& prep = *static_cast<const Prepared*>(prepared);
    int st = Inner::launch(&prep.inner, prep.inner_workspace, device, stream, programmatic);
    if (st != PCR_OK) return st;
    cudaLaunchAttribute pdl = programmatic_dependent();
    cudaLaunchConfig_t config{};
    config.gridDim = prep.grid;
    config.blockDim = dim3(kChunks * kGroups);
    config.stream = stream;
    config.attrs = &pdl;
    config.numAttrs = Inner::kProgrammatic && programmatic ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&config, sum_slices<ElementD>, prep.sum);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return set_error(PCR_ERR_CUDA, "split-K reduction launch failed: %s", cudaGetErrorString(e));
    }
    return PCR_OK;
  }

  static const void* device_function() { return Inner::device_function(); }
};

}  // namespace pcr::split
