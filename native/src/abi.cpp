// The C ABI: every extern "C" export of the library, each run behind the exception guard.
//
// An export only plumbs arguments into the room that does the work (runtime.h says which)
// and runs it through guarded() (guard.h), so that no C++ exception reaches the caller.
// Four exports cannot throw and go unguarded: pcr_abi_version and pcr_kernel_count return
// constants, pcr_last_error a thread-local array's address, pcr_ranker_destroy deletes. The
// CPython builtins (pcr_py_builtins) are the library's other entry points; python.cpp runs
// them behind the same guard. pcr_xla_gemm (builds with jaxlib's FFI headers only) answers
// XLA with an XLA FFI error rather than a status, so xla_ffi.cpp runs it behind the guard
// itself.
#include "guard.h"
#include "runtime.h"

using namespace pcr;

extern "C" {

// ---- library -------------------------------------------------------------------

PCR_API int pcr_abi_version(void) { return PCR_ABI_VERSION; }

PCR_API const char* pcr_last_error(void) { return last_error(); }

// The JSON is built once; should that fail (out of host memory), a JSON object saying so.
PCR_API const char* pcr_build_info(void) {
  static const char kFailed[] = "{\"error\": \"pcr_build_info failed: see pcr_last_error()\"}";
  return guarded_or(kFailed, [&] { return build_info(); });
}

// ---- catalogue -----------------------------------------------------------------

PCR_API int pcr_kernel_count(void) { return kKernelCount; }

PCR_API int pcr_kernel_info(int32_t kernel, pcr_kernel_desc* out) {
  return guarded([&] { return kernel_info(kernel, out); });
}

PCR_API int pcr_kernel_find(const char* name, int32_t* kernel) {
  return guarded([&] { return kernel_find(name, kernel); });
}

PCR_API int pcr_kernel_runs_on(int32_t kernel, int32_t device, int32_t* runs) {
  return guarded([&] {
    bool r = false;
    int st = kernel_runs_on(kernel, device, &r);
    *runs = r;
    return st;
  });
}

PCR_API int pcr_kernel_verdicts(const pcr_problem* problem, pcr_verdict* verdicts, int32_t count) {
  return guarded([&] {
    clear_error();
    if (!problem) return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_kernel_verdicts: no problem");
    return judge(*problem, nullptr, verdicts, count);
  });
}

// ---- devices -------------------------------------------------------------------

PCR_API int pcr_driver_version(int32_t* version) {
  return guarded([&] { return driver_version(version); });
}

PCR_API int pcr_runtime_version(int32_t* version) {
  return guarded([&] { return runtime_version(version); });
}

PCR_API int pcr_device_count(int32_t* count) {
  return guarded([&] { return device_count(count); });
}

PCR_API int pcr_device_name(int32_t device, char* buf, size_t size) {
  return guarded([&] { return device_name(device, buf, size); });
}

PCR_API int pcr_device_cc(int32_t device, int32_t* cc, int32_t* sm_count) {
  return guarded([&] { return device_cc(device, cc, sm_count); });
}

PCR_API int pcr_stream_wait(void* consumer, void* producer) {
  return guarded([&] {
    return stream_wait(static_cast<cudaStream_t>(consumer), static_cast<cudaStream_t>(producer));
  });
}

PCR_API int pcr_pointer_device(const void* ptr, int32_t* device) {
  return guarded([&] { return pointer_device(ptr, device); });
}

// ---- scratch memory ----------------------------------------------------------

PCR_API int pcr_memory_stats(int32_t device, pcr_memory_usage* out) {
  return guarded([&] {
    clear_error();
    return memory_stats(device, out);
  });
}

PCR_API int pcr_empty_cache(int32_t device) {
  return guarded([&] {
    clear_error();
    return empty_cache(device);
  });
}

PCR_API int pcr_set_scratch_limit(int64_t bytes) {
  return guarded([&] {
    clear_error();
    return set_scratch_limit(bytes);
  });
}

PCR_API int pcr_set_allocator(pcr_alloc_fn alloc, pcr_release_fn release, void* context) {
  return guarded([&] { return set_allocator(alloc, release, context); });
}

// ---- GEMM ----------------------------------------------------------------------

PCR_API int pcr_describe(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                         double alpha, double beta, const pcr_extras* extras, pcr_problem* out,
                         pcr_verdict* verdicts, int32_t count) {
  return guarded(
      [&] { return describe_judged(a, b, c, d, alpha, beta, extras, out, verdicts, count); });
}

PCR_API int pcr_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                     double alpha, double beta, const pcr_extras* extras, int32_t kernel,
                     void* stream, pcr_problem* problem) {
  return guarded([&] { return gemm(a, b, c, d, alpha, beta, extras, kernel, stream, problem); });
}

// ---- bound plans ---------------------------------------------------------------

PCR_API int pcr_plan_create(const DLTensor* a, const DLTensor* b, const DLTensor* c,
                            const DLTensor* d, double alpha, double beta, const pcr_extras* extras,
                            int32_t kernel, pcr_problem* problem, pcr_plan** plan) {
  return guarded([&] {
    clear_error();
    if (!plan) return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_plan_create: plan is NULL");
    return plan_create(a, b, c, d, alpha, beta, extras, kernel, problem, plan);
  });
}

PCR_API int pcr_plan_run(pcr_plan* plan, void* stream) {
  return guarded([&] {
    return plan_run(plan, nullptr, nullptr, nullptr, nullptr, nullptr,
                    static_cast<cudaStream_t>(stream));
  });
}

PCR_API int pcr_plan_run_with(pcr_plan* plan, const DLTensor* a, const DLTensor* b,
                              const DLTensor* c, const DLTensor* d, const pcr_extras* extras,
                              void* stream) {
  return guarded([&] {
    clear_error();
    return plan_run(plan, a, b, c, d, extras, static_cast<cudaStream_t>(stream));
  });
}

PCR_API int pcr_plan_kernel(const pcr_plan* plan, int32_t* kernel) {
  return guarded([&] { return plan_kernel(plan, kernel); });
}

PCR_API void pcr_plan_destroy(pcr_plan* plan) {
  guarded([&] { plan_destroy(plan); });
}

// ---- grouped GEMM ----------------------------------------------------------------

PCR_API int pcr_grouped_gemm(const DLTensor* const* a, const DLTensor* const* b,
                             const DLTensor* const* c, const DLTensor* const* d, int32_t count,
                             double alpha, double beta, const pcr_extras* const* extras,
                             int32_t kernel, void* stream, pcr_problem* problem) {
  return guarded([&] {
    return grouped_gemm(a, b, c, d, count, alpha, beta, extras, kernel, stream, problem);
  });
}

PCR_API int pcr_moe_gemm(const DLTensor* x, const DLTensor* w, const DLTensor* offsets,
                         const DLTensor* out, double alpha, const pcr_extras* extras,
                         int32_t kernel, void* stream, pcr_problem* problem) {
  return guarded(
      [&] { return moe_gemm(x, w, offsets, out, alpha, extras, kernel, stream, problem); });
}

PCR_API int pcr_quantize(const DLTensor* x, const DLTensor* q, const DLTensor* scale,
                         int32_t granularity, int32_t dynamic, void* stream) {
  return guarded([&] {
    clear_error();
    return quantize(x, q, scale, granularity, dynamic, static_cast<cudaStream_t>(stream));
  });
}

PCR_API int pcr_im2col(const DLTensor* x, const DLTensor* cols, const pcr_conv* conv, int32_t r,
                       int32_t s, void* stream) {
  return guarded([&] {
    clear_error();
    return im2col(x, cols, conv, r, s, static_cast<cudaStream_t>(stream));
  });
}

PCR_API int pcr_col2im(const DLTensor* cols, const DLTensor* dx, const DLTensor* c,
                       const pcr_conv* conv, int32_t r, int32_t s, double alpha, double beta,
                       void* stream) {
  return guarded([&] {
    clear_error();
    return col2im(cols, dx, c, conv, r, s, alpha, beta, static_cast<cudaStream_t>(stream));
  });
}

// ---- kernel choice: the time model and the ranking ---------------------------------

PCR_API int pcr_model_terms(const pcr_kernel_desc* kernel, int64_t m, int64_t n, int64_t k,
                            int64_t batch, int32_t sm_count, int32_t cc, pcr_model* out) {
  return guarded([&] {
    if (!kernel || !out) return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_model_terms: NULL");
    return model_terms(*kernel, m, n, k, batch, sm_count, cc, out);
  });
}

PCR_API int pcr_kernel_families(int32_t cc, int32_t* families, int32_t capacity, int32_t* count) {
  return guarded([&] {
    if ((capacity > 0 && !families) || !count)
      return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_kernel_families: NULL");
    *count = kernel_families(cc, families, capacity);
    return int(PCR_OK);
  });
}

PCR_API int pcr_ranker_create(const pcr_table* table, pcr_ranker** ranker) {
  return guarded([&] { return ranker_create(table, ranker); });
}

PCR_API void pcr_ranker_destroy(pcr_ranker* ranker) { ranker_destroy(ranker); }

PCR_API int pcr_rank(const pcr_problem* problem, const int32_t* families, int32_t family_count,
                     const pcr_kernel_desc* candidates, const int32_t* ids, int32_t count,
                     const pcr_ranker* ranker, pcr_ranked* out, int32_t* ranked) {
  return guarded([&] {
    return rank(problem, families, family_count, candidates, ids, count, ranker, out, ranked);
  });
}

PCR_API int pcr_selector_set(const pcr_ranker* ranker) {
  return guarded([&] { return selector_set(ranker); });
}

PCR_API int pcr_select_tuned(int32_t device, const pcr_tuned* entries, int32_t count,
                             const char* source, const char* refusal) {
  return guarded([&] { return select_tuned(device, entries, count, source, refusal); });
}

PCR_API int pcr_select_provider(pcr_select_provider_fn provider, void* context) {
  return guarded([&] { return select_provider(provider, context); });
}

PCR_API int pcr_select_observe(pcr_select_observer_fn observer, void* context) {
  return guarded([&] { return select_observe(observer, context); });
}

PCR_API int pcr_select_rank(const pcr_problem* problem, const pcr_verdict* verdicts, int32_t flags,
                            pcr_ranked* out, int32_t capacity, int32_t* count) {
  return guarded([&] {
    clear_error();
    return select_rank(problem, verdicts, flags, out, capacity, count);
  });
}

PCR_API int pcr_select_passed_over(const pcr_problem* problem, const pcr_verdict* verdicts,
                                   int32_t flags, pcr_verdict* passed, int32_t count) {
  return guarded([&] {
    clear_error();
    return select_passed_over(problem, verdicts, flags, passed, count);
  });
}

PCR_API int pcr_select_clear(void) {
  return guarded([&] { select_clear(); });
}

PCR_API int pcr_problem_identity(const pcr_problem* problem, int64_t* values, int32_t capacity) {
  return guarded([&] { return identity(problem, values, capacity); });
}

PCR_API const char* pcr_problem_identity_names(void) { return identity_names(); }

// ---- Python-object entry points (python.cpp) -------------------------------------

PCR_API int pcr_py_plan_create(void* a, void* b, void* c, void* d, double alpha, double beta,
                               void* extras, int32_t kernel, pcr_problem* problem,
                               pcr_plan** plan) {
  return guarded(
      [&] { return py_plan_create(a, b, c, d, alpha, beta, extras, kernel, problem, plan); });
}

PCR_API int pcr_py_quantize(void* x, void* q, void* scale, int32_t granularity, int32_t dynamic,
                            int32_t flags, void* stream) {
  return guarded([&] { return py_quantize(x, q, scale, granularity, dynamic, flags, stream); });
}

PCR_API int pcr_py_im2col(void* x, void* cols, void* conv, int32_t r, int32_t s, int32_t flags,
                          void* stream) {
  return guarded([&] { return py_im2col(x, cols, conv, r, s, flags, stream); });
}

PCR_API int pcr_py_col2im(void* cols, void* dx, void* c, void* conv, int32_t r, int32_t s,
                          double alpha, double beta, int32_t flags, void* stream) {
  return guarded([&] { return py_col2im(cols, dx, c, conv, r, s, alpha, beta, flags, stream); });
}

PCR_API int pcr_py_describe(void* a, void* b, void* c, void* d, double alpha, double beta,
                            void* extras, pcr_problem* out, pcr_verdict* verdicts, int32_t count) {
  return guarded(
      [&] { return py_describe(a, b, c, d, alpha, beta, extras, out, verdicts, count); });
}

PCR_API int pcr_py_grouped_gemm(void** a, void** b, void** c, void** d, void** extras,
                                int32_t count, double alpha, double beta, int32_t kernel,
                                int32_t flags, void* stream, pcr_problem* problem) {
  return guarded([&] {
    return py_grouped_gemm(a, b, c, d, extras, count, alpha, beta, kernel, flags, stream, problem);
  });
}

PCR_API int pcr_py_moe_gemm(void* x, void* w, void* offsets, void* out, double alpha, void* extras,
                            int32_t kernel, int32_t flags, void* stream, pcr_problem* problem) {
  return guarded([&] {
    return py_moe_gemm(x, w, offsets, out, alpha, extras, kernel, flags, stream, problem);
  });
}

PCR_API const void* pcr_py_builtins(void) {
  return guarded_or<const void>(nullptr, [&] { return py_builtins(); });
}

// ---- XLA FFI handler (xla_ffi.cpp) -------------------------------------------------

#ifdef PCR_XLA_FFI
// pycutlass_rt.jax's handler: XLA_FFI_Error* (XLA_FFI_CallFrame*), registered with XLA by
// jax.ffi.register_ffi_target. Outside the public header: its types are XLA's, and Python
// looks it up by name.
PCR_API void* pcr_xla_gemm(void* call_frame) { return xla_gemm(call_frame); }
#endif

}  // extern "C"
