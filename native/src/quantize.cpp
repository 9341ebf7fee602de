// pcr_quantize's checks: x, q and the scale grid, before anything is launched
// (the kernels: quantize.cu).
#include <cinttypes>

#include "runtime.h"

namespace pcr {
namespace {

// A rows x K tensor whose K is contiguous: 2-D, or N-D with every dimension but the last
// folded into rows (they must then be one regular stride apart).
int load_rows(const DLTensor* t, const char* name, Matrix* m) {
  if (t->ndim < 1)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "quantize: %s must have at least one dimension",
                     name);
  if (int st = load_dtype(t, name, m)) return st;
  const int last = t->ndim - 1;
  m->cols = t->shape[last];
  m->rows = 1;
  for (int i = 0; i < last; ++i) m->rows *= t->shape[i];
  if (m->cols < 0 || m->rows < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "quantize: %s has a negative dimension", name);
  auto stride = [&](int i) {
    if (t->strides) return t->strides[i];
    int64_t s = 1;
    for (int j = i + 1; j < t->ndim; ++j) s *= t->shape[j];
    return s;
  };
  m->s1 = 1;
  if (m->cols > 1 && stride(last) != 1)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "quantize: %s's last dimension must be contiguous (stride 1, got %" PRId64
                     "); make it contiguous first",
                     name, stride(last));
  // rows: the innermost leading dimension's stride, the outer ones multiples of it
  m->s0 = last > 0 ? stride(last - 1) : m->cols;
  for (int i = last - 1; i > 0; --i)
    if (t->shape[i - 1] > 1 && stride(i - 1) != stride(i) * t->shape[i])
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "quantize: %s's leading dimensions do not fold into rows of one stride; "
                       "make it contiguous first",
                       name);
  if (m->rows > 1 && m->s0 < m->cols)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "quantize: %s's rows overlap (row stride %" PRId64 " < %" PRId64 " elements)",
                     name, m->s0, m->cols);
  if (m->rows == 1) m->s0 = m->cols;
  return load_place(t, name, m->rows * m->cols, m);
}

}  // namespace

int quantize(const DLTensor* xt, const DLTensor* qt, const DLTensor* st_, int32_t granularity,
             int32_t dynamic, cudaStream_t stream) {
  if (!xt || !qt || !st_)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "quantize: x, q and scale are required");
  if (int st = check_tensors({{xt, "x"}, {qt, "q"}, {st_, "scale"}})) return st;
  if (granularity < PCR_QUANT_TENSOR || granularity > PCR_QUANT_BLOCK)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "quantize: unknown granularity %d", granularity);
  Matrix x, q, s;
  int st;
  if ((st = load_rows(xt, "x", &x)) || (st = load_rows(qt, "q", &q))) return st;
  if (x.dtype != PCR_F16 && x.dtype != PCR_BF16 && x.dtype != PCR_F32)
    return set_error(PCR_ERR_UNSUPPORTED, "quantize: x is %s; float16, bfloat16 or float32",
                     dtype_name(x.dtype));
  if (q.dtype != PCR_E4M3 && q.dtype != PCR_S8)
    return set_error(PCR_ERR_UNSUPPORTED, "quantize: q is %s; float8_e4m3fn or int8",
                     dtype_name(q.dtype));
  if (q.rows != x.rows || q.cols != x.cols)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "quantize: q (%" PRId64 " x %" PRId64 ") must have x's shape (%" PRId64
                     " x %" PRId64 " as rows x K)",
                     q.rows, q.cols, x.rows, x.cols);
  // the scale grid: one value, or one per row / row group and per K group
  const int64_t rows = x.rows, k = x.cols;
  const int64_t want_r = granularity == PCR_QUANT_TENSOR  ? 1
                         : granularity == PCR_QUANT_BLOCK ? (rows + 127) / 128
                                                          : rows;
  const int64_t want_k =
      granularity == PCR_QUANT_GROUP || granularity == PCR_QUANT_BLOCK ? (k + 127) / 128 : 1;
  if ((st = load_dtype(st_, "scale", &s))) return st;
  if (s.dtype != PCR_F32) return set_error(PCR_ERR_UNSUPPORTED, "quantize: scale must be float32");
  int64_t count = 1;
  for (int i = 0; i < st_->ndim; ++i) count *= st_->shape[i];
  const bool two_d = st_->ndim == 2 && st_->shape[0] == want_r && st_->shape[1] == want_k;
  const bool flat = st_->ndim <= 1 && want_k == 1 && count == want_r;
  if (!two_d && !flat && !(want_r == 1 && want_k == 1 && count == 1))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "quantize: scale has shape %s; this granularity takes (%" PRId64 ", %" PRId64
                     ")",
                     shape_text(st_->shape, st_->ndim).c_str(), want_r, want_k);
  s.rows = want_r;
  s.cols = want_k;
  s.s0 = two_d ? (st_->strides ? st_->strides[0] : want_k)
               : (st_->ndim == 1 && st_->strides ? st_->strides[0] : 1);
  s.s1 = two_d ? (st_->strides ? st_->strides[1] : 1) : 0;
  if (s.rows == 1) s.s0 = 0;
  if (s.cols == 1) s.s1 = 0;
  if (s.s0 < 0 || s.s1 < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "quantize: scale has a negative stride");
  if ((st = load_place(st_, "scale", count, &s))) return st;  // (float32-aligned)
  if (dynamic && ((s.rows > 1 && s.s0 == 0) || (s.cols > 1 && s.s1 == 0)))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "quantize: a dynamic scale grid is written: it may not be a broadcast view");
  // places: one GPU; outputs apart from everything else
  for (const Matrix* m : {&q, &s})
    if (is_host(m->device_type) || is_host(x.device_type) || m->device_id != x.device_id)
      return set_error(PCR_ERR_DEVICE_MISMATCH,
                       "quantize: x, q and scale must be on one GPU (host arrays are not taken)");
  if (overlaps(q, x) || overlaps(q, s))
    return set_error(PCR_ERR_OVERLAP, "quantize: q overlaps %s", overlaps(q, x) ? "x" : "scale");
  if (dynamic && overlaps(s, x)) return set_error(PCR_ERR_OVERLAP, "quantize: scale overlaps x");
  if (x.rows == 0 || x.cols == 0) return PCR_OK;
  DeviceGuard guard;
  if ((st = guard.set(x.device_id))) return st;
  return launch_quantize(x, q, s, granularity, dynamic != 0, stream);
}

}  // namespace pcr
