// The maximum of |d| (pcr_extras.amax), reduced as the bits of non-negative floats: their
// unsigned order is the floats' order, and any NaN's bits (sign cleared) exceed infinity's,
// so a NaN in d makes amax NaN rather than vanishing in a float max. The destination holds
// +0 before the launch (the runtime zeroes it); every warp adds one atomicMax.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace pcr {

// bits folded with |x|
__device__ __forceinline__ uint32_t amax_bits(uint32_t bits, float x) {
  const uint32_t b = __float_as_uint(fabsf(x));
  return b > bits ? b : bits;
}

// The warp's maximum into *amax; every lane of the warp calls it.
__device__ __forceinline__ void commit_amax(float* amax, uint32_t bits) {
#pragma unroll
  for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2) {
    const uint32_t other = __shfl_xor_sync(0xffffffffu, bits, lane_mask);
    bits = other > bits ? other : bits;
  }
  if ((threadIdx.x & 31) == 0 && bits != 0) atomicMax(reinterpret_cast<unsigned*>(amax), bits);
}

}  // namespace pcr
