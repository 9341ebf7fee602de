// The activation of a fused epilogue, chosen per launch (pcr_activation), so that one
// kernel serves them all: the branch is uniform across the grid and costs next to nothing
// beside the epilogue's memory traffic.
#pragma once

#include <cmath>
#include <type_traits>

#include "cutlass/array.h"
#include "cutlass/cutlass.h"

#include "kernel.h"
#include "pycutlass_rt.h"

namespace pcr {

// Fast exp and division (ex2.approx, rcp.approx on the GPU): a few units in the last place
// of float, far below the float16/bfloat16 rounding of the outputs they feed, and several
// times cheaper than expf and IEEE division, which made SiLU cost 60% of a large GEMM.
CUTLASS_HOST_DEVICE float fast_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return std::exp(x);
#endif
}
CUTLASS_HOST_DEVICE float fast_div(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fdividef(x, y);
#else
  return x / y;
#endif
}

struct Relu {
  CUTLASS_HOST_DEVICE float operator()(float x) const { return x > 0.0f || x != x ? x : 0.0f; }
};
struct Gelu {
  CUTLASS_HOST_DEVICE float operator()(float x) const {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  }
};
struct GeluTanh {  // tanh(y) = 1 - 2 / (1 + e^(2y)), exact at both tails
  CUTLASS_HOST_DEVICE float operator()(float x) const {
    float y = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (2.0f - fast_div(2.0f, 1.0f + fast_exp(2.0f * y)));
  }
};
struct Silu {
  CUTLASS_HOST_DEVICE float operator()(float x) const { return fast_div(x, 1.0f + fast_exp(-x)); }
};
struct Sigmoid {
  CUTLASS_HOST_DEVICE float operator()(float x) const {
    return fast_div(1.0f, 1.0f + fast_exp(-x));
  }
};
// tanh: 1 - 2 / (1 + e^(2x)), exact at both tails; near 0, where that cancels, the odd
// series to x^7 (its next term is below 4e-7 of tanh for |x| < 1/4)
struct Tanh {
  CUTLASS_HOST_DEVICE float operator()(float x) const {
    if (fabsf(x) < 0.25f) {
      float x2 = x * x;
      return x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
    }
    return 1.0f - fast_div(2.0f, 1.0f + fast_exp(2.0f * x));
  }
};
struct Hardswish {
  CUTLASS_HOST_DEVICE float operator()(float x) const {
    return x * fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
  }
};

struct LeakyRelu {
  float slope;
  CUTLASS_HOST_DEVICE float operator()(float x) const {
    return x >= 0.0f || x != x ? x : slope * x;
  }
};
struct Clamp {  // NaN stays NaN, as torch.clamp's
  float lo, hi;
  CUTLASS_HOST_DEVICE float operator()(float x) const {
    return x != x ? x : (x < lo ? lo : (x > hi ? hi : x));
  }
};

// y[i] = f(x[i]) over a fragment (cutlass::Array) or a single float.
template <class Fragment, class F>
CUTLASS_HOST_DEVICE Fragment map(Fragment const& x, F f) {
  if constexpr (std::is_same_v<Fragment, float>) {
    return f(x);
  } else {
    Fragment y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < Fragment::kElements; ++i) y[i] = f(x[i]);
    return y;
  }
}

// The switch sits outside the element loop: one branch per fragment, and each case's
// loop is straight-line code (a switch per element interleaves every function's code
// and cost the epilogue more than the whole GEMM).
template <class Fragment>
CUTLASS_HOST_DEVICE Fragment activate(ActivationArgs const& a, Fragment const& x) {
  switch (a.kind) {
    case PCR_ACT_RELU:
      return map(x, Relu{});
    case PCR_ACT_GELU:
      return map(x, Gelu{});
    case PCR_ACT_GELU_TANH:
      return map(x, GeluTanh{});
    case PCR_ACT_SILU:
      return map(x, Silu{});
    case PCR_ACT_SIGMOID:
      return map(x, Sigmoid{});
    case PCR_ACT_TANH:
      return map(x, Tanh{});
    case PCR_ACT_HARDSWISH:
      return map(x, Hardswish{});
    case PCR_ACT_LEAKY_RELU:
      return map(x, LeakyRelu{a.alpha});
    case PCR_ACT_CLAMP:
      return map(x, Clamp{a.alpha, a.beta});
    default:
      return x;
  }
}

// A CUTLASS compute functor over a fragment (cutlass::Array<float, N>), with its
// per-launch Arguments (shared by every fragment size, as EVT nodes require).
template <class Fragment>
struct Activation {
  using Arguments = ActivationArgs;
  CUTLASS_HOST_DEVICE Fragment operator()(Fragment const& x, Arguments const& args) const {
    return activate(args, x);
  }
};

}  // namespace pcr
