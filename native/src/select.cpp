// Kernel choice: the per-thread selection memo Python fills, and the kernel a call takes.
#include <atomic>
#include <cstring>
#include <string>
#include <unordered_map>

#include "runtime.h"

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
  int32_t f[20] = {p.dtype_a,    p.dtype_b,  p.dtype_c, p.dtype_d, p.layout_a,
                   p.layout_b,   p.align_a,  p.align_b, p.align_c, p.align_d,
                   p.c_mode,     p.cc,       p.staged,  p.bias,    p.activation,
                   p.align_bias, p.epilogue, p.grouped, p.scale_m, p.scale_n};
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

}  // namespace

bool same_problem(const pcr_problem& x, const pcr_problem& y) {
  return key_of(x) == key_of(y) && x.transposed == y.transposed && x.host == y.host &&
         x.device == y.device;
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
    reasons += std::string("\n  ") + last_error();
  }
  return set_error(PCR_ERR_UNSUPPORTED, "no candidate kernel can implement this problem:%s",
                   reasons.c_str());
}

// A forced kernel (checked), or the selected one. A problem without GEMM work (an empty
// extent, or K = 0: d = act(beta * c + bias) elementwise) launches no GEMM kernel, so it
// takes none (PCR_KERNEL_NONE) and asks for no selection: its result does not hinge on which
// kernels the build holds for its layouts.
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

int select_put(const pcr_problem* problem, const int32_t* kernels, int32_t count) {
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

void select_clear() { g_generation.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace pcr
