// pcr_quantize: x (rows x K, K contiguous; float16, bfloat16 or float32) into q (fp8 e4m3
// or int8) and float32 scales, x ~= q * scale, per tensor, per row (token), per row and
// group of 128 along K, or per 128 x 128 block: the scales computed from |x|'s maximum in
// the same pass (dynamic) or read (static). The grids are those block-scaled GEMMs read
// (pcr_scale_kind), with any strides.
//
// Memory: a group is 16 threads of 8 elements each (one 16-byte load), reduced with warp
// shuffles and quantized from registers, so x is read once. A row's or a block's maximum
// needs all of it before any element is written: its CTA reads the region twice, the
// second time from L2 (a row of 7168 bfloat16 is 14 KB), so DRAM still sees x once. A
// dynamic per-tensor scale takes three launches: the maximum, the quantization, the scale.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

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

// Per row and group of 128: 16 threads a group, 8 consecutive elements a thread.
constexpr int kGroup = 128, kPerThread = 8, kThreadsPerGroup = kGroup / kPerThread;
constexpr int kGroupThreads = 256;  // 16 groups along K per CTA

template <class X, class Q, bool kVector>
__global__ void quantize_groups(Job j) {
  const int64_t g =
      blockIdx.x * int64_t(kGroupThreads / kThreadsPerGroup) + threadIdx.x / kThreadsPerGroup;
  const int lane = threadIdx.x % kThreadsPerGroup;
  const int64_t c0 = g * kGroup + lane * kPerThread;
  const bool group_in = g * kGroup < j.k;  // the group's 16 lanes agree
  for (int64_t r = blockIdx.y; r < j.rows; r += gridDim.y) {
    const X* xr = static_cast<const X*>(j.x) + r * j.ldx;
    float v[kPerThread];
    if (kVector && c0 + kPerThread <= j.k) {
      union {
        uint4 raw[sizeof(X) * kPerThread / 16];
        X e[kPerThread];
      } u;
#pragma unroll
      for (int i = 0; i < int(sizeof(u.raw) / 16); ++i)
        u.raw[i] = reinterpret_cast<const uint4*>(xr + c0)[i];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) v[i] = load_f(&u.e[i]);
    } else {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) v[i] = c0 + i < j.k ? load_f(xr + c0 + i) : 0.0f;
    }
    float s;
    float* sp = j.scale + r * j.scale_rows + g * j.scale_k;
    if (j.dynamic) {
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
      for (int m = kThreadsPerGroup / 2; m > 0; m /= 2)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m, kThreadsPerGroup));
      s = fmaxf(amax, kMinAmax) / QuantOf<Q>::kMax;
      if (lane == 0 && group_in) *sp = s;
    } else {
      s = group_in ? *sp : 1.0f;
    }
    if (!group_in) continue;
    Q* qr = static_cast<Q*>(j.q) + r * j.ldq;
    if (kVector && c0 + kPerThread <= j.k) {
      union {
        uint2 raw;
        Q e[kPerThread];
      } u;
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) u.e[i] = QuantOf<Q>::cast(v[i] / s);
      *reinterpret_cast<uint2*>(qr + c0) = u.raw;
    } else {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i)
        if (c0 + i < j.k) qr[c0 + i] = QuantOf<Q>::cast(v[i] / s);
    }
  }
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

unsigned grid_rows(int64_t rows) { return unsigned(std::min<int64_t>(rows, 65535)); }

template <class X, class Q>
int launch_typed(const Job& j, int granularity, cudaStream_t stream) {
  if (granularity == PCR_QUANT_GROUP) {
    const bool vector = reinterpret_cast<uintptr_t>(j.x) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(j.q) % 8 == 0 &&
                        (j.ldx * sizeof(X)) % 16 == 0 && j.ldq % 8 == 0;
    const int64_t groups = (j.k + kGroup - 1) / kGroup;
    const dim3 grid(unsigned((groups + 15) / 16), grid_rows(j.rows));
    (vector ? quantize_groups<X, Q, true>
            : quantize_groups<X, Q, false>)<<<grid, kGroupThreads, 0, stream>>>(j);
    return cuda_status(cudaGetLastError(), "quantize launch");
  }
  if (granularity == PCR_QUANT_TENSOR && j.dynamic) {
    int st = cuda_status(cudaMemsetAsync(j.scale, 0, sizeof(float), stream), "cudaMemsetAsync");
    if (st != PCR_OK) return st;
    const dim3 grid(unsigned(std::min<int64_t>((j.k + 255) / 256, 64)),
                    grid_rows(std::min<int64_t>(j.rows, 1024)));
    max_abs<X><<<grid, 256, 0, stream>>>(j);
    Job from_amax = j;
    from_amax.dynamic = false;
    const int64_t cols = std::min<int64_t>(j.k, 4096);
    const dim3 qgrid(unsigned((j.k + cols - 1) / cols), grid_rows(j.rows));
    quantize_regions<X, Q><<<qgrid, kRegionThreads, 0, stream>>>(from_amax, 1, cols, true);
    scale_of_amax<Q><<<1, 1, 0, stream>>>(j.scale);
    return cuda_status(cudaGetLastError(), "quantize launch");
  }
  // per row (token), per 128 x 128 block, or a static per-tensor scale
  const int rows_per = granularity == PCR_QUANT_BLOCK ? 128 : 1;
  const int64_t cols_per = granularity == PCR_QUANT_BLOCK ? 128 : j.k;
  Job job = j;
  if (granularity == PCR_QUANT_TENSOR) job.scale_rows = job.scale_k = 0;  // static: one value
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
