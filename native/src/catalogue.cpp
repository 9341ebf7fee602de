// The build's kernel catalogue as the ABI reports it: build info, kernels by index and name.
#include <cstring>
#include <string>

#include "runtime.h"

#ifndef PCR_CUTLASS_VERSION
#define PCR_CUTLASS_VERSION "unknown"
#endif

namespace pcr {

const char* build_info() {
  static const std::string info = [] {
#ifdef PCR_XLA_FFI
    const std::string jax_handler = xla_handler_info();
#else
    const std::string jax_handler = "{\"built\": false}";
#endif
    std::string s =
        "{\"abi\": " + std::to_string(PCR_ABI_VERSION) +
        ", \"cuda_runtime\": " + std::to_string(CUDART_VERSION) +
        ", \"cutlass\": \"" PCR_CUTLASS_VERSION "\", \"kernels\": " + std::to_string(kKernelCount) +
        ", \"jax_handler\": " + jax_handler + ", \"catalog\": " + kBuildJson + "}";
    return s;
  }();
  return info.c_str();
}

int kernel_info(int32_t kernel, pcr_kernel_desc* out) {
  if (kernel < 0 || kernel >= kKernelCount)
    return set_error(PCR_ERR_KERNEL_NOT_FOUND, "kernel index %d out of range [0, %d)", kernel,
                     kKernelCount);
  *out = kKernels[kernel]->info;
  return PCR_OK;
}

int kernel_find(const char* name, int32_t* kernel) {
  for (int i = 0; i < kKernelCount; ++i)
    if (name && std::strcmp(kKernels[i]->info.name, name) == 0) {
      *kernel = i;
      return PCR_OK;
    }
  *kernel = -1;
  return set_error(PCR_ERR_KERNEL_NOT_FOUND, "no kernel named '%s' in this build",
                   name ? name : "(null)");
}

}  // namespace pcr
