// From four 4-D DLTensor views to one validated convolution (pcr_extras.conv): an implicit
// GEMM whose operands stay where they are. Kernels read packed NHWC / KRSC tensors, so
// nothing is staged or transposed; each tensor is also kept as a flat matrix (rows: its
// first three dimensions, columns: the last), which is all that host copies, aliasing
// checks and the K = 0 pass need. Every check names the tensor at fault in the call's terms
// (x, w, y; dy, dx, dw).
#include <algorithm>
#include <cinttypes>
#include <string>

#include "runtime.h"

namespace pcr {
namespace {

struct Tensor4 {
  int64_t dim[4] = {};
  Matrix flat;
};

std::string dims_text(const int64_t* dim) { return shape_text(dim, 4); }

// A packed 4-D tensor: its last dimension contiguous, the others without gaps (a size-1
// dimension's stride says nothing and is not read). `order` names its dimensions.
int load_packed(const DLTensor* t, const char* name, const char* order, Tensor4* out) {
  if (t->ndim != 4)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "%s must be a 4-D %s tensor, got %d dimensions",
                     name, order, t->ndim);
  int64_t packed = 1;
  for (int i = 3; i >= 0; --i) {
    const int64_t n = t->shape[i];
    if (n < 0) return set_error(PCR_ERR_INVALID_ARGUMENT, "%s has a negative dimension", name);
    if (t->strides && n > 1 && t->strides[i] != packed) {
      std::string strides = dims_text(t->strides);
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "%s must be a packed %s tensor (a channels_last torch tensor, permuted "
                       "to %s, is one); its strides are %s for shape %s",
                       name, order, order, strides.c_str(), dims_text(t->shape).c_str());
    }
    out->dim[i] = n;
    packed *= n;
  }
  Matrix& m = out->flat;
  if (int st = load_dtype(t, name, &m)) return st;
  m.rows = out->dim[0] * out->dim[1] * out->dim[2];
  m.cols = out->dim[3];
  m.s0 = std::max<int64_t>(m.cols, 1);
  m.s1 = 1;
  return load_place(t, name, m.rows * m.cols, &m);
}

// An output extent of torch's conv2d: floor((in + 2 pad - dilation (f - 1) - 1) / stride) + 1,
// or -1 where the dilated filter is larger than the padded input.
int64_t out_extent(int64_t in, int pad, int dilation, int64_t f, int stride) {
  const int64_t span = in + 2 * int64_t(pad) - int64_t(dilation) * (f - 1) - 1;
  return span < 0 ? -1 : span / stride + 1;
}

}  // namespace

int describe_conv(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                  double alpha, double beta, const pcr_extras& x, pcr_problem* p, Bound* bound) {
  const pcr_conv& cv = *x.conv;
  const int op = cv.op;
  if (op != PCR_OP_FPROP && op != PCR_OP_DGRAD && op != PCR_OP_WGRAD)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "unknown convolution op %d (fprop 1, dgrad 2, "
                     "wgrad 3)",
                     op);
  if (cv.pad_h < 0 || cv.pad_w < 0 || cv.stride_h < 1 || cv.stride_w < 1 || cv.dilation_h < 1 ||
      cv.dilation_w < 1 || cv.groups < 1)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "convolution: padding must be >= 0, stride, dilation and groups >= 1 (got "
                     "padding (%d, %d), stride (%d, %d), dilation (%d, %d), groups %d)",
                     cv.pad_h, cv.pad_w, cv.stride_h, cv.stride_w, cv.dilation_h, cv.dilation_w,
                     cv.groups);
  if (x.scale_a || x.scale_b)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "scale_a and scale_b dequantize int8 and fp8 GEMMs; a convolution takes none");
  if (x.aux || x.amax || x.scale_d)
    return set_error(PCR_ERR_UNSUPPORTED, "%s is a GEMM's; a convolution takes none",
                     x.aux    ? "aux (the pre-activation)"
                     : x.amax ? "amax"
                              : "scale_d");
  const bool fprop = op == PCR_OP_FPROP;
  if (!fprop && (x.bias || x.activation != PCR_ACT_NONE))
    return set_error(PCR_ERR_UNSUPPORTED,
                     "a bias or an activation is fused into fprop only; %s is linear", op_name(op));

  // The operands in CUTLASS's roles (a, b, d) and the call's names for them.
  static const char* const kNames[][3] = {
      {}, {"x", "w", "y"}, {"dy", "w", "dx"}, {"dy", "x", "dw"}};
  static const char* const kOrders[][3] = {
      {}, {"NHWC", "KRSC", "NPQK"}, {"NPQK", "KRSC", "NHWC"}, {"NPQK", "NHWC", "KRSC"}};
  const char* const* names = kNames[op];
  Tensor4 A, B, D, C;
  int st;
  if ((st = load_packed(a, names[0], kOrders[op][0], &A)) ||
      (st = load_packed(b, names[1], kOrders[op][1], &B)) ||
      (st = load_packed(d, names[2], kOrders[op][2], &D)))
    return st;
  const Tensor4& act = fprop ? A : op == PCR_OP_DGRAD ? D : B;  // x or dx: N, H, W, C
  const Tensor4& flt = op == PCR_OP_WGRAD ? D : B;              // w or dw: K, R, S, C/groups
  const Tensor4& out = fprop ? D : A;                           // y or dy: N, P, Q, K
  const char* act_name = names[fprop ? 0 : op == PCR_OP_DGRAD ? 2 : 1];
  const char* flt_name = names[op == PCR_OP_WGRAD ? 2 : 1];
  const char* out_name = names[fprop ? 2 : 0];
  const int64_t n = act.dim[0], h = act.dim[1], w = act.dim[2], ch = act.dim[3];
  const int64_t k = flt.dim[0], r = flt.dim[1], s = flt.dim[2], cg = flt.dim[3];
  const int g = cv.groups;
  if (ch != cg * g)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s has %" PRId64 " channels but %s holds %" PRId64
                     " per group for %d groups (%s's last dimension must be C / groups)",
                     act_name, ch, flt_name, cg, g, flt_name);
  if (k % g)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s has %" PRId64 " filters, not a multiple of groups (%d)", flt_name, k, g);
  const int64_t pp = out_extent(h, cv.pad_h, cv.dilation_h, r, cv.stride_h);
  const int64_t qq = out_extent(w, cv.pad_w, cv.dilation_w, s, cv.stride_w);
  if (pp < 0 || qq < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "the filter (%" PRId64 " x %" PRId64
                     ", dilation %d x %d) is larger than "
                     "the padded input (%" PRId64 " x %" PRId64 ", padding %d x %d)",
                     r, s, cv.dilation_h, cv.dilation_w, h, w, cv.pad_h, cv.pad_w);
  const int64_t want[4] = {n, pp, qq, k};
  if (out.dim[0] != n || out.dim[1] != pp || out.dim[2] != qq || out.dim[3] != k)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s must be (N, P, Q, K) = %s for %s %s and %s %s with these padding, "
                     "stride and dilation; got %s",
                     out_name, dims_text(want).c_str(), act_name, dims_text(act.dim).c_str(),
                     flt_name, dims_text(flt.dim).c_str(), dims_text(out.dim).c_str());

  // The implicit GEMM (pcr_problem.op's comment); each extent counts tiles in int32.
  const int64_t mnk[3][3] = {
      {n * pp * qq, k, r * s * cg}, {n * h * w, ch, r * s * k / g}, {k, r * s * cg, n * pp * qq}};
  const int64_t* e = mnk[op - 1];
  if (e[0] > kMaxExtent || e[1] > kMaxExtent || e[2] > kMaxExtent)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "the convolution's implicit GEMM is %" PRId64 " x %" PRId64 " x %" PRId64
                     ": past 2^31 - 1024 in one extent, which kernels count in 32 bits",
                     e[0], e[1], e[2]);
  if (A.flat.dtype != B.flat.dtype)
    return set_error(PCR_ERR_UNSUPPORTED, "%s is %s but %s is %s; they must share a dtype",
                     names[0], dtype_name(A.flat.dtype), names[1], dtype_name(B.flat.dtype));

  const bool use_c = c && beta != 0.0;
  if (c) {
    if ((st = load_packed(c, "c", kOrders[op][2], &C))) return st;
    if (C.flat.dtype != D.flat.dtype || std::memcmp(C.dim, D.dim, sizeof C.dim) != 0)
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "c must be packed like %s, with its shape %s and dtype %s; got %s %s",
                       names[2], dims_text(D.dim).c_str(), dtype_name(D.flat.dtype),
                       dims_text(C.dim).c_str(), dtype_name(C.flat.dtype));
  }
  Matrix V;
  if (x.bias) {
    const DLTensor* t = x.bias;
    const int dt = dtype_from_dl(t->dtype);
    if (t->ndim != 1 || t->shape[0] != k || (k > 1 && t->strides && t->strides[0] != 1) ||
        dt != D.flat.dtype)
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "bias must be a contiguous vector of the %" PRId64
                       " output channels in %s's dtype (%s); got shape %s, %s",
                       k, names[2], dtype_name(D.flat.dtype), shape_text(t->shape, t->ndim).c_str(),
                       dtype_name(dt));
    V.rows = 1, V.cols = k, V.s0 = k, V.s1 = 1;
    V.dtype = dt, V.esize = esize_of(dt);
    if ((st = load_place(t, "bias", k, &V))) return st;
  }

  const Matrix* ops[kPlaces] = {&A.flat, &B.flat, &D.flat, c ? &C.flat : nullptr,
                                x.bias ? &V : nullptr};
  const char* const place_names[kPlaces] = {names[0], names[1], names[2], "c", "bias"};
  bool host = false;
  if ((st = check_places(ops, place_names, &host))) return st;
  const bool c_is_d = use_c && C.flat.ptr == D.flat.ptr;
  if (use_c && !c_is_d && overlaps(C.flat, D.flat))
    return set_error(PCR_ERR_OVERLAP,
                     "c overlaps %s without being the same tensor; pass c=%s or separate buffers",
                     names[2], names[2]);

  p->op = op;
  p->conv = {int32_t(n),  int32_t(h),    int32_t(w),    int32_t(ch),
             int32_t(k),  int32_t(r),    int32_t(s),    int32_t(pp),
             int32_t(qq), cv.pad_h,      cv.pad_w,      cv.stride_h,
             cv.stride_w, cv.dilation_h, cv.dilation_w, g};
  p->m = e[0];
  p->n = e[1];
  p->k = e[2];
  p->batch = 1;
  p->dtype_a = p->dtype_b = A.flat.dtype;
  if (x.math == PCR_MATH_TF32 && A.flat.dtype == PCR_F32) p->dtype_a = p->dtype_b = PCR_TF32;
  p->dtype_d = D.flat.dtype;
  p->layout_a = p->layout_b = PCR_NHWC;
  p->align_a = alignment_bytes(A.flat, PCR_ROW_MAJOR, A.flat.s0);
  p->align_b = alignment_bytes(B.flat, PCR_ROW_MAJOR, B.flat.s0);
  p->align_d = alignment_bytes(D.flat, PCR_ROW_MAJOR, D.flat.s0);
  p->host = host;
  p->activation = x.activation;
  p->epilogue = x.bias || x.activation != PCR_ACT_NONE ? PCR_EPI_BIASACT : PCR_EPI_LINEAR;
  if (x.bias) {
    p->bias = PCR_BIAS_PER_COLUMN;  // the implicit GEMM's N is the output channel
    p->align_bias = alignment_bytes(V, PCR_ROW_MAJOR, V.s0);
  }
  if (use_c) {
    p->dtype_c = C.flat.dtype;
    p->c_mode = PCR_C_READ;
    p->align_c = alignment_bytes(C.flat, PCR_ROW_MAJOR, C.flat.s0);
  }

  bound->a = A.flat;
  bound->b = B.flat;
  bound->d = D.flat;
  if (use_c) bound->c = C.flat;
  if (x.bias) bound->bias = V;
  bound->lda = A.flat.s0, bound->ldb = B.flat.s0, bound->ldc = C.flat.s0, bound->ldd = D.flat.s0;
  bound->alpha = alpha;
  bound->beta = beta;
  bound->activation = activation_of(x);
  bound->conv = {p->conv, op};
  return finish_problem(p, D.flat, host);
}

namespace {

// An image and its unfolding (pcr_im2col, pcr_col2im) checked: the geometry, the image a
// packed NHWC tensor, cols a contiguous row-major (N*P*Q x >= r*s*C) matrix of its dtype.
// `what` names the call in messages.
struct Unfolding {
  Tensor4 image;
  Matrix cols;
  Im2col g{};  // the geometry the kernels take
};
int check_unfolding(const DLTensor* it, const char* image, const DLTensor* ct, const pcr_conv* cv,
                    int32_t r, int32_t s, const char* what, Unfolding* u) {
  if (!it || !ct || !cv)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "%s: %s, cols and conv are required", what, image);
  if (int st = check_tensors({{it, image}, {ct, "cols"}})) return st;
  if (r < 1 || s < 1 || cv->pad_h < 0 || cv->pad_w < 0 || cv->stride_h < 1 || cv->stride_w < 1 ||
      cv->dilation_h < 1 || cv->dilation_w < 1 || cv->groups < 1)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s: needs a filter of at least 1 x 1 (got %d x %d), padding >= 0, "
                     "stride, dilation and groups >= 1",
                     what, r, s);
  if (int st = load_packed(it, image, "NHWC", &u->image)) return st;
  const int64_t* dim = u->image.dim;
  const int64_t groups = cv->groups;
  if (dim[3] % groups)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "%s: %s's %" PRId64 " channels in %d groups", what,
                     image, dim[3], cv->groups);
  const int64_t p = out_extent(dim[1], cv->pad_h, cv->dilation_h, r, cv->stride_h);
  const int64_t q = out_extent(dim[2], cv->pad_w, cv->dilation_w, s, cv->stride_w);
  if (p < 0 || q < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s: the %d x %d filter is larger than the padded input", what, r, s);
  const int64_t rows = dim[0] * p * q, taps = int64_t(r) * s * (dim[3] / groups);
  if (ct->ndim != 2 || ct->shape[0] != rows || ct->shape[1] % groups ||
      ct->shape[1] / groups < taps ||
      (ct->strides && ct->shape[0] > 1 && ct->strides[0] != ct->shape[1]) ||
      (ct->strides && ct->shape[1] > 1 && ct->strides[1] != 1))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "cols must be a contiguous row-major (%" PRId64 ", %d x >= %" PRId64
                     ") matrix: N * P * Q rows of a block per group of r * s * C / groups values",
                     rows, cv->groups, taps);
  Matrix& cols = u->cols;
  cols.rows = ct->shape[0];
  cols.cols = ct->shape[1];
  cols.s0 = cols.cols;
  cols.s1 = 1;
  if (int st = load_dtype(ct, "cols", &cols)) return st;
  if (int st = load_place(ct, "cols", cols.rows * cols.cols, &cols)) return st;
  if (cols.dtype != u->image.flat.dtype)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "cols must have %s's dtype", image);
  u->g = Im2col{dim[0],
                dim[1],
                dim[2],
                dim[3],
                p,
                q,
                r,
                s,
                cols.cols,
                groups,
                cv->pad_h,
                cv->pad_w,
                cv->stride_h,
                cv->stride_w,
                cv->dilation_h,
                cv->dilation_w};
  return PCR_OK;
}

// The last check of both (after their own): one GPU for both tensors, apart.
int on_one_gpu(const Unfolding& u, const char* image, const char* what) {
  const Matrix &img = u.image.flat, &cols = u.cols;
  if (is_host(img.device_type) || is_host(cols.device_type) || img.device_id != cols.device_id)
    return set_error(PCR_ERR_DEVICE_MISMATCH, "%s: %s and cols must be on one GPU", what, image);
  if (overlaps(img, cols)) return set_error(PCR_ERR_OVERLAP, "%s: cols overlaps %s", what, image);
  return PCR_OK;
}

}  // namespace

int im2col(const DLTensor* xt, const DLTensor* ct, const pcr_conv* cv, int32_t r, int32_t s,
           cudaStream_t stream) {
  Unfolding u;
  if (int st = check_unfolding(xt, "x", ct, cv, r, s, "pcr_im2col", &u)) return st;
  if (int st = on_one_gpu(u, "x", "pcr_im2col")) return st;
  if (u.cols.rows == 0 || u.cols.cols == 0) return PCR_OK;
  DeviceGuard guard;
  if (int st = guard.set(u.cols.device_id)) return st;
  return launch_unfold(u.image.flat.ptr, u.cols.ptr, u.cols.esize, u.g, stream);
}

int col2im(const DLTensor* ct, const DLTensor* dxt, const DLTensor* c, const pcr_conv* cv,
           int32_t r, int32_t s, double alpha, double beta, cudaStream_t stream) {
  Unfolding u;
  if (int st = check_unfolding(dxt, "dx", ct, cv, r, s, "pcr_col2im", &u)) return st;
  const Matrix& dx = u.image.flat;
  if (dx.dtype != PCR_F16 && dx.dtype != PCR_BF16 && dx.dtype != PCR_F32)
    return set_error(PCR_ERR_UNSUPPORTED, "pcr_col2im: dx must be float16, bfloat16 or float32");
  Tensor4 in;
  if (c) {
    if (int st = check_tensors({{c, "c"}})) return st;
    if (int st = load_packed(c, "c", "NHWC", &in)) return st;
    if (!std::equal(in.dim, in.dim + 4, u.image.dim) || in.flat.dtype != dx.dtype ||
        in.flat.device_type != dx.device_type || in.flat.device_id != dx.device_id)
      return set_error(PCR_ERR_INVALID_ARGUMENT, "c must be dx's shape and dtype, on its GPU");
    if (overlaps(in.flat, dx) && in.flat.ptr != dx.ptr)
      return set_error(PCR_ERR_OVERLAP, "c overlaps dx without being it");
  }
  if (int st = on_one_gpu(u, "dx", "pcr_col2im")) return st;
  if (dx.rows * dx.cols == 0) return PCR_OK;
  DeviceGuard guard;
  if (int st = guard.set(dx.device_id)) return st;
  return launch_fold(u.cols.ptr, dx.ptr, c ? in.flat.ptr : nullptr, dx.dtype, u.g, float(alpha),
                     float(beta), stream);
}

}  // namespace pcr
