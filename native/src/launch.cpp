// A described problem's launch: host operands, staged operands, K = 0, C copied, the kernel.
#include "runtime.h"

namespace pcr {
namespace {

int launch_parts(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream, pcr_plan* plan);

// The kernel step of a launch, through `plan`'s prepared launch or (nullptr) the thread's.
int run_kernel(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream, pcr_plan* plan) {
  return run_prepared(k, gemm_args(p, bd), stream, plan ? &plan->prepared : nullptr);
}

// Copies the staged inputs into (zero-padded) scratch, runs the kernel's problem there,
// and copies D back; or, split at a column (pcr_problem.split_n), runs the two parts so.
int launch_staged(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream,
                  pcr_plan* plan) {
  if (p.split_n) {
    pcr_problem part;
    Bound part_bd;
    column_part(p, bd, 0, p.split_n, &part, &part_bd);
    int st = launch_parts(part, part_bd, k, stream, plan);
    if (st != PCR_OK) return st;
    column_part(p, bd, p.split_n, p.n - p.split_n, &part, &part_bd);
    return launch_parts(part, part_bd, k, stream, nullptr);  // the plan's launch is the first
  }
  Scratch scratch;  // held until the copy back is enqueued
  int st =
      scratch.allocate(p.device, stream, stage_layout(p, bd, nullptr).bytes, ScratchKind::kStaging);
  if (st != PCR_OK) return st;
  Staging s = stage_layout(p, bd, static_cast<char*>(scratch.get()));
  // a staged D has padding the kernel computes too: amax is then taken of d afterwards
  if (s.staged & PCR_STAGED_D) s.bound.amax = Matrix{};
  const Matrix* src[2];
  const Matrix* dst[2];
  int inputs = 0;
  if (s.staged & PCR_STAGED_A) src[inputs] = &bd.a, dst[inputs++] = &s.bound.a;
  if (s.staged & PCR_STAGED_B) src[inputs] = &bd.b, dst[inputs++] = &s.bound.b;
  if ((st = launch_stage_copies(src, dst, inputs, stream))) return st;
  if ((st = launch_parts(s.problem, s.bound, k, stream, plan))) return st;
  if (!(s.staged & PCR_STAGED_D)) return PCR_OK;
  if ((st = launch_scale_copy(&s.bound.d, bd.d, 1.0, stream))) return st;
  return launch_amax(bd.d, bd.amax, stream);
}

// Host operands: copy each one's byte span to the GPU, run, copy the outputs back,
// synchronize.
int launch_host(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream) {
  Bound dev = bd;
  Matrix* ops[] = {&dev.a,       &dev.b,       &dev.c,   &dev.d,    &dev.bias,
                   &dev.scale_m, &dev.scale_n, &dev.aux, &dev.amax, &dev.scale_d};
  const Matrix* src[] = {&bd.a,       &bd.b,       &bd.c,   &bd.d,    &bd.bias,
                         &bd.scale_m, &bd.scale_n, &bd.aux, &bd.amax, &bd.scale_d};
  constexpr int kOutputs[] = {3, 7, 8};  // d, aux, amax: copied back
  constexpr int kOps = sizeof ops / sizeof ops[0];
  Scratch buffers[kOps];  // freed on the stream, after the copy back
  int st = PCR_OK;
  for (int i = 0; i < kOps && st == PCR_OK; ++i) {
    if (!src[i]->ptr) continue;
    if (i == 2 && src[2]->ptr == src[3]->ptr) continue;  // c is d: staged with d
    uintptr_t lo, hi;
    src[i]->extent(&lo, &hi);
    if (hi == lo) continue;
    st = buffers[i].allocate(p.device, stream, hi - lo, ScratchKind::kHostCopy);
    if (st == PCR_OK)
      st = cuda_status(
          cudaMemcpyAsync(buffers[i].get(), src[i]->ptr, hi - lo, cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync(host to device)");
    ops[i]->ptr = static_cast<char*>(buffers[i].get());
  }
  if (bd.c.ptr && bd.c.ptr == bd.d.ptr) dev.c.ptr = dev.d.ptr;
  if (st == PCR_OK) st = launch_device(p, dev, k, stream);
  for (int i : kOutputs) {
    if (st != PCR_OK || !buffers[i].get()) continue;
    uintptr_t lo, hi;
    src[i]->extent(&lo, &hi);
    st = cuda_status(
        cudaMemcpyAsync(src[i]->ptr, buffers[i].get(), hi - lo, cudaMemcpyDeviceToHost, stream),
        "cudaMemcpyAsync(device to host)");
  }
  // the host's d is complete, and the host's inputs may change, only after this
  if (st == PCR_OK) st = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return st;
}

// launch_device's work past zeroing amax: each column part of a split problem comes here.
int launch_parts(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream,
                 pcr_plan* plan) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return PCR_OK;
  if (p.staged) return launch_staged(p, bd, k, stream, plan);
  int st;
  if (p.k == 0) {  // the whole answer: d = act(beta * c + bias), aux = beta * c + bias
    const bool has_c = p.c_mode != PCR_C_NONE;
    const Matrix* c = has_c ? &bd.c : nullptr;
    const double beta = has_c ? bd.beta : 0.0;
    const Matrix* bias = p.bias != PCR_BIAS_NONE ? &bd.bias : nullptr;
    if (!bd.aux.ptr)
      st = launch_scale_copy(c, bd.d, beta, stream, bias, bd.activation);
    else if (!(st = launch_scale_copy(c, bd.aux, beta, stream, bias)))
      st = launch_scale_copy(&bd.aux, bd.d, 1.0, stream, nullptr, bd.activation);
    return st ? st : launch_amax(bd.d, bd.amax, stream);
  }
  if (p.c_mode == PCR_C_COPIED && (st = launch_scale_copy(&bd.c, bd.d, 1.0, stream)))
    return st;  // C in D's form for the kernel, which applies beta
  return run_kernel(p, bd, k, stream, plan);
}

}  // namespace

int launch_device(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream,
                  pcr_plan* plan) {
  // amax is a maximum over every part of the launch (column parts, K = 0's passes, an
  // empty d's none): zeroed once, here
  if (bd.amax.ptr) {
    int st = cuda_status(cudaMemsetAsync(bd.amax.ptr, 0, sizeof(float), stream),
                         "cudaMemsetAsync(amax)");
    if (st != PCR_OK) return st;
  }
  return launch_parts(p, bd, k, stream, plan);
}

int launch(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream) {
  DeviceGuard guard;
  int st = guard.set(p.device);
  if (st != PCR_OK) return st;
  return p.host ? launch_host(p, bd, k, stream) : launch_device(p, bd, k, stream);
}

int gemm(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d, double alpha,
         double beta, const pcr_extras* extras, int32_t kernel, void* stream, pcr_problem* out) {
  pcr_problem local;
  pcr_problem& p = out ? *out : local;
  Bound bd;
  int st = describe(a, b, c, d, alpha, beta, extras, &p, &bd);
  if (st != PCR_OK) return st;
  int k = -1;
  if ((st = kernel_for(p, bd, kernel, &k))) return st;
  return launch(p, bd, k, static_cast<cudaStream_t>(stream));
}

}  // namespace pcr
