// From four DLTensor views to one validated GEMM in canonical form.
//
// Canonical form: D is row-major. A column-major D is handled by computing
// D^T = B^T A^T (swap and transpose the operands), so kernels need one D layout.
// Every check runs here, before any device work, and names the argument at fault.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <string>

#include "runtime.h"
#include "problem.h"

namespace pcr {

namespace {

bool is_quantized(int dtype) { return dtype == PCR_S8 || dtype == PCR_E4M3 || dtype == PCR_E5M2; }

}  // namespace

int describe(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
             double alpha, double beta, const pcr_extras* extras, pcr_problem* p, Bound* bound,
             int grouped) {
  clear_error();
  std::memset(p, 0, sizeof *p);
  *bound = Bound{};
  const pcr_extras none{};
  const pcr_extras& x = extras ? *extras : none;
  const DLTensor* bias = x.bias;
  const int activation = x.activation;
  if (x.math != PCR_MATH_IEEE && x.math != PCR_MATH_TF32 && x.math != PCR_MATH_FAST_ACCUM)
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
  p->fast_accum = x.math == PCR_MATH_FAST_ACCUM && (A.dtype == PCR_E4M3 || A.dtype == PCR_E5M2);
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

  return finish_problem(p, D, host, grouped != PCR_GROUPED_NONE);
}

int finish_problem(pcr_problem* p, const Matrix& D, bool host, bool grouped) {
  int st;
  // The build must know this dtype combination at all (before asking for a GPU): a kernel
  // of the problem's kind (op, grouped or not, epilogue, scales) computes these dtypes.
  auto of_kind = [&](const pcr_kernel_desc& kd) {
    return kd.op == p->op && bool(kd.grouped) == grouped &&
           epilogue_serves(kd.epilogue, p->epilogue) && same_block_scales(kd, *p) &&
           (kd.out_scale || !p->out_scale);
  };
  bool known = false;
  for (int i = 0; i < kKernelCount && !known; ++i) {
    const pcr_kernel_desc& kd = kKernels[i]->info;
    known = of_kind(kd) && kd.dtype_a == p->dtype_a && kd.dtype_b == p->dtype_b &&
            kd.dtype_d == p->dtype_d;
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
      if (!of_kind(kd)) continue;
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

}  // namespace pcr
