// A call's tensors as validated Matrix records: dtype, device and address, shape and strides,
// layout and alignment; the bias, scales, block-scale grids, amax and scale_d.
#include <algorithm>
#include <cinttypes>
#include <string>

#include <initializer_list>

#include "runtime.h"
#include "problem.h"

namespace pcr {

int dtype_from_dl(DLDataType t) {
  if (t.lanes != 1) return PCR_DTYPE_INVALID;
  if (t.code == kDLFloat && t.bits == 16) return PCR_F16;
  if (t.code == kDLFloat && t.bits == 32) return PCR_F32;
  if (t.code == kDLFloat && t.bits == 64) return PCR_F64;
  if (t.code == kDLBfloat && t.bits == 16) return PCR_BF16;
  if (t.code == kDLInt && t.bits == 8) return PCR_S8;
  if (t.code == kDLInt && t.bits == 32) return PCR_S32;
  if (t.code == kDLFloat8_e4m3fn && t.bits == 8) return PCR_E4M3;
  if (t.code == kDLFloat8_e5m2 && t.bits == 8) return PCR_E5M2;
  return PCR_DTYPE_INVALID;
}

bool is_host(int device_type) { return device_type == kDLCPU || device_type == kDLCUDAHost; }

int load_dtype(const DLTensor* t, const char* name, Matrix* m) {
  m->dtype = dtype_from_dl(t->dtype);
  if (m->dtype == PCR_DTYPE_INVALID)
    return set_error(PCR_ERR_INVALID_DTYPE,
                     "%s has a dtype pycutlass_rt does not handle (DLPack code %d, %d bits, "
                     "%d lanes); use float16, bfloat16 or float32",
                     name, t->dtype.code, t->dtype.bits, t->dtype.lanes);
  m->esize = esize_of(m->dtype);
  return PCR_OK;
}

int load_place(const DLTensor* t, const char* name, int64_t elements, Matrix* m) {
  m->ptr = static_cast<char*>(t->data) + t->byte_offset;
  m->device_type = t->device.device_type;
  m->device_id = t->device.device_id;
  if (m->device_type != kDLCUDA && m->device_type != kDLCUDAManaged && !is_host(m->device_type))
    return set_error(PCR_ERR_DEVICE_MISMATCH,
                     "%s lives on DLPack device type %d; pycutlass_rt takes CUDA tensors "
                     "(or host arrays, staged through the GPU)",
                     name, m->device_type);
  if (m->ptr == nullptr && elements > 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "%s has a null data pointer", name);
  // a GPU address off its element size faults every kernel (a sticky misaligned address)
  if (m->esize > 1 && reinterpret_cast<uintptr_t>(m->ptr) % m->esize && elements > 0)
    return set_error(PCR_ERR_MISALIGNED,
                     "%s's address is not a multiple of its element size (%d bytes)", name,
                     m->esize);
  return PCR_OK;
}

// A 2-D matrix, or a 3-D batch of them (batch dimension first).
int load_matrix(const DLTensor* t, const char* name, bool allow_zero_stride, Matrix* m) {
  if (t->ndim != 2 && t->ndim != 3)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s must be a 2-D matrix or a 3-D batch of matrices, got a %d-D tensor", name,
                     t->ndim);
  const int r = t->ndim - 2;  // index of the rows dimension
  if (r) {
    m->batch = t->shape[0];
    m->sb = t->strides ? t->strides[0] : t->shape[1] * t->shape[2];
    if (m->batch < 0 || m->sb < 0)
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "%s has a negative batch dimension or batch stride", name);
    if (m->batch >= (int64_t(1) << 31))
      return set_error(PCR_ERR_UNSUPPORTED, "%s has a batch of 2^31 or more matrices", name);
    if (m->batch == 1) m->sb = 0;
  }
  if (int st = load_dtype(t, name, m)) return st;
  m->rows = t->shape[r];
  m->cols = t->shape[r + 1];
  if (m->rows < 0 || m->cols < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "%s has a negative dimension", name);
  if (m->rows > kMaxExtent || m->cols > kMaxExtent)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "%s has a dimension past 2^31 - 1024 (%" PRId64 " x %" PRId64
                     "); kernels index dimensions, count tiles and pad extents with 32 bits",
                     name, m->rows, m->cols);
  if (t->strides) {
    m->s0 = t->strides[r];
    m->s1 = t->strides[r + 1];
  } else {
    m->s0 = m->cols;
    m->s1 = 1;
  }
  // A size-1 dimension is never stepped over: its stride carries no information; nor do
  // the strides of an empty matrix or batch (read as compact row-major: numpy gives a
  // freshly made empty array all-zero strides).
  if (m->rows == 1) m->s0 = 0;
  if (m->cols == 1) m->s1 = 0;
  if (m->rows == 0 || m->cols == 0 || m->batch == 0)
    m->s0 = std::max<int64_t>(m->cols, 1), m->s1 = 1;
  if (m->s0 < 0 || m->s1 < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s has a negative stride (%" PRId64 ", %" PRId64
                     "); flipped views are not supported: make it contiguous first",
                     name, t->strides[r], t->strides[r + 1]);
  if (((m->rows > 1 && m->s0 == 0) || (m->cols > 1 && m->s1 == 0)) && !allow_zero_stride)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s has a zero stride (a broadcast view, strides %" PRId64 ", %" PRId64
                     "); materialize it first (e.g. .contiguous())",
                     name, m->s0, m->s1);
  return load_place(t, name, m->rows * m->cols * m->batch, m);
}

// Row-major if the column stride is 1 (leading dimension s0), else column-major if the
// row stride is 1 (leading dimension s1); a size-1 dimension fits either. Returns false
// if neither holds or rows would overlap.
bool layout_of(const Matrix& m, int* layout, int64_t* ld) {
  const int64_t row_ld = m.rows == 1 ? std::max<int64_t>(m.cols, 1) : m.s0;
  const int64_t col_ld = m.cols == 1 ? std::max<int64_t>(m.rows, 1) : m.s1;
  const bool row_ok = (m.s1 == 1 || m.cols <= 1) && row_ld >= std::max<int64_t>(m.cols, 1);
  const bool col_ok = (m.s0 == 1 || m.rows <= 1) && col_ld >= std::max<int64_t>(m.rows, 1);
  // Prefer row-major unless the matrix is a single column (then column-major is natural).
  if (row_ok && (!col_ok || m.cols > 1 || m.rows == 1)) {
    *layout = PCR_ROW_MAJOR;
    *ld = row_ld;
    return true;
  }
  if (col_ok) {
    *layout = PCR_COL_MAJOR;
    *ld = col_ld;
    return true;
  }
  return false;
}

int layout_error(const Matrix& m, const char* name) {
  return set_error(PCR_ERR_INVALID_ARGUMENT,
                   "%s (%" PRId64 " x %" PRId64 ", strides %" PRId64 ", %" PRId64
                   ") is neither row- nor column-major: one dimension needs stride 1 and the "
                   "other a stride at least its extent; make it contiguous first",
                   name, m.rows, m.cols, m.s0, m.s1);
}

// Largest power of two <= 16 dividing the address, the leading dimension, the batch
// stride and the contiguous extent, in bytes. Kernels with 16-byte vector access need 16.
int alignment_bytes(const Matrix& m, int layout, int64_t ld) {
  uintptr_t v = reinterpret_cast<uintptr_t>(m.ptr);
  int64_t contiguous = layout == PCR_ROW_MAJOR ? m.cols : m.rows;
  int align = 16;
  while (align > m.esize && (v % align || (ld * m.esize) % align ||
                             (contiguous * m.esize) % align || (m.sb * m.esize) % align))
    align /= 2;
  return align;
}

// The bias as a broadcast view over d (rows x cols), numpy's rules: shape (N,), (1, N) or
// (1, 1, N) adds one value per column (*axis = PCR_BIAS_PER_COLUMN), (M, 1) or (1, M, 1)
// one per row (PCR_BIAS_PER_ROW).
int load_bias(const DLTensor* t, const Matrix& D, Matrix* v, int* axis) {
  if (t->ndim < 1 || t->ndim > 3)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "bias must be a vector of shape (N,), (1, N) or (M, 1); got a %d-D tensor",
                     t->ndim);
  v->dtype = dtype_from_dl(t->dtype);
  if (v->dtype != D.dtype)
    return set_error(
        PCR_ERR_UNSUPPORTED, "bias is %s but d is %s; pass the bias in d's dtype",
        v->dtype == PCR_DTYPE_INVALID ? dl_dtype_text(t->dtype).c_str() : dtype_name(v->dtype),
        dtype_name(D.dtype));
  v->esize = esize_of(v->dtype);
  int64_t shape[3] = {1, 1, 1}, stride[3] = {0, 0, 0};
  for (int i = 0, j = 3 - t->ndim; i < t->ndim; ++i, ++j) {
    shape[j] = t->shape[i];
    stride[j] = t->strides ? t->strides[i] : 1;
  }
  if (!t->strides)  // compact row-major
    for (int j = 1; j >= 0; --j) stride[j] = stride[j + 1] * shape[j + 1];
  if (shape[0] != 1)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "bias has a batch dimension of %" PRId64
                     "; one bias vector serves the "
                     "whole batch: pass shape (N,) or (M, 1)",
                     shape[0]);
  int64_t len, step;
  if (shape[1] == 1 && shape[2] == D.cols) {
    *axis = PCR_BIAS_PER_COLUMN, len = shape[2], step = stride[2];
  } else if (shape[2] == 1 && shape[1] == D.rows) {
    *axis = PCR_BIAS_PER_ROW, len = shape[1], step = stride[1];
  } else {
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "bias of shape %s does not broadcast against d (%" PRId64 ", %" PRId64
                     ") as a vector: pass (N,) or (1, N) for one value per column, (M, 1) for "
                     "one per row",
                     shape_text(t->shape, t->ndim).c_str(), D.rows, D.cols);
  }
  if (len > 1 && step != 1)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "bias must be contiguous (its stride is %" PRId64
                     "); make it contiguous "
                     "first",
                     step);
  v->ptr = static_cast<char*>(t->data) + t->byte_offset;
  if (v->ptr == nullptr && len > 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "bias has a null data pointer");
  if (reinterpret_cast<uintptr_t>(v->ptr) % v->esize && len > 0)
    return set_error(PCR_ERR_MISALIGNED,
                     "bias's address is not a multiple of its element size (%d bytes)", v->esize);
  v->device_type = t->device.device_type;
  v->device_id = t->device.device_id;
  v->rows = D.rows;
  v->cols = D.cols;
  v->s0 = *axis == PCR_BIAS_PER_ROW ? 1 : 0;
  v->s1 = *axis == PCR_BIAS_PER_COLUMN ? 1 : 0;
  return PCR_OK;
}

namespace {

// A float32 scale: one value (any shape of one element), or a contiguous vector of `len`
// (shape (len,), or (len, 1) / (1, len) along `axis` 0 / 1 of d). Sets *mode to
// PCR_SCALE_TENSOR or PCR_SCALE_VECTOR.
int load_scale(const DLTensor* t, const char* name, int64_t len, int axis, Matrix* v, int* mode) {
  if (dtype_from_dl(t->dtype) != PCR_F32)
    return set_error(PCR_ERR_UNSUPPORTED, "%s must be float32", name);
  if (t->ndim > 2)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "%s must be a scalar or a vector, got %d-D", name,
                     t->ndim);
  int64_t count = 1, step = 1;
  for (int i = 0; i < t->ndim; ++i) {
    count *= t->shape[i];
    if (t->shape[i] != 1) step = t->strides ? t->strides[i] : 1;
  }
  const bool along = t->ndim < 2 || t->shape[1 - axis] == 1;
  if (count != 1 && !(count == len && along))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s has %" PRId64 " elements; pass one (per tensor) or %" PRId64
                     " (one per %s, shaped (%" PRId64 ",) or %s)",
                     name, count, len, axis == 0 ? "row of a" : "column of b", len,
                     axis == 0 ? "(M, 1)" : "(1, N)");
  v->ptr = static_cast<char*>(t->data) + t->byte_offset;
  if (!v->ptr && count > 0)  // an empty vector (of an empty M or N) has no storage
    return set_error(PCR_ERR_INVALID_ARGUMENT, "%s has a null data pointer", name);
  if (reinterpret_cast<uintptr_t>(v->ptr) % 4 && count > 0)
    return set_error(PCR_ERR_MISALIGNED, "%s's address is not 4-byte aligned (float32)", name);
  *mode = count == 1 ? PCR_SCALE_TENSOR : PCR_SCALE_VECTOR;
  if (*mode == PCR_SCALE_VECTOR && (step != 1 || reinterpret_cast<uintptr_t>(v->ptr) % 16))
    return set_error(PCR_ERR_MISALIGNED,
                     "%s must be a contiguous vector at a 16-byte aligned address", name);
  v->dtype = PCR_F32;
  v->esize = 4;
  v->rows = axis == 0 ? count : 1;  // kept as a column (axis 0) or a row (axis 1)
  v->cols = axis == 0 ? 1 : count;
  v->s0 = axis == 0 ? 1 : 0;
  v->s1 = axis == 0 ? 0 : 1;
  v->device_type = t->device.device_type;
  v->device_id = t->device.device_id;
  return PCR_OK;
}

// fp8 block scales (pcr_scale_kind GROUPS, BLOCKS): a float32 grid shaped as an operand
// divided into blocks of 128 along K, and of 1 (GROUPS) or 128 (BLOCKS) along its other
// dimension, each rounded up. `rows` is that other dimension's extent, `k` K; `axis` 0 for
// a (rows, K): grids (rows, Kb) or (ceil(rows/128), Kb); 1 for b (K, rows): (Kb, rows) or
// (Kb, ceil(rows/128)). Returns the kinds t's shape fits (bits 1 << kind; a one-element or
// vector shape may fit several), without reading anything else.
int grid_kinds(const DLTensor* t, int64_t rows, int64_t k, int axis) {
  const int64_t kb = (k + 127) / 128, blocks = (rows + 127) / 128;
  int64_t count = 1;
  for (int i = 0; i < t->ndim; ++i) count *= t->shape[i];
  int fits = 0;
  if (count == 1) fits |= 1 << PCR_SCALE_TENSOR;
  if (t->ndim == 2) {
    const int64_t along = t->shape[axis == 0 ? 0 : 1], kdim = t->shape[axis == 0 ? 1 : 0];
    if (kdim == kb && along == rows) fits |= 1 << PCR_SCALE_GROUPS;
    if (kdim == kb && along == blocks) fits |= 1 << PCR_SCALE_BLOCKS;
  } else if (count == 1 && kb == 1) {  // a single block's scale, of any shape
    fits |= (rows <= 1 ? 1 << PCR_SCALE_GROUPS : 0) | (blocks == 1 ? 1 << PCR_SCALE_BLOCKS : 0);
  }
  return fits;
}

// A block-scale grid (see grid_kinds) as a matrix in its operand's orientation: scale_a's
// rows are a's row groups and its columns K-blocks, scale_b's rows K-blocks and its columns
// b's column groups. Any strides (each fits in 32 bits: the kernel's layouts hold them so).
int load_grid(const DLTensor* t, const char* name, Matrix* v) {
  if (dtype_from_dl(t->dtype) != PCR_F32)
    return set_error(PCR_ERR_UNSUPPORTED, "%s must be float32", name);
  v->dtype = PCR_F32;
  v->esize = 4;
  v->rows = t->ndim == 2 ? t->shape[0] : 1;
  v->cols = t->ndim == 2 ? t->shape[1] : 1;
  v->s0 = t->ndim == 2 ? (t->strides ? t->strides[0] : v->cols) : 0;
  v->s1 = t->ndim == 2 ? (t->strides ? t->strides[1] : 1) : 0;
  if (v->rows == 1) v->s0 = 0;
  if (v->cols == 1) v->s1 = 0;
  if (v->s0 < 0 || v->s1 < 0 || v->s0 >= (int64_t(1) << 31) || v->s1 >= (int64_t(1) << 31))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s has strides (%" PRId64 ", %" PRId64
                     "); a block-scale grid's strides are non-negative and below 2^31",
                     name, v->s0, v->s1);
  return load_place(t, name, v->rows * v->cols, v);  // (its address: float32-aligned)
}

}  // namespace

// scale_a and scale_b (either may be null) for a (m x k) @ b (k x n): per-tensor and
// per-row/column factors (load_scale), or a pair of fp8 block-scale grids, read so when
// either tensor's shape fits only a grid. *kind_a, *kind_b: their pcr_scale_kind.
int load_scales(const DLTensor* sa, const DLTensor* sb, int64_t m, int64_t n, int64_t k, Matrix* va,
                Matrix* vb, int* kind_a, int* kind_b) {
  const int plain = (1 << PCR_SCALE_TENSOR);
  const int fa = sa ? grid_kinds(sa, m, k, 0) : 0, fb = sb ? grid_kinds(sb, n, k, 1) : 0;
  // a vector's shape: (len,), or (len, 1) along a's rows, (1, len) along b's columns
  auto vector = [](const DLTensor* t, int64_t len, int axis) {
    int64_t count = 1;
    for (int i = 0; i < t->ndim; ++i) count *= t->shape[i];
    return count == len && t->ndim <= 2 && (t->ndim < 2 || t->shape[1 - axis] == 1);
  };
  // a shape that fits a grid and nothing else (no vector, no single value) makes both grids
  const bool grid_a = sa && (fa & ~plain) && !(fa & plain) && !vector(sa, m, 0);
  const bool grid_b = sb && (fb & ~plain) && !(fb & plain) && !vector(sb, n, 1);
  if (!grid_a && !grid_b) {
    int st;
    if (sa && (st = load_scale(sa, "scale_a", m, 0, va, kind_a))) return st;
    if (sb && (st = load_scale(sb, "scale_b", n, 1, vb, kind_b))) return st;
    return PCR_OK;
  }
  const int64_t kb = (k + 127) / 128, mb = (m + 127) / 128, nb = (n + 127) / 128;
  if (!sa || !sb)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s is a block-scale grid; block scales come in pairs: pass scale_a (%" PRId64
                     ", %" PRId64 ") per token or (%" PRId64 ", %" PRId64
                     ") per 128x128 block, and scale_b (%" PRId64 ", %" PRId64
                     ") per block or (%" PRId64 ", %" PRId64 ") per column",
                     sa ? "scale_a" : "scale_b", m, kb, mb, kb, kb, nb, kb, n);
  // a's grid is per token where both fit (the same shape when m == 1), b's per block
  *kind_a = fa & (1 << PCR_SCALE_GROUPS)   ? PCR_SCALE_GROUPS
            : fa & (1 << PCR_SCALE_BLOCKS) ? PCR_SCALE_BLOCKS
                                           : PCR_SCALE_NONE;
  *kind_b = fb & (1 << PCR_SCALE_BLOCKS)   ? PCR_SCALE_BLOCKS
            : fb & (1 << PCR_SCALE_GROUPS) ? PCR_SCALE_GROUPS
                                           : PCR_SCALE_NONE;
  if (!*kind_a)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "scale_b is a block-scale grid, so scale_a must be one: (%" PRId64 ", %" PRId64
                     ") per token and 128 of K, or (%" PRId64 ", %" PRId64
                     ") per 128x128 block of a (%" PRId64 " x %" PRId64 "); got shape %s",
                     m, kb, mb, kb, m, k, shape_text(sa->shape, sa->ndim).c_str());
  if (!*kind_b)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "scale_a is a block-scale grid, so scale_b must be one: (%" PRId64 ", %" PRId64
                     ") per 128x128 block of b (%" PRId64 " x %" PRId64 "), or (%" PRId64
                     ", %" PRId64 ") per column and 128 of K; got shape %s",
                     kb, nb, k, n, kb, n, shape_text(sb->shape, sb->ndim).c_str());
  int st;
  if ((st = load_grid(sa, "scale_a", va)) || (st = load_grid(sb, "scale_b", vb))) return st;
  return PCR_OK;
}

bool is_grid(int kind) { return kind == PCR_SCALE_GROUPS || kind == PCR_SCALE_BLOCKS; }

// amax and scale_d (pcr_extras): one float32 element of any shape, kept as a 1x1 matrix.
int load_one_float(const DLTensor* t, const char* name, Matrix* m) {
  int64_t count = 1;
  for (int i = 0; i < t->ndim; ++i) count *= t->shape[i];
  if (dtype_from_dl(t->dtype) != PCR_F32 || count != 1)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s is one float32 value; got shape %s of %s (pass "
                     "torch.empty((), dtype=torch.float32, device=d.device))",
                     name, shape_text(t->shape, t->ndim).c_str(),
                     dtype_from_dl(t->dtype) == PCR_DTYPE_INVALID
                         ? "an unknown dtype"
                         : dtype_name(dtype_from_dl(t->dtype)));
  m->dtype = PCR_F32;
  m->esize = 4;
  m->rows = m->cols = m->batch = 1;
  return load_place(t, name, 1, m);  // (its address: float32-aligned)
}

int check_tensors(std::initializer_list<std::pair<const DLTensor*, const char*>> tensors) {
  for (const auto& [t, name] : tensors) {
    if (!t) continue;
    if (t->ndim < 0 || t->ndim > 32)
      return set_error(PCR_ERR_INVALID_ARGUMENT, "%s: its producer exported a rank of %d", name,
                       t->ndim);
    if (t->ndim > 0 && !t->shape)
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "%s: its producer exported %d dimensions without a shape", name, t->ndim);
  }
  return PCR_OK;
}

}  // namespace pcr
