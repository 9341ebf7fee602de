// pcr_quantize: x (rows x K, K contiguous; float16, bfloat16 or float32) into q (fp8 e4m3
// or int8) and float32 scales, x ~= q * scale, per tensor, per row (token), per row and
// group of 128 along K, or per 128 x 128 block: the scales computed from |x|'s maximum in
// the same pass (dynamic) or read (static). The grids are those block-scaled GEMMs read
// (pcr_scale_kind), with any strides.
//
// Memory: x is read from DRAM once, in 16-byte loads, several in flight per thread. A group
// is 16 threads of 8 elements, reduced with warp shuffles and quantized from registers; a
// thread takes a group's slice of several rows at once. A row (token) of up to 16384
// elements is held in the registers of one warp (short rows: many rows per CTA, so that
// small-K layers keep the GPU busy) or of one CTA, and quantized from there. Longer rows, a
// 128 x 128 block and unaligned tensors are read twice by one CTA, the second time from L2.
// A dynamic per-tensor scale takes three launches: the maximum, the quantization, the scale.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "amax.h"
#include "runtime.h"

namespace pcr {
namespace {

// A dynamic scale's floor: an all-zero group gets a tiny scale rather than 0 (q / 0).
constexpr float kMinAmax = 1e-10f;

template <class Q>
struct QuantOf;
template <>
struct QuantOf<__nv_fp8_storage_t> {
  static constexpr float kMax = 448.0f;  // e4m3's largest finite value
  __device__ static __nv_fp8_storage_t cast(float v) {
    return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);  // saturating, RNE
  }
};
template <>
struct QuantOf<int8_t> {
  static constexpr float kMax = 127.0f;
  __device__ static int8_t cast(float v) { return int8_t(max(-128, min(127, __float2int_rn(v)))); }
};

__device__ __forceinline__ float load_f(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float load_f(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load_f(const float* p) { return *p; }

// What every kernel takes: x and q (row strides in elements, K contiguous), the scales'
// grid (element strides between row groups and between K groups), the extent.
struct Job {
  const void* x;
  void* q;
  float* scale;
  int64_t ldx, ldq, scale_rows, scale_k;
  int64_t rows, k;
  bool dynamic;
};

// Per row and group of 128: 16 threads a group, 8 consecutive elements a thread, kRows
// rows a thread at once (their loads issued together).
constexpr int kGroup = 128, kPerThread = 8, kThreadsPerGroup = kGroup / kPerThread;
constexpr int kGroupThreads = 256;  // 16 groups along K per CTA
constexpr int kGroupRows = 4;

// kN elements of x as loaded: kept packed in registers until used (half the registers of
// floats for 16-bit x, so more loads stay in flight).
template <class X, int kN>
union Pack {
  uint4 raw[kN * sizeof(X) / 16];
  X e[kN];
};

// p's elements from x[0, valid): one 16-byte load each where `vector` and all are valid.
template <class X, int kN>
__device__ __forceinline__ void load_pack(const X* x, int64_t valid, bool vector, Pack<X, kN>& p) {
  constexpr int kLoads = int(sizeof(p.raw) / 16);
  if (vector && valid >= kN) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) p.raw[i] = __ldg(reinterpret_cast<const uint4*>(x) + i);
  } else {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) p.raw[i] = make_uint4(0, 0, 0, 0);  // +0 in every type
#pragma unroll
    for (int i = 0; i < kN; ++i)
      if (i < valid) p.e[i] = x[i];
  }
}

template <class X, int kN>
__device__ __forceinline__ float amax_of(const Pack<X, kN>& p) {
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) amax = fmaxf(amax, fabsf(load_f(&p.e[i])));
  return amax;
}

// q[0, valid) = p / s, rounded and saturated: one store where `vector` and all are valid.
template <class Q, class X, int kN>
__device__ __forceinline__ void store_pack(Q* q, int64_t valid, bool vector, const Pack<X, kN>& p,
                                           float s) {
  using Raw = typename std::conditional<kN == 8, uint2, uint32_t>::type;
  static_assert(sizeof(Raw) == kN * sizeof(Q), "one store of kN quantized elements");
  if (vector && valid >= kN) {
    union {
      Raw raw;
      Q e[kN];
    } u;
#pragma unroll
    for (int i = 0; i < kN; ++i) u.e[i] = QuantOf<Q>::cast(load_f(&p.e[i]) / s);
    *reinterpret_cast<Raw*>(q) = u.raw;
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i)
      if (i < valid) q[i] = QuantOf<Q>::cast(load_f(&p.e[i]) / s);
  }
}

// The CTA's 16 group slots: `slots_k` (a power of two) groups along K side by side, and
// 16 / slots_k rows of them (short rows: K = 240 has 2 groups, a CTA takes 8 rows of them).
template <class X, class Q, bool kVector>
__global__ void quantize_groups(Job j, int slots_k) {
  const int slot = threadIdx.x / kThreadsPerGroup, lane = threadIdx.x % kThreadsPerGroup;
  const int slots_r = kGroupThreads / kThreadsPerGroup / slots_k;
  const int64_t g = blockIdx.x * int64_t(slots_k) + slot % slots_k;
  const int64_t c0 = g * kGroup + lane * kPerThread;
  const bool group_in = g * kGroup < j.k;  // the group's 16 lanes agree
  const int64_t valid = j.k - c0;
  const int64_t rows_per_cta = int64_t(slots_r) * kGroupRows;
  for (int64_t r0 = blockIdx.y * rows_per_cta + slot / slots_k; r0 < j.rows;
       r0 += int64_t(gridDim.y) * rows_per_cta) {
    Pack<X, kPerThread> v[kGroupRows];  // rows r0, r0 + slots_r, ...
#pragma unroll
    for (int i = 0; i < kGroupRows; ++i) {
      const int64_t r = r0 + int64_t(i) * slots_r;
      load_pack(static_cast<const X*>(j.x) + r * j.ldx + c0, r < j.rows ? valid : int64_t(0),
                kVector, v[i]);
    }
#pragma unroll
    for (int i = 0; i < kGroupRows; ++i) {
      const int64_t r = r0 + int64_t(i) * slots_r;
      const bool in = group_in && r < j.rows;  // the group's 16 lanes agree
      float s;
      float* sp = j.scale + r * j.scale_rows + g * j.scale_k;
      if (j.dynamic) {  // every lane shuffles: the warp's other group may be in
        float amax = amax_of(v[i]);
#pragma unroll
        for (int m = kThreadsPerGroup / 2; m > 0; m /= 2)
          amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m, kThreadsPerGroup));
        s = fmaxf(amax, kMinAmax) / QuantOf<Q>::kMax;
        if (lane == 0 && in) *sp = s;
      } else {
        s = in ? *sp : 1.0f;
      }
      if (in) store_pack(static_cast<Q*>(j.q) + r * j.ldq + c0, valid, kVector, v[i], s);
    }
  }
}

// Per row (token), from registers: a team of kTeam threads (a warp or the whole CTA) holds
// its row in kChunks 16-byte vectors a thread, takes |x|'s maximum, quantizes. Rows stride
// by the teams of the grid. A static scale (per row, or one: scale_rows 0) skips the
// maximum; scale_from_amax reads the tensor's maximum at j.scale (the per-tensor pass).
// kMaxOnly: nothing is written but max |x| over all rows, into j.scale (zeroed before).
template <class X, class Q, int kTeam, int kChunks, bool kMaxOnly>
__global__ void __launch_bounds__(256) quantize_rows(Job j, bool scale_from_amax) {
  constexpr int kVec = 16 / sizeof(X);
  constexpr int kTeams = 256 / kTeam;
  __shared__ float warp_max[256 / 32];
  const int team = threadIdx.x / kTeam, t = threadIdx.x % kTeam;
  uint32_t bits = 0;  // kMaxOnly
  for (int64_t r = int64_t(blockIdx.x) * kTeams + team; r < j.rows;
       r += int64_t(gridDim.x) * kTeams) {
    const X* xr = static_cast<const X*>(j.x) + r * j.ldx;
    Pack<X, kVec> v[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t col = (int64_t(c) * kTeam + t) * kVec;
      load_pack(xr + col, j.k - col, true, v[c]);
    }
    if constexpr (kMaxOnly) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) bits = amax_bits(bits, amax_of(v[c]));
      continue;
    }
    float* sp = j.scale + r * j.scale_rows;
    float s;
    if (j.dynamic) {
      float amax = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) amax = fmaxf(amax, amax_of(v[c]));
#pragma unroll
      for (int m = 16; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
      if (kTeam > 32) {  // the CTA is the team: r is the same for every thread
        if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
        __syncthreads();
#pragma unroll
        for (int w = 0; w < kTeam / 32; ++w) amax = fmaxf(amax, warp_max[w]);
        __syncthreads();  // warp_max is reused by the next row
      }
      s = fmaxf(amax, kMinAmax) / QuantOf<Q>::kMax;
      if (t == 0) *sp = s;
    } else {
      s = scale_from_amax ? fmaxf(*sp, kMinAmax) / QuantOf<Q>::kMax : *sp;
    }
    Q* qr = static_cast<Q*>(j.q) + r * j.ldq;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t col = (int64_t(c) * kTeam + t) * kVec;
      store_pack(qr + col, j.k - col, true, v[c], s);
    }
  }
  if constexpr (kMaxOnly) commit_amax(j.scale, bits);
}

// Per region (a row: 1 x K; a block: 128 x 128; static scales any tiling): the maximum of
// |x| over the region (dynamic), then the region quantized by its scale. `rows_per` x
// `cols_per` regions, one CTA each (blockIdx.x along K, y along rows, grid-strided).
// scale_from_amax: the scale is derived from a maximum already at j.scale (per tensor).
constexpr int kRegionThreads = 256;

template <class X, class Q>
__global__ void quantize_regions(Job j, int rows_per, int64_t cols_per, bool scale_from_amax) {
  __shared__ float warp_max[kRegionThreads / 32];
  for (int64_t rb = blockIdx.y; rb * rows_per < j.rows; rb += gridDim.y) {
    const int64_t r0 = rb * rows_per, c0 = blockIdx.x * cols_per;
    const int64_t nr = min(int64_t(rows_per), j.rows - r0), nc = min(cols_per, j.k - c0);
    const X* x = static_cast<const X*>(j.x) + r0 * j.ldx + c0;
    Q* q = static_cast<Q*>(j.q) + r0 * j.ldq + c0;
    float* sp = j.scale + rb * j.scale_rows + blockIdx.x * j.scale_k;
    float s;
    if (j.dynamic) {
      float amax = 0.0f;
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t c = threadIdx.x; c < nc; c += kRegionThreads)
          amax = fmaxf(amax, fabsf(load_f(x + r * j.ldx + c)));
      for (int m = 16; m > 0; m /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
      if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
      __syncthreads();
      amax = 0.0f;
      for (int w = 0; w < kRegionThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
      s = fmaxf(amax, kMinAmax) / QuantOf<Q>::kMax;
      __syncthreads();  // warp_max is reused by the next region
      if (threadIdx.x == 0) *sp = s;
    } else {
      s = scale_from_amax ? fmaxf(*sp, kMinAmax) / QuantOf<Q>::kMax : *sp;
    }
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t c = threadIdx.x; c < nc; c += kRegionThreads)
        q[r * j.ldq + c] = QuantOf<Q>::cast(load_f(x + r * j.ldx + c) / s);
  }
}

template <class X>
__global__ void max_abs(Job j) {
  uint32_t bits = 0;
  for (int64_t r = blockIdx.y; r < j.rows; r += gridDim.y)
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < j.k;
         c += int64_t(gridDim.x) * blockDim.x)
      bits = amax_bits(bits, load_f(static_cast<const X*>(j.x) + r * j.ldx + c));
  commit_amax(j.scale, bits);
}

template <class Q>
__global__ void scale_of_amax(float* scale) {
  *scale = fmaxf(*scale, kMinAmax) / QuantOf<Q>::kMax;
}

// Whether every row of x starts on 16 bytes (one 16-byte load per vector), and every row
// of q on `elems` bytes (one store of `elems` quantized elements).
template <class X>
bool x_vectors(const Job& j) {
  return reinterpret_cast<uintptr_t>(j.x) % 16 == 0 && (j.ldx * int64_t(sizeof(X))) % 16 == 0;
}
bool q_vectors(const Job& j, int elems) {
  return reinterpret_cast<uintptr_t>(j.q) % elems == 0 && j.ldq % elems == 0;
}

unsigned grid_rows(int64_t rows) { return unsigned(std::min<int64_t>(rows, 65535)); }

// What quantize_rows is launched for: quantizing (scale_from_amax: from the maximum of a
// per-tensor pass), or that pass's maximum alone.
enum class RowsPass { kQuantize, kFromAmax, kMaxOnly };

using RowsKernel = void (*)(Job, bool);

template <class X, class Q, bool kMaxOnly>
RowsKernel rows_kernel(int64_t warp_chunks, int64_t cta_chunks, int* teams) {
  if (warp_chunks <= 8) {
    *teams = 256 / 32;
    return warp_chunks <= 1   ? quantize_rows<X, Q, 32, 1, kMaxOnly>
           : warp_chunks <= 2 ? quantize_rows<X, Q, 32, 2, kMaxOnly>
           : warp_chunks <= 4 ? quantize_rows<X, Q, 32, 4, kMaxOnly>
                              : quantize_rows<X, Q, 32, 8, kMaxOnly>;
  }
  *teams = 1;  // more than 8 warp vectors: at least 2 CTA ones
  return cta_chunks <= 2   ? quantize_rows<X, Q, 256, 2, kMaxOnly>
         : cta_chunks <= 4 ? quantize_rows<X, Q, 256, 4, kMaxOnly>
                           : quantize_rows<X, Q, 256, 8, kMaxOnly>;
}

// quantize_rows where x (and q) take vector accesses and a row fits one team's registers
// (a warp's up to 8 vectors a thread, else the CTA's); false, nothing launched, elsewhere.
template <class X, class Q>
bool launch_rows(const Job& j, RowsPass pass, cudaStream_t stream, int* status) {
  constexpr int kVec = 16 / sizeof(X);
  const bool max_only = pass == RowsPass::kMaxOnly;
  const bool vector = x_vectors<X>(j) && (max_only || q_vectors(j, kVec));
  const int64_t warp_chunks = (j.k + 32 * kVec - 1) / (32 * kVec);
  const int64_t cta_chunks = (j.k + 256 * kVec - 1) / (256 * kVec);
  if (!vector || cta_chunks > 8) return false;
  int teams;
  const RowsKernel kernel = max_only ? rows_kernel<X, Q, true>(warp_chunks, cta_chunks, &teams)
                                     : rows_kernel<X, Q, false>(warp_chunks, cta_chunks, &teams);
  // a maximum's CTAs stride over the rows (each warp ends in one atomic)
  const int64_t cap = max_only ? int64_t(4096) : int64_t(1) << 20;
  const int64_t ctas = std::min<int64_t>((j.rows + teams - 1) / teams, cap);
  kernel<<<unsigned(ctas), 256, 0, stream>>>(j, pass == RowsPass::kFromAmax);
  *status = cuda_status(cudaGetLastError(), "quantize launch");
  return true;
}

template <class X, class Q>
int launch_typed(const Job& j, int granularity, cudaStream_t stream) {
  if (granularity == PCR_QUANT_GROUP) {
    const bool vector = x_vectors<X>(j) && q_vectors(j, kPerThread);
    const int64_t groups = (j.k + kGroup - 1) / kGroup;
    constexpr int kSlots = kGroupThreads / kThreadsPerGroup;
    int slots_k = 1;  // groups side by side along K: a power of two, the rest rows
    while (slots_k < kSlots && slots_k < groups) slots_k *= 2;
    const int64_t rows_per_cta = int64_t(kSlots / slots_k) * kGroupRows;
    const dim3 grid(unsigned((groups + slots_k - 1) / slots_k),
                    grid_rows((j.rows + rows_per_cta - 1) / rows_per_cta));
    (vector ? quantize_groups<X, Q, true>
            : quantize_groups<X, Q, false>)<<<grid, kGroupThreads, 0, stream>>>(j, slots_k);
    return cuda_status(cudaGetLastError(), "quantize launch");
  }
  int st = PCR_OK;
  if (granularity == PCR_QUANT_TENSOR && j.dynamic) {
    st = cuda_status(cudaMemsetAsync(j.scale, 0, sizeof(float), stream), "cudaMemsetAsync");
    if (st != PCR_OK) return st;
    if (!launch_rows<X, Q>(j, RowsPass::kMaxOnly, stream, &st)) {
      const dim3 grid(unsigned(std::min<int64_t>((j.k + 255) / 256, 64)),
                      grid_rows(std::min<int64_t>(j.rows, 1024)));
      max_abs<X><<<grid, 256, 0, stream>>>(j);
    }
    Job from_amax = j;
    from_amax.dynamic = false;
    from_amax.scale_rows = from_amax.scale_k = 0;
    if (!launch_rows<X, Q>(from_amax, RowsPass::kFromAmax, stream, &st)) {
      const int64_t cols = std::min<int64_t>(j.k, 4096);
      const dim3 qgrid(unsigned((j.k + cols - 1) / cols), grid_rows(j.rows));
      quantize_regions<X, Q><<<qgrid, kRegionThreads, 0, stream>>>(from_amax, 1, cols, true);
    }
    scale_of_amax<Q><<<1, 1, 0, stream>>>(j.scale);
    return cuda_status(cudaGetLastError(), "quantize launch");
  }
  // per row (token), per 128 x 128 block, or a static per-tensor scale
  Job job = j;
  if (granularity == PCR_QUANT_TENSOR) job.scale_rows = job.scale_k = 0;  // static: one value
  if (granularity != PCR_QUANT_BLOCK && launch_rows<X, Q>(job, RowsPass::kQuantize, stream, &st))
    return st;
  const int rows_per = granularity == PCR_QUANT_BLOCK ? 128 : 1;
  const int64_t cols_per = granularity == PCR_QUANT_BLOCK ? 128 : j.k;
  const dim3 grid(unsigned((j.k + cols_per - 1) / cols_per),
                  grid_rows((j.rows + rows_per - 1) / rows_per));
  quantize_regions<X, Q><<<grid, kRegionThreads, 0, stream>>>(job, rows_per, cols_per, false);
  return cuda_status(cudaGetLastError(), "quantize launch");
}

}  // namespace

int launch_quantize(const Matrix& x, const Matrix& q, const Matrix& scale, int granularity,
                    bool dynamic, cudaStream_t stream) {
  if (x.rows == 0 || x.cols == 0) return PCR_OK;
  // a grid's row strides step over row groups (1 or 128 rows), its column strides over K
  // groups; a token's (rows x 1) has none along K
  Job j{x.ptr,  q.ptr,  reinterpret_cast<float*>(scale.ptr), x.s0, q.s0, scale.s0, scale.s1, x.rows,
        x.cols, dynamic};
  auto run = [&](auto xt) {
    using X = decltype(xt);
    return q.dtype == PCR_E4M3 ? launch_typed<X, __nv_fp8_storage_t>(j, granularity, stream)
                               : launch_typed<X, int8_t>(j, granularity, stream);
  };
  switch (x.dtype) {
    case PCR_F16:
      return run(__half{});
    case PCR_BF16:
      return run(__nv_bfloat16{});
    case PCR_F32:
      return run(float{});
    default:
      return set_error(PCR_ERR_UNSUPPORTED, "quantize: x is %s", dtype_name(x.dtype));
  }
}

}  // namespace pcr
