// d = scale * src for strided matrices with dtype conversion: beta * C when K == 0, and
// C brought into D's form (layout, dtype, broadcast strides) before a kernel reads it.
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

template <class Src, class Dst>
__global__ void scale_copy(const Src* src, int64_t ss0, int64_t ss1, Dst* dst, int64_t ds0,
                           int64_t ds1, int64_t rows, int64_t cols, float scale) {
  int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / cols, c = i % cols;
    float v = src ? scale * to_float(src[r * ss0 + c * ss1]) : 0.0f;
    dst[r * ds0 + c * ds1] = from_float<Dst>(v);
  }
}

template <class Src, class Dst>
int launch_typed(const Matrix* src, const Matrix& dst, float scale, cudaStream_t stream) {
  int64_t n = dst.rows * dst.cols;
  int blocks = int(std::min<int64_t>((n + 255) / 256, 65535));
  scale_copy<Src, Dst><<<blocks, 256, 0, stream>>>(
      src ? reinterpret_cast<const Src*>(src->ptr) : nullptr, src ? src->s0 : 0,
      src ? src->s1 : 0, reinterpret_cast<Dst*>(dst.ptr), dst.s0, dst.s1, dst.rows, dst.cols,
      scale);
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
