// Whether a kernel takes a described problem (check_kernel), kernel by kernel over the build
// (judge), with the reason where not.
#include <cstdio>
#include <string>

#include "runtime.h"
#include "problem.h"

namespace pcr {

// Whether a kernel's mainloop takes a problem's scales: block-scaled kernels its grids
// exactly, the others any problem without grids.
bool same_block_scales(const pcr_kernel_desc& kd, const pcr_problem& p) {
  const bool grids = is_grid(p.scale_m);
  return kd.scale_m == (grids ? p.scale_m : PCR_SCALE_NONE) &&
         kd.scale_n == (grids ? p.scale_n : PCR_SCALE_NONE);
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
                     "%s reduces no amax and applies no scale_d (kernels with out_scale: the "
                     "dequantizing epilogues, and sm90a/sm100a quantized kernels)",
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
  if (is_fast_accum(kd) && !p.fast_accum)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "%s accumulates fp8 products without adding them into fp32 every 128 of K "
                     "(fast accumulation), which this call did not allow (math='fast_accum')",
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
