// The XLA FFI handler of pycutlass_rt.jax: XLA's buffers as DLTensor views, run through
// pcr_gemm's own path (describe, kernel choice, launch) on the stream XLA gives.
//
// Built against the XLA FFI headers vendored in native/third_party/xla (PCR_XLA_FFI: every
// build but one configured with PYCUTLASS_RT_XLA_FFI_INCLUDE=OFF); abi.cpp exports it as
// pcr_xla_gemm. Operands: a, b, then c (attribute has_c) and bias (has_bias); one result,
// d. Every operand has d's leading (batch) dimensions, each of d's extent or 1 (shared):
// pycutlass_rt/jax.py passes them so, and vmap (vmap_method="expand_dims") adds one per
// level, of extent 1 for an unbatched operand. The trailing run of batch dimensions over
// which a, b and c are each whole or shared (and the bias shared) is one batched GEMM;
// any dimensions before it are looped over, one launch per index.
//
// Kernel choice is the library's (pcr_gemm's selector), as for every other caller: the
// package hands each device's say over when the call is traced, so that the handler's
// threads never wait on Python. Nothing here synchronizes or allocates outside the
// library's scratch, as with pcr_gemm; the handler does not declare itself command-buffer
// compatible, so XLA runs it on its stream rather than tracing it into a CUDA graph of its own.
#include <algorithm>
#include <string>
#include <string_view>

#include "guard.h"
#include "runtime.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace pcr {
namespace {

constexpr int kMaxBatchDims = 16;

// DLPack's type of an XLA element type the library takes; lanes 0 for any other.
DLDataType dl_type(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F16:
      return {kDLFloat, 16, 1};
    case ffi::DataType::BF16:
      return {kDLBfloat, 16, 1};
    case ffi::DataType::F32:
      return {kDLFloat, 32, 1};
    case ffi::DataType::F64:
      return {kDLFloat, 64, 1};
    case ffi::DataType::S8:
      return {kDLInt, 8, 1};
    case ffi::DataType::S32:
      return {kDLInt, 32, 1};
    case ffi::DataType::F8E4M3FN:
      return {kDLFloat8_e4m3fn, 8, 1};
    case ffi::DataType::F8E5M2:
      return {kDLFloat8_e5m2, 8, 1};
    default:
      return {0, 0, 0};
  }
}

// One operand: its buffer, batch dimensions (the first n) and trailing dimensions.
struct Operand {
  char* data = nullptr;
  DLDataType dtype{};
  int esize = 0;
  const int64_t* dims = nullptr;
  int rank = 0;
  int64_t stride[kMaxBatchDims] = {};  // elements between indices of batch dimension i; 0: shared
  bool shared(int i) const { return dims[i] == 1; }
};

// Checks an operand against d's batch dimensions (`batch`, n of them) and the count of
// trailing dimensions it may have (lo..hi), and computes its batch strides.
int load(const ffi::AnyBuffer& buf, const char* name, const int64_t* batch, int n, int lo, int hi,
         Operand* op) {
  op->data = static_cast<char*>(buf.untyped_data());
  op->dtype = dl_type(buf.element_type());
  op->esize = op->dtype.bits / 8;
  op->dims = buf.dimensions().begin();
  op->rank = int(buf.dimensions().size());
  if (!op->dtype.lanes)
    return set_error(PCR_ERR_INVALID_DTYPE,
                     "%s has XLA element type %d, which pycutlass_rt does not take; use float16, "
                     "bfloat16 or float32",
                     name, int(buf.element_type()));
  if (op->rank - n < lo || op->rank - n > hi)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "%s has rank %d; with d's %d batch dimensions it needs rank %d%s", name,
                     op->rank, n, n + lo, lo == hi ? "" : " or one more");
  int64_t step = 1;
  for (int i = op->rank - 1; i >= n; --i) step *= op->dims[i];
  for (int i = n - 1; i >= 0; --i) {
    if (op->dims[i] != 1 && op->dims[i] != batch[i])
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "%s has extent %lld in batch dimension %d, d %lld; each operand's is d's "
                       "or 1",
                       name, static_cast<long long>(op->dims[i]), i,
                       static_cast<long long>(batch[i]));
    op->stride[i] = op->shared(i) ? 0 : step;
    step *= op->dims[i];
  }
  return PCR_OK;
}

// A DLTensor view of one launch's matrices of `op` (its last two dimensions, transposed
// when asked): `count` of them (1: shared) from `offset` elements on.
struct View {
  int64_t shape[3], strides[3];
  DLTensor t;  // points into shape and strides: never copied
  View(const View&) = delete;
  View(const Operand& op, int64_t offset, int64_t count, bool transposed, int device) {
    const int64_t p = op.dims[op.rank - 2], q = op.dims[op.rank - 1];
    shape[0] = count, shape[1] = transposed ? q : p, shape[2] = transposed ? p : q;
    strides[0] = p * q, strides[1] = transposed ? 1 : q, strides[2] = transposed ? q : 1;
    t = DLTensor{op.data + offset * op.esize, {kDLCUDA, device}, 3, op.dtype, shape, strides, 0};
  }
};

struct Attrs {
  double alpha, beta;
  bool transpose_a, transpose_b, has_c, has_bias;
  int32_t activation;
  double activation_alpha, activation_beta;
  int32_t rank;  // d's rank when traced: another rank means vmap added batch dimensions
};

int run(cudaStream_t stream, const ffi::RemainingArgs& args, const ffi::AnyBuffer& out,
        const Attrs& at) {
  clear_error();
  const size_t want = 2 + at.has_c + at.has_bias;
  if (args.size() != want)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "the handler got %zu operands, its attributes say %zu", args.size(), want);
  ffi::AnyBuffer in[4] = {out, out, out, out};  // a, b, c, bias (c and bias where given)
  const bool given[4] = {true, true, at.has_c, at.has_bias};
  for (int i = 0, next = 0; i < 4; ++i) {
    if (!given[i]) continue;
    auto buf = args.get<ffi::AnyBuffer>(next++);
    if (!buf.has_value())
      return set_error(PCR_ERR_INVALID_ARGUMENT, "operand %d: %s", next - 1,
                       buf.error().message().c_str());
    in[i] = *buf;
  }
  const int n = int(out.dimensions().size()) - 2;
  if (n < 0 || n > kMaxBatchDims)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "d has rank %d; it needs 2 to %d",
                     int(out.dimensions().size()), kMaxBatchDims + 2);
  const int64_t* batch = out.dimensions().begin();
  Operand a, b, c, d, bias;
  int st;
  if ((st = load(in[0], "a", batch, n, 2, 2, &a)) || (st = load(in[1], "b", batch, n, 2, 2, &b)) ||
      (st = load(out, "d", batch, n, 2, 2, &d)) ||
      (at.has_c && (st = load(in[2], "c", batch, n, 2, 2, &c))) ||
      (at.has_bias && (st = load(in[3], "bias", batch, n, 1, 2, &bias))))
    return st;
  if (out.element_count() == 0) return PCR_OK;  // nothing to write
  int device;
  if ((st = pointer_device(d.data, &device))) return st;

  // The launch's batch dimensions: [split, n), over which each of a, b, c is whole or
  // shared throughout (mode 1 or 0; -1 while only extents of 1 were seen) and the bias
  // shared. Those before split are looped over.
  const Operand* ops[3] = {&a, &b, at.has_c ? &c : nullptr};
  int mode[3] = {-1, -1, -1};
  int split = n;
  for (int i = n - 1; i >= 0; --i) {
    if (batch[i] != 1) {
      int next[3];
      bool fits = !(at.has_bias && !bias.shared(i));
      for (int j = 0; j < 3 && fits; ++j) {
        next[j] = ops[j] ? !ops[j]->shared(i) : -1;
        fits = mode[j] < 0 || mode[j] == next[j];
      }
      if (!fits) break;
      std::copy(next, next + 3, mode);
    }
    split = i;
  }
  int64_t count = 1, loops = 1;
  for (int i = 0; i < n; ++i) (i < split ? loops : count) *= batch[i];

  pcr_extras extras{};
  extras.activation = at.activation;
  extras.activation_alpha = at.activation_alpha;
  extras.activation_beta = at.activation_beta;
  int64_t bias_shape[2];
  DLTensor bias_t{};
  if (at.has_bias) {
    for (int i = n; i < bias.rank; ++i) bias_shape[i - n] = bias.dims[i];
    bias_t =
        DLTensor{nullptr, {kDLCUDA, device}, bias.rank - n, bias.dtype, bias_shape, nullptr, 0};
    extras.bias = &bias_t;
  }
  for (int64_t l = 0; l < loops; ++l) {
    int64_t off[5] = {};  // a, b, c, d, bias: the loop index's first elements
    const Operand* all[5] = {&a, &b, &c, &d, &bias};  // c and bias absent: strides 0
    int64_t rest = l;
    for (int i = split - 1; i >= 0; --i) {
      const int64_t idx = rest % batch[i];
      rest /= batch[i];
      for (int j = 0; j < 5; ++j) off[j] += idx * all[j]->stride[i];
    }
    View va(a, off[0], mode[0] == 1 ? count : 1, at.transpose_a, device);
    View vb(b, off[1], mode[1] == 1 ? count : 1, at.transpose_b, device);
    View vd(d, off[3], count, false, device);
    View vc(at.has_c ? c : d, off[at.has_c ? 2 : 3], mode[2] == 1 ? count : 1, false, device);
    if (at.has_bias) bias_t.data = bias.data + off[4] * bias.esize;
    const DLTensor* ct = at.has_c ? &vc.t : nullptr;
    pcr_problem p;
    st = gemm(&va.t, &vb.t, ct, &vd.t, at.alpha, at.beta, &extras, PCR_KERNEL_SELECT, stream, &p);
    if (st != PCR_OK) return st;
  }
  return PCR_OK;
}

ffi::ErrorCode error_code(int status) {
  switch (status) {
    case PCR_ERR_UNSUPPORTED:
    case PCR_ERR_NO_KERNEL_FOR_ARCH:
      return ffi::ErrorCode::kUnimplemented;
    case PCR_ERR_NO_DEVICE:
      return ffi::ErrorCode::kUnavailable;
    case PCR_ERR_CUDA:
    case PCR_ERR_INTERNAL:
      return ffi::ErrorCode::kInternal;
    default:
      return ffi::ErrorCode::kInvalidArgument;
  }
}

ffi::Error handle(cudaStream_t stream, ffi::RemainingArgs args, ffi::Result<ffi::AnyBuffer> out,
                  double alpha, double beta, int32_t transpose_a, int32_t transpose_b,
                  int32_t has_c, int32_t has_bias, int32_t activation, double activation_alpha,
                  double activation_beta, int32_t rank) {
  Attrs at{alpha,         beta,       transpose_a != 0, transpose_b != 0, has_c != 0,
           has_bias != 0, activation, activation_alpha, activation_beta,  rank};
  const int st = run(stream, args, *out, at);
  if (st == PCR_OK) return ffi::Error::Success();
  return ffi::Error(error_code(st), std::string("pycutlass_rt: ") + last_error());
}

XLA_FFI_DEFINE_HANDLER(kGemm, handle,
                       ffi::Ffi::Bind()
                           .Ctx<ffi::PlatformStream<cudaStream_t>>()
                           .RemainingArgs()
                           .Ret<ffi::AnyBuffer>()
                           .Attr<double>("alpha")
                           .Attr<double>("beta")
                           .Attr<int32_t>("transpose_a")
                           .Attr<int32_t>("transpose_b")
                           .Attr<int32_t>("has_c")
                           .Attr<int32_t>("has_bias")
                           .Attr<int32_t>("activation")
                           .Attr<double>("activation_alpha")
                           .Attr<double>("activation_beta")
                           .Attr<int32_t>("rank"));

}  // namespace

// The handler behind the library's guard: an exception escaping the binding or the call
// (out of host memory) comes back to XLA as an internal error with the thread's message.
void* xla_gemm(void* call_frame) noexcept {
  auto* frame = static_cast<XLA_FFI_CallFrame*>(call_frame);
  XLA_FFI_Error* result = nullptr;
  if (guarded([&] { result = kGemm(frame); }) == PCR_OK) return result;
  XLA_FFI_Error_Create_Args args{XLA_FFI_Error_Create_Args_STRUCT_SIZE, nullptr, last_error(),
                                 XLA_FFI_Error_Code_INTERNAL};
  return frame->api->XLA_FFI_Error_Create(&args);
}

const char* xla_handler_info() {
#define PCR_STR2(x) #x
#define PCR_STR(x) PCR_STR2(x)
  return "{\"built\": true, \"xla_ffi_api\": \"" PCR_STR(XLA_FFI_API_MAJOR) "." PCR_STR(
      XLA_FFI_API_MINOR) "\"}";
#undef PCR_STR
#undef PCR_STR2
}

}  // namespace pcr
