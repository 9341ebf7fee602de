// d = act(scale * src + bias) for strided (batches of) matrices with dtype conversion:
// the whole answer when K == 0, C brought into D's form (layout, dtype, broadcast
// strides) before a kernel reads it, and operands staged into (or out of) aligned scratch;
// max |d| where no kernel's epilogue reduced it; and a convolution's input unfolded into
// the matrix a GEMM takes (im2col), and back (col2im: a dgrad's unfolded gradient summed
// into dx).
#include <algorithm>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "activation.h"
#include "amax.h"
#include "runtime.h"

namespace pcr {
namespace {

// Arithmetic in fp32, or in fp64 where an end is fp64 or int32 (exact for both).
template <class T>
constexpr bool kWide = std::is_same_v<T, double> || std::is_same_v<T, int32_t>;
template <class Src, class Dst>
using Compute = std::conditional_t<kWide<Src> || kWide<Dst>, double, float>;

template <class C, class T>
__device__ C to(T v) {
  return C(float(v));
}
template <>
__device__ double to(double v) {
  return v;
}
template <>
__device__ double to(int32_t v) {
  return double(v);
}
template <class T, class C>
__device__ T from(C v) {
  return T(v);
}
template <>
__device__ __half from(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __nv_bfloat16 from(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ int8_t from(float v) {  // round to nearest, saturate
  return int8_t(max(-128, min(127, __float2int_rn(v))));
}
template <>
__device__ int8_t from(double v) {
  return from<int8_t>(float(v));
}
template <>
__device__ int32_t from(double v) {
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
                           ActivationArgs activation) {
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
            if (activation.kind != PCR_ACT_NONE) v[j] = activate(activation, v[j]);
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

// The grid of an elementwise pass over d (after its columns are the unit-stride dimension):
// about a thousand blocks, each thread taking kRows rows per step in scale_copy, so that
// enough loads are in flight for DRAM, without a block per row (up to 16384 short-lived
// blocks).
dim3 elementwise_grid(const View& d, int64_t batch) {
  const int64_t gx = std::min<int64_t>((d.cols + 255) / 256, 64);
  const int64_t gy = std::min<int64_t>(d.rows, std::max<int64_t>(1, 1024 / gx));
  const int64_t gz = std::min<int64_t>(batch, std::max<int64_t>(1, 1024 / (gx * gy)));
  return dim3(unsigned(gx), unsigned(gy), unsigned(std::min<int64_t>(gz, 65535)));
}

template <class Src, class Dst>
int launch_typed(const Matrix* src, const Matrix& dst, double scale, cudaStream_t stream,
                 const Matrix* bias, ActivationArgs activation) {
  View s = view_of(src), d = view_of(&dst), v = view_of(bias);
  if (d.s0 == 1 && d.s1 != 1) {  // column-major destination: walk it column by column
    for (View* x : {&s, &d, &v}) {
      std::swap(x->rows, x->cols);
      std::swap(x->s0, x->s1);
    }
  }
  const dim3 grid = elementwise_grid(d, dst.batch);
  auto* kernel = bias || activation.kind != PCR_ACT_NONE ? scale_copy<Src, Dst, true>
                                                         : scale_copy<Src, Dst, false>;
  kernel<<<grid, 256, 0, stream>>>(s, d, dst.batch, scale, v, activation);
  return cuda_status(cudaGetLastError(), "scale_copy launch");
}

// max |d| into amax (amax.h): a grid-stride pass, columns on threads as above.
template <class T>
__global__ void reduce_amax(View d, int64_t batch, float* amax) {
  const auto* x = static_cast<const T*>(d.ptr);
  uint32_t bits = 0;
  for (int64_t l = blockIdx.z; l < batch; l += gridDim.z)
    for (int64_t r = blockIdx.y; r < d.rows; r += gridDim.y)
      for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < d.cols;
           c += int64_t(gridDim.x) * blockDim.x)
        bits = amax_bits(bits, float(to<double>(x[l * d.sb + r * d.s0 + c * d.s1])));
  commit_amax(amax, bits);  // every thread of the block gets here
}

// Staging of inputs into aligned scratch (same dtype, rows contiguous on both sides): each
// thread writes one 16-byte chunk of a destination row from the source's elements, which
// may start at any element offset, and zeros past the source's extent. Up to two operands
// share one launch (blockIdx.z). On the H200 the general copy above took 9.9 us for an
// 8 MB operand, mostly 64-bit index arithmetic per element.
struct RowCopy {
  const void* src = nullptr;
  void* dst = nullptr;
  int64_t src_ld = 0, dst_ld = 0, src_rows = 0, src_cols = 0, rows = 0, chunks = 0;
};

template <class E>  // an unsigned integer of the element's size
__device__ __forceinline__ void stage_chunk(const RowCopy& job) {
  constexpr int kPer = 16 / sizeof(E);
  const int64_t chunk = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (chunk >= job.chunks) return;
  const int64_t c0 = chunk * kPer;
  for (int64_t r = blockIdx.y; r < job.rows; r += gridDim.y) {
    const E* s = static_cast<const E*>(job.src) + r * job.src_ld;
    uint32_t w[4] = {0, 0, 0, 0};  // the chunk's four words, in registers
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const uint64_t x = r < job.src_rows && c0 + i < job.src_cols ? uint64_t(s[c0 + i]) : 0;
      constexpr int kBits = 8 * sizeof(E);
      w[i * kBits / 32] |= uint32_t(x << (i * kBits % 32));
      if constexpr (kBits == 64) w[i * kBits / 32 + 1] = uint32_t(x >> 32);
    }
    *reinterpret_cast<uint4*>(static_cast<E*>(job.dst) + r * job.dst_ld + c0) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// One branch per operand, so that each reads its RowCopy from the parameter bank: picking
// one with `blockIdx.z ? b : a` copied both to local memory and read every field back
// from there (39 us for the 8 MB operand on the H200).
template <class E>
__global__ void stage_rows(RowCopy a, RowCopy b) {
  if (blockIdx.z == 0)
    stage_chunk<E>(a);
  else
    stage_chunk<E>(b);
}

// The RowCopy of src into dst, or false where the fast path does not apply: dtypes
// differ, a batch, no unit-stride dimension shared by both, an unaligned destination.
bool row_copy(const Matrix& src, const Matrix& dst, RowCopy* out) {
  if (src.dtype != dst.dtype || src.batch > 1 || dst.batch > 1) return false;
  const bool rows = dst.s1 == 1;  // row-major destination, else column-major (s0 == 1)
  const int64_t src_inner = rows ? src.s1 : src.s0, dst_ld = rows ? dst.s0 : dst.s1;
  const int64_t per = 16 / dst.esize;
  if ((!rows && dst.s0 != 1) || src_inner > 1 || dst_ld % per ||
      reinterpret_cast<uintptr_t>(dst.ptr) % 16)
    return false;
  *out = {src.ptr,
          dst.ptr,
          rows ? src.s0 : src.s1,
          dst_ld,
          rows ? src.rows : src.cols,
          rows ? src.cols : src.rows,
          rows ? dst.rows : dst.cols,
          0};
  out->chunks = ((rows ? dst.cols : dst.rows) + per - 1) / per;
  return true;
}

// Calls f(T{}) with the C++ type of a pcr_dtype; false for a dtype it does not know.
template <class F>
bool with_type(int dtype, F&& f) {
  switch (dtype) {
    case PCR_F16:
      f(__half{});
      return true;
    case PCR_BF16:
      f(__nv_bfloat16{});
      return true;
    case PCR_F32:
    case PCR_TF32:
      f(float{});
      return true;
    case PCR_F64:
      f(double{});
      return true;
    case PCR_S8:
      f(int8_t{});
      return true;
    case PCR_S32:
      f(int32_t{});
      return true;
    case PCR_E4M3:
      f(__nv_fp8_e4m3{});
      return true;
    case PCR_E5M2:
      f(__nv_fp8_e5m2{});
      return true;
    default:
      return false;
  }
}

}  // namespace

int launch_scale_copy(const Matrix* src, const Matrix& dst, double scale, cudaStream_t stream,
                      const Matrix* bias, ActivationArgs activation) {
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

int launch_amax(const Matrix& d, const Matrix& amax, cudaStream_t stream) {
  if (!amax.ptr || d.rows == 0 || d.cols == 0 || d.batch == 0) return PCR_OK;
  View v = view_of(&d);
  if (v.s0 == 1 && v.s1 != 1) std::swap(v.rows, v.cols), std::swap(v.s0, v.s1);  // columns
  const dim3 grid = elementwise_grid(v, d.batch);
  auto* out = reinterpret_cast<float*>(amax.ptr);
  if (!with_type(d.dtype, [&](auto t) {
        reduce_amax<decltype(t)><<<grid, 256, 0, stream>>>(v, d.batch, out);
      }))
    return set_error(PCR_ERR_UNSUPPORTED, "amax of %s", dtype_name(d.dtype));
  return cuda_status(cudaGetLastError(), "amax launch");
}

namespace {

// The index type of im2col and col2im: 32-bit where every position and its grid-stride
// successor fit (division, which the kernels cannot avoid entirely, costs several times as
// much in 64 bits), else 64-bit.
bool fits32(const Im2col& g) {
  constexpr int64_t limit = int64_t(1) << 31;
  return g.n * g.p * g.q < limit && g.width < limit && g.n * g.h * g.w * g.c < limit;
}

// A position (n, a, b) in an N x A x B grid, stepped by a fixed count with carries instead
// of divisions: `step` is the count decomposed once (each part below its extent).
template <class I>
struct Position {
  I n, a, b;
  __device__ void advance(const Position& step, I A, I B) {
    b += step.b;
    if (b >= B) b -= B, ++a;
    a += step.a;
    if (a >= A) a -= A, ++n;
    n += step.n;
  }
};
template <class I>
__device__ Position<I> position(I index, I A, I B) {
  return {index / (A * B), (index / B) % A, index % B};
}

// V elements of E moved as one access (16 bytes at most).
template <class E, int V>
struct alignas(sizeof(E) * V) Run {
  E v[V];
};

// im2col: a thread writes a run of V adjacent columns of cols (one 16-byte store where the
// block of columns allows) and steps down the rows, its output position (n, p, q) advanced
// by additions; each column's group, filter tap (i, j) and channel are worked out once.
// kRun: channels per group a multiple of V, so a run is V adjacent channels of one tap,
// read with one load; otherwise V loads (a few channels, as a network's first layer has).
// On the H200 one element per thread (its index arithmetic and a 2-byte store each) ran at
// about 2 us per MB of cols; runs with one load each at about 0.45 us per MB (UNet's
// conv_out, ResNeXt's grouped 3x3), the first layers' three channels at 1.1. Writes
// coalesce along a row; reads come mostly from L2 (each input element serves up to r * s
// rows).
template <class E, int V, bool kRun, class I>
__global__ void unfold(const void* image, void* unfolded, Im2col g) {
  const E* x = static_cast<const E*>(image);
  Run<E, V>* cols = static_cast<Run<E, V>*>(unfolded);
  const I runs = I(g.width / V), P = I(g.p), Q = I(g.q), rows = I(g.n * g.p * g.q);
  const I block = I(g.width / g.groups), cg = I(g.c / g.groups), taps = I(g.r * g.s) * cg;
  const I step = I(gridDim.y) * blockDim.y;
  const Position<I> stride = position(step, P, Q);
  constexpr int kSources = kRun ? 1 : V;
  for (I run = blockIdx.x * blockDim.x + threadIdx.x; run < runs; run += gridDim.x * blockDim.x) {
    I ch[kSources];
    int dh[kSources], dw[kSources];
    bool tap[kSources];
#pragma unroll
    for (int e = 0; e < kSources; ++e) {
      const I col = run * V + e, within = col % block;
      tap[e] = within < taps;  // past the taps: zeros padding the block to 16 bytes
      ch[e] = tap[e] ? (col / block) * cg + within % cg : 0;
      const I ij = tap[e] ? within / cg : 0;
      dh[e] = int(ij / I(g.s)) * int(g.dilation_h) - int(g.pad_h);
      dw[e] = int(ij % I(g.s)) * int(g.dilation_w) - int(g.pad_w);
    }
    I row = blockIdx.y * blockDim.y + threadIdx.y;
    Position<I> at = position(row, P, Q);
    for (; row < rows; row += step, at.advance(stride, P, Q)) {
      const int64_t h0 = int64_t(at.a) * g.stride_h, w0 = int64_t(at.b) * g.stride_w;
      const E* pixel = x + int64_t(at.n) * g.h * g.w * g.c;
      Run<E, V> out;
#pragma unroll
      for (int e = 0; e < kSources; ++e) {
        const int64_t h = h0 + dh[e], w = w0 + dw[e];
        const bool inside = tap[e] && h >= 0 && h < g.h && w >= 0 && w < g.w;
        const E* at_hw = pixel + (h * g.w + w) * g.c + ch[e];
        if constexpr (kRun)
          out = inside ? *reinterpret_cast<const Run<E, V>*>(at_hw) : Run<E, V>{};
        else
          out.v[e] = inside ? *at_hw : E(0);
      }
      cols[int64_t(row) * runs + run] = out;
    }
  }
}

// The filter taps t (rows i or columns j) whose window covers input coordinate `coord`:
// coord + pad - t * dilation = o * stride with 0 <= o < out. f(t, o) for each.
template <class I, class F>
__device__ void taps_over(I coord, int64_t pad, int64_t dilation, int64_t stride, int64_t taps,
                          I out, F f) {
  const I from = coord + I(pad), by = I(stride);
  // with unit dilation only every stride-th tap can land on an output position
  const I first = dilation == 1 ? from % by : 0, step = dilation == 1 ? by : 1;
  for (I t = first; int64_t(t) < taps && int64_t(t) * dilation <= int64_t(from); t += step) {
    const I at = from - I(int64_t(t) * dilation);
    if (dilation != 1 && at % by) continue;
    const I o = at / by;
    if (o < out) f(t, o);
  }
}

// col2im, the adjoint of unfold: each element of dx (n, h, w, channel) gathers, in fp32,
// the unfolded gradient's entries of every filter tap (i, j) whose window covered it, then
// dx = alpha * sum + beta * c. A gather, not a scatter: no atomics, the same order always.
// Positions advance by additions (Position), taps by the stride (taps_over).
template <class T, class I>
__global__ void fold(const T* cols, T* dx, const T* c, Im2col g, float alpha, float beta) {
  const I C = I(g.c), W = I(g.w), HW = I(g.h * g.w), total = I(g.n * g.h * g.w * g.c);
  const I block = I(g.width / g.groups), cg = I(g.c / g.groups), P = I(g.p), Q = I(g.q);
  const I step = I(gridDim.x) * blockDim.x;
  const Position<I> stride = position(step, HW, C);  // (n, h * W + w, channel)
  I e = blockIdx.x * blockDim.x + threadIdx.x;
  Position<I> at = position(e, HW, C);
  for (; e < total; e += step, at.advance(stride, HW, C)) {
    const I ch = at.b, h = at.a / W, w = at.a % W;
    const I first = cg == C ? ch : (ch / cg) * block + ch % cg;  // the channel's tap-0 column
    float acc = 0.0f;
    taps_over(h, g.pad_h, g.dilation_h, g.stride_h, g.r, P, [&](I i, I p) {
      taps_over(w, g.pad_w, g.dilation_w, g.stride_w, g.s, Q, [&](I j, I q) {
        const int64_t row = (int64_t(at.n) * P + p) * Q + q;
        acc += to<float>(cols[row * g.width + first + (int64_t(i) * g.s + j) * cg]);
      });
    });
    float v = alpha * acc;
    if (c) v += beta * to<float>(c[e]);
    dx[e] = from<T>(v);
  }
}

template <class T>
int launch_fold_typed(const void* cols, void* dx, const void* c, const Im2col& g, float alpha,
                      float beta, cudaStream_t stream) {
  const int64_t total = g.n * g.h * g.w * g.c;
  const unsigned grid = unsigned(std::min<int64_t>((total + 255) / 256, 8192));
  auto* kernel = fits32(g) ? fold<T, uint32_t> : fold<T, uint64_t>;
  kernel<<<grid, 256, 0, stream>>>(static_cast<const T*>(cols), static_cast<T*>(dx),
                                   static_cast<const T*>(c), g, alpha, beta);
  return cuda_status(cudaGetLastError(), "col2im launch");
}

template <class E, int V, bool kRun>
void launch_unfold_run(const void* x, void* cols, const Im2col& u, dim3 grid, dim3 block,
                       cudaStream_t stream) {
  auto* kernel = fits32(u) ? unfold<E, V, kRun, uint32_t> : unfold<E, V, kRun, uint64_t>;
  kernel<<<grid, block, 0, stream>>>(x, cols, u);
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Runs of 16 bytes where a group's block of columns and cols' address allow (with one load
// each where the channels and x's address do too), else single elements.
template <class E>
void launch_unfold_typed(const void* x, void* cols, const Im2col& u, cudaStream_t stream) {
  constexpr int kV = 16 / sizeof(E);
  const bool runs = (u.width / u.groups) % kV == 0 && aligned(cols, 16);
  const bool one_load = runs && (u.c / u.groups) % kV == 0 && aligned(x, 16);
  const int64_t width = runs ? u.width / kV : u.width, rows = u.n * u.p * u.q;
  // 256 threads a block: across the runs (up to all 256), the rest down the rows; about
  // 4096 blocks in all (a few waves of every SM), each then striding
  const int64_t across = std::min<int64_t>(width, 256);
  const dim3 block{unsigned(across), unsigned(256 / across)};
  const int64_t gx = std::min<int64_t>((width + across - 1) / across, 64);
  const int64_t gy =
      std::min<int64_t>((rows + block.y - 1) / block.y, std::max<int64_t>(1, 4096 / gx));
  const dim3 grid{unsigned(gx), unsigned(gy)};
  auto* launch = one_load ? launch_unfold_run<E, kV, true>
                 : runs   ? launch_unfold_run<E, kV, false>
                          : launch_unfold_run<E, 1, false>;
  launch(x, cols, u, grid, block, stream);
}

}  // namespace

int launch_unfold(const void* x, void* cols, int esize, const Im2col& u, cudaStream_t stream) {
  auto* launch = esize == 1   ? launch_unfold_typed<uint8_t>
                 : esize == 2 ? launch_unfold_typed<uint16_t>
                 : esize == 4 ? launch_unfold_typed<uint32_t>
                              : launch_unfold_typed<uint64_t>;  // bits are copied: size decides
  launch(x, cols, u, stream);
  return cuda_status(cudaGetLastError(), "im2col launch");
}

int launch_stage_copies(const Matrix* const src[], const Matrix* const dst[], int count,
                        cudaStream_t stream) {
  RowCopy jobs[2];
  int fast = 0, esize = 0;
  for (int i = 0; i < count; ++i) {
    if (fast < 2 && (fast == 0 || dst[i]->esize == esize) &&
        row_copy(*src[i], *dst[i], &jobs[fast])) {
      ++fast;
      esize = dst[i]->esize;
      continue;
    }
    int st = launch_scale_copy(src[i], *dst[i], 1.0, stream);
    if (st != PCR_OK) return st;
  }
  if (!fast) return PCR_OK;
  int64_t chunks = 0, rows = 0;
  for (int i = 0; i < fast; ++i)
    chunks = std::max(chunks, jobs[i].chunks), rows = std::max(rows, jobs[i].rows);
  dim3 grid(unsigned((chunks + 127) / 128), unsigned(std::min<int64_t>(rows, 65535)), fast);
  auto* kernel = esize == 1   ? stage_rows<uint8_t>
                 : esize == 2 ? stage_rows<uint16_t>
                 : esize == 4 ? stage_rows<uint32_t>
                              : stage_rows<uint64_t>;
  kernel<<<grid, 128, 0, stream>>>(jobs[0], jobs[1]);
  return cuda_status(cudaGetLastError(), "stage_rows launch");
}

int launch_fold(const void* cols, void* dx, const void* c, int dtype, const Im2col& g, float alpha,
                float beta, cudaStream_t stream) {
  switch (dtype) {
    case PCR_F16:
      return launch_fold_typed<__half>(cols, dx, c, g, alpha, beta, stream);
    case PCR_BF16:
      return launch_fold_typed<__nv_bfloat16>(cols, dx, c, g, alpha, beta, stream);
    case PCR_F32:
      return launch_fold_typed<float>(cols, dx, c, g, alpha, beta, stream);
    default:
      return set_error(PCR_ERR_UNSUPPORTED, "col2im takes float16, bfloat16 and float32");
  }
}

}  // namespace pcr
