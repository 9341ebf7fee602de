// Depthwise 2-D convolutions (one filter per channel: groups = C = K), direct convolutions
// on CUDA cores (sm80 family: one sm_80 source for sm_80/86/89/90 SASS): packed NHWC
// activations, torch's channels_last depthwise filters (C, R, S, 1), fp32 accumulation.
// fprop has the fused epilogue y = act(alpha * acc + beta * c + bias[k]); dgrad (a
// stride-1 one as fprop of dy with the filters rotated) and wgrad the linear one.
//
// What follows describes fprop's kernel; dgrad's gathers the same way, wgrad's sums per
// tap over slices of the outputs, those built for a filter reusing inputs along W as
// fprop's do (each kernel says how).
//
// Memory bound (R*S multiply-adds per loaded element), so the kernel is built around its
// loads: a thread holds 8 channels (one 16-byte vector) of kOutputs consecutive outputs
// along W (for 5x5 and 7x7 filters 4 channels, 8 bytes, of 8 outputs: the registers hold
// no more, and a longer run converts fewer loaded inputs per FMA). For each filter row it
// walks the input row once, each load feeding every output whose window covers it (with a
// static filter and stride the walk unrolls into straight-line FMAs), so a 3x3 stride-1
// row reads 1.5 vectors per output instead of 3. A CTA's filters are staged once in shared
// memory, tap-major, so that a thread reads its channels of a tap in one load. Threads
// take the channel vectors of a chunk of channels (the fastest index: a warp reads whole
// pixels) and then the output runs of consecutive rows, so that small channel counts still
// fill the CTA.
//
// kR = kS = kStride = 0 make the generic kernel: any filter, stride and dilation, read
// tap by tap without the reuse along W.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

#include "cutlass/array.h"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_conversion.h"

#include "activation.h"
#include "kernel.h"

namespace pcr::depthwise {

constexpr int kVector = 8;       // channels per thread: 16 bytes of 16-bit elements
constexpr int kThreads = 256;    // per CTA
constexpr int kMaxVectors = 32;  // channel vectors per CTA (256 channels of kVector)
constexpr int kOutputs = 4;      // outputs per thread along W
// CTAs per SM the registers must allow: 16 warps keep enough loads in flight (one CTA of
// the widest kernels, 7x7 at stride 2, otherwise holds its SM at 8)
constexpr int kMinCtas = 2;
// a CTA's filters in shared memory: within the default static limit, which a filter of
// up to 48 KB / (16 bytes * taps) channel vectors per CTA keeps (3072 taps: 55 x 55)
constexpr int kMaxSmem = 48 * 1024;

// One launch's arguments, built on the host. The tensors by pass: fprop reads x and w and
// writes y; dgrad reads dy and w and writes y = dx (N x H x W x C, c likewise); wgrad reads
// x and dy, sums per CTA into `partials` and writes y = dw (C x R x S, c likewise).
struct Params {
  const void* x;     // N x H x W x C
  const void* w;     // C x R x S (x 1)
  const void* dy;    // N x P x Q x C (dgrad, wgrad)
  const void* c;     // y's shape, read where beta != 0
  void* y;           // N x P x Q x C (fprop)
  const void* bias;  // C values, or null
  float* partials;   // wgrad: slices x R*S x C sums (the workspace)
  int n, h, w_, ch, p, q, r, s;
  int pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w;
  int vectors;        // C / the channels a thread holds
  int chunk_vectors;  // channel vectors per CTA
  int rows_per_cta;   // rows of threads per CTA, each row on output runs (wgrad: positions,
                      // or runs once per filter row of the CTA): kThreads / chunk_vectors at
                      // most, fewer where a small problem spreads over more CTAs
  int row_split;      // fprop built for a filter: threads per run, each a share of the
                      // filter rows (1, or R for a small problem)
  int runs;           // output runs per output row: ceil(width / outputs per run)
  int64_t items;      // output runs in all: N * rows * runs (wgrad: N * P * Q positions)
  int slices;         // wgrad: slices of N * P * Q per channel chunk and tap group
  int tap_groups;     // wgrad: CTAs per slice and channel chunk, each a group of taps:
                      // kWgradTaps (generic) or filter_rows rows of the filter
  int filter_rows;    // wgrad built for a filter: filter rows per CTA (1 or R)
  float alpha, beta;
  ActivationArgs activation;
};

// N channels of a thread: kVector (one 16-byte load of 16-bit elements), or 4 (8 bytes)
// where a kernel holds more outputs instead
template <class T, int N = kVector>
using Vec = cutlass::Array<T, N>;
template <int N = kVector>
using AccN = cutlass::Array<float, N>;
using Acc = AccN<>;

template <int N>
struct Raw;  // the load unit of N 16-bit elements
template <>
struct Raw<8> {
  using type = uint4;
};
template <>
struct Raw<4> {
  using type = uint2;
};

template <class T, int N = kVector>
__device__ __forceinline__ AccN<N> load_vector(const T* p) {
  using R = typename Raw<N>::type;
  union {
    R raw;
    Vec<T, N> v;
  } u;
  u.raw = __ldg(reinterpret_cast<const R*>(p));
  return cutlass::NumericArrayConverter<float, T, N>()(u.v);
}

template <class T, int N = kVector>
__device__ __forceinline__ AccN<N> load_shared(const T* p) {
  return cutlass::NumericArrayConverter<float, T, N>()(*reinterpret_cast<const Vec<T, N>*>(p));
}

// acc += x * w, channel by channel
template <int N>
__device__ __forceinline__ void multiply_add(AccN<N>& acc, const AccN<N>& x, const AccN<N>& w) {
  CUTLASS_PRAGMA_UNROLL
  for (int i = 0; i < N; ++i) acc[i] = fmaf(x[i], w[i], acc[i]);
}

// The epilogue of a run of kRun outputs of kVec channels: act(alpha * acc + beta * c +
// bias) at y's elements (out_row + q0 + t) * C + channel for t < kRun within `width`, one
// store of kVec elements each.
template <class D, int kVec = kVector, int kRun = kOutputs>
__device__ __forceinline__ void store_run(const Params& prm, const AccN<kVec>* acc, int64_t out_row,
                                          int q0, int width, int channel) {
  AccN<kVec> bias;
  if (prm.bias)
    bias = load_vector<D, kVec>(static_cast<const D*>(prm.bias) + channel);
  else
    bias.fill(0.0f);
  const int ch = prm.ch;
  CUTLASS_PRAGMA_UNROLL
  for (int t = 0; t < kRun; ++t) {
    if (q0 + t >= width) break;
    const int64_t at = (out_row + q0 + t) * ch + channel;
    AccN<kVec> y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kVec; ++i) y[i] = prm.alpha * acc[t][i] + bias[i];
    if (prm.beta != 0.0f) {
      const AccN<kVec> c = load_vector<D, kVec>(static_cast<const D*>(prm.c) + at);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kVec; ++i) y[i] = fmaf(prm.beta, c[i], y[i]);
    }
    y = activate(prm.activation, y);
    using R = typename Raw<kVec>::type;
    union {
      R raw;
      Vec<D, kVec> v;
    } u;
    u.v = cutlass::NumericArrayConverter<D, float, kVec>()(y);
    *reinterpret_cast<R*>(static_cast<D*>(prm.y) + at) = u.raw;
  }
}

// The dynamic shared memory of a launch.
__device__ __forceinline__ unsigned char* shared_bytes() {
#if defined(PCR_EMULATE)
  return emulate::shared_memory().bytes;
#else
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  return smem_bytes;
#endif
}

// The type a kernel whose threads hold kVec channels stages its filters as: 16-bit, as w,
// for kVector channels (floats would double the shared-memory bytes each tap's read moves,
// which the 3x3 kernels feel); floats for fewer, read without a conversion per tap.
template <class T, int kVec>
using FilterOf = std::conditional_t<kVec == kVector, T, float>;

// The CTA's channel chunk's filters in shared memory as F, tap-major ([r * S + s][chunk
// channel]), read from w's contiguous run of C x R x S in order; kFlip: rotated by 180
// degrees (tap r * S + s holds w's (R - 1 - r, S - 1 - s)).
template <class F, class T, bool kFlip = false, int kVec = kVector>
__device__ __forceinline__ const F* stage_filters(const Params& prm, int taps) {
  F* filters = reinterpret_cast<F*>(shared_bytes());
  const int chunk_channels = prm.chunk_vectors * kVec;
  const int c0 = blockIdx.y * chunk_channels;
  const T* w = static_cast<const T*>(prm.w) + int64_t(c0) * taps;
  const int chunk_taps = min(chunk_channels, prm.ch - c0) * taps;
  for (int i = threadIdx.x; i < chunk_taps; i += kThreads) {
    const int tap = kFlip ? taps - 1 - i % taps : i % taps;
    filters[tap * chunk_channels + i / taps] = F(w[i]);
  }
  __syncthreads();
  return filters;
}

// The outputs a thread of fprop's or dgrad's kernels takes: kRun consecutive columns from
// col0 of output row `row` (of `height`) of image n, in its CTA's channel vector; with
// fprop's row_split, filter rows part, part + row_split, ... of them.
struct Run {
  int lane, vector, n, row, col0, part;
};
template <int kRun = kOutputs>
__device__ __forceinline__ bool run_of(const Params& prm, int height, Run& r) {
  r.lane = threadIdx.x % prm.chunk_vectors;
  const int slot = threadIdx.x / prm.chunk_vectors;
  r.part = slot % prm.row_split;
  r.vector = blockIdx.y * prm.chunk_vectors + r.lane;
  const int64_t item = int64_t(blockIdx.x) * prm.rows_per_cta + slot / prm.row_split;
  if (slot / prm.row_split >= prm.rows_per_cta || item >= prm.items || r.vector >= prm.vectors)
    return false;
  const int64_t nrow = item / prm.runs;
  r.col0 = int(item % prm.runs) * kRun;
  r.row = int(nrow % height), r.n = int(nrow / height);
  return true;
}

// kR x kS (0: runtime) filters, stride kStride (0: runtime), dilation 1 unless generic.
// kFlip: the filters rotated by 180 degrees, which makes a stride-1 dgrad an fprop of dy
// (Direct's dgrad kernels built for a filter). With row_split > 1 (kernels built for a
// filter, small problems) the threads of a run each take a share of the filter rows, so
// that no thread walks all R rows' loads one after another; the first adds the others'
// sums up in order through shared memory. A thread holds kVec channels (kVector, or 4 where
// the kernel holds more outputs instead) of kRun consecutive outputs along W.
template <class T, class D, int kR, int kS, int kStride, bool kFlip = false, int kVec = kVector,
          int kRun = kOutputs>
__global__ void __launch_bounds__(kThreads, kMinCtas) depthwise_fprop(const Params prm) {
  constexpr bool kGeneric = kR == 0;
  const int taps = kGeneric ? prm.r * prm.s : kR * kS;
  const int chunk_channels = prm.chunk_vectors * kVec;
  using F = FilterOf<T, kVec>;
  const F* filters = stage_filters<F, T, kFlip, kVec>(prm, taps);
  using A = AccN<kVec>;

  Run run{};
  const bool active = run_of<kRun>(prm, prm.p, run);
  if (!active && prm.row_split == 1) return;
  const int lane = run.lane, vector = run.vector, op = run.row, on = run.n, q0 = run.col0;
  const int ch = prm.ch, width = prm.w_, height = prm.h;
  const int stride_h = kGeneric ? prm.stride_h : kStride;
  const int stride_w = kGeneric ? prm.stride_w : kStride;
  const int channel = vector * kVec;
  const T* x = static_cast<const T*>(prm.x) + int64_t(on) * height * width * ch + channel;
  const F* f = filters + lane * kVec;

  A acc[kRun];
  CUTLASS_PRAGMA_UNROLL
  for (int t = 0; t < kRun; ++t) acc[t].fill(0.0f);

  if (!active) {  // a thread of a split run past the end: only the barriers below
  } else if constexpr (kGeneric) {
    for (int r = 0; r < prm.r; ++r) {
      const int ih = op * stride_h - prm.pad_h + r * prm.dilation_h;
      if (ih < 0 || ih >= height) continue;
      const T* in = x + int64_t(ih) * width * ch;
      for (int s = 0; s < prm.s; ++s) {
        const A wv = load_shared<F, kVec>(f + (r * prm.s + s) * chunk_channels);
        CUTLASS_PRAGMA_UNROLL
        for (int t = 0; t < kRun; ++t) {
          const int iw = (q0 + t) * stride_w - prm.pad_w + s * prm.dilation_w;
          if (iw >= 0 && iw < width)
            multiply_add(acc[t], load_vector<T, kVec>(in + int64_t(iw) * ch), wv);
        }
      }
    }
  } else {
    // the input columns the run's windows cover, each loaded once per filter row; a run
    // whose columns all lie inside the row (most) walks them without bounds checks
    constexpr int kSpan = (kRun - 1) * kStride + kS;
    const int iw0 = q0 * kStride - prm.pad_w;
    auto rows = [&](auto checked) {
      CUTLASS_PRAGMA_NO_UNROLL
      for (int r = run.part; r < kR; r += prm.row_split) {
        const int ih = op * kStride - prm.pad_h + r;
        if (ih < 0 || ih >= height) continue;
        const T* in = x + (int64_t(ih) * width + iw0) * ch;  // column iw0 (maybe padding)
        // tap s is first read at column s (by output 0): loaded there, so that only the taps
        // of the columns in flight hold registers
        A wv[kS];
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kSpan; ++j) {
          if (j < kS) wv[j] = load_shared<F, kVec>(f + (r * kS + j) * chunk_channels);
          if (decltype(checked)::value && (iw0 + j < 0 || iw0 + j >= width))
            continue;  // padding: adds nothing
          const A xv = load_vector<T, kVec>(in + j * ch);
          CUTLASS_PRAGMA_UNROLL
          for (int t = 0; t < kRun; ++t) {
            const int s = j - t * kStride;  // the tap of output t that reads column j
            if (s >= 0 && s < kS) multiply_add(acc[t], xv, wv[s]);
          }
        }
      }
    };
    if (iw0 >= 0 && iw0 + kSpan <= width)
      rows(std::false_type{});
    else
      rows(std::true_type{});
  }

  if (prm.row_split > 1) {
    __syncthreads();  // every thread is done with the filters: their bytes take the sums
    float* sums = reinterpret_cast<float*>(shared_bytes());  // [thread][output][channel]
    constexpr int kFloats = kRun * kVec;
    CUTLASS_PRAGMA_UNROLL
    for (int t = 0; t < kRun; ++t) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kVec; ++i) sums[threadIdx.x * kFloats + t * kVec + i] = acc[t][i];
    }
    __syncthreads();
    if (!active || run.part != 0) return;
    for (int part = 1; part < prm.row_split; ++part) {  // the run's threads: chunk_vectors apart
      const float* theirs = sums + (threadIdx.x + part * prm.chunk_vectors) * kFloats;
      CUTLASS_PRAGMA_UNROLL
      for (int t = 0; t < kRun; ++t) {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < kVec; ++i) acc[t][i] += theirs[t * kVec + i];
      }
    }
  }
  store_run<D, kVec, kRun>(prm, acc, (int64_t(on) * prm.p + op) * prm.q, q0, prm.q, channel);
}

// dgrad: dx = the transposed convolution of dy, any filter, stride and dilation (kR = kS =
// kStride = 0), or built for a kR x kS filter at stride kStride, no dilation (the taps
// unrolled, the stride's divisions shifts). A thread takes 8 channels of kOutputs
// consecutive dx elements along W, as fprop's threads do; an element (ih, iw) gathers
// dy[(ih + pad - r * dilation) / stride] for every tap whose numerator the stride divides.
template <class T, class D, int kR = 0, int kS = 0, int kStride = 0>
__global__ void __launch_bounds__(kThreads, kMinCtas) depthwise_dgrad(const Params prm) {
  constexpr bool kGeneric = kR == 0;
  const int filter_r = kGeneric ? prm.r : kR, filter_s = kGeneric ? prm.s : kS;
  const int stride_h = kGeneric ? prm.stride_h : kStride;
  const int stride_w = kGeneric ? prm.stride_w : kStride;
  const int dilation_h = kGeneric ? prm.dilation_h : 1, dilation_w = kGeneric ? prm.dilation_w : 1;
  const int taps = filter_r * filter_s;
  const int chunk_channels = prm.chunk_vectors * kVector;
  const T* filters = stage_filters<T, T>(prm, taps);

  Run run;
  if (!run_of(prm, prm.h, run)) return;
  const int lane = run.lane, ih = run.row, in_ = run.n, w0 = run.col0;
  const int ch = prm.ch, channel = run.vector * kVector;
  const T* dy = static_cast<const T*>(prm.dy) + int64_t(in_) * prm.p * prm.q * ch + channel;
  const T* f = filters + lane * kVector;

  Acc acc[kOutputs];
  CUTLASS_PRAGMA_UNROLL
  for (int t = 0; t < kOutputs; ++t) acc[t].fill(0.0f);
  CUTLASS_PRAGMA_NO_UNROLL
  for (int r = 0; r < filter_r; ++r) {
    const int num_h = ih + prm.pad_h - r * dilation_h;
    if (num_h < 0 || num_h % stride_h) continue;
    const int oh = num_h / stride_h;
    if (oh >= prm.p) continue;
    const T* out = dy + int64_t(oh) * prm.q * ch;
    // whole where the filter is static
    CUTLASS_PRAGMA_UNROLL
    for (int s = 0; s < filter_s; ++s) {
      const Acc wv = load_shared(f + (r * filter_s + s) * chunk_channels);
      CUTLASS_PRAGMA_UNROLL
      for (int t = 0; t < kOutputs; ++t) {
        const int num_w = w0 + t + prm.pad_w - s * dilation_w;
        if (num_w < 0 || num_w % stride_w) continue;
        const int ow = num_w / stride_w;
        if (ow < prm.q) multiply_add(acc[t], load_vector(out + int64_t(ow) * ch), wv);
      }
    }
  }
  store_run<D>(prm, acc, (int64_t(in_) * prm.h + ih) * prm.w_, w0, prm.w_, channel);
}

// wgrad's taps per round of a CTA's reduction, and the generic kernel's taps per CTA
constexpr int kWgradTaps = 4;

// The sums of one round of kWgradTaps taps (the first `count`), held by every thread of a
// wgrad CTA, added up over the CTA's rows in a fixed order into partials[slice][tap][channel].
// The CTA's threads form `groups` groups of chunk_vectors lanes per row (thread = (row *
// groups + group) * chunk_vectors + lane), group g's sums being taps tap0 + g * group_taps
// + j; the smem staging makes the order deterministic.
__device__ __forceinline__ void reduce_taps(const Params& prm, const Acc* acc, int slice, int tap0,
                                            int count, int groups = 1, int group_taps = 0) {
  float* sums = reinterpret_cast<float*>(shared_bytes());  // [row][group][lane][tap][channel]
  const int per_row = kWgradTaps * kVector;                // floats of one thread's sums
  const int lanes = prm.chunk_vectors * groups;            // threads of one row
  const int taps = prm.r * prm.s;
  if (threadIdx.x / lanes < prm.rows_per_cta) {
    float* mine = sums + threadIdx.x * per_row;
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kWgradTaps; ++j) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kVector; ++i) mine[j * kVector + i] = acc[j][i];
    }
  }
  __syncthreads();
  for (int v = threadIdx.x; v < lanes * per_row; v += kThreads) {
    const int l = v / per_row, j = v % per_row / kVector, i = v % kVector;
    const int g = l / prm.chunk_vectors;
    const int c = (blockIdx.y * prm.chunk_vectors + l % prm.chunk_vectors) * kVector + i;
    if (j >= count || c >= prm.ch) continue;
    float total = 0.0f;
    for (int r = 0; r < prm.rows_per_cta; ++r)
      total += sums[(r * lanes + l) * per_row + j * kVector + i];
    prm.partials[(int64_t(slice) * taps + tap0 + g * group_taps + j) * prm.ch + c] = total;
  }
  __syncthreads();  // the next round writes sums again
}

// A wgrad thread's work items: those of slice `slice` (of prm.slices over prm.items) from
// the thread's row on, rows_per_cta apart, each as (image n, output row p, column col of
// the `cols` per output row), stepped from one to the next without dividing.
struct Walk {
  int64_t item, last;
  int col, p, n;
  int cols, step_cols, step_rows;
  __device__ Walk(const Params& prm, int slice, int row, int cols_) : cols(cols_) {
    const int64_t per_slice = (prm.items + prm.slices - 1) / prm.slices;
    const int64_t first = int64_t(slice) * per_slice;
    last = min(prm.items, first + per_slice);
    item = first + row;
    col = int(item % cols), p = int(item / cols % prm.p), n = int(item / cols / prm.p);
    step_cols = prm.rows_per_cta % cols, step_rows = prm.rows_per_cta / cols;
  }
  __device__ bool more() const { return item < last; }
  __device__ void next(const Params& prm) {
    item += prm.rows_per_cta;
    col += step_cols;
    p += step_rows;
    if (col >= cols) col -= cols, ++p;
    while (p >= prm.p) p -= prm.p, ++n;
  }
};

// wgrad, any filter, stride and dilation, first of two launches: CTA (slice and tap group,
// channel chunk) sums dy[n, p, q] * x[n, p * stride - pad + r * dilation, ...] over its
// slice of the N * P * Q positions for kWgradTaps taps: a thread takes 8 channels and every
// rows_per_cta-th position of the slice, and the CTA adds its threads' sums up in a fixed
// order into partials[slice][tap][channel].
template <class T>
__global__ void __launch_bounds__(kThreads, kMinCtas) depthwise_wgrad_partials(const Params prm) {
  const int lane = threadIdx.x % prm.chunk_vectors, row = threadIdx.x / prm.chunk_vectors;
  const int vector = blockIdx.y * prm.chunk_vectors + lane;
  const int slice = blockIdx.x / prm.tap_groups, t0 = blockIdx.x % prm.tap_groups * kWgradTaps;
  const int ch = prm.ch, channel = vector * kVector, taps = prm.r * prm.s;
  // the taps' offsets in x, and which exist
  int dh[kWgradTaps], dw[kWgradTaps];
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < kWgradTaps; ++j) {
    const int tap = min(t0 + j, taps - 1);
    dh[j] = (tap / prm.s) * prm.dilation_h - prm.pad_h;
    dw[j] = (tap % prm.s) * prm.dilation_w - prm.pad_w;
  }

  Acc acc[kWgradTaps];
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < kWgradTaps; ++j) acc[j].fill(0.0f);
  if (row < prm.rows_per_cta && vector < prm.vectors) {
    for (Walk at(prm, slice, row, prm.q); at.more(); at.next(prm)) {  // positions
      const Acc g = load_vector(static_cast<const T*>(prm.dy) + at.item * ch + channel);
      const T* x = static_cast<const T*>(prm.x) + int64_t(at.n) * prm.h * prm.w_ * ch + channel;
      const int ih0 = at.p * prm.stride_h, iw0 = at.col * prm.stride_w;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kWgradTaps; ++j) {
        const int ih = ih0 + dh[j], iw = iw0 + dw[j];
        if (t0 + j < taps && ih >= 0 && ih < prm.h && iw >= 0 && iw < prm.w_)
          multiply_add(acc[j], load_vector(x + (int64_t(ih) * prm.w_ + iw) * ch), g);
      }
    }
  }
  reduce_taps(prm, acc, slice, t0, min(kWgradTaps, taps - t0));
}

// wgrad built for a kR x kS filter at stride kStride (dilation 1), first of two launches:
// CTA (slice and group of filter_rows filter rows, channel chunk) sums dy[n, p, q] * x[n, p *
// stride - pad + fr, q * stride - pad + s] for every tap (fr, s) of its rows over its slice
// of the output runs. A thread takes 8 channels of kOutputs consecutive outputs along W (as
// fprop's threads do) for one filter row, and walks the input row it reads once, each load
// feeding every tap that reads it. With filter_rows = R (large problems) a run's R threads
// sit in one CTA: they read the same dy and, a few runs apart, the same input rows, from
// the SM's L1 rather than each from L2; with 1 (small problems, whose partials would
// otherwise outweigh their inputs) a CTA takes one filter row and more CTAs share a slice.
template <class T, int kR, int kS, int kStride>
__global__ void __launch_bounds__(kThreads, kMinCtas) depthwise_wgrad_rows(const Params prm) {
  const int lane = threadIdx.x % prm.chunk_vectors, rows = prm.filter_rows;
  const int row = threadIdx.x / (prm.chunk_vectors * rows);
  const int slice = blockIdx.x / prm.tap_groups, fr0 = blockIdx.x % prm.tap_groups * rows;
  const int fr = fr0 + threadIdx.x / prm.chunk_vectors % rows;
  const int vector = blockIdx.y * prm.chunk_vectors + lane;
  const int ch = prm.ch, channel = vector * kVector;
  constexpr int kSpan = (kOutputs - 1) * kStride + kS;

  Acc acc[kS];
  CUTLASS_PRAGMA_UNROLL
  for (int s = 0; s < kS; ++s) acc[s].fill(0.0f);
  // one run of filter row fr (input row ih, columns from iw0): its outputs' dy against the
  // input columns they read; a run whole and inside the row (most) walks them unchecked
  auto run_taps = [&](auto checked, int on, int op, int q0, int ih, int iw0) {
    constexpr bool kChecked = decltype(checked)::value;
    const int outputs = kChecked ? min(kOutputs, prm.q - q0) : kOutputs;
    const T* dy =
        static_cast<const T*>(prm.dy) + ((int64_t(on) * prm.p + op) * prm.q + q0) * ch + channel;
    Acc g[kOutputs];
    CUTLASS_PRAGMA_UNROLL
    for (int t = 0; t < kOutputs; ++t) {
      if (t < outputs)
        g[t] = load_vector(dy + t * ch);
      else
        g[t].fill(0.0f);
    }
    const T* in = static_cast<const T*>(prm.x) + ((int64_t(on) * prm.h + ih) * prm.w_ + iw0) * ch +
                  channel;  // column iw0
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kSpan; ++j) {
      if (kChecked) {
        if (iw0 + j < 0 || iw0 + j >= prm.w_) continue;  // padding: adds nothing
        // columns only outputs past the edge read are never loaded (0 * inf would be NaN)
        if (j >= (outputs - 1) * kStride + kS) break;
      }
      const Acc xv = load_vector(in + j * ch);
      CUTLASS_PRAGMA_UNROLL
      for (int t = 0; t < kOutputs; ++t) {
        const int s = j - t * kStride;  // the tap of output t that reads column j
        if ((!kChecked || t < outputs) && s >= 0 && s < kS) multiply_add(acc[s], xv, g[t]);
      }
    }
  };
  if (row < prm.rows_per_cta && vector < prm.vectors) {
    for (Walk at(prm, slice, row, prm.runs); at.more(); at.next(prm)) {  // runs
      const int ih = at.p * kStride - prm.pad_h + fr, q0 = at.col * kOutputs;
      const int iw0 = q0 * kStride - prm.pad_w;
      if (ih < 0 || ih >= prm.h) continue;
      if (q0 + kOutputs <= prm.q && iw0 >= 0 && iw0 + kSpan <= prm.w_)
        run_taps(std::false_type{}, at.n, at.p, q0, ih, iw0);
      else
        run_taps(std::true_type{}, at.n, at.p, q0, ih, iw0);
    }
  }
  CUTLASS_PRAGMA_UNROLL
  for (int s0 = 0; s0 < kS; s0 += kWgradTaps) {
    Acc round[kWgradTaps];
    CUTLASS_PRAGMA_UNROLL
    for (int j = 0; j < kWgradTaps; ++j) {
      if (s0 + j < kS)
        round[j] = acc[s0 + j];
      else
        round[j].fill(0.0f);
    }
    reduce_taps(prm, round, slice, fr0 * kS + s0, min(kWgradTaps, kS - s0), rows, kS);
  }
}

// wgrad's second launch: dw[c][tap] = alpha * (the slices' partials added in a fixed order)
// + beta * c[c][tap]. A CTA (kSumSmem bytes of shared memory) takes 32 channels of one tap
// (blockIdx.x: tap * channel tiles + tile), a warp's lanes a channel each, so that each
// slice's row is one coalesced 128-byte read; its kSumGroups warps add every kSumGroups-th
// slice, and the first adds their sums in order: the chains of dependent loads stay short
// for any slice count.
constexpr int kSumGroups = kThreads / 32;
constexpr int kSumSmem = kThreads * int(sizeof(float));
template <class D>
__global__ void __launch_bounds__(kThreads) depthwise_wgrad_sum(const Params prm) {
  const int taps = prm.r * prm.s, tiles = (prm.ch + 31) / 32;
  const int tap = blockIdx.x / tiles, c = blockIdx.x % tiles * 32 + threadIdx.x % 32;
  const int group = threadIdx.x / 32;
  auto* sums = reinterpret_cast<float (*)[32]>(shared_bytes());  // [group][lane]
  float total = 0.0f;
  if (c < prm.ch) {
    const float* from = prm.partials + int64_t(tap) * prm.ch + c;
    const int64_t step = int64_t(taps) * prm.ch;  // one slice
    for (int sl = group; sl < prm.slices; sl += kSumGroups) total += from[sl * step];
  }
  sums[group][threadIdx.x % 32] = total;
  __syncthreads();
  if (group != 0 || c >= prm.ch) return;
  total = sums[0][threadIdx.x];
  CUTLASS_PRAGMA_UNROLL
  for (int g = 1; g < kSumGroups; ++g) total += sums[g][threadIdx.x];
  const int64_t e = int64_t(c) * taps + tap;
  float y = prm.alpha * total;
  if (prm.beta != 0.0f) y = fmaf(prm.beta, float(static_cast<const D*>(prm.c)[e]), y);
  static_cast<D*>(prm.y)[e] = D(y);
}

inline const char* op_words(int kind) {
  return kind == PCR_OP_FPROP ? "fprop" : kind == PCR_OP_DGRAD ? "dgrad" : "wgrad";
}

// The Params every direct kernel's launch shares: the operands past the pass's inputs (c,
// y, bias), the geometry, the scalars, `vec` channels a thread in CTA chunks of
// `chunk_vectors` such vectors (as many rows of threads as kThreads holds), no row split.
inline void common_params(const GemmArgs& g, int vec, int chunk_vectors, Params& p) {
  const ConvArgs& v = g.conv;
  p.c = g.c, p.y = g.d, p.bias = g.bias_n;
  p.n = v.n, p.h = v.h, p.w_ = v.w, p.ch = v.c, p.p = v.p, p.q = v.q, p.r = v.r, p.s = v.s;
  p.pad_h = v.pad_h, p.pad_w = v.pad_w, p.stride_h = v.stride_h, p.stride_w = v.stride_w;
  p.dilation_h = v.dilation_h, p.dilation_w = v.dilation_w;
  p.vectors = v.c / vec;
  p.chunk_vectors = chunk_vectors;
  p.rows_per_cta = kThreads / chunk_vectors;
  p.row_split = 1;
  p.alpha = float(g.alpha), p.beta = float(g.beta);
  p.activation = g.activation;
}

// The grid of fprop's or dgrad's runs (p.items over `chunks` channel chunks), p.rows_per_cta
// lowered where a small problem would otherwise leave SMs idle: twice as many CTAs as SMs,
// fewer runs each, share its load latency.
inline dim3 spread_runs(Params& p, int chunks, int sm_count) {
  const int64_t want = 2 * int64_t(std::max(sm_count, 1));
  p.rows_per_cta =
      int(std::clamp<int64_t>((p.items * chunks + want - 1) / want, 1, p.rows_per_cta));
  return dim3(unsigned((p.items + p.rows_per_cta - 1) / p.rows_per_cta), unsigned(chunks));
}

// Channel vectors per CTA for `vectors` in all and at most `most` a CTA: whole counts up to
// `most`, else chunks of equal size (960 channels: 4 of 30 vectors, not 3 of 32 and one
// of 24).
inline int equal_chunks(int vectors, int most) {
  const int chunks = (vectors + most - 1) / most;
  return (vectors + chunks - 1) / chunks;
}

// can_implement's refusals shared by the direct kernels built for a kR x kS filter at stride
// kStride: another filter, stride or any dilation; for a dgrad run as fprop of dy with the
// filters flipped, padding past the filter's extent less one; a grid of fprop's or dgrad's
// runs (n x height rows of `width` outputs in runs of `run`, kThreads / chunk_vectors runs a
// CTA) wider than one launch takes.
inline int refuse_other_filter(const ConvArgs& v, int kR, int kS, int kStride) {
  if (v.r == kR && v.s == kS && v.stride_h == kStride && v.stride_w == kStride &&
      v.dilation_h == 1 && v.dilation_w == 1)
    return PCR_OK;
  return set_error(PCR_ERR_UNSUPPORTED,
                   "this kernel is built for %d x %d filters, stride %d, no dilation; the "
                   "problem has %d x %d, stride (%d, %d), dilation (%d, %d)",
                   kR, kS, kStride, v.r, v.s, v.stride_h, v.stride_w, v.dilation_h, v.dilation_w);
}
inline int refuse_flipped_padding(const ConvArgs& v, int kR, int kS) {
  if (v.pad_h <= kR - 1 && v.pad_w <= kS - 1) return PCR_OK;
  return set_error(PCR_ERR_UNSUPPORTED,
                   "this dgrad kernel takes padding up to the filter's extent less one (%d, %d); "
                   "the problem has (%d, %d)",
                   kR - 1, kS - 1, v.pad_h, v.pad_w);
}
inline int refuse_wide_grid(int n, int height, int width, int run, int chunk_vectors) {
  const int64_t runs = (int64_t(width) + run - 1) / run;
  const int64_t rows = kThreads / chunk_vectors;
  if ((int64_t(n) * height * runs + rows - 1) / rows <= INT32_MAX) return PCR_OK;
  return set_error(PCR_ERR_UNSUPPORTED, "the output (%d x %d x %d) is too large for one launch", n,
                   height, width);
}

// A stride-1 dgrad's Params as fprop's kernel of dy (P x Q) to dx (H x W) with the filters
// flipped: the extents swapped, the padding kR - 1 - pad.
inline void as_flipped_fprop(const ConvArgs& v, int kR, int kS, Params& p) {
  p.h = v.p, p.w_ = v.q, p.p = v.h, p.q = v.w;
  p.pad_h = kR - 1 - v.pad_h, p.pad_w = kS - 1 - v.pad_w;
}

// Enqueues one of this file's kernels on `stream` (kThreads a CTA).
inline int start(void (*kernel)(const Params), dim3 grid, int smem, cudaStream_t stream,
                 const Params& prm) {
#if !defined(PCR_EMULATE)
  kernel<<<grid, kThreads, smem, stream>>>(prm);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return set_error(PCR_ERR_CUDA, "depthwise kernel launch failed: %s (%s)", cudaGetErrorName(e),
                     cudaGetErrorString(e));
#else  // the CPU tests run the device code on the host (tests/mockgpu)
  (void)stream;
  emulate::launch(kernel, grid, dim3(kThreads), smem, prm);
#endif
  return PCR_OK;
}

// The KernelOps of a direct depthwise kernel (kernel.h) of pass kOp (pcr_op): ElementA the
// inputs' dtype (half_t or bfloat16_t), ElementD the output's (the same); kR x kS the
// filter and kStride the stride it is built for, all 0 for the generic kernel (a dgrad's
// at stride 1 is fprop's, at stride 2 the gather). fprop's epilogue is always the fused one
// (PCR_EPI_BIASACT): with no bias and no activation it is the linear one, at no cost a
// memory-bound kernel notices; the gradients' is the linear one.
template <int kOp, class ElementA, class ElementD, int kR, int kS, int kStride, int Epilogue>
struct Direct {
  static_assert(kOp == PCR_OP_FPROP || kOp == PCR_OP_DGRAD || kOp == PCR_OP_WGRAD, "a pass");
  static_assert(Epilogue == (kOp == PCR_OP_FPROP ? PCR_EPI_BIASACT : PCR_EPI_LINEAR),
                "fprop kernels are built with the fused epilogue, the gradients' linear");
  static_assert(sizeof(ElementA) == 2 && sizeof(ElementD) == 2, "16-bit inputs and outputs");
  static_assert((kR == 0) == (kS == 0) && (kR == 0) == (kStride == 0), "all static or generic");

  // A stride-1 dgrad kernel built for a filter runs fprop's kernel on dy with the filters
  // rotated and the padding R - 1 - pad: dx is that fprop's output.
  static constexpr bool kFlipped = kOp == PCR_OP_DGRAD && kStride == 1;
  static constexpr bool kGeneric = kR == 0;
  // runs fprop's kernel built for a filter (fprop's or a stride-1 dgrad's), which splits
  // small problems' filter rows (row_split)
  static constexpr bool kStaticFprop = !kGeneric && (kOp == PCR_OP_FPROP || kFlipped);
  // wgrad built for a filter: threads on runs of outputs, each for one filter row
  static constexpr bool kWgradRows = kOp == PCR_OP_WGRAD && !kGeneric;
  // Channels and outputs a thread of fprop's kernel holds: 4 channels of 8 outputs for 5x5
  // and 7x7 filters, for which kVector channels of kOutputs outputs and a filter row's taps
  // outgrow the registers of two CTAs per SM (spills, and moves between the FMAs), and a
  // run of 8 converts fewer loaded inputs per FMA; kVector of kOutputs otherwise.
  static constexpr bool kWideRun = kStaticFprop && kR >= 5;
  static constexpr int kVec = kWideRun ? 4 : kVector;
  static constexpr int kRun = kWideRun ? 8 : kOutputs;
  static constexpr int kFilterBytes = int(sizeof(FilterOf<ElementA, kVec>));  // per tap and channel
  static constexpr bool kProgrammatic = false;

  struct Prepared {
    Params params;
    dim3 grid, sum_grid;  // sum_grid: wgrad's second launch
    int smem;
  };

  // Channel vectors per CTA (equal_chunks): up to kMaxVectors, few enough that a chunk's
  // filters (fprop, dgrad) fit in shared memory.
  static int chunk_vectors(const ConvArgs& v) {
    return equal_chunks(v.c / kVec,
                        kOp == PCR_OP_WGRAD
                            ? kMaxVectors
                            : std::min(kMaxVectors, kMaxSmem / (v.r * v.s * kVec * kFilterBytes)));
  }

  // The rows and columns of fprop's output (y: P x Q) or dgrad's (dx: H x W).
  static std::pair<int, int> output_extent(const ConvArgs& v) {
    return kOp == PCR_OP_FPROP ? std::pair{v.p, v.q} : std::pair{v.h, v.w};
  }

  // wgrad's work items: positions (generic) or runs of kOutputs along Q, N * P * Q or
  // N * P * ceil(Q / kOutputs)
  static int64_t wgrad_items(const ConvArgs& v) {
    return int64_t(v.n) * v.p * (kWgradRows ? (v.q + kOutputs - 1) / kOutputs : v.q);
  }

  // wgrad's partition: filter rows per CTA (1 or kR, built for a filter), CTAs per slice and
  // channel chunk, rows of threads per CTA, and slices of the work items
  struct WgradSplit {
    int filter_rows, tap_groups, rows, slices;
  };

  // About four CTAs per SM in all, each thread with at least 8 positions (generic) or one
  // run. Built for a filter, a CTA takes all kR filter rows unless the slices' partials
  // would then outweigh a quarter of the inputs (x and dy) they are summed from.
  static WgradSplit wgrad_split(const ConvArgs& v, int sm_count) {
    const int cv = chunk_vectors(v), chunks = (v.c / kVec + cv - 1) / cv;
    auto split = [&](int filter_rows) {
      WgradSplit w{};
      w.filter_rows = filter_rows;
      w.tap_groups = kWgradRows ? kR / filter_rows : (v.r * v.s + kWgradTaps - 1) / kWgradTaps;
      w.rows = kThreads / (cv * filter_rows);
      const int64_t ctas = int64_t(chunks) * w.tap_groups;
      const int64_t most = std::max<int64_t>(1, wgrad_items(v) / (w.rows * (kWgradRows ? 1 : 8)));
      const int64_t want =
          std::max<int64_t>(1, (4 * int64_t(std::max(sm_count, 1)) + ctas - 1) / ctas);
      w.slices = int(std::min<int64_t>({want, most, 1024}));
      return w;
    };
    if (!kWgradRows) return split(1);
    const WgradSplit whole = split(kR);
    const int64_t partials = int64_t(whole.slices) * v.r * v.s * v.c * int64_t(sizeof(float));
    const int64_t inputs =
        (int64_t(v.h) * v.w + int64_t(v.p) * v.q) * v.n * v.c * int64_t(sizeof(ElementA));
    return 4 * partials <= inputs ? whole : split(1);
  }

  static int can_implement(const GemmArgs& g) {
    const ConvArgs& v = g.conv;
    if (v.kind != kOp)
      return set_error(PCR_ERR_UNSUPPORTED, "a depthwise %s kernel cannot run a %s", op_words(kOp),
                       op_words(v.kind));
    if (v.groups != v.c || v.k != v.c)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "depthwise kernels run one filter per channel (groups = C = K); got C %d, "
                       "K %d, %d groups%s",
                       v.c, v.k, v.groups,
                       v.groups == v.c ? " (a channel multiplier K / C > 1 is not supported)" : "");
    if (v.c % kVector)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "depthwise kernels read channels in vectors of %d; C %d is not a multiple",
                       kVector, v.c);
    if (kOp != PCR_OP_WGRAD && int64_t(v.r) * v.s * kVec * kFilterBytes > kMaxSmem)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "a %d x %d filter is larger than depthwise kernels take (%d taps at most)",
                       v.r, v.s, kMaxSmem / (kVec * kFilterBytes));
    if (kFlipped && refuse_flipped_padding(v, kR, kS) != PCR_OK) return PCR_ERR_UNSUPPORTED;
    if (!kGeneric && refuse_other_filter(v, kR, kS, kStride) != PCR_OK) return PCR_ERR_UNSUPPORTED;
    if (kOp == PCR_OP_WGRAD) {
      if (int64_t(v.r) * v.s * ((v.c + 31) / 32) > INT32_MAX)  // the sum's grid
        return set_error(PCR_ERR_UNSUPPORTED,
                         "the filters (%d x %d x %d) are too many for one launch", v.c, v.r, v.s);
      return PCR_OK;
    }
    const auto [height, width] = output_extent(v);
    return refuse_wide_grid(v.n, height, width, kRun, chunk_vectors(v));
  }

  static size_t workspace_size(const GemmArgs& g) {
    if (kOp != PCR_OP_WGRAD) return 0;
    const ConvArgs& v = g.conv;
    return size_t(wgrad_split(v, g.sm_count).slices) * v.r * v.s * v.c * sizeof(float);
  }

  static int prepare(const GemmArgs& g, void* workspace, void* out) {
    const ConvArgs& v = g.conv;
    auto* prep = new (out) Prepared{};
    Params& p = prep->params;
    // GemmArgs' a, b and d are the pass's (fprop: x, w, y; dgrad: dy, w, dx; wgrad: dy, x, dw)
    if (kOp == PCR_OP_FPROP) p.x = g.a, p.w = g.b;
    if (kOp == PCR_OP_DGRAD) p.dy = g.a, p.w = g.b;
    if (kOp == PCR_OP_WGRAD) p.dy = g.a, p.x = g.b;
    common_params(g, kVec, chunk_vectors(v), p);
    const int chunks = (p.vectors + p.chunk_vectors - 1) / p.chunk_vectors;
    if (kOp == PCR_OP_WGRAD) {
      const WgradSplit w = wgrad_split(v, g.sm_count);
      p.partials = static_cast<float*>(workspace);
      p.filter_rows = w.filter_rows, p.tap_groups = w.tap_groups;
      p.rows_per_cta = w.rows, p.slices = w.slices;
      p.runs = (v.q + kOutputs - 1) / kOutputs;
      p.items = wgrad_items(v);
      prep->grid = dim3(unsigned(p.slices * p.tap_groups), unsigned(chunks));
      prep->sum_grid = dim3(unsigned(v.r * v.s * ((v.c + 31) / 32)));
      prep->smem = kThreads * kWgradTaps * kVector * int(sizeof(float));
      return PCR_OK;
    }
    const auto [height, width] = output_extent(v);
    if (kFlipped) {  // fprop's kernel from dy (P x Q) to dx (H x W)
      p.x = g.a;
      as_flipped_fprop(v, kR, kS, p);
    }
    p.runs = (width + kRun - 1) / kRun;
    p.items = int64_t(v.n) * height * p.runs;
    const int64_t sms = std::max(g.sm_count, 1);
    // a small problem (batch 1, late layers) gives each run's filter rows to kR threads
    // where that many fit the GPU at once (fprop's kernels built for a filter) ...
    if (kStaticFprop) {
      if (p.items * p.vectors * kR <= sms * kThreads * kMinCtas) p.row_split = kR;
      p.rows_per_cta /= p.row_split;
    }
    // ... and spreads its runs over more CTAs
    prep->grid = spread_runs(p, chunks, g.sm_count);
    const int filters = v.r * v.s * p.chunk_vectors * kVec * kFilterBytes;
    const int sums = p.row_split > 1 ? kThreads * kRun * kVec * int(sizeof(float)) : 0;
    prep->smem = std::max(filters, sums);
    return PCR_OK;
  }

  // The pass's kernel (wgrad's first; depthwise_wgrad_sum follows it).
  static auto kernel() {
    if constexpr (kOp == PCR_OP_FPROP)
      return &depthwise_fprop<ElementA, ElementD, kR, kS, kStride, false, kVec, kRun>;
    else if constexpr (kFlipped)
      return &depthwise_fprop<ElementA, ElementD, kR, kS, 1, true, kVec, kRun>;
    else if constexpr (kOp == PCR_OP_DGRAD)
      return &depthwise_dgrad<ElementA, ElementD, kR, kS, kStride>;
    else if constexpr (kWgradRows)
      return &depthwise_wgrad_rows<ElementA, kR, kS, kStride>;
    else
      return &depthwise_wgrad_partials<ElementA>;
  }

  static int launch(const void* prepared, void*, int, cudaStream_t stream,
                    bool /*programmatic: never, see kProgrammatic*/) {
    const auto& prep = *static_cast<const Prepared*>(prepared);
    int st = start(kernel(), prep.grid, prep.smem, stream, prep.params);
    if (st == PCR_OK && kOp == PCR_OP_WGRAD)
      st = start(&depthwise_wgrad_sum<ElementD>, prep.sum_grid, kSumSmem, stream, prep.params);
    return st;
  }

  static const void* device_function() { return reinterpret_cast<const void*>(kernel()); }
};

}  // namespace pcr::depthwise
