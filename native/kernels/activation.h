// The activation of a fused epilogue, chosen per launch (pcr_activation), so that one
// kernel serves them all: the branch is uniform across the grid, and its cases are out of
// the epilogue's line of code (activate).
#pragma once

#include <cmath>
#include <type_traits>

#include "cutlass/array.h"
#include "cutlass/cutlass.h"

#include "kernel.h"
#include "pycutlass_rt.h"

namespace pcr {

// Fast exp and division for float (ex2.approx, rcp.approx on the GPU): a few units in the
// last place, far below the float16/bfloat16 rounding of the outputs they feed, and several
// times cheaper than expf and IEEE division, which made SiLU cost 60% of a large GEMM.
// double (float64 GEMMs' epilogues) keeps exp and division exact.
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
CUTLASS_HOST_DEVICE double fast_exp(double x) { return exp(x); }
CUTLASS_HOST_DEVICE double fast_div(double x, double y) { return x / y; }

// The arithmetic of an epilogue writing ElementD: float; double for float64 outputs; int32
// for int32 outputs (int8 inputs), which are exact: their alpha, beta, bias and clamp
// bounds are integers (the host checks), and relu and clamp are the activations they take.
template <class ElementD>
using ComputeOf =
    std::conditional_t<std::is_same_v<ElementD, double>, double,
                       std::conditional_t<std::is_same_v<ElementD, int32_t>, int32_t, float>>;

// Each activation computes in T: ComputeOf's type.
template <class T>
struct Relu {
  CUTLASS_HOST_DEVICE T operator()(T x) const { return x > T(0) || x != x ? x : T(0); }
};
// GELU keeps libdevice's erff, which is branch-free already: a kernel of one GELU per
// thread compiles to 41 SASS instructions on sm_90a with it (one MUFU) and to 40 with
// Numerical Recipes' erfc form (two MUFUs), which would keep the tail below x ~ -5.5 that
// 1 + erf(x) rounds to 0 (as torch's float GELU does) but costs as much.
template <class T>
struct Gelu {
  CUTLASS_HOST_DEVICE T operator()(T x) const {
    return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752)));
  }
};
template <class T>
struct GeluTanh {  // tanh(y) = 1 - 2 / (1 + e^(2y)), exact at both tails
  CUTLASS_HOST_DEVICE T operator()(T x) const {
    T y = T(0.79788456080286536) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(2) - fast_div(T(2), T(1) + fast_exp(T(2) * y)));
  }
};
template <class T>
struct Silu {
  CUTLASS_HOST_DEVICE T operator()(T x) const { return fast_div(x, T(1) + fast_exp(-x)); }
};
template <class T>
struct Sigmoid {
  CUTLASS_HOST_DEVICE T operator()(T x) const { return fast_div(T(1), T(1) + fast_exp(-x)); }
};
// tanh: 1 - 2 / (1 + e^(2x)), exact at both tails; near 0, where that cancels, the odd
// series to x^7 (its next term is below 4e-7 of tanh for |x| < 1/4: float's precision;
// double takes tanh itself)
template <class T>
struct Tanh {
  CUTLASS_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_same_v<T, double>) {
      return tanh(x);
    } else {
      if (fabsf(x) < 0.25f) {
        float x2 = x * x;
        return x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
      }
      return 1.0f - fast_div(2.0f, 1.0f + fast_exp(2.0f * x));
    }
  }
};
template <class T>
struct Hardswish {
  CUTLASS_HOST_DEVICE T operator()(T x) const {
    return x * fmin(fmax(x + T(3), T(0)), T(6)) * (T(1) / T(6));
  }
};

template <class T>
struct LeakyRelu {
  T slope;
  CUTLASS_HOST_DEVICE T operator()(T x) const { return x >= T(0) || x != x ? x : slope * x; }
};
template <class T>
struct Clamp {  // NaN stays NaN, as torch.clamp's
  T lo, hi;
  CUTLASS_HOST_DEVICE T operator()(T x) const {
    return x != x ? x : (x < lo ? lo : (x > hi ? hi : x));
  }
};

// A fragment's element type (cutlass::Array), or a scalar's own.
template <class Fragment, class = void>
struct ElementOf {
  using type = Fragment;
};
template <class Fragment>
struct ElementOf<Fragment, std::void_t<typename Fragment::Element>> {
  using type = typename Fragment::Element;
};

// y[i] = f(x[i]) over a fragment (cutlass::Array) or a single float or double.
template <class Fragment, class F>
CUTLASS_HOST_DEVICE Fragment map(Fragment const& x, F f) {
  if constexpr (std::is_arithmetic_v<Fragment>) {
    return f(x);
  } else {
    Fragment y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < Fragment::kElements; ++i) y[i] = f(x[i]);
    return y;
  }
}

// One activation over a fragment. The switch sits outside the element loop (one branch
// per fragment, each case's loop straight-line code: a switch per element cost the
// epilogue more than the whole GEMM).
template <class Fragment>
CUTLASS_HOST_DEVICE Fragment activate_cases(ActivationArgs const& a, Fragment const& x) {
  using T = typename ElementOf<Fragment>::type;
  switch (a.kind) {
    case PCR_ACT_RELU:
      return map(x, Relu<T>{});
    case PCR_ACT_GELU:
      return map(x, Gelu<T>{});
    case PCR_ACT_GELU_TANH:
      return map(x, GeluTanh<T>{});
    case PCR_ACT_SILU:
      return map(x, Silu<T>{});
    case PCR_ACT_SIGMOID:
      return map(x, Sigmoid<T>{});
    case PCR_ACT_TANH:
      return map(x, Tanh<T>{});
    case PCR_ACT_HARDSWISH:
      return map(x, Hardswish<T>{});
    case PCR_ACT_LEAKY_RELU:
      return map(x, LeakyRelu<T>{T(a.alpha)});
    case PCR_ACT_CLAMP:
      return map(x, Clamp<T>{T(a.alpha), T(a.beta)});
    default:
      return x;
  }
}

// On the GPU the cases live out of line, called once per fragment: inlined into each
// visit of an unrolled epilogue they tripled a kernel's code and slowed its epilogue even
// with no activation, the untaken cases sitting between the hot blocks. Arguments by
// value keep the fragment in registers across the call.
#if defined(__CUDA_ARCH__)
template <class Fragment>
__device__ __noinline__ Fragment activate_out_of_line(ActivationArgs a, Fragment x) {
  return activate_cases(a, x);
}
#endif

template <class Fragment>
CUTLASS_HOST_DEVICE Fragment activate(ActivationArgs const& a, Fragment const& x) {
  using T = typename ElementOf<Fragment>::type;
  if constexpr (std::is_integral_v<T>) {  // the exact ones (ComputeOf)
    if (a.kind == PCR_ACT_RELU) return map(x, Relu<T>{});
    if (a.kind == PCR_ACT_CLAMP) return map(x, Clamp<T>{T(a.alpha), T(a.beta)});
    return x;
  } else {
    if (a.kind == PCR_ACT_NONE) return x;
#if defined(__CUDA_ARCH__)
    return activate_out_of_line(a, x);
#else
    return activate_cases(a, x);
#endif
  }
}

// A CUTLASS compute functor over a fragment (cutlass::Array<ComputeOf, N>), with its
// per-launch Arguments (shared by every fragment size, as EVT nodes require).
template <class Fragment>
struct Activation {
  using Arguments = ActivationArgs;
  CUTLASS_HOST_DEVICE Fragment operator()(Fragment const& x, Arguments const& args) const {
    return activate(args, x);
  }
};

}  // namespace pcr
