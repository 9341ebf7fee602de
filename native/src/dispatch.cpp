// The GEMM entry points: selection memo, launch, host staging, catalogue queries.
#include <atomic>
#include <cstring>
#include <mutex>
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
  int64_t m, n, k;
  int32_t f[12];
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
  key.n = p.n;
  key.k = p.k;
  int32_t f[12] = {p.dtype_a, p.dtype_b, p.dtype_c, p.dtype_d, p.layout_a, p.layout_b,
                   p.align_a, p.align_b, p.align_c, p.align_d, p.c_mode, p.cc};
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

int workspace_for(int device, cudaStream_t stream, size_t bytes, void** out) {
  *out = nullptr;
  if (bytes == 0) return PCR_OK;
  uint64_t key = (uint64_t(uintptr_t(stream)) << 8) ^ uint64_t(device);
  std::lock_guard<std::mutex> lock(g_ws_mutex);
  Workspace& ws = g_ws[key];
  if (ws.bytes < bytes) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &capture);
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
    if (st != PCR_OK) return st;
    ws.bytes = bytes;
  }
  *out = ws.ptr;
  return PCR_OK;
}

int run_kernel(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream) {
  GemmArgs g = gemm_args(p, bd);
  const KernelOps& ops = kKernels[k]->ops;
  int st = ops.can_implement(g);
  if (st != PCR_OK) {
    std::string why = pcr_last_error();
    return set_error(st, "%s: %s", kKernels[k]->info.name, why.c_str());
  }
  void* ws = nullptr;
  if ((st = workspace_for(p.device, stream, ops.workspace_size(g), &ws))) return st;
  return ops.run(g, ws, stream);
}

int launch_device(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return PCR_OK;
  int st;
  if (p.k == 0 || p.c_mode == 2) {
    // d = beta * c first: the whole answer when K == 0, else C in D's form for the kernel.
    float scale = p.c_mode == 0 ? 0.0f : float(bd.beta);
    if ((st = launch_scale_copy(p.c_mode ? &bd.c : nullptr, bd.d,
                                p.k == 0 ? scale : 1.0f, stream)))
      return st;
    if (p.k == 0) return PCR_OK;
  }
  return run_kernel(p, bd, k, stream);
}

// Host operands: copy each one's byte span to the GPU, run, copy D back, synchronize.
int launch_host(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream) {
  Bound dev = bd;
  Matrix* ops[] = {&dev.a, &dev.b, &dev.c, &dev.d};
  const Matrix* src[] = {&bd.a, &bd.b, &bd.c, &bd.d};
  void* buffers[4] = {nullptr, nullptr, nullptr, nullptr};
  int st = PCR_OK;
  for (int i = 0; i < 4 && st == PCR_OK; ++i) {
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

}  // namespace

int launch(const pcr_problem& p, const Bound& bd, int k, cudaStream_t stream) {
  DeviceGuard guard;
  int st = guard.set(p.device);
  if (st != PCR_OK) return st;
  return p.host ? launch_host(p, bd, k, stream) : launch_device(p, bd, k, stream);
}

int gemm(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
         double alpha, double beta, int32_t kernel, void* stream, pcr_problem* out) {
  pcr_problem local;
  pcr_problem& p = out ? *out : local;
  Bound bd;
  int st = describe(a, b, c, d, alpha, beta, &p, &bd);
  if (st != PCR_OK) return st;
  auto s = static_cast<cudaStream_t>(stream);
  if (kernel >= 0) {
    if ((st = check_kernel(kernel, p, &bd))) return st;
    return launch(p, bd, kernel, s);
  }
  if (kernel != -1)
    return set_error(PCR_ERR_KERNEL_NOT_FOUND, "kernel index %d is not in this build", kernel);
  Memo& m = memo();
  auto it = m.map.find(key_of(p));
  if (it == m.map.end()) return PCR_NEED_SELECTION;
  const Candidates& cand = it->second;
  std::string reasons;
  for (int i = 0; i < cand.count; ++i) {
    int k = cand.kernel[i];
    if (check_kernel(k, p, &bd) == PCR_OK) return launch(p, bd, k, s);
    reasons += std::string("\n  ") + pcr_last_error();
  }
  return set_error(PCR_ERR_UNSUPPORTED, "no candidate kernel can implement this problem:%s",
                   reasons.c_str());
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
                         const DLTensor* d, double alpha, double beta, pcr_problem* out) {
  Bound bd;
  return describe(a, b, c, d, alpha, beta, out, &bd);
}

PCR_API int pcr_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* c,
                     const DLTensor* d, double alpha, double beta, int32_t kernel,
                     void* stream, pcr_problem* problem) {
  return gemm(a, b, c, d, alpha, beta, kernel, stream, problem);
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

PCR_API int pcr_select_clear(void) {
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  return PCR_OK;
}

}  // extern "C"
