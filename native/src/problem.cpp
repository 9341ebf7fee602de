// From four DLTensor views to one validated GEMM in canonical form.
//
// Canonical form: D is row-major. A column-major D is handled by computing
// D^T = B^T A^T (swap and transpose the operands), so kernels need one D layout.
// Every check runs here, before any device work, and names the argument at fault.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include <initializer_list>

#include "runtime.h"

namespace pcr {

const char* op_name(int op) {
  static const char* const kNames[] = {"GEMM", "convolution fprop", "convolution dgrad",
                                       "convolution wgrad"};
  return op >= PCR_OP_GEMM && op <= PCR_OP_WGRAD ? kNames[op] : "unknown";
}

const char* dtype_name(int dtype) {
  switch (dtype) {
    case PCR_F16:
      return "float16";
    case PCR_BF16:
      return "bfloat16";
    case PCR_F32:
      return "float32";
    case PCR_F64:
      return "float64";
    case PCR_TF32:
      return "tfloat32";
    case PCR_E4M3:
      return "float8_e4m3fn";
    case PCR_E5M2:
      return "float8_e5m2";
    case PCR_S8:
      return "int8";
    case PCR_S32:
      return "int32";
    default:
      return "invalid";
  }
}

namespace {
// pcr_activation's names, as Python spells them (its enum tokens)
const char* activation_name(int activation) {
  static const char* const kNames[] = {"none",    "relu", "gelu",      "gelu_tanh",  "silu",
                                       "sigmoid", "tanh", "hardswish", "leaky_relu", "clamp"};
  static_assert(sizeof kNames / sizeof *kNames == PCR_ACT_CLAMP + 1, "one per pcr_activation");
  return activation >= 0 && activation <= PCR_ACT_CLAMP ? kNames[activation] : "invalid";
}
}  // namespace

const char* epilogue_words(int epilogue) {
  switch (epilogue) {
    case PCR_EPI_LINEAR:
      return "plain";
    case PCR_EPI_BIASACT:
      return "fused bias/activation";
    case PCR_EPI_SCALED:
      return "dequantizing (scale_a/scale_b)";
    case PCR_EPI_AUX:
      return "fused bias/activation writing aux or amax";
    default:
      return "invalid";
  }
}

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

namespace {

// A DLPack dtype as numpy spells it ("int16", "uint8", "complex64"), for messages about
// dtypes the library has no code for.
std::string dl_dtype_text(DLDataType t) {
  static const char* const kinds[] = {"int",    "uint",    "float", "opaque",
                                      "bfloat", "complex", "bool"};
  std::string s = t.code < sizeof kinds / sizeof *kinds ? kinds[t.code]
                                                        : "code " + std::to_string(t.code) + " ";
  s += std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

}  // namespace

std::string shape_text(const int64_t* dims, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (n == 1 ? ",)" : ")");
}

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

namespace {

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

}  // namespace

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

namespace {

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

// How messages say a pair of block-scale kinds.
std::string block_words(int kind_m, int kind_n) {
  auto one = [](int kind, const char* operand, const char* line) {
    return std::string(operand) + (kind == PCR_SCALE_GROUPS
                                       ? std::string(" per ") + line + " and 128 of K"
                                       : " per 128x128 block");
  };
  return one(kind_m, "scale_a", "row") + ", " + one(kind_n, "scale_b", "column");
}

// Whether a kernel's mainloop takes a problem's scales: block-scaled kernels its grids
// exactly, the others any problem without grids.
bool same_block_scales(const pcr_kernel_desc& kd, const pcr_problem& p) {
  const bool grids = is_grid(p.scale_m);
  return kd.scale_m == (grids ? p.scale_m : PCR_SCALE_NONE) &&
         kd.scale_n == (grids ? p.scale_n : PCR_SCALE_NONE);
}

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

bool is_quantized(int dtype) { return dtype == PCR_S8 || dtype == PCR_E4M3 || dtype == PCR_E5M2; }

// A problem this large (multiply-adds), or with a K loop this long, runs its misaligned
// operands through aligned scratch: a pass over each costs far less than the any-alignment
// kernels' slowness. Their 2-byte loads cost ~0.7 us per 32-deep K step of a tile on the
// H200: the held-out corpus sweep (heuristics/eval) timed them 4-20x slower than the
// aligned kernels at every size, 19 us against 3 us at 1 x 3072 x 768 and 69 us against
// 5 us at 1 x 64 x 3072, where a staged copy costs a launch of a few microseconds.
constexpr double kStageMinMacs = double(1 << 27);
constexpr int64_t kStageMinK = 512;

// Whether the build holds a kernel that reads p's operands at any alignment (p's dtypes,
// layouts and epilogue): a small misaligned problem runs there; where none does (the fp8
// kernels, a filtered build), staging is the only way it runs at all.
bool any_alignment_kernel(const pcr_problem& p) {
  for (int i = 0; i < kKernelCount; ++i) {
    const pcr_kernel_desc& kd = kKernels[i]->info;
    if (kd.align_a == 1 && !kd.grouped && kd.dtype_a == p.dtype_a && kd.dtype_b == p.dtype_b &&
        kd.dtype_d == p.dtype_d && kd.layout_a == p.layout_a && kd.layout_b == p.layout_b &&
        epilogue_serves(kd.epilogue, p.epilogue))
      return true;
  }
  return false;
}

// Marks the operands a device problem copies into 16-byte-aligned scratch (odd leading
// dimensions, offset views), so that the TMA / cp.async kernels can run it: a large one, or
// one with a long K loop, always; a small one where no any-alignment kernel can take it. A C
// that D's kernel cannot read in place is copied into D (or D's scratch) first.
//
// Batched problems are not staged; the any-alignment kernels run them. Staging pads each
// copy's contiguous extent, so a fused epilogue's problem is staged only where that
// extent is K (zeros add nothing) or D's N with no vector along N (bias, column scales),
// which would otherwise be read past its end.
//
// A split problem's part (column_part) runs the whole's kernel, which reads aligned
// operands: its misaligned ones are staged whatever its size (`small_may_stay` false).
void stage_misaligned(pcr_problem* p, bool small_may_stay) {
  if (p->host || p->k == 0 || p->batch > 1) return;
  const bool aligned = p->align_a >= 16 && p->align_b >= 16 && p->align_d >= 16 &&
                       (p->c_mode != PCR_C_READ || p->align_c >= 16);
  if (aligned) return;  // (before the registry walk below: the common case pays nothing)
  if (small_may_stay && double(p->m) * double(p->n) * double(p->k) < kStageMinMacs &&
      p->k < kStageMinK && any_alignment_kernel(*p))
    return;
  // a padded N would read b's per-column block scales past their end
  if (p->align_d < 16 && p->scale_n == PCR_SCALE_GROUPS) return;
  if (p->epilogue != PCR_EPI_LINEAR &&
      ((p->align_a < 16 && p->layout_a != PCR_ROW_MAJOR) ||
       (p->align_b < 16 && p->layout_b != PCR_COL_MAJOR) ||
       (p->align_d < 16 && (p->bias == PCR_BIAS_PER_COLUMN || p->scale_n == PCR_SCALE_VECTOR))))
    return;
  if (p->align_a < 16) p->staged |= PCR_STAGED_A, p->align_a = 16;
  if (p->align_b < 16) p->staged |= PCR_STAGED_B, p->align_b = 16;
  if (p->align_d < 16) p->staged |= PCR_STAGED_D, p->align_d = 16;
  if (p->c_mode == PCR_C_READ && (p->align_c < 16 || (p->staged & PCR_STAGED_D)))
    p->c_mode = PCR_C_COPIED;
  if (p->c_mode == PCR_C_COPIED) p->align_c = p->align_d;
}

// Below this many bytes of B, a padded copy of B costs less than the split's two more
// launches (graph replays on the H200: at 8 x 2049 x 2048, 8.4 MB of B, 18.5 us split
// against 14.6 unsplit; even at 16.8 MB; the split 7 us faster at 33.5 MB).
constexpr double kSplitMinBytes = double(16 << 20);

// Where a staged problem's columns split (pcr_problem.split_n), or 0: where D's padded N is
// all that stages B, B's columns contiguous along K. The copy is a pass over all of B (the
// weights of an odd vocabulary's projection: 133 MB at 51866 x 1280, twice cuBLAS's whole
// call at M = 4); columns up to a multiple of 16 bytes of D read B in place instead, and
// the last few stage only their own columns, as a second launch of the same kernel.
int64_t split_column(const pcr_problem& p, const Bound& bd) {
  // (a block-scale grid along N splits only at whole blocks: never, here)
  if (p.op != PCR_OP_GEMM || !(p.staged & PCR_STAGED_D) || (p.staged & PCR_STAGED_B) ||
      is_grid(p.scale_n) || p.layout_b != PCR_COL_MAJOR ||
      double(p.k) * double(p.n) * bd.b.esize < kSplitMinBytes)
    return 0;
  // an N that is not a multiple of 16 bytes of D is padded, and with it B's columns: the
  // whole problem's staging copies B
  const int64_t n0 = p.n / (16 / bd.d.esize) * (16 / bd.d.esize);
  if (n0 == 0 || n0 == p.n) return 0;
  pcr_problem head;
  Bound head_bd;
  column_part(p, bd, 0, n0, &head, &head_bd);
  return (stage_layout(head, head_bd, nullptr).staged & PCR_STAGED_B) ? 0 : n0;
}

// What the operands in bd allow: p's alignments, how the kernel reads C (use_c: beta != 0),
// what staging copies and where it splits. describe's last step on a GEMM, and
// column_part's on each part (`part`: every misaligned operand staged, no further split).
void place(pcr_problem* p, Bound* bd, bool use_c, bool part) {
  const Matrix &A = bd->a, &B = bd->b, &C = bd->c, &D = bd->d;
  p->align_a = alignment_bytes(A, p->layout_a, bd->lda);
  p->align_b = alignment_bytes(B, p->layout_b, bd->ldb);
  p->align_d = alignment_bytes(D, PCR_ROW_MAJOR, bd->ldd);
  if (p->bias) {  // the address only: the vector's length is D's extent, aligned as D is
    uintptr_t v = reinterpret_cast<uintptr_t>(bd->bias.ptr);
    for (p->align_bias = 16; p->align_bias > bd->bias.esize && v % p->align_bias;)
      p->align_bias /= 2;
  }
  p->staged = 0;
  p->c_mode = PCR_C_NONE;
  p->align_c = 0;
  if (use_c) {
    const bool c_is_d =
        C.ptr == D.ptr && C.s0 == D.s0 && C.s1 == D.s1 && C.sb == D.sb && C.dtype == D.dtype;
    int lc;
    int64_t ldc;
    // C feeds the kernel's epilogue directly when it looks like D (row-major, D's dtype,
    // 16-byte friendly); anything else (other layout or dtype, broadcast strides) is
    // first copied into D, and the kernel then reads D as C.
    if (c_is_d ||
        (C.dtype == D.dtype && layout_of(C, &lc, &ldc) && lc == PCR_ROW_MAJOR && C.s0 > 0)) {
      p->c_mode = PCR_C_READ;
      bd->ldc = c_is_d ? bd->ldd : ldc;
      p->align_c = alignment_bytes(C, PCR_ROW_MAJOR, bd->ldc);
    } else {
      p->c_mode = PCR_C_COPIED;
      p->align_c = p->align_d;
    }
  } else {
    bd->c = Matrix{};
  }
  stage_misaligned(p, !part);
  p->split_n = part ? 0 : split_column(*p, *bd);
}

}  // namespace

void column_part(const pcr_problem& p, const Bound& bd, int64_t n0, int64_t n, pcr_problem* part,
                 Bound* pb) {
  *part = p;
  *pb = bd;
  part->n = n;
  // b, c, d and the vectors along N (bias, column scales) lose the other columns; a
  // per-row bias (stride 0 along N) and one-value scales stay as they are
  for (Matrix* m : {&pb->b, &pb->c, &pb->d, &pb->bias, &pb->scale_n, &pb->aux}) {
    if (!m->ptr || m->cols != p.n) continue;
    m->ptr += n0 * m->s1 * m->esize;
    m->cols = n;
  }
  place(part, pb, p.c_mode != PCR_C_NONE, true);
}

bool overlaps(const Matrix& x, const Matrix& y) {
  uintptr_t xl, xh, yl, yh;
  x.extent(&xl, &xh);
  y.extent(&yl, &yh);
  return xl < xh && yl < yh && xl < yh && yl < xh;
}

// Whether two matrices share an element. Byte ranges that meet decide, except for two
// row-major views with one row pitch (column blocks of one output, e.g. fused Q, K and V
// projections), which share an element only if their rows and their columns, as offsets
// within the pitch, both meet.
bool share_elements(const Matrix& x, const Matrix& y) {
  if (!overlaps(x, y)) return false;
  const int64_t pitch = x.s0;
  if (x.esize != y.esize || x.s1 != 1 || y.s1 != 1 || y.s0 != pitch || pitch <= 0 ||
      x.cols > pitch || y.cols > pitch || x.batch != 1 || y.batch != 1)
    return true;
  const int64_t bytes =
      int64_t(reinterpret_cast<intptr_t>(y.ptr) - reinterpret_cast<intptr_t>(x.ptr));
  if (bytes % x.esize) return true;
  const int64_t off = bytes / x.esize;  // y(i, j) is x's element off + i * pitch + j
  const int64_t row0 = off >= 0 ? off / pitch : -((-off + pitch - 1) / pitch);
  const int64_t col0 = off - row0 * pitch;  // 0 <= col0 < pitch
  auto meet = [](int64_t a0, int64_t a1, int64_t b0, int64_t b1) { return a0 < b1 && b0 < a1; };
  // y's columns in x's rows: [col0, pitch) of rows row0..., then [0, rest) of the next ones
  const int64_t end = col0 + y.cols;
  if (meet(row0, row0 + y.rows, 0, x.rows) && meet(col0, std::min(end, pitch), 0, x.cols))
    return true;
  return end > pitch && meet(row0 + 1, row0 + 1 + y.rows, 0, x.rows) &&
         meet(0, end - pitch, 0, x.cols);
}

void Matrix::transpose() {
  std::swap(rows, cols);
  std::swap(s0, s1);
}

void Matrix::extent(uintptr_t* lo, uintptr_t* hi) const {
  uintptr_t base = reinterpret_cast<uintptr_t>(ptr);
  if (rows == 0 || cols == 0 || batch == 0) {
    *lo = *hi = base;
    return;
  }
  *lo = base;
  *hi = base + uintptr_t(((batch - 1) * sb + (rows - 1) * s0 + (cols - 1) * s1 + 1) * esize);
}

namespace {

// An output batch's matrices each own their memory. One batch stride: matrices i and i + j
// sit as 0 and j do, so matrix 0 against each j whose bytes it meets decides; interleaved
// ones (d.transpose(1, 0, 2) of a (rows, L, N) buffer, heads side by side) share no
// element and pass.
int check_own_matrices(const Matrix& out, const char* name) {
  Matrix one = out;
  one.batch = 1;
  if (one.s1 != 1 && one.s0 == 1) one.transpose();  // sharing is the same either way
  constexpr int64_t kMaxMet = int64_t(1) << 16;     // beyond: refused unexamined
  for (int64_t j = 1; j < out.batch; ++j) {
    Matrix other = one;
    other.ptr = one.ptr + j * out.sb * out.esize;
    if (!overlaps(one, other)) break;  // later matrices start later still
    if (j > kMaxMet || share_elements(one, other))
      return set_error(PCR_ERR_OVERLAP,
                       "%s's matrices overlap (batch stride %" PRId64
                       " elements); every output matrix needs its own memory",
                       name, out.sb);
  }
  return PCR_OK;
}

}  // namespace

int check_places(const Matrix* const ops[kPlaces], const char* const names[kPlaces], bool* host) {
  // Devices: all CUDA on one ordinal, or all on the host.
  const Matrix& D = *ops[2];
  *host = is_host(D.device_type);
  for (int i = 0; i < kPlaces; ++i) {
    if (!ops[i]) continue;
    if (is_host(ops[i]->device_type) != *host)
      return set_error(PCR_ERR_DEVICE_MISMATCH,
                       "%s is a %s array but %s is a %s array; pass all operands on the GPU, "
                       "or all on the host",
                       names[i], is_host(ops[i]->device_type) ? "host" : "GPU", names[2],
                       *host ? "host" : "GPU");
    if (!*host && ops[i]->device_id != D.device_id)
      return set_error(PCR_ERR_DEVICE_MISMATCH,
                       "%s is on cuda:%d but %s is on cuda:%d; move them to one device", names[i],
                       ops[i]->device_id, names[2], D.device_id);
  }
  // Aliasing: d must not overlap a, b or the extras, which the kernel reads while d is
  // written (c is the caller's to check: d may be c exactly).
  for (int i : {0, 1, 4, 5, 6, 9})
    if (ops[i] && overlaps(D, *ops[i]))
      return set_error(PCR_ERR_OVERLAP,
                       "%s overlaps %s in memory; the output must not alias an input of the "
                       "product (pass a separate output)",
                       names[2], names[i]);
  // the second outputs (aux, amax) alias nothing: every other operand is read or written
  for (int out : {7, 8})
    for (int i = 0; ops[out] && i < out; ++i)
      if (ops[i] && overlaps(*ops[out], *ops[i]))
        return set_error(PCR_ERR_OVERLAP, "%s overlaps %s in memory; pass a separate buffer",
                         names[out], names[i]);
  return PCR_OK;
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

int describe(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
             double alpha, double beta, const pcr_extras* extras, pcr_problem* p, Bound* bound) {
  clear_error();
  std::memset(p, 0, sizeof *p);
  *bound = Bound{};
  const pcr_extras none{};
  const pcr_extras& x = extras ? *extras : none;
  const DLTensor* bias = x.bias;
  const int activation = x.activation;
  if (x.math != PCR_MATH_IEEE && x.math != PCR_MATH_TF32)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "unknown math code %d", x.math);
  if (!a || !b || !d) return set_error(PCR_ERR_INVALID_ARGUMENT, "a, b and d are required");
  if (int st = check_tensors({{a, "a"},
                              {b, "b"},
                              {c, "c"},
                              {d, "d"},
                              {x.bias, "bias"},
                              {x.scale_a, "scale_a"},
                              {x.scale_b, "scale_b"},
                              {x.aux, "aux"},
                              {x.amax, "amax"},
                              {x.scale_d, "scale_d"}}))
    return st;
  if (!std::isfinite(alpha) || !std::isfinite(beta))
    return set_error(PCR_ERR_INVALID_ARGUMENT, "alpha and beta must be finite numbers (got %g, %g)",
                     alpha, beta);
  if (beta != 0.0 && !c)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "c is None but beta = %g; pass c, or beta=0", beta);
  if (activation < PCR_ACT_NONE || activation > PCR_ACT_CLAMP)  // the last pcr_activation
    return set_error(PCR_ERR_INVALID_ARGUMENT, "unknown activation code %d", activation);
  if (!std::isfinite(x.activation_alpha) || !std::isfinite(x.activation_beta))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "the activation's parameters must be finite numbers (got %g, %g)",
                     x.activation_alpha, x.activation_beta);
  if (activation == PCR_ACT_CLAMP && x.activation_alpha > x.activation_beta)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "clamp: min %g is above max %g", x.activation_alpha,
                     x.activation_beta);
  if (x.conv) return describe_conv(a, b, c, d, alpha, beta, x, p, bound);
  Matrix &A = bound->a, &B = bound->b, &C = bound->c, &D = bound->d, &V = bound->bias;
  int st;
  if ((st = load_matrix(a, "a", false, &A)) || (st = load_matrix(b, "b", false, &B)) ||
      (st = load_matrix(d, "d", false, &D)))
    return st;
  // c is validated whenever given, and read only when beta != 0.
  const bool use_c = c && beta != 0.0;
  if (c && (st = load_matrix(c, "c", true, &C))) return st;
  int bias_axis = PCR_BIAS_NONE;
  if (bias && (st = load_bias(bias, D, &V, &bias_axis))) return st;
  Matrix &SA = bound->scale_m, &SB = bound->scale_n;  // canonical below
  int scale_a = PCR_SCALE_NONE, scale_b = PCR_SCALE_NONE;
  if ((x.scale_a || x.scale_b) && (st = load_scales(x.scale_a, x.scale_b, D.rows, D.cols, A.cols,
                                                    &SA, &SB, &scale_a, &scale_b)))
    return st;
  const bool grids = is_grid(scale_a);
  Matrix& X = bound->aux;
  if (x.aux) {
    if ((st = load_matrix(x.aux, "aux", false, &X))) return st;
    if (X.rows != D.rows || X.cols != D.cols || X.batch != D.batch)
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "aux is %" PRId64 "x%" PRId64 " (%" PRId64 " matrices) but d is %" PRId64
                       "x%" PRId64 " (%" PRId64 "); aux takes d's shape",
                       X.rows, X.cols, X.batch, D.rows, D.cols, D.batch);
    if (X.dtype != D.dtype)
      return set_error(PCR_ERR_UNSUPPORTED, "aux is %s but d is %s; pass aux in d's dtype",
                       dtype_name(X.dtype), dtype_name(D.dtype));
  }
  if (x.amax && (st = load_one_float(x.amax, "amax", &bound->amax))) return st;
  if (x.scale_d && (st = load_one_float(x.scale_d, "scale_d", &bound->scale_d))) return st;

  // Batch: d holds all L matrices; each input has L of them or one shared by all.
  const int64_t L = D.batch;
  {
    const Matrix* in[] = {&A, &B, c ? &C : nullptr};
    const char* in_names[] = {"a", "b", "c"};
    for (int i = 0; i < 3; ++i) {
      if (!in[i] || in[i]->batch == 1 || in[i]->batch == L) continue;
      if (L == 1)
        return set_error(PCR_ERR_INVALID_ARGUMENT,
                         "d holds 1 matrices but %s holds %" PRId64 "; d must be (L, M, N)",
                         in_names[i], in[i]->batch);
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "batch mismatch: %s holds %" PRId64 " matrices, d %" PRId64
                       "; each of a, b, c holds L matrices or one (shared)",
                       in_names[i], in[i]->batch, L);
    }
    for (const Matrix* out : {&D, x.aux ? &X : nullptr})
      if (out && (st = check_own_matrices(*out, out == &D ? "d" : "aux"))) return st;
  }

  if (A.cols != B.rows || A.rows != D.rows || B.cols != D.cols)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "shape mismatch: a is %" PRId64 "x%" PRId64 ", b is %" PRId64 "x%" PRId64
                     ", d is %" PRId64 "x%" PRId64 "; need a (M, K), b (K, N), d (M, N)",
                     A.rows, A.cols, B.rows, B.cols, D.rows, D.cols);
  if (c && (C.rows != D.rows || C.cols != D.cols))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "shape mismatch: c is %" PRId64 "x%" PRId64 " but d is %" PRId64 "x%" PRId64,
                     C.rows, C.cols, D.rows, D.cols);
  if (A.dtype != B.dtype)
    return set_error(PCR_ERR_UNSUPPORTED, "a is %s but b is %s; a and b must share a dtype",
                     dtype_name(A.dtype), dtype_name(B.dtype));

  const Matrix* ops[kPlaces] = {&A,
                                &B,
                                &D,
                                c ? &C : nullptr,
                                bias ? &V : nullptr,
                                scale_a ? &SA : nullptr,
                                scale_b ? &SB : nullptr,
                                x.aux ? &X : nullptr,
                                x.amax ? &bound->amax : nullptr,
                                x.scale_d ? &bound->scale_d : nullptr};
  static const char* const kNames[] = {"a",       "b",       "d",   "c",    "bias",
                                       "scale_a", "scale_b", "aux", "amax", "scale_d"};
  bool host = false;
  if ((st = check_places(ops, kNames, &host))) return st;
  bool c_is_d =
      use_c && C.ptr == D.ptr && C.s0 == D.s0 && C.s1 == D.s1 && C.sb == D.sb && C.dtype == D.dtype;
  if (use_c && !c_is_d && overlaps(C, D))
    return set_error(PCR_ERR_OVERLAP,
                     "c overlaps d without being the same view; pass c=d (same strides) or "
                     "separate buffers");

  // Orientation: make D row-major.
  int ld_layout;
  int64_t ldd;
  if (!layout_of(D, &ld_layout, &ldd)) return layout_error(D, "d");
  if (ld_layout == PCR_COL_MAJOR) {
    p->transposed = 1;
    std::swap(A, B);
    A.transpose();
    B.transpose();
    D.transpose();
    if (use_c) C.transpose();
    if (bias)  // d^T's columns are d's rows
      V.transpose(),
          bias_axis = bias_axis == PCR_BIAS_PER_ROW ? PCR_BIAS_PER_COLUMN : PCR_BIAS_PER_ROW;
    std::swap(SA, SB);  // b^T's rows are b's columns
    SA.transpose(), SB.transpose();
    std::swap(scale_a, scale_b);
    if (x.aux) X.transpose();
    layout_of(D, &ld_layout, &ldd);
  }
  int64_t ldx = 0;
  int aux_layout = PCR_ROW_MAJOR;
  if (x.aux && (!layout_of(X, &aux_layout, &ldx) || aux_layout != PCR_ROW_MAJOR))
    return set_error(PCR_ERR_UNSUPPORTED,
                     "aux must have d's layout (%s-major, one dimension of stride 1); make it "
                     "like d (torch.empty_like(d))",
                     p->transposed ? "column" : "row");
  int la, lb;
  int64_t lda, ldb;
  if (!layout_of(A, &la, &lda)) return layout_error(A, p->transposed ? "b (as b^T)" : "a");
  if (!layout_of(B, &lb, &ldb)) return layout_error(B, p->transposed ? "a (as a^T)" : "b");

  p->m = A.rows;
  p->n = B.cols;
  p->k = A.cols;
  p->dtype_a = A.dtype;
  p->dtype_b = B.dtype;
  p->dtype_d = D.dtype;
  if (x.math == PCR_MATH_TF32 && A.dtype == PCR_F32)  // TF32 kernels carry their own dtype
    p->dtype_a = p->dtype_b = PCR_TF32;
  p->scale_m = scale_a;
  p->scale_n = scale_b;
  // Scale tensors dequantize int8 and fp8 inputs; on 16-bit ones they are a per-row or
  // per-column factor (a normalization or a dequantized layer's scales) folded into the GEMM.
  if ((scale_a || scale_b) && !is_quantized(A.dtype) && A.dtype != PCR_F16 && A.dtype != PCR_BF16)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "scale_a and scale_b apply to int8, fp8, float16 and bfloat16 inputs; a "
                     "and b are %s (fold a per-tensor factor into alpha)",
                     dtype_name(A.dtype));
  if (grids && A.dtype != PCR_E4M3 && A.dtype != PCR_E5M2)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "block-scale grids (scale_a, scale_b) dequantize fp8 inputs; a and b are %s",
                     dtype_name(A.dtype));
  if (grids && L != 1)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "block scales take one GEMM (2-D a, b and d); d holds %" PRId64
                     " matrices: run them one by one, or as a grouped GEMM",
                     L);
  auto int32_valued = [](double v) { return v == std::floor(v) && std::fabs(v) < 2147483648.0; };
  if (D.dtype == PCR_S32 && (!int32_valued(alpha) || (use_c && !int32_valued(beta))))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "int32 outputs are computed exactly, in int32: alpha and beta must be "
                     "integers in int32's range (got %g, %g); for scaled results ask for a "
                     "float output",
                     alpha, beta);
  if (D.dtype == PCR_S32 && activation != PCR_ACT_NONE && activation != PCR_ACT_RELU &&
      activation != PCR_ACT_CLAMP)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "int32 outputs are computed exactly, in int32: their activations are relu "
                     "and clamp (integer bounds), not %s; for others ask for a float output",
                     activation_name(activation));
  if (D.dtype == PCR_S32 && activation == PCR_ACT_CLAMP &&
      (!int32_valued(x.activation_alpha) || !int32_valued(x.activation_beta)))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "int32 outputs are computed exactly, in int32: clamp's bounds must be "
                     "integers in int32's range (got %g, %g)",
                     x.activation_alpha, x.activation_beta);
  p->layout_a = la;
  p->layout_b = lb;
  p->host = host;
  p->batch = L;
  p->activation = activation;
  p->bias = bias_axis;
  // Per-tensor scales alone are a linear problem: the linear kernels that read them
  // (pcr_kernel_desc::tensor_scales) run it at their own speed; vectors, bias or an
  // activation with scales need the dequantizing epilogue.
  const bool fused = bias || activation != PCR_ACT_NONE;
  const bool scaled = scale_a != PCR_SCALE_NONE || scale_b != PCR_SCALE_NONE;
  // Block scales apply in the mainloop: the epilogue is what remains (bias, activation).
  p->epilogue =
      !grids && (scale_a == PCR_SCALE_VECTOR || scale_b == PCR_SCALE_VECTOR || (scaled && fused))
          ? PCR_EPI_SCALED
      : fused ? PCR_EPI_BIASACT
              : PCR_EPI_LINEAR;
  // amax and the output scale of quantized inputs' epilogues (kernels with out_scale);
  // amax of 16-bit GEMMs without scales rides the aux epilogue
  const bool quantized_out = is_quantized(A.dtype) || scaled;
  if (x.scale_d || (x.amax && quantized_out)) {
    if (x.aux)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "aux with %s: no kernel writes the pre-activation of a dequantizing "
                       "epilogue",
                       scaled ? "scale_a/scale_b" : "quantized inputs");
    if (!quantized_out)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "scale_d scales a quantized GEMM's output (int8 or fp8 inputs, or "
                       "scale_a/scale_b); fold it into alpha here");
    if (D.dtype == PCR_S32)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "%s with int32 outputs: those are exact integers; ask for a float or "
                       "fp8 output",
                       x.scale_d ? "scale_d" : "amax");
    if (x.scale_d && A.cols == 0)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "scale_d with K = 0: no kernel runs; d = beta * c needs no GEMM");
    p->out_scale = 1;
  } else if (x.aux || x.amax) {
    if (scaled)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "%s with scale_a/scale_b: no kernel writes the %s of a dequantizing "
                       "epilogue (fold number scales into alpha)",
                       x.aux ? "aux" : "amax", x.aux ? "pre-activation" : "amax");
    p->epilogue = PCR_EPI_AUX;
    bound->ldaux = ldx;
  }
  bound->lda = lda;
  bound->ldb = ldb;
  bound->ldd = ldd;
  bound->alpha = alpha;
  bound->beta = beta;
  bound->activation = activation_of(x);
  if (use_c) p->dtype_c = C.dtype;
  place(p, bound, use_c, false);
  // aux is written where it is: the kernel's 16-byte stores need it aligned, and d too
  // (a staged d would need aux staged beside it)
  // a staged d's padding is computed too, and its amax taken afterwards: of the scaled d
  if (p->out_scale && x.amax && x.scale_d && (p->staged & PCR_STAGED_D))
    return set_error(PCR_ERR_UNSUPPORTED,
                     "amax with scale_d needs d 16-byte aligned (address, leading dimension "
                     "and row length a multiple of 16 bytes)");
  const bool aux_aligned = x.aux && alignment_bytes(X, PCR_ROW_MAJOR, ldx) >= 16;
  if (x.aux && !host && (!aux_aligned || (p->staged & PCR_STAGED_D)))
    return set_error(PCR_ERR_UNSUPPORTED,
                     "aux needs d and aux 16-byte aligned (addresses, leading dimensions and "
                     "rows of a multiple of 16 bytes); %s is not",
                     aux_aligned ? "d" : "aux");

  return finish_problem(p, D, host);
}

int finish_problem(pcr_problem* p, const Matrix& D, bool host) {
  int st;
  // The build must know this dtype combination at all (before asking for a GPU).
  bool known = false;
  for (int i = 0; i < kKernelCount && !known; ++i) {
    const pcr_kernel_desc& kd = kKernels[i]->info;
    known = kd.op == p->op && kd.dtype_a == p->dtype_a && kd.dtype_b == p->dtype_b &&
            kd.dtype_d == p->dtype_d && epilogue_serves(kd.epilogue, p->epilogue) &&
            same_block_scales(kd, *p) && (kd.out_scale || !p->out_scale);
  }
  if (!known) {
    static const char* const kWith[] = {
        "",  // by pcr_epilogue: LINEAR, BIASACT, SCALED, AUX
        " with a fused bias/activation epilogue", " with scale_a/scale_b (a dequantizing epilogue)",
        " with a fused bias/activation epilogue writing aux or amax"};
    static_assert(sizeof kWith / sizeof *kWith == PCR_EPI_AUX + 1, "one per pcr_epilogue");
    std::string have;
    for (int i = 0; i < kKernelCount; ++i) {
      const pcr_kernel_desc& kd = kKernels[i]->info;
      if (kd.op != p->op || !epilogue_serves(kd.epilogue, p->epilogue) ||
          !same_block_scales(kd, *p) || (p->out_scale && !kd.out_scale))
        continue;
      std::string combo = std::string(dtype_name(kd.dtype_a)) + " x " + dtype_name(kd.dtype_b) +
                          " -> " + dtype_name(kd.dtype_d);
      if (have.find(combo) == std::string::npos) have += (have.empty() ? "" : "; ") + combo;
    }
    const bool conv = p->op != PCR_OP_GEMM;
    std::string with = kWith[p->epilogue];
    if (is_grid(p->scale_m))
      with += " with block scales (" + block_words(p->scale_m, p->scale_n) + ")";
    if (p->out_scale) with += " reducing amax or applying scale_d";
    return set_error(
        PCR_ERR_UNSUPPORTED,
        "no kernel in this build computes %s x %s -> %s%s%s%s; available%s: %s%s",
        dtype_name(p->dtype_a), dtype_name(p->dtype_b), dtype_name(p->dtype_d),
        conv ? " as a " : "", conv ? op_name(p->op) : "", with.c_str(),
        p->epilogue != PCR_EPI_LINEAR || is_grid(p->scale_m) || p->out_scale ? with.c_str() : "",
        have.empty() ? "none" : have.c_str(),
        p->dtype_a == PCR_TF32 || p->dtype_a == PCR_F32
            ? " (tfloat32: float32 tensors with math='tf32')"
            : "");
  }

  // The device: the operands' GPU, or the current one for host operands.
  int dev = D.device_id;
  if (host && (st = cuda_status(cudaGetDevice(&dev), "cudaGetDevice"))) return st;
  DeviceInfo info{};
  if ((st = device_info(dev, &info))) return st;
  p->device = dev;
  p->cc = info.cc;
  p->sm_count = info.sm_count;
  return PCR_OK;
}

GemmArgs gemm_args(const pcr_problem& p, const Bound& bd) {
  GemmArgs g;
  // padding too: prepared launches compare args bytewise
  std::memset(static_cast<void*>(&g), 0, sizeof g);
  g.m = int(p.m);
  g.n = int(p.n);
  g.k = int(p.k);
  g.a = bd.a.ptr;
  g.lda = bd.lda;
  g.b = bd.b.ptr;
  g.ldb = bd.ldb;
  g.d = bd.d.ptr;
  g.ldd = bd.ldd;
  if (p.c_mode == PCR_C_READ) {
    g.c = bd.c.ptr;
    g.ldc = bd.ldc;
  } else {  // no C, or C already copied into D
    g.c = bd.d.ptr;
    g.ldc = bd.ldd;
  }
  g.alpha = bd.alpha;
  g.beta = p.c_mode == PCR_C_NONE ? 0.0 : bd.beta;
  g.batch = int(p.batch);
  g.batch_a = bd.a.sb;
  g.batch_b = bd.b.sb;
  g.batch_c = p.c_mode == PCR_C_READ ? bd.c.sb : bd.d.sb;
  g.batch_d = bd.d.sb;
  if (p.bias == PCR_BIAS_PER_COLUMN) g.bias_n = bd.bias.ptr;
  if (p.bias == PCR_BIAS_PER_ROW) g.bias_m = bd.bias.ptr;
  g.activation = bd.activation;
  g.aux = bd.aux.ptr;
  g.ldaux = bd.ldaux;
  g.batch_aux = bd.aux.sb;
  g.amax = reinterpret_cast<float*>(bd.amax.ptr);
  g.scale_d = reinterpret_cast<const float*>(bd.scale_d.ptr);
  g.scale_a = bd.scale_m.ptr;
  g.scale_b = bd.scale_n.ptr;
  g.scale_a_per_row = p.scale_m == PCR_SCALE_VECTOR;
  g.scale_b_per_col = p.scale_n == PCR_SCALE_VECTOR;
  if (is_grid(p.scale_m)) {  // scale_m's rows are row groups, scale_n's columns column groups
    g.scale_a_group_stride = bd.scale_m.s0;
    g.scale_a_kblock_stride = bd.scale_m.s1;
    g.scale_b_group_stride = bd.scale_n.s1;
    g.scale_b_kblock_stride = bd.scale_n.s0;
  }
  g.conv = bd.conv;
  g.device = p.device;
  g.sm_count = p.sm_count;
  return g;
}

ActivationArgs activation_of(const pcr_extras& x) {
  const bool slope = x.activation == PCR_ACT_LEAKY_RELU || x.activation == PCR_ACT_CLAMP;
  return {x.activation, slope ? x.activation_alpha : 0.0,
          x.activation == PCR_ACT_CLAMP ? x.activation_beta : 0.0};
}

Staging stage_layout(const pcr_problem& p, const Bound& bd, char* base) {
  Staging st{p, bd, 0};
  st.problem.staged = 0;
  if (!p.staged) return st;
  Matrix* mats[] = {&st.bound.a, &st.bound.b, &st.bound.d};
  const int bits[] = {PCR_STAGED_A, PCR_STAGED_B, PCR_STAGED_D};
  int64_t* lds[] = {&st.bound.lda, &st.bound.ldb, &st.bound.ldd};
  bool row[] = {p.layout_a == PCR_ROW_MAJOR, p.layout_b == PCR_ROW_MAJOR, true};
  // Each operand's (rows, cols) as dimensions of the problem: 0 = M, 1 = N, 2 = K.
  const int dims[3][2] = {{0, 2}, {2, 1}, {0, 1}};
  int64_t ext[3] = {p.m, p.n, p.k};
  int staged = p.staged;
  // Pad the contiguous extent of every staged operand; an operand whose extent grew is
  // staged too (zero-filled). Two rounds reach the fixed point: padding only grows.
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 3; ++i) {
      int64_t per16 = 16 / mats[i]->esize;
      int inner = dims[i][row[i] ? 1 : 0];
      if (staged & bits[i]) ext[inner] = (ext[inner] + per16 - 1) / per16 * per16;
      for (int j = 0; j < 3; ++j)
        if (ext[dims[j][0]] != mats[j]->rows || ext[dims[j][1]] != mats[j]->cols) staged |= bits[j];
    }
  st.problem.m = ext[0];
  st.problem.n = ext[1];
  st.problem.k = ext[2];
  for (int i = 0; i < 3; ++i) {
    if (!(staged & bits[i])) continue;
    Matrix& m = *mats[i];
    m.rows = ext[dims[i][0]];
    m.cols = ext[dims[i][1]];
    // rows start on 128-byte lines: TMA boxes of rows that straddle lines load slower
    int64_t per128 = 128 / m.esize;
    int64_t ld = ((row[i] ? m.cols : m.rows) + per128 - 1) / per128 * per128;
    m.ptr = base ? base + st.bytes : nullptr;
    m.s0 = row[i] ? ld : 1;
    m.s1 = row[i] ? 1 : ld;
    *lds[i] = ld;
    st.bytes += (size_t((row[i] ? m.rows : m.cols) * ld * m.esize) + 255) / 256 * 256;
  }
  st.staged = staged;
  int* aligns[] = {&st.problem.align_a, &st.problem.align_b, &st.problem.align_d};
  for (int i = 0; i < 3; ++i)
    if (staged & bits[i]) *aligns[i] = 16;
  if ((staged & PCR_STAGED_D) && st.problem.c_mode != PCR_C_NONE) {  // C into D's scratch
    st.problem.c_mode = PCR_C_COPIED;
    st.problem.align_c = 16;
  }
  return st;
}

int check_kernel(int k, const pcr_problem& p, const Bound* bound) {
  if (k < 0 || k >= kKernelCount)
    return set_error(PCR_ERR_KERNEL_NOT_FOUND, "kernel index %d is not in this build", k);
  const pcr_kernel_desc& kd = kKernels[k]->info;
  if (kd.op != p.op)
    return set_error(PCR_ERR_UNSUPPORTED, "%s is a %s kernel; the problem is a %s", kd.name,
                     op_name(kd.op), op_name(p.op));
  if (kd.dtype_a != p.dtype_a || kd.dtype_b != p.dtype_b || kd.dtype_d != p.dtype_d)
    return set_error(PCR_ERR_UNSUPPORTED, "%s computes %s x %s -> %s, not %s x %s -> %s", kd.name,
                     dtype_name(kd.dtype_a), dtype_name(kd.dtype_b), dtype_name(kd.dtype_d),
                     dtype_name(p.dtype_a), dtype_name(p.dtype_b), dtype_name(p.dtype_d));
  // An empty problem launches no kernel (d = beta * c at most): any kernel of these
  // dtypes may be named for it, and none may see its extents (kernel.h, check_extents).
  if (!has_gemm_work(p)) return PCR_OK;
  if (kd.grouped != (p.grouped != PCR_GROUPED_NONE))
    return set_error(PCR_ERR_UNSUPPORTED,
                     kd.grouped ? "%s is a grouped kernel"
                                : "%s computes one GEMM (or a batch), not a grouped one",
                     kd.name);
  const bool grids = is_grid(p.scale_m);
  if (p.out_scale && !kd.out_scale)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "%s reduces no amax and applies no scale_d (kernels with out_scale: "
                     "quantized inputs on sm90a and sm100a)",
                     kd.name);
  if (!same_block_scales(kd, p)) {
    if (!grids) return set_error(PCR_ERR_UNSUPPORTED, "%s takes fp8 block-scale grids", kd.name);
    return set_error(PCR_ERR_UNSUPPORTED, "%s takes %s; this call's block scales are %s", kd.name,
                     kd.scale_m ? block_words(kd.scale_m, kd.scale_n).c_str() : "no block scales",
                     block_words(p.scale_m, p.scale_n).c_str());
  }
  if (kd.epilogue == PCR_EPI_LINEAR && !grids &&
      (p.scale_m != PCR_SCALE_NONE || p.scale_n != PCR_SCALE_NONE) && !kd.tensor_scales)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "%s reads no scale tensors; this call needs a dequantizing epilogue, or "
                     "scales given as numbers (folded into alpha)",
                     kd.name);
  if (!epilogue_serves(kd.epilogue, p.epilogue))
    return set_error(PCR_ERR_UNSUPPORTED, "%s has a %s epilogue; this call needs a %s one", kd.name,
                     epilogue_words(kd.epilogue), epilogue_words(p.epilogue));
  if (kd.layout_a != p.layout_a || kd.layout_b != p.layout_b) {
    auto L = [](int l) { return l == PCR_ROW_MAJOR ? 't' : 'n'; };
    return set_error(PCR_ERR_UNSUPPORTED,
                     "%s takes layout %c%c, the problem is %c%c (t = row-major, n = column-major"
                     ", after orienting d row-major)",
                     kd.name, L(kd.layout_a), L(kd.layout_b), L(p.layout_a), L(p.layout_b));
  }
  int es_ab = esize_of(kd.dtype_a), es_d = esize_of(kd.dtype_d);
  struct {
    const char* what;
    int have, need;
  } req[] = {
      {"a", p.align_a, kd.align_a * es_ab},
      {"b", p.align_b, kd.align_b * es_ab},
      {"d", p.align_d, kd.align_c * es_d},
      {"c", p.c_mode == PCR_C_READ ? p.align_c : 16, kd.align_c * es_d},
      {"bias", p.bias != PCR_BIAS_NONE ? p.align_bias : 16, kd.align_c * es_d},
  };
  for (auto& r : req)
    if (r.have < r.need)
      return set_error(PCR_ERR_MISALIGNED,
                       "%s needs %d-byte alignment of %s (address, leading dimension and "
                       "contiguous extent); %s has %d",
                       kd.name, r.need, r.what, r.what, r.have);
  if (p.device >= 0) {
    bool runs = false;
    int st = kernel_runs_on(k, p.device, &runs);
    if (st != PCR_OK) return st;
    if (!runs)
      return set_error(PCR_ERR_UNSUPPORTED, "%s has no image for this GPU (compute %d.%d)", kd.name,
                       p.cc / 10, p.cc % 10);
  }
  // grouped sizes live on the GPU: nothing to judge here
  if (bound && p.grouped == PCR_GROUPED_NONE) {
    // CUTLASS judges the operands the kernel will read: staged ones at an aligned address
    alignas(256) static char aligned_base[256];
    Staging s = stage_layout(p, *bound, aligned_base);
    GemmArgs g = gemm_args(s.problem, s.bound);
    int st = kKernels[k]->ops.can_implement(g);
    if (st != PCR_OK) {
      std::string why = last_error();
      return set_error(st, "%s: %s", kd.name, why.c_str());
    }
  }
  return PCR_OK;
}

int judge(const pcr_problem& p, const Bound* bound, pcr_verdict* verdicts, int32_t count) {
  if (!verdicts) return PCR_OK;
  if (count < 0) return set_error(PCR_ERR_INVALID_ARGUMENT, "verdicts: count %d < 0", count);
  for (int k = 0; k < count && k < kKernelCount; ++k) {
    pcr_verdict& v = verdicts[k];
    v.status = check_kernel(k, p, bound);
    std::snprintf(v.reason, sizeof v.reason, "%s", v.status == PCR_OK ? "" : last_error());
  }
  clear_error();
  return PCR_OK;
}

int describe_judged(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                    double alpha, double beta, const pcr_extras* extras, pcr_problem* problem,
                    pcr_verdict* verdicts, int32_t count) {
  Bound bd;
  int st = describe(a, b, c, d, alpha, beta, extras, problem, &bd);
  return st == PCR_OK ? judge(*problem, &bd, verdicts, count) : st;
}

}  // namespace pcr
