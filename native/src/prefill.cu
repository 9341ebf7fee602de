// d = act(scale * src + bias) for strided (batches of) matrices with dtype conversion:
// the whole answer when K == 0, C brought into D's form (layout, dtype, broadcast
// strides) before a kernel reads it, and operands staged into (or out of) aligned scratch.
#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "activation.h"
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

// One strided view (element strides of rows, columns and batch) and its extent.
struct View {
  const void* ptr = nullptr;
  int64_t s0 = 0, s1 = 0, sb = 0, rows = 0, cols = 0;
};

View view_of(const Matrix* m) {
  return m ? View{m->ptr, m->s0, m->s1, m->sb, m->rows, m->cols} : View{};
}

template <class Src, class Dst>
__global__ void scale_copy(View src, View dst, int64_t batch, float scale, View bias,
                           int activation) {
  const auto* s = static_cast<const Src*>(src.ptr);
  const auto* v_bias = static_cast<const Dst*>(bias.ptr);
  const int64_t row_step = gridDim.y;
  for (int64_t l = blockIdx.z; l < batch; l += gridDim.z) {
    auto* d = static_cast<Dst*>(const_cast<void*>(dst.ptr)) + l * dst.sb;
    for (int64_t r0 = blockIdx.y; r0 < dst.rows; r0 += row_step * kRows)
      for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < dst.cols;
           c += int64_t(gridDim.x) * blockDim.x) {
        float v[kRows];
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const int64_t r = r0 + j * row_step;
          const bool inside = s && r < dst.rows && r < src.rows && c < src.cols;
          v[j] = inside ? scale * to_float(s[l * src.sb + r * src.s0 + c * src.s1]) : 0.0f;
          if (v_bias && r < dst.rows) v[j] += to_float(v_bias[r * bias.s0 + c * bias.s1]);
          v[j] = activate(activation, v[j]);
        }
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const int64_t r = r0 + j * row_step;
          if (r < dst.rows) d[r * dst.s0 + c * dst.s1] = from_float<Dst>(v[j]);
        }
      }
  }
}

template <class Src, class Dst>
int launch_typed(const Matrix* src, const Matrix& dst, float scale, cudaStream_t stream,
                 const Matrix* bias, int activation) {
  View s = view_of(src), d = view_of(&dst), v = view_of(bias);
  if (d.s0 == 1 && d.s1 != 1) {  // column-major destination: walk it column by column
    for (View* x : {&s, &d, &v}) {
      std::swap(x->rows, x->cols);
      std::swap(x->s0, x->s1);
    }
  }
  // About a thousand blocks, each thread copying kRows rows per step: enough loads in
  // flight for DRAM, without a block per row (up to 16384 short-lived blocks).
  const int64_t gx = std::min<int64_t>((d.cols + 255) / 256, 64);
  const int64_t gy = std::min<int64_t>(d.rows, std::max<int64_t>(1, 1024 / gx));
  const int64_t gz = std::min<int64_t>(dst.batch, std::max<int64_t>(1, 1024 / (gx * gy)));
  dim3 grid(unsigned(gx), unsigned(gy), unsigned(std::min<int64_t>(gz, 65535)));
  scale_copy<Src, Dst><<<grid, 256, 0, stream>>>(s, d, dst.batch, scale, v, activation);
  return cuda_status(cudaGetLastError(), "scale_copy launch");
}

template <class Src>
int dispatch_dst(const Matrix* src, const Matrix& dst, float scale, cudaStream_t stream,
                 const Matrix* bias, int activation) {
  switch (dst.dtype) {
    case PCR_F16: return launch_typed<Src, __half>(src, dst, scale, stream, bias, activation);
    case PCR_BF16:
      return launch_typed<Src, __nv_bfloat16>(src, dst, scale, stream, bias, activation);
    case PCR_F32: return launch_typed<Src, float>(src, dst, scale, stream, bias, activation);
    default:
      return set_error(PCR_ERR_UNSUPPORTED, "cannot write %s outputs", dtype_name(dst.dtype));
  }
}

}  // namespace

int launch_scale_copy(const Matrix* src, const Matrix& dst, float scale, cudaStream_t stream,
                      const Matrix* bias, int activation) {
  if (dst.rows == 0 || dst.cols == 0 || dst.batch == 0) return PCR_OK;
  switch (src ? src->dtype : PCR_F32) {
    case PCR_F16: return dispatch_dst<__half>(src, dst, scale, stream, bias, activation);
    case PCR_BF16: return dispatch_dst<__nv_bfloat16>(src, dst, scale, stream, bias, activation);
    case PCR_F32: return dispatch_dst<float>(src, dst, scale, stream, bias, activation);
    default:
      return set_error(PCR_ERR_UNSUPPORTED, "c of dtype %s cannot be read",
                       dtype_name(src->dtype));
  }
}

}  // namespace pcr
