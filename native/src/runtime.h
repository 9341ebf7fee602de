// Internal declarations shared by the runtime's translation units.
#pragma once

#include <cstdint>

#include "kernel.h"

namespace pcr {

void clear_error();

// ---- registry (generated registry.cpp) ----
extern const KernelEntry* const kKernels[];
extern const int kKernelCount;
extern const char kBuildJson[];

// ---- devices (device.cpp) ----
struct DeviceInfo {
  int cc;        // e.g. 90
  int sm_count;
};
// PCR_OK and the device's properties (cached), or PCR_ERR_NO_DEVICE / PCR_ERR_CUDA.
int device_info(int device, DeviceInfo* out);
// Makes `device` current for the scope, restoring the caller's device afterwards.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  int set(int device);
  ~DeviceGuard();
 private:
  int previous_ = -1;
};
int cuda_status(cudaError_t e, const char* what);
// Whether the build holds an image of kernel `k` that loads on `device` (cached).
int kernel_runs_on(int k, int device, bool* runs);

// ---- operands and problems (problem.cpp) ----
// A validated matrix operand: rows x cols with element strides s0 (rows), s1 (cols).
struct Matrix {
  char* ptr = nullptr;  // data + byte_offset
  int64_t rows = 0, cols = 0, s0 = 0, s1 = 0;
  int dtype = PCR_DTYPE_INVALID;
  int esize = 0;
  int device_type = 0, device_id = 0;
  void transpose();
  // Byte range [lo, hi) touched by the elements; empty when the matrix is empty.
  void extent(uintptr_t* lo, uintptr_t* hi) const;
};

// What a launch needs beyond the pcr_problem: the operands in canonical orientation.
struct Bound {
  Matrix a, b, c, d;  // c.ptr == nullptr without C
  double alpha = 1.0, beta = 0.0;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
};

int describe(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
             double alpha, double beta, pcr_problem* problem, Bound* bound);
// Whether kernel `k` accepts `problem` (dtypes, layouts, alignment, CUTLASS's checks).
int check_kernel(int k, const pcr_problem& problem, const Bound* bound);
GemmArgs gemm_args(const pcr_problem& problem, const Bound& bound);
const char* dtype_name(int dtype);

// ---- launches (dispatch.cpp, prefill.cu) ----
int launch(const pcr_problem& problem, const Bound& bound, int kernel, cudaStream_t stream);
// describe + kernel choice (forced, or from the selection memo) + launch.
int gemm(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
         double alpha, double beta, int32_t kernel, void* stream, pcr_problem* problem);
// d = scale * src elementwise (src == nullptr: d = 0), any strides, converting dtypes.
int launch_scale_copy(const Matrix* src, const Matrix& dst, float scale, cudaStream_t stream);

}  // namespace pcr
