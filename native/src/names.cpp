// How messages name things: ops, dtypes, activations, epilogues, shapes and block-scale
// kinds, as Python spells them.
#include <string>

#include "runtime.h"
#include "problem.h"

namespace pcr {

const char* op_name(int op) {
  static const char* const kNames[] = {"GEMM", "convolution fprop", "convolution dgrad",
                                       "convolution wgrad"};
  return op >= PCR_OP_GEMM && op <= PCR_OP_WGRAD ? kNames[op] : "unknown";
}

const char* dtype_name(int dtype) {
  switch (dtype) {
    case PCR_F16:
      return "float16";
    case PCR_BF16:
      return "bfloat16";
    case PCR_F32:
      return "float32";
    case PCR_F64:
      return "float64";
    case PCR_TF32:
      return "tfloat32";
    case PCR_E4M3:
      return "float8_e4m3fn";
    case PCR_E5M2:
      return "float8_e5m2";
    case PCR_S8:
      return "int8";
    case PCR_S32:
      return "int32";
    default:
      return "invalid";
  }
}

// pcr_activation's names, as Python spells them (its enum tokens)
const char* activation_name(int activation) {
  static const char* const kNames[] = {"none",    "relu", "gelu",      "gelu_tanh",  "silu",
                                       "sigmoid", "tanh", "hardswish", "leaky_relu", "clamp"};
  static_assert(sizeof kNames / sizeof *kNames == PCR_ACT_CLAMP + 1, "one per pcr_activation");
  return activation >= 0 && activation <= PCR_ACT_CLAMP ? kNames[activation] : "invalid";
}

// pcr_epilogue's names, as Python spells them (its enum tokens, the words of kernel names)
const char* epilogue_name(int epilogue) {
  static const char* const kNames[] = {"linear", "biasact", "scaled", "aux"};
  static_assert(sizeof kNames / sizeof *kNames == PCR_EPI_AUX + 1, "one per pcr_epilogue");
  return epilogue >= 0 && epilogue <= PCR_EPI_AUX ? kNames[epilogue] : "invalid";
}

const char* epilogue_words(int epilogue) {
  switch (epilogue) {
    case PCR_EPI_LINEAR:
      return "plain";
    case PCR_EPI_BIASACT:
      return "fused bias/activation";
    case PCR_EPI_SCALED:
      return "dequantizing (scale_a/scale_b)";
    case PCR_EPI_AUX:
      return "fused bias/activation writing aux or amax";
    default:
      return "invalid";
  }
}

// A DLPack dtype as numpy spells it ("int16", "uint8", "complex64"), for messages about
// dtypes the library has no code for.
std::string dl_dtype_text(DLDataType t) {
  static const char* const kinds[] = {"int",    "uint",    "float", "opaque",
                                      "bfloat", "complex", "bool"};
  std::string s = t.code < sizeof kinds / sizeof *kinds ? kinds[t.code]
                                                        : "code " + std::to_string(t.code) + " ";
  s += std::to_string(t.bits);
  if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
  return s;
}

std::string shape_text(const int64_t* dims, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (n == 1 ? ",)" : ")");
}

// How messages say a pair of block-scale kinds.
std::string block_words(int kind_m, int kind_n) {
  auto one = [](int kind, const char* operand, const char* line) {
    return std::string(operand) + (kind == PCR_SCALE_GROUPS
                                       ? std::string(" per ") + line + " and 128 of K"
                                       : " per 128x128 block");
  };
  return one(kind_m, "scale_a", "row") + ", " + one(kind_n, "scale_b", "column");
}

}  // namespace pcr
