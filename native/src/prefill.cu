// d = act(scale * src + bias) for strided (batches of) matrices with dtype conversion:
// the whole answer when K == 0, C brought into D's form (layout, dtype, broadcast
// strides) before a kernel reads it, and operands staged into (or out of) aligned scratch.
#include <algorithm>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "activation.h"
#include "runtime.h"

namespace pcr {
namespace {

// Arithmetic in fp32, or in fp64 where an end is fp64 or int32 (exact for both).
template <class T> constexpr bool kWide = std::is_same_v<T, double> || std::is_same_v<T, int32_t>;
template <class Src, class Dst>
using Compute = std::conditional_t<kWide<Src> || kWide<Dst>, double, float>;

template <class C, class T> __device__ C to(T v) { return C(float(v)); }
template <> __device__ double to(double v) { return v; }
template <> __device__ double to(int32_t v) { return double(v); }
template <class T, class C> __device__ T from(C v) { return T(v); }
template <> __device__ __half from(float v) { return __float2half_rn(v); }
template <> __device__ __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
template <> __device__ int8_t from(float v) {  // round to nearest, saturate
  return int8_t(max(-128, min(127, __float2int_rn(v))));
}
template <> __device__ int8_t from(double v) { return from<int8_t>(float(v)); }
template <> __device__ int32_t from(double v) {
  return int32_t(fmax(-2147483648.0, fmin(2147483647.0, rint(v))));
}

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

// kEpilogue: the bias and activation are applied (only the K = 0 answer has them). A plain
// copy is its own instantiation: with the activation's code inlined for each of the kRows
// elements (predicated off, but issued), ncu counted ~300 instructions per element on the
// H200 and the staging copies ran at 0.5x torch's.
template <class Src, class Dst, bool kEpilogue>
__global__ void scale_copy(View src, View dst, int64_t batch, double scale_, View bias,
                           int activation) {
  using C = Compute<Src, Dst>;
  const C scale = C(scale_);
  const auto* s = static_cast<const Src*>(src.ptr);
  const auto* v_bias = static_cast<const Dst*>(bias.ptr);
  const int64_t row_step = gridDim.y;
  for (int64_t l = blockIdx.z; l < batch; l += gridDim.z) {
    auto* d = static_cast<Dst*>(const_cast<void*>(dst.ptr)) + l * dst.sb;
    for (int64_t r0 = blockIdx.y; r0 < dst.rows; r0 += row_step * kRows)
      for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < dst.cols;
           c += int64_t(gridDim.x) * blockDim.x) {
        C v[kRows];
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const int64_t r = r0 + j * row_step;
          const bool inside = s && r < dst.rows && r < src.rows && c < src.cols;
          v[j] = inside ? scale * to<C>(s[l * src.sb + r * src.s0 + c * src.s1]) : C(0);
          if constexpr (kEpilogue) {
            if (v_bias && r < dst.rows) v[j] += to<C>(v_bias[r * bias.s0 + c * bias.s1]);
            if (activation != PCR_ACT_NONE) v[j] = C(activate(activation, float(v[j])));
          }
        }
#pragma unroll
        for (int j = 0; j < kRows; ++j) {
          const int64_t r = r0 + j * row_step;
          if (r < dst.rows) d[r * dst.s0 + c * dst.s1] = from<Dst>(v[j]);
        }
      }
  }
}

template <class Src, class Dst>
int launch_typed(const Matrix* src, const Matrix& dst, double scale, cudaStream_t stream,
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
  auto* kernel = bias || activation != PCR_ACT_NONE ? scale_copy<Src, Dst, true>
                                                    : scale_copy<Src, Dst, false>;
  kernel<<<grid, 256, 0, stream>>>(s, d, dst.batch, scale, v, activation);
  return cuda_status(cudaGetLastError(), "scale_copy launch");
}

// Calls f(T{}) with the C++ type of a pcr_dtype; false for a dtype it does not know.
template <class F>
bool with_type(int dtype, F&& f) {
  switch (dtype) {
    case PCR_F16: f(__half{}); return true;
    case PCR_BF16: f(__nv_bfloat16{}); return true;
    case PCR_F32: case PCR_TF32: f(float{}); return true;
    case PCR_F64: f(double{}); return true;
    case PCR_S8: f(int8_t{}); return true;
    case PCR_S32: f(int32_t{}); return true;
    case PCR_E4M3: f(__nv_fp8_e4m3{}); return true;
    case PCR_E5M2: f(__nv_fp8_e5m2{}); return true;
    default: return false;
  }
}

}  // namespace

int launch_scale_copy(const Matrix* src, const Matrix& dst, double scale, cudaStream_t stream,
                      const Matrix* bias, int activation) {
  if (dst.rows == 0 || dst.cols == 0 || dst.batch == 0) return PCR_OK;
  int st = PCR_OK;
  const int src_dtype = src ? src->dtype : dst.dtype;
  bool known_dst = false;
  const bool known_src = with_type(src_dtype, [&](auto s) {
    known_dst = with_type(dst.dtype, [&](auto d) {
      st = launch_typed<decltype(s), decltype(d)>(src, dst, scale, stream, bias, activation);
    });
  });
  if (!known_src || !known_dst)
    return set_error(PCR_ERR_UNSUPPORTED, "cannot convert %s to %s", dtype_name(src_dtype),
                     dtype_name(dst.dtype));
  return st;
}

}  // namespace pcr
