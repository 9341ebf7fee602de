// A described problem's launch: host operands, staged operands, K = 0, C copied, the kernel.
#include <algorithm>

#include "runtime.h"

namespace pcr {
namespace {

// Every scratch buffer a launch needs, taken before its first write to an output, so that
// an allocation that fails leaves the outputs as they were. Column parts and staging run
// one after another on the stream: each kind's largest need serves them all.
struct LaunchScratch {
  size_t staging_bytes = 0, workspace_bytes = 0;
  Scratch staging, workspace;
};

// What the launch of (p, bd) with kernel k needs, added into *s.
void scratch_needs(const pcr_problem& p, const Bound& bd, int k, pcr_plan* plan, LaunchScratch* s) {
  if (p.m == 0 || p.n == 0 || p.batch == 0 || p.k == 0) return;
  if (p.staged && p.split_n) {
    pcr_problem part;
    Bound part_bd;
    column_part(p, bd, 0, p.split_n, &part, &part_bd);
    scratch_needs(part, part_bd, k, plan, s);
    column_part(p, bd, p.split_n, p.n - p.split_n, &part, &part_bd);
    scratch_needs(part, part_bd, k, nullptr, s);
  } else if (p.staged) {
    Staging st = stage_layout(p, bd, nullptr);
    s->staging_bytes = std::max(s->staging_bytes, st.bytes);
    scratch_needs(st.problem, st.bound, k, plan, s);
  } else {
    const size_t ws = workspace_size(k, gemm_args(p, bd), plan ? &plan->prepared : nullptr);
    s->workspace_bytes = std::max(s->workspace_bytes, ws);
  }
}

int launch_parts(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream, pcr_plan* plan,
                 LaunchScratch& s);

// The kernel step of a launch, through `plan`'s prepared launch or (nullptr) the thread's.
int run_kernel(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream, pcr_plan* plan,
               LaunchScratch& s) {
  return run_prepared(k, gemm_args(p, bd), stream, plan ? &plan->prepared : nullptr,
                      s.workspace.get(), s.workspace_bytes);
}

// Copies the staged inputs into (zero-padded) scratch, runs the kernel's problem there,
// and copies D back; or, split at a column (pcr_problem.split_n), runs the two parts so.
int launch_staged(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream, pcr_plan* plan,
                  LaunchScratch& scratch) {
  if (p.split_n) {
    pcr_problem part;
    Bound part_bd;
    column_part(p, bd, 0, p.split_n, &part, &part_bd);
    int st = launch_parts(part, part_bd, k, stream, plan, scratch);
    if (st != PCR_OK) return st;
    column_part(p, bd, p.split_n, p.n - p.split_n, &part, &part_bd);
    // the plan's launch is the first part's
    return launch_parts(part, part_bd, k, stream, nullptr, scratch);
  }
  Staging s = stage_layout(p, bd, static_cast<char*>(scratch.staging.get()));
  // a staged D has padding the kernel computes too: amax is then taken of d afterwards
  if (s.staged & PCR_STAGED_D) s.bound.amax = Matrix{};
  const Matrix* src[2];
  const Matrix* dst[2];
  int inputs = 0;
  if (s.staged & PCR_STAGED_A) src[inputs] = &bd.a, dst[inputs++] = &s.bound.a;
  if (s.staged & PCR_STAGED_B) src[inputs] = &bd.b, dst[inputs++] = &s.bound.b;
  int st;
  if ((st = launch_stage_copies(src, dst, inputs, stream))) return st;
  if ((st = launch_parts(s.problem, s.bound, k, stream, plan, scratch))) return st;
  if (!(s.staged & PCR_STAGED_D)) return PCR_OK;
  if ((st = launch_scale_copy(&s.bound.d, bd.d, 1.0, stream))) return st;
  return launch_amax(bd.d, bd.amax, stream);
}

// A copy of the elements of `m` (at `host` on the host) to or from `dev`, a device span
// laid out alike (dev - lo as m.ptr - lo, where [lo, hi) is m's extent): rows (or columns)
// at a time where one dimension is contiguous, so no byte between the elements moves.
// Threads writing disjoint parts of one host array then lose nothing of each other's.
int copy_view(const Matrix& m, char* host, char* dev, bool to_device, cudaStream_t stream) {
  const cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  const char* what =
      to_device ? "cudaMemcpy2DAsync(host to device)" : "cudaMemcpy2DAsync(device to host)";
  const int64_t e = m.esize;
  int64_t run, count, pitch;  // a contiguous run of elements, how many, their distance
  if (m.s1 == 1 || m.cols == 1)
    run = m.cols, count = m.rows, pitch = m.rows > 1 ? m.s0 : m.cols;
  else if (m.s0 == 1 || m.rows == 1)
    run = m.rows, count = m.cols, pitch = m.cols > 1 ? m.s1 : m.rows;
  else
    run = 0, count = 0, pitch = 0;
  if (run == 0 || pitch < run) {  // no contiguous dimension, or rows overlap: the span
    uintptr_t lo, hi;
    m.extent(&lo, &hi);
    return cuda_status(
        cudaMemcpyAsync(to_device ? dev : host, to_device ? host : dev, hi - lo, kind, stream),
        to_device ? "cudaMemcpyAsync(host to device)" : "cudaMemcpyAsync(device to host)");
  }
  int64_t batches = m.batch;
  if (batches > 1 && m.sb == count * pitch) count *= batches, batches = 1;  // one 2-D copy
  for (int64_t i = 0; i < batches; ++i) {
    const int64_t off = i * m.sb * e;
    char* dst = (to_device ? dev : host) + off;
    const char* src = (to_device ? host : dev) + off;
    int st = cuda_status(
        cudaMemcpy2DAsync(dst, pitch * e, src, pitch * e, run * e, count, kind, stream), what);
    if (st != PCR_OK) return st;
  }
  return PCR_OK;
}

// Host operands: each one's span allocated on the GPU and its elements copied there; run;
// the outputs' elements copied back; synchronize.
int launch_host(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream) {
  Bound dev = bd;
  Matrix* ops[] = {&dev.a,       &dev.b,       &dev.c,   &dev.d,    &dev.bias,
                   &dev.scale_m, &dev.scale_n, &dev.aux, &dev.amax, &dev.scale_d};
  const Matrix* src[] = {&bd.a,       &bd.b,       &bd.c,   &bd.d,    &bd.bias,
                         &bd.scale_m, &bd.scale_n, &bd.aux, &bd.amax, &bd.scale_d};
  constexpr int kOutputs[] = {3, 7, 8};  // d, aux, amax: copied back
  constexpr int kOps = sizeof ops / sizeof ops[0];
  Scratch buffers[kOps];  // freed on the stream, after the copy back
  // d, aux and amax go in only where the kernel reads them (c is d; a staged d's padding
  // is the kernel's own): an output's elements all come back written.
  const bool d_read = bd.c.ptr && bd.c.ptr == bd.d.ptr;
  int st = PCR_OK;
  for (int i = 0; i < kOps && st == PCR_OK; ++i) {
    if (!src[i]->ptr) continue;
    if (i == 2 && d_read) continue;  // c is d: staged with d
    uintptr_t lo, hi;
    src[i]->extent(&lo, &hi);
    if (hi == lo) continue;
    st = buffers[i].allocate(p.device, stream, hi - lo, ScratchKind::kHostCopy);
    ops[i]->ptr = static_cast<char*>(buffers[i].get());
    const bool output = i == 3 || i == 7 || i == 8;
    if (st == PCR_OK && (!output || (i == 3 && d_read)))
      st = copy_view(*src[i], src[i]->ptr, ops[i]->ptr, true, stream);
  }
  if (d_read) dev.c.ptr = dev.d.ptr;
  if (st == PCR_OK) st = launch_device(p, dev, k, stream);
  for (int i : kOutputs) {
    if (st != PCR_OK || !buffers[i].get()) continue;
    st = copy_view(*src[i], src[i]->ptr, ops[i]->ptr, false, stream);
  }
  // the host's d is complete, and the host's inputs may change, only after this
  if (st == PCR_OK) st = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return st;
}

// launch_device's work past zeroing amax: each column part of a split problem comes here.
int launch_parts(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream, pcr_plan* plan,
                 LaunchScratch& s) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return PCR_OK;
  if (p.staged) return launch_staged(p, bd, k, stream, plan, s);
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
  return run_kernel(p, bd, k, stream, plan, s);
}

}  // namespace

int launch_device(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream,
                  pcr_plan* plan) {
  LaunchScratch s;
  scratch_needs(p, bd, k, plan, &s);
  int st;
  if ((st = s.staging.allocate(p.device, stream, s.staging_bytes, ScratchKind::kStaging)))
    return st;
  if ((st = s.workspace.allocate(p.device, stream, s.workspace_bytes, ScratchKind::kWorkspace,
                                 k >= 0 && kKernels[k]->info.grouped)))
    return st;
  // amax is a maximum over every part of the launch (column parts, K = 0's passes, an
  // empty d's none): zeroed once, here
  if (bd.amax.ptr && (st = cuda_status(cudaMemsetAsync(bd.amax.ptr, 0, sizeof(float), stream),
                                       "cudaMemsetAsync(amax)")))
    return st;
  return launch_parts(p, bd, k, stream, plan, s);
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
