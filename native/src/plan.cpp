// Bound plans: one problem's kernel and prepared launch, built once.
#include <new>

#include "runtime.h"

namespace pcr {

int plan_create(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                double alpha, double beta, const pcr_extras* extras, int32_t kernel,
                pcr_problem* out, pcr_plan** plan) {
  *plan = nullptr;
  pcr_problem local;
  pcr_problem& p = out ? *out : local;
  Bound bd;
  int st = describe(a, b, c, d, alpha, beta, extras, &p, &bd);
  if (st != PCR_OK) return st;
  if (p.host)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "a plan needs GPU tensors; host (numpy) operands are staged per call: "
                     "use gemm() for them");
  int k = -1;
  if ((st = kernel_for(p, bd, kernel, &k))) return st;
  auto* pl = new (std::nothrow) pcr_plan();
  if (!pl) return set_error(PCR_ERR_INTERNAL, "out of host memory");
  pl->problem = p;
  pl->bound = bd;
  pl->kernel = k;
  if (has_gemm_work(p)) {
    DeviceGuard guard;
    st = guard.set(p.device);
    // Built now for the kernel's own problem, these parameters are what every run launches,
    // unless scratch enters them (staged operands, a workspace): runs build those for the
    // scratch they get, which is the stream's kept buffer (the same block run after run).
    Staging s = stage_layout(p, bd, nullptr);
    GemmArgs g = gemm_args(s.problem, s.bound);
    size_t bytes = kKernels[k]->ops.workspace_size(g);
    if (st == PCR_OK && !s.staged && !bytes) st = pl->prepared.prepare(k, g, 0, nullptr);
    if (st != PCR_OK) {
      plan_destroy(pl);
      return st;
    }
  }
  *plan = pl;
  return PCR_OK;
}

int plan_run(pcr_plan* pl, const DLTensor* a, const DLTensor* b, const DLTensor* c,
             const DLTensor* d, const pcr_extras* extras, cudaStream_t stream) {
  if (!pl) return set_error(PCR_ERR_INVALID_ARGUMENT, "plan is NULL");
  // A run rebuilds the prepared launch when its tensors or scratch moved: two at once
  // would race on it, so a run that finds another under way refuses.
  if (pl->running.exchange(true, std::memory_order_acquire))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "this plan is running in another thread: a plan runs from one thread at "
                     "a time (build one plan per thread)");
  struct Done {
    std::atomic<bool>& running;
    ~Done() { running.store(false, std::memory_order_release); }
  } done{pl->running};
  const Bound* bd = &pl->bound;
  Bound fresh;
  if (a || b || c || d || extras) {
    if (!(a && b && d))
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "a plan runs on a, b, (c,) d (and the extras' tensors) together");
    const bool tf32 = pl->problem.dtype_a == PCR_TF32;
    const bool fp8 = pl->problem.dtype_a == PCR_E4M3 || pl->problem.dtype_a == PCR_E5M2;
    // math matters to fp32 (TF32 or not) and fp8 (fast accumulation or not) only
    const bool matters = tf32 || fp8 || pl->problem.dtype_a == PCR_F32;
    const ActivationArgs& act = pl->bound.activation;
    // a convolution plan's tensors are the same convolution's
    const ConvArgs& cv = pl->bound.conv;
    const pcr_conv conv{cv.kind,     cv.pad_h,      cv.pad_w,      cv.stride_h,
                        cv.stride_w, cv.dilation_h, cv.dilation_w, cv.groups};
    pcr_extras x{nullptr,
                 nullptr,
                 nullptr,
                 act.kind,
                 tf32                     ? PCR_MATH_TF32
                 : pl->problem.fast_accum ? PCR_MATH_FAST_ACCUM
                                          : PCR_MATH_IEEE,
                 act.alpha,
                 act.beta,
                 cv.kind != PCR_OP_GEMM ? &conv : nullptr};
    if (extras) {
      const ActivationArgs given = activation_of(*extras);
      if (given.kind != act.kind || given.alpha != act.alpha || given.beta != act.beta ||
          (matters && extras->math != x.math))
        return set_error(PCR_ERR_INVALID_ARGUMENT,
                         "a plan runs with the activation (and its parameters) and math it was "
                         "built with");
      x.bias = extras->bias, x.scale_a = extras->scale_a, x.scale_b = extras->scale_b;
      x.aux = extras->aux, x.amax = extras->amax, x.scale_d = extras->scale_d;
    }
    pcr_problem p;
    int st = describe(a, b, c, d, pl->bound.alpha, pl->bound.beta, &x, &p, &fresh);
    if (st != PCR_OK) return st;
    if (!same_problem(p, pl->problem))
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "these tensors describe another problem than the plan's (%lldx%lldx%lld "
                       "with its dtypes, layouts, alignments and device): build a plan for them",
                       (long long)pl->problem.m, (long long)pl->problem.n,
                       (long long)pl->problem.k);
    bd = &fresh;
  }
  DeviceGuard guard;
  int st = guard.set(pl->problem.device);
  if (st != PCR_OK) return st;
  return launch_device(pl->problem, *bd, pl->kernel, stream, pl);
}

int plan_kernel(const pcr_plan* plan, int32_t* kernel) {
  if (!plan || !kernel) return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_plan_kernel: NULL");
  *kernel = plan->kernel;
  return PCR_OK;
}

void plan_destroy(pcr_plan* plan) { delete plan; }

}  // namespace pcr
