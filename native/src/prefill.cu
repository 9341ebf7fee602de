// d = scale * src for strided matrices with dtype conversion: beta * C when K == 0, C
// brought into D's form (layout, dtype, broadcast strides) before a kernel reads it, and
// operands staged into (or out of) aligned scratch.
#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime.h"

namespace pcr {
namespace {

template <class T> __device__ float to_float(T v) { return float(v); }
template <> __device__ float to_float(__half v) { return __half2float(v); }
template <> __device__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ T from_float(float v) { return T(v); }
template <> __device__ __half from_float(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }

// Columns are the destination's unit-stride dimension (see launch_typed), so neighbouring
// threads write neighbouring elements; rows stride over the grid's y dimension, kRows of
// them at a time so that each thread has that many independent loads in flight (a copy
// with one load per thread at a time is bound by DRAM latency, not bandwidth). Elements
// outside the source's extent (a padded destination) are written as zeros.
constexpr int kRows = 8;

template <class Src, class Dst>
__global__ void scale_copy(const Src* src, int64_t ss0, int64_t ss1, int64_t src_rows,
                           int64_t src_cols, Dst* dst, int64_t ds0, int64_t ds1, int64_t rows,
                           int64_t cols, float scale) {
  const int64_t row_step = gridDim.y;
  for (int64_t r0 = blockIdx.y; r0 < rows; r0 += row_step * kRows)
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols;
         c += int64_t(gridDim.x) * blockDim.x) {
      float v[kRows];
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        const int64_t r = r0 + j * row_step;
        const bool inside = src && r < rows && r < src_rows && c < src_cols;
        v[j] = inside ? scale * to_float(src[r * ss0 + c * ss1]) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        const int64_t r = r0 + j * row_step;
        if (r < rows) dst[r * ds0 + c * ds1] = from_float<Dst>(v[j]);
      }
    }
}

template <class Src, class Dst>
int launch_typed(const Matrix* src, const Matrix& dst, float scale, cudaStream_t stream) {
  int64_t rows = dst.rows, cols = dst.cols, ds0 = dst.s0, ds1 = dst.s1;
  int64_t ss0 = src ? src->s0 : 0, ss1 = src ? src->s1 : 0;
  int64_t src_rows = src ? src->rows : 0, src_cols = src ? src->cols : 0;
  if (ds0 == 1 && ds1 != 1) {  // column-major destination: walk it column by column
    std::swap(rows, cols);
    std::swap(ds0, ds1);
    std::swap(ss0, ss1);
    std::swap(src_rows, src_cols);
  }
  // About a thousand blocks, each thread copying kRows rows per step: enough loads in
  // flight for DRAM, without a block per row (up to 16384 short-lived blocks).
  const int64_t gx = std::min<int64_t>((cols + 255) / 256, 64);
  dim3 grid(unsigned(gx), unsigned(std::min<int64_t>(rows, std::max<int64_t>(1, 1024 / gx))));
  scale_copy<Src, Dst><<<grid, 256, 0, stream>>>(
      src ? reinterpret_cast<const Src*>(src->ptr) : nullptr, ss0, ss1, src_rows, src_cols,
      reinterpret_cast<Dst*>(dst.ptr), ds0, ds1, rows, cols, scale);
  return cuda_status(cudaGetLastError(), "scale_copy launch");
}

template <class Src>
int dispatch_dst(const Matrix* src, const Matrix& dst, float scale, cudaStream_t stream) {
  switch (dst.dtype) {
    case PCR_F16: return launch_typed<Src, __half>(src, dst, scale, stream);
    case PCR_BF16: return launch_typed<Src, __nv_bfloat16>(src, dst, scale, stream);
    case PCR_F32: return launch_typed<Src, float>(src, dst, scale, stream);
    default:
      return set_error(PCR_ERR_UNSUPPORTED, "cannot write %s outputs", dtype_name(dst.dtype));
  }
}

}  // namespace

int launch_scale_copy(const Matrix* src, const Matrix& dst, float scale, cudaStream_t stream) {
  if (dst.rows == 0 || dst.cols == 0) return PCR_OK;
  switch (src ? src->dtype : PCR_F32) {
    case PCR_F16: return dispatch_dst<__half>(src, dst, scale, stream);
    case PCR_BF16: return dispatch_dst<__nv_bfloat16>(src, dst, scale, stream);
    case PCR_F32: return dispatch_dst<float>(src, dst, scale, stream);
    default:
      return set_error(PCR_ERR_UNSUPPORTED, "c of dtype %s cannot be read",
                       dtype_name(src->dtype));
  }
}

}  // namespace pcr
