// The C ABI: every extern "C" export of the library, each handing its work to a room.
#include <cstdio>
#include <cstring>
#include <string>

#include "runtime.h"

#ifndef PCR_CUTLASS_VERSION
#define PCR_CUTLASS_VERSION "unknown"
#endif

using namespace pcr;

extern "C" {

// ---- library -------------------------------------------------------------------

PCR_API int pcr_abi_version(void) { return PCR_ABI_VERSION; }

PCR_API const char* pcr_last_error(void) { return last_error(); }

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

// ---- catalogue -----------------------------------------------------------------

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

PCR_API int pcr_kernel_runs_on(int32_t kernel, int32_t device, int32_t* runs) {
  bool r = false;
  int st = kernel_runs_on(kernel, device, &r);
  *runs = r;
  return st;
}

PCR_API int pcr_kernel_check(int32_t kernel, const pcr_problem* problem) {
  clear_error();
  return check_kernel(kernel, *problem, nullptr);
}

// ---- devices -------------------------------------------------------------------

PCR_API int pcr_driver_version(int32_t* version) {
  int v = 0;
  cudaError_t e = cudaDriverGetVersion(&v);  // 0 without a driver, not an error
  *version = e == cudaSuccess ? v : 0;
  return PCR_OK;
}

PCR_API int pcr_runtime_version(int32_t* version) {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  *version = v;
  return PCR_OK;
}

PCR_API int pcr_device_count(int32_t* count) {
  int n = 0;
  *count = 0;
  int st = cuda_status(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (st != PCR_OK) return st;
  *count = n;
  return PCR_OK;
}

PCR_API int pcr_device_name(int32_t device, char* buf, size_t size) {
  DeviceInfo info{};
  int st = device_info(device, &info);
  if (st != PCR_OK) return st;
  cudaDeviceProp prop;
  st = cuda_status(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  if (st != PCR_OK) return st;
  snprintf(buf, size, "%s", prop.name);
  return PCR_OK;
}

PCR_API int pcr_device_cc(int32_t device, int32_t* cc, int32_t* sm_count) {
  DeviceInfo info{};
  int st = device_info(device, &info);
  if (st != PCR_OK) return st;
  *cc = info.cc;
  *sm_count = info.sm_count;
  return PCR_OK;
}

PCR_API int pcr_pointer_device(const void* ptr, int32_t* device) {
  cudaPointerAttributes attr;
  int st = cuda_status(cudaPointerGetAttributes(&attr, ptr), "cudaPointerGetAttributes");
  if (st != PCR_OK) return st;
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "pointer %p is not CUDA device memory", ptr);
  *device = attr.device;
  return PCR_OK;
}

// ---- GEMM ----------------------------------------------------------------------

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

// ---- bound plans ---------------------------------------------------------------

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

PCR_API int pcr_select_put(const pcr_problem* problem, const int32_t* kernels,
                           int32_t count) {
  return select_put(problem, kernels, count);
}

// ---- grouped GEMM ----------------------------------------------------------------

PCR_API int pcr_grouped_gemm(const DLTensor* const* a, const DLTensor* const* b,
                             const DLTensor* const* c, const DLTensor* const* d, int32_t count,
                             double alpha, double beta, int32_t kernel, void* stream,
                             pcr_problem* problem) {
  return grouped_gemm(a, b, c, d, count, alpha, beta, kernel, stream, problem);
}

PCR_API int pcr_moe_gemm(const DLTensor* x, const DLTensor* w, const DLTensor* offsets,
                         const DLTensor* out, double alpha, int32_t kernel, void* stream,
                         pcr_problem* problem) {
  return moe_gemm(x, w, offsets, out, alpha, kernel, stream, problem);
}

PCR_API int pcr_select_clear(void) {
  select_clear();
  return PCR_OK;
}

// ---- Python-object entry points (python.cpp) -------------------------------------

PCR_API int pcr_py_gemm(void* a, void* b, void* c, void* d, double alpha, double beta,
                        void* extras, int32_t kernel, int32_t flags, void* stream,
                        pcr_problem* problem) {
  return py_gemm(a, b, c, d, alpha, beta, extras, kernel, flags, stream, problem);
}

PCR_API int pcr_py_plan_create(void* a, void* b, void* c, void* d, double alpha, double beta,
                               void* extras, int32_t kernel, pcr_problem* problem,
                               pcr_plan** plan) {
  return py_plan_create(a, b, c, d, alpha, beta, extras, kernel, problem, plan);
}

PCR_API int pcr_py_plan_run(pcr_plan* plan, void* a, void* b, void* c, void* d, void* extras,
                            int32_t flags, void* stream) {
  return py_plan_run(plan, a, b, c, d, extras, flags, stream);
}

PCR_API int pcr_py_plan_launch(pcr_plan* plan) { return py_plan_launch(plan); }

PCR_API int pcr_py_describe(void* a, void* b, void* c, void* d, double alpha, double beta,
                            void* extras, pcr_problem* out) {
  return py_describe(a, b, c, d, alpha, beta, extras, out);
}

PCR_API int pcr_py_grouped_gemm(void** a, void** b, void** c, void** d, int32_t count,
                                double alpha, double beta, int32_t kernel, int32_t flags,
                                void* stream, pcr_problem* problem) {
  return py_grouped_gemm(a, b, c, d, count, alpha, beta, kernel, flags, stream, problem);
}

PCR_API int pcr_py_moe_gemm(void* x, void* w, void* offsets, void* out, double alpha,
                            int32_t kernel, int32_t flags, void* stream, pcr_problem* problem) {
  return py_moe_gemm(x, w, offsets, out, alpha, kernel, flags, stream, problem);
}

PCR_API const void* pcr_py_builtins(void) { return py_builtins(); }


}  // extern "C"
