// The GEMM entry points: selection memo, launch, host staging, catalogue queries.
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime.h"

#ifndef PCR_CUTLASS_VERSION
#define PCR_CUTLASS_VERSION "unknown"
#endif

namespace pcr {
namespace {

// ---- selection memo ------------------------------------------------------------
// Python decides (tuned cache > shipped table > model) once per distinct problem and
// hands the ranked candidates down; later calls find them here without leaving C.
// Each thread keeps its own map, so lookups take no lock; a global generation number
// lets pcr_select_clear invalidate every thread's map.

struct Key {
  int64_t m, n, k, batch;
  int32_t f[20];
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof *this) == 0; }
};
struct KeyHash {
  size_t operator()(const Key& key) const {
    const auto* w = reinterpret_cast<const uint64_t*>(&key);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof key / 8; ++i) h = (h ^ w[i]) * 1099511628211ull;
    return size_t(h ^ (h >> 29));
  }
};
constexpr int kMaxCandidates = 8;
struct Candidates {
  int32_t count;
  int32_t kernel[kMaxCandidates];
  // The first candidate that passed check_kernel: every input of that check (dtypes,
  // layouts, alignments, extents, device arch) is part of the key, so later calls
  // launch it without checking again.
  int32_t resolved = -1;
};
struct Memo {
  uint64_t generation = 0;
  std::unordered_map<Key, Candidates, KeyHash> map;
};
std::atomic<uint64_t> g_generation{1};
thread_local Memo t_memo;

Key key_of(const pcr_problem& p) {
  Key key;
  std::memset(&key, 0, sizeof key);
  key.m = p.m;
  // A grouped problem's M is its largest group's (the MoE form: every routed token), which
  // changes from call to call; the choice does not hinge on it, so powers of two bucket it
  // and a new routing reuses the remembered kernels instead of asking Python again.
  if (p.grouped != PCR_GROUPED_NONE)
    for (key.m = p.m ? 1 : 0; key.m < p.m;) key.m *= 2;
  key.n = p.n;
  key.k = p.k;
  key.batch = p.batch;
  int32_t f[20] = {p.dtype_a, p.dtype_b,   p.dtype_c,    p.dtype_d,  p.layout_a,
                   p.layout_b, p.align_a, p.align_b,    p.align_c,  p.align_d,
                   p.c_mode,  p.cc,       p.staged,     p.bias,     p.activation,
                   p.align_bias, p.epilogue, p.grouped, p.scale_m,  p.scale_n};
  std::memcpy(key.f, f, sizeof f);
  return key;
}

Memo& memo() {
  uint64_t gen = g_generation.load(std::memory_order_acquire);
  if (t_memo.generation != gen || t_memo.map.size() > 65536) {
    t_memo.map.clear();
    t_memo.generation = gen;
  }
  return t_memo;
}

// ---- workspace -----------------------------------------------------------------
// One buffer per (device, stream), grown outside stream capture only, so that a call
// inside a CUDA graph never allocates.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};
std::mutex g_ws_mutex;
std::unordered_map<uint64_t, Workspace> g_ws;

// New workspace is zeroed once. The pointer-array kernels write their TMA descriptors
// there with tensormap.cp_fenceproxy, which compute-sanitizer's initcheck does not count
// as a write; without this every descriptor fence would be reported as an uninitialized
// read.
int zero(void* ptr, size_t bytes, cudaStream_t stream) {
  return cuda_status(cudaMemsetAsync(ptr, 0, bytes, stream), "cudaMemsetAsync(workspace)");
}

}  // namespace

int workspace_for(int device, cudaStream_t stream, size_t bytes, void** out, Pool pool,
                  bool* temporary) {
  *out = nullptr;
  if (temporary) *temporary = false;
  if (bytes == 0) return PCR_OK;
  uint64_t key = (uint64_t(uintptr_t(stream)) << 8) ^ (uint64_t(device) << 1) ^ uint64_t(pool);
  std::lock_guard<std::mutex> lock(g_ws_mutex);
  Workspace& ws = g_ws[key];
  if (ws.bytes < bytes) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &capture);
    if (capture != cudaStreamCaptureStatusNone && temporary) {
      *temporary = true;  // a graph memory node: allocated and freed at each replay
      int st = cuda_status(cudaMallocAsync(out, bytes, stream), "cudaMallocAsync(workspace)");
      return st != PCR_OK ? st : zero(*out, bytes, stream);
    }
    if (capture != cudaStreamCaptureStatusNone)
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "this kernel needs %zu bytes of workspace on this stream, which cannot "
                       "be allocated during graph capture: run the call once before capturing",
                       bytes);
    if (ws.ptr) {
      cudaStreamSynchronize(stream);
      cudaFree(ws.ptr);
      ws = Workspace{};
    }
    int st = cuda_status(cudaMalloc(&ws.ptr, bytes), "cudaMalloc(workspace)");
    if (st == PCR_OK) st = zero(ws.ptr, bytes, stream);
    if (st != PCR_OK) return st;
    ws.bytes = bytes;
  }
  *out = ws.ptr;
  return PCR_OK;
}

namespace {

// ---- prepared launches ---------------------------------------------------------
// Launch parameters are a pure function of (kernel, GemmArgs, workspace). Each thread
// keeps its last few, so a call repeating an earlier one (same tensors: the common
// case in inference loops) skips CUTLASS's parameter setup and TMA descriptor encoding.
constexpr int kPreparedSlots = 4;
struct PreparedCache {
  PreparedLaunch slot[kPreparedSlots];
  int next = 0;

  PreparedLaunch& find(int k, const GemmArgs& g) {
    for (PreparedLaunch& s : slot)
      if (s.matches(k, g)) return s;
    PreparedLaunch& s = slot[next];
    next = (next + 1) % kPreparedSlots;
    s.kernel = -1;
    return s;
  }
};
thread_local PreparedCache t_prepared;
}  // namespace

int run_prepared(int k, const GemmArgs& g, cudaStream_t stream) {
  PreparedLaunch& prep = t_prepared.find(k, g);
  size_t bytes = prep.kernel == k ? prep.workspace_bytes : kKernels[k]->ops.workspace_size(g);
  void* ws = nullptr;
  bool temporary = false;
  if (bytes) {
    int st = workspace_for(g.device, stream, bytes, &ws, kKernelWorkspace, &temporary);
    if (st != PCR_OK) return st;
  }
  int st = prep.launch(k, g, bytes, ws, stream);
  if (temporary) cudaFreeAsync(ws, stream);
  return st;
}

namespace {

int run_kernel(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream) {
  return run_prepared(k, gemm_args(p, bd), stream);
}

// The kernel step of a launch: a plan's own workspace and prepared launch, or the
// stream's workspace and the thread's prepared launches.
int run_kernel(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream,
               pcr_plan* plan) {
  if (!plan) return run_kernel(p, bd, k, stream);
  return plan->prepared.launch(k, gemm_args(p, bd), plan->workspace_bytes, plan->workspace,
                               stream);
}

int launch_device(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream,
                  pcr_plan* plan = nullptr);

// Copies the staged inputs into (zero-padded) scratch, runs the kernel's problem there,
// and copies D back.
int launch_staged(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream,
                  pcr_plan* plan) {
  void* scratch = plan ? plan->scratch : nullptr;
  int st = plan ? PCR_OK
                : workspace_for(p.device, stream, stage_layout(p, bd, nullptr).bytes, &scratch,
                                kStagingScratch);
  if (st != PCR_OK) return st;
  Staging s = stage_layout(p, bd, static_cast<char*>(scratch));
  const Matrix* src[2];
  const Matrix* dst[2];
  int inputs = 0;
  if (s.staged & PCR_STAGED_A) src[inputs] = &bd.a, dst[inputs++] = &s.bound.a;
  if (s.staged & PCR_STAGED_B) src[inputs] = &bd.b, dst[inputs++] = &s.bound.b;
  if ((st = launch_stage_copies(src, dst, inputs, stream))) return st;
  if ((st = launch_device(s.problem, s.bound, k, stream, plan))) return st;
  return (s.staged & PCR_STAGED_D) ? launch_scale_copy(&s.bound.d, bd.d, 1.0, stream) : PCR_OK;
}

int launch_device(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream,
                  pcr_plan* plan) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return PCR_OK;
  if (p.staged) return launch_staged(p, bd, k, stream, plan);
  int st;
  if (p.k == 0) {  // the whole answer: d = act(beta * c + bias)
    const bool has_c = p.c_mode != PCR_C_NONE;
    return launch_scale_copy(has_c ? &bd.c : nullptr, bd.d, has_c ? bd.beta : 0.0, stream,
                             p.bias != PCR_BIAS_NONE ? &bd.bias : nullptr, p.activation);
  }
  if (p.c_mode == PCR_C_COPIED && (st = launch_scale_copy(&bd.c, bd.d, 1.0, stream)))
    return st;  // C in D's form for the kernel, which applies beta
  return run_kernel(p, bd, k, stream, plan);
}

// Host operands: copy each one's byte span to the GPU, run, copy D back, synchronize.
int launch_host(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream) {
  Bound dev = bd;
  Matrix* ops[] = {&dev.a, &dev.b, &dev.c, &dev.d, &dev.bias, &dev.scale_m, &dev.scale_n};
  const Matrix* src[] = {&bd.a, &bd.b, &bd.c, &bd.d, &bd.bias, &bd.scale_m, &bd.scale_n};
  constexpr int kOps = sizeof ops / sizeof ops[0];
  void* buffers[kOps] = {};
  int st = PCR_OK;
  for (int i = 0; i < kOps && st == PCR_OK; ++i) {
    if (!src[i]->ptr) continue;
    if (i == 2 && src[2]->ptr == src[3]->ptr) continue;  // c is d: staged with d
    uintptr_t lo, hi;
    src[i]->extent(&lo, &hi);
    if (hi == lo) continue;
    st = cuda_status(cudaMalloc(&buffers[i], hi - lo), "cudaMalloc(host staging)");
    if (st == PCR_OK)
      st = cuda_status(cudaMemcpy(buffers[i], src[i]->ptr, hi - lo, cudaMemcpyHostToDevice),
                       "cudaMemcpy(host to device)");
    ops[i]->ptr = static_cast<char*>(buffers[i]);
  }
  if (bd.c.ptr && bd.c.ptr == bd.d.ptr) dev.c.ptr = dev.d.ptr;
  if (st == PCR_OK) st = launch_device(p, dev, k, stream);
  if (st == PCR_OK && buffers[3]) {
    uintptr_t lo, hi;
    bd.d.extent(&lo, &hi);
    st = cuda_status(cudaMemcpyAsync(bd.d.ptr, buffers[3], hi - lo, cudaMemcpyDeviceToHost,
                                     stream), "cudaMemcpy(device to host)");
    if (st == PCR_OK) st = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  for (void* b : buffers)
    if (b) cudaFree(b);
  return st;
}

bool same_problem(const pcr_problem& x, const pcr_problem& y) {
  return key_of(x) == key_of(y) && x.transposed == y.transposed && x.host == y.host &&
         x.device == y.device;
}

}  // namespace

// Whether kernel k runs `g` as a programmatic dependent (PDL). Measured on the H200
// (benchmarks/RESULTS.md, "PDL policy"): it saves 0.3-2 us per launch where the
// launch latency shows (1024^3 7.3 -> 6.4 us), but a ping-pong kernel whose CTAs each hold
// one tile over a long K, with two or more tile rows, or whose tiles outnumber the SMs,
// ran 5-38% slower (256x4096x14336: 48 -> 65 us); those launch plainly. "Long" is
// K > 2048, and K > 4096 for 1-byte inputs (rows of 4 KB, as 16-bit inputs' at 2048):
// their decode shapes at K = 4096 gain 3-7% from PDL
// (the same section, 2026-12-02).
static bool programmatic_suits(const pcr_kernel_desc& d, const GemmArgs& g) {
  const int64_t short_k = esize_of(d.dtype_a) == 1 ? 4096 : 2048;
  if (d.schedule != PCR_SCHED_PINGPONG || g.k <= short_k) return true;
  const int64_t rows = (g.m + d.tile_m - 1) / d.tile_m;
  return rows == 1 && (g.n + d.tile_n - 1) / d.tile_n <= g.sm_count;
}

int PreparedLaunch::prepare(int k, const GemmArgs& g, size_t bytes, void* ws) {
  kernel = -1;  // empty until the parameters are complete
  int st = kKernels[k]->ops.prepare(g, ws, blob);
  if (st != PCR_OK) return st;
  kernel = k;
  args = g;
  workspace_bytes = bytes;
  workspace = ws;
  programmatic = pdl_enabled() && programmatic_suits(kKernels[k]->info, g);
  return PCR_OK;
}

int PreparedLaunch::launch(int k, const GemmArgs& g, size_t bytes, void* ws,
                           cudaStream_t stream) {
  if (!matches(k, g) || workspace != ws) {
    int st = prepare(k, g, bytes, ws);
    if (st != PCR_OK) return st;
  }
  return kKernels[k]->ops.launch(blob, ws, g.device, stream, programmatic);
}

int launch(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream) {
  DeviceGuard guard;
  int st = guard.set(p.device);
  if (st != PCR_OK) return st;
  return p.host ? launch_host(p, bd, k, stream) : launch_device(p, bd, k, stream);
}

int select(const pcr_problem& p, const Bound& bd, int* kernel) {
  Memo& m = memo();
  auto it = m.map.find(key_of(p));
  if (it == m.map.end()) return PCR_NEED_SELECTION;
  Candidates& cand = it->second;
  if (cand.resolved >= 0) {
    *kernel = cand.resolved;
    return PCR_OK;
  }
  std::string reasons;
  for (int i = 0; i < cand.count; ++i) {
    if (check_kernel(cand.kernel[i], p, &bd) == PCR_OK) {
      *kernel = cand.resolved = cand.kernel[i];
      return PCR_OK;
    }
    reasons += std::string("\n  ") + pcr_last_error();
  }
  return set_error(PCR_ERR_UNSUPPORTED, "no candidate kernel can implement this problem:%s",
                   reasons.c_str());
}

// A forced kernel (checked), or the selected one. A problem without GEMM work (an empty
// extent, or K = 0: d = act(beta * c + bias) elementwise) launches no GEMM kernel, so it
// takes none (PCR_KERNEL_NONE) and asks for no selection: its result does not hinge on which kernels
// the build holds for its layouts.
int kernel_for(const pcr_problem& p, const Bound& bd, int32_t forced, int* kernel) {
  if (forced == PCR_KERNEL_SELECT && !has_gemm_work(p)) {
    *kernel = PCR_KERNEL_NONE;
    return PCR_OK;
  }
  if (forced == PCR_KERNEL_SELECT) return select(p, bd, kernel);
  if (forced < 0)
    return set_error(PCR_ERR_KERNEL_NOT_FOUND, "kernel index %d is not in this build", forced);
  int st = check_kernel(forced, p, &bd);
  if (st == PCR_OK) *kernel = forced;
  return st;
}

int gemm(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
         double alpha, double beta, const pcr_extras* extras, int32_t kernel, void* stream,
         pcr_problem* out) {
  pcr_problem local;
  pcr_problem& p = out ? *out : local;
  Bound bd;
  int st = describe(a, b, c, d, alpha, beta, extras, &p, &bd);
  if (st != PCR_OK) return st;
  int k = -1;
  if ((st = kernel_for(p, bd, kernel, &k))) return st;
  return launch(p, bd, k, static_cast<cudaStream_t>(stream));
}

// ---- bound plans -----------------------------------------------------------------

int plan_create(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                double alpha, double beta, const pcr_extras* extras, int32_t kernel,
                pcr_problem* out, pcr_plan** plan) {
  *plan = nullptr;
  pcr_problem local;
  pcr_problem& p = out ? *out : local;
  Bound bd;
  int st = describe(a, b, c, d, alpha, beta, extras, &p, &bd);
  if (st != PCR_OK) return st;
  if (p.host)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "a plan needs GPU tensors; host (numpy) operands are staged per call: "
                     "use gemm() for them");
  int k = -1;
  if ((st = kernel_for(p, bd, kernel, &k))) return st;
  auto* pl = new (std::nothrow) pcr_plan();
  if (!pl) return set_error(PCR_ERR_INTERNAL, "out of host memory");
  pl->problem = p;
  pl->bound = bd;
  pl->kernel = k;
  if (has_gemm_work(p)) {
    DeviceGuard guard;
    st = guard.set(p.device);
    size_t scratch = stage_layout(p, bd, nullptr).bytes;
    if (st == PCR_OK && scratch)
      st = cuda_status(cudaMalloc(&pl->scratch, scratch), "cudaMalloc(staging scratch)");
    // the kernel's own problem: staged operands live in the plan's scratch
    Staging s = stage_layout(p, bd, static_cast<char*>(pl->scratch));
    GemmArgs g = gemm_args(s.problem, s.bound);
    pl->workspace_bytes = kKernels[k]->ops.workspace_size(g);
    if (st == PCR_OK && pl->workspace_bytes)
      st = cuda_status(cudaMalloc(&pl->workspace, pl->workspace_bytes), "cudaMalloc(workspace)");
    if (st == PCR_OK) st = pl->prepared.prepare(k, g, pl->workspace_bytes, pl->workspace);
    if (st != PCR_OK) {
      pcr_plan_destroy(pl);
      return st;
    }
  }
  *plan = pl;
  return PCR_OK;
}

int plan_run(pcr_plan* pl, const DLTensor* a, const DLTensor* b, const DLTensor* c,
             const DLTensor* d, const pcr_extras* extras, cudaStream_t stream) {
  if (!pl) return set_error(PCR_ERR_INVALID_ARGUMENT, "plan is NULL");
  const Bound* bd = &pl->bound;
  Bound fresh;
  if (a || b || c || d || extras) {
    if (!(a && b && d))
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "a plan runs on a, b, (c,) d (and the extras' tensors) together");
    const bool tf32 = pl->problem.dtype_a == PCR_TF32;
    const bool f32 = tf32 || pl->problem.dtype_a == PCR_F32;  // math matters to fp32 only
    pcr_extras x{nullptr, nullptr, nullptr, pl->problem.activation,
                 tf32 ? PCR_MATH_TF32 : PCR_MATH_IEEE};
    if (extras) {
      if (extras->activation != x.activation || (f32 && extras->math != x.math))
        return set_error(PCR_ERR_INVALID_ARGUMENT,
                         "a plan runs with the activation and math it was built with");
      x.bias = extras->bias, x.scale_a = extras->scale_a, x.scale_b = extras->scale_b;
    }
    pcr_problem p;
    int st = describe(a, b, c, d, pl->bound.alpha, pl->bound.beta, &x, &p, &fresh);
    if (st != PCR_OK) return st;
    if (!same_problem(p, pl->problem))
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "these tensors describe another problem than the plan's (%lldx%lldx%lld "
                       "with its dtypes, layouts, alignments and device): build a plan for them",
                       (long long)pl->problem.m, (long long)pl->problem.n,
                       (long long)pl->problem.k);
    bd = &fresh;
  }
  DeviceGuard guard;
  int st = guard.set(pl->problem.device);
  if (st != PCR_OK) return st;
  return launch_device(pl->problem, *bd, pl->kernel, stream, pl);
}

}  // namespace pcr

using namespace pcr;

extern "C" {

PCR_API int pcr_abi_version(void) { return PCR_ABI_VERSION; }

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

PCR_API int pcr_kernel_check(int32_t kernel, const pcr_problem* problem) {
  clear_error();
  return check_kernel(kernel, *problem, nullptr);
}

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

PCR_API int pcr_select_put(const pcr_problem* problem, const int32_t* kernels,
                           int32_t count) {
  if (!problem || (count > 0 && !kernels) || count < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_select_put: bad arguments");
  Candidates cand{};
  for (int i = 0; i < count && cand.count < kMaxCandidates; ++i) {
    if (kernels[i] < 0 || kernels[i] >= kKernelCount)
      return set_error(PCR_ERR_KERNEL_NOT_FOUND, "kernel index %d out of range", kernels[i]);
    cand.kernel[cand.count++] = kernels[i];
  }
  memo().map[key_of(*problem)] = cand;
  return PCR_OK;
}

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

PCR_API void pcr_plan_destroy(pcr_plan* plan) {
  if (!plan) return;
  if (plan->workspace || plan->scratch) {
    DeviceGuard guard;  // cudaFree waits for the plan's pending launches
    if (guard.set(plan->problem.device) == PCR_OK) {
      cudaFree(plan->workspace);
      cudaFree(plan->scratch);
    }
  }
  delete plan;
}

PCR_API int pcr_select_clear(void) {
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  return PCR_OK;
}

}  // extern "C"
