// Kernel choice's memo: each thread remembers the candidates it ranked for a problem
// (choose.cpp), and a call takes the first that accepts its operands.
#include <atomic>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime.h"

namespace pcr {
namespace {

// ---- selection memo ------------------------------------------------------------
// A problem seen for the first time is ranked once per thread (choose.cpp); later calls
// find the candidates here. Each thread keeps its own map, so lookups take no lock; a
// global generation number lets the selector invalidate every thread's map.

// A problem's identity: every field its kernel choice may hinge on. The memo keys on it,
// pcr_problem_identity hands the same list to Python's tune cache (_cache.problem_key), and
// a plan's rebinding compares it: one list, so the three cannot drift apart.
// clang-format off
#define PCR_IDENTITY(X)                                                                    \
  X(m) X(n) X(k) X(batch) X(dtype_a) X(dtype_b) X(dtype_c) X(dtype_d) X(layout_a)          \
  X(layout_b) X(align_a) X(align_b) X(align_c) X(align_d) X(c_mode) X(cc) X(staged) X(bias) \
  X(activation) X(align_bias) X(epilogue) X(grouped) X(scale_m) X(scale_n) X(out_scale) X(op)   \
  X(conv.n) X(conv.h) X(conv.w) X(conv.c) X(conv.k) X(conv.r) X(conv.s) X(conv.pad_h)         \
  X(conv.pad_w) X(conv.stride_h) X(conv.stride_w) X(conv.dilation_h) X(conv.dilation_w)      \
  X(conv.groups) X(fast_accum)
// clang-format on
#define PCR_COUNT(field) +1
constexpr int kIdentityFields = 0 PCR_IDENTITY(PCR_COUNT);
#undef PCR_COUNT
#define PCR_NAME(field) #field " "
constexpr char kIdentityNames[] = PCR_IDENTITY(PCR_NAME);
#undef PCR_NAME

struct Key {
  int64_t v[kIdentityFields];
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
  int i = 0;
#define PCR_VALUE(field) key.v[i++] = int64_t(p.field);
  PCR_IDENTITY(PCR_VALUE)
#undef PCR_VALUE
  // A grouped problem's M is its largest group's (the MoE form: every routed token), which
  // changes from call to call; the choice does not hinge on it, so powers of two bucket it
  // and a new routing reuses the remembered kernels instead of asking Python again.
  if (p.grouped != PCR_GROUPED_NONE)
    for (key.v[0] = p.m ? 1 : 0; key.v[0] < p.m;) key.v[0] *= 2;
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
  const Key key = key_of(p);
  auto it = m.map.find(key);
  if (it == m.map.end()) {
    std::vector<pcr_ranked> ranked;
    int32_t unused_tuned;
    int st = choose(p, &bd, nullptr, 0, &ranked, &unused_tuned);
    if (st != PCR_OK) return st;
    Candidates fresh{};
    for (const pcr_ranked& r : ranked)
      if (fresh.count < kMaxCandidates) fresh.kernel[fresh.count++] = r.candidate;
    observe(p, ranked, unused_tuned);  // first: it may call back in (and clear the memo)
    it = memo().map.emplace(key, fresh).first;
  }
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

void forget_choices() { g_generation.fetch_add(1, std::memory_order_acq_rel); }

void select_clear() {
  forget_says();
  forget_choices();
}

const char* identity_names() { return kIdentityNames; }

std::string identity_key(const pcr_problem& p) {
  const Key key = key_of(p);
  return std::string(reinterpret_cast<const char*>(key.v), sizeof key.v);
}

std::string identity_key(const int64_t* values) {
  return std::string(reinterpret_cast<const char*>(values), sizeof(int64_t) * kIdentityFields);
}

int identity(const pcr_problem* problem, int64_t* values, int32_t capacity) {
  static_assert(kIdentityFields <= PCR_IDENTITY_MAX, "pcr_tuned's identity is too short");
  if (!problem || !values || capacity < kIdentityFields)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "pcr_problem_identity: needs a problem and room for %d values",
                     kIdentityFields);
  Key key = key_of(*problem);
  std::memcpy(values, key.v, sizeof key.v);
  return PCR_OK;
}

}  // namespace pcr
