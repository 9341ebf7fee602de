// The catalogue and GEMM entry points of the C ABI; their work is in the rooms runtime.h names.
#include <cstring>
#include <string>

#include "runtime.h"

#ifndef PCR_CUTLASS_VERSION
#define PCR_CUTLASS_VERSION "unknown"
#endif

using namespace pcr;

extern "C" {

PCR_API int pcr_abi_version(void) { return PCR_ABI_VERSION; }

PCR_API const char* pcr_build_info(void) {
  static const std::string info = [] {
    std::string s = "{\"abi\": " + std::to_string(PCR_ABI_VERSION) +
                    ", \"cuda_runtime\": " + std::to_string(CUDART_VERSION) +
                    ", \"cutlass\": \"" PCR_CUTLASS_VERSION "\", \"kernels\": " +
                    std::to_string(kKernelCount) + ", \"catalog\": " + kBuildJson + "}";
    return s;
  }();
  return info.c_str();
}

PCR_API int pcr_kernel_count(void) { return kKernelCount; }

PCR_API int pcr_kernel_info(int32_t kernel, pcr_kernel_desc* out) {
  if (kernel < 0 || kernel >= kKernelCount)
    return set_error(PCR_ERR_KERNEL_NOT_FOUND, "kernel index %d out of range [0, %d)", kernel,
                     kKernelCount);
  *out = kKernels[kernel]->info;
  return PCR_OK;
}

PCR_API int pcr_kernel_find(const char* name, int32_t* kernel) {
  for (int i = 0; i < kKernelCount; ++i)
    if (name && std::strcmp(kKernels[i]->info.name, name) == 0) {
      *kernel = i;
      return PCR_OK;
    }
  *kernel = -1;
  return set_error(PCR_ERR_KERNEL_NOT_FOUND, "no kernel named '%s' in this build",
                   name ? name : "(null)");
}

PCR_API int pcr_kernel_check(int32_t kernel, const pcr_problem* problem) {
  clear_error();
  return check_kernel(kernel, *problem, nullptr);
}

PCR_API int pcr_describe(const DLTensor* a, const DLTensor* b, const DLTensor* c,
                         const DLTensor* d, double alpha, double beta,
                         const pcr_extras* extras, pcr_problem* out) {
  Bound bd;
  return describe(a, b, c, d, alpha, beta, extras, out, &bd);
}

PCR_API int pcr_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* c,
                     const DLTensor* d, double alpha, double beta, const pcr_extras* extras,
                     int32_t kernel, void* stream, pcr_problem* problem) {
  return gemm(a, b, c, d, alpha, beta, extras, kernel, stream, problem);
}

PCR_API int pcr_select_put(const pcr_problem* problem, const int32_t* kernels,
                           int32_t count) {
  return select_put(problem, kernels, count);
}

PCR_API int pcr_plan_create(const DLTensor* a, const DLTensor* b, const DLTensor* c,
                            const DLTensor* d, double alpha, double beta,
                            const pcr_extras* extras, int32_t kernel, pcr_problem* problem,
                            pcr_plan** plan) {
  clear_error();
  if (!plan) return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_plan_create: plan is NULL");
  return plan_create(a, b, c, d, alpha, beta, extras, kernel, problem, plan);
}

PCR_API int pcr_plan_run(pcr_plan* plan, void* stream) {
  return plan_run(plan, nullptr, nullptr, nullptr, nullptr, nullptr,
                  static_cast<cudaStream_t>(stream));
}

PCR_API int pcr_plan_run_with(pcr_plan* plan, const DLTensor* a, const DLTensor* b,
                              const DLTensor* c, const DLTensor* d, const pcr_extras* extras,
                              void* stream) {
  clear_error();
  return plan_run(plan, a, b, c, d, extras, static_cast<cudaStream_t>(stream));
}

PCR_API int pcr_plan_kernel(const pcr_plan* plan, int32_t* kernel) {
  if (!plan || !kernel) return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_plan_kernel: NULL");
  *kernel = plan->kernel;
  return PCR_OK;
}

PCR_API void pcr_plan_destroy(pcr_plan* plan) { plan_destroy(plan); }

PCR_API int pcr_select_clear(void) {
  select_clear();
  return PCR_OK;
}

}  // extern "C"
