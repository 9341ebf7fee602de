// Kernel choice for one problem (pycutlass_rt.h, "the selector"): which of this build's
// kernels take it, a device's tuned entries and refusal, the ranking, the message when no
// kernel runs it, and why each kernel it leaves out is left out. The per-thread memo of
// choices lives in select.cpp.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime.h"

namespace pcr {
namespace {

// ---- a device's say: its tuned entries, or its refusal ----------------------------------
struct Tuned {
  int32_t kernel;
  bool pinned;
};
struct Say {
  uint64_t generation;                             // the says' generation it was given in
  std::unordered_map<std::string, Tuned> entries;  // identity_key -> entry
  std::string source;
  bool refuses = false;
  std::string refusal;
};
constexpr int kMaxDevices = 64;
std::mutex g_mutex;  // guards the says and the callbacks (never held while one runs)
std::shared_ptr<const Say> g_say[kMaxDevices];
std::atomic<uint64_t> g_say_generation{1};
pcr_select_provider_fn g_provider = nullptr;
void* g_provider_context = nullptr;
pcr_select_observer_fn g_observer = nullptr;
void* g_observer_context = nullptr;

std::shared_ptr<const Say> held_say(int device, uint64_t generation) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto& say = g_say[device];
  return say && say->generation == generation ? say : nullptr;
}

// The device's say, asking the provider the first time (and after pcr_select_clear). The
// provider runs unlocked: it calls back into select_tuned, and may wait for a lock of its
// own (Python's GIL) that a thread inside the library holds while it waits for ours.
std::shared_ptr<const Say> say_of(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  const uint64_t generation = g_say_generation.load(std::memory_order_acquire);
  if (auto say = held_say(device, generation)) return say;
  pcr_select_provider_fn provider;
  void* context;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    provider = g_provider;
    context = g_provider_context;
  }
  if (provider) provider(device, context);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& say = g_say[device];
  if (!say || say->generation != generation) {  // no say given: none, until asked again
    auto none = std::make_shared<Say>();
    none->generation = generation;
    say = none;
  }
  return say;
}

// ---- which kernels take a problem ------------------------------------------------------
// The kernel's kind matches the problem's (what messages leave unsaid: a kernel of other
// dtypes or layouts is no candidate at all); whether it accepts the operands is
// check_kernel's (pcr_verdict).
bool same_kind(const pcr_kernel_desc& kd, const pcr_problem& p) {
  const bool grids = is_grid(p.scale_m);
  return kd.op == p.op && kd.dtype_a == p.dtype_a && kd.dtype_b == p.dtype_b &&
         kd.dtype_d == p.dtype_d && kd.layout_a == p.layout_a && kd.layout_b == p.layout_b &&
         kd.grouped == (p.grouped != PCR_GROUPED_NONE) && (kd.out_scale || !p.out_scale) &&
         kd.scale_m == (grids ? p.scale_m : PCR_SCALE_NONE) &&
         kd.scale_n == (grids ? p.scale_n : PCR_SCALE_NONE) &&
         epilogue_serves(kd.epilogue, p.epilogue);
}

// How the no-kernel message names what the problem's epilogue needs ("" for a plain one).
std::string needs_words(int epilogue) {
  if (epilogue == PCR_EPI_LINEAR) return "";
  return std::string(" with a ") + epilogue_words(epilogue) + " epilogue";
}

// Why the screen leaves out a kernel that takes the problem.
enum class Dropped {
  kFastAccum,  // fast accumulation allowed, and a fast-accumulating kernel runs it
  kEpilogue,   // a richer epilogue, and a kernel of the problem's own runs it
};

struct Screened {
  std::vector<int32_t> accepted;  // kernel indices, the problem's own epilogue only if any
  std::string reasons;            // "\n  name: why" for each kernel of its kind refused
  std::vector<std::pair<int32_t, Dropped>> dropped;  // kernels that take it, left out
};

std::string dropped_words(int32_t k, Dropped why) {
  if (why == Dropped::kFastAccum)
    return "fp8 fast accumulation allowed: a fast-accumulating kernel runs it";
  return std::string("epilogue ") + epilogue_name(kKernels[k]->info.epilogue) +
         ": a kernel of the problem's own runs it";
}

// What is said of a kernel left out for no reason the selector knows (none is, as it stands).
constexpr char kNoCandidate[] = "not a candidate for this problem";

// Why a kernel does not take a problem (PCR_OK and "": it does).
struct Refusal {
  int status = PCR_OK;
  std::string why;
};

bool runs_here(const pcr_kernel_desc& kd, const int32_t* order, int nfam) {
  return std::find(order, order + nfam, kd.family) != order + nfam;
}

// Why kernel k does not take p: its family's not running on the problem's GPU first (no
// check of a kernel that cannot run here, and the reason that holds whatever the shape),
// else its verdict's refusal (what explain() lists) or, on a launch, the check's.
Refusal refusal_of(int32_t k, const pcr_problem& p, const Bound* bound, const pcr_verdict* verdicts,
                   const int32_t* order, int nfam) {
  const pcr_kernel_desc& kd = kKernels[k]->info;
  Refusal r;
  if (!runs_here(kd, order, nfam)) {
    r.status = PCR_ERR_NO_KERNEL_FOR_ARCH;
    r.why = "sm" + std::to_string(kd.family) + " kernels do not run on compute " +
            std::to_string(p.cc / 10) + "." + std::to_string(p.cc % 10);
  } else if (verdicts) {
    r.status = verdicts[k].status;
    const char* why = verdicts[k].reason;  // the caller's: maybe unterminated
    if (r.status != PCR_OK) r.why.assign(why, strnlen(why, sizeof verdicts[k].reason));
  } else {
    r.status = check_kernel(k, p, bound);
    if (r.status != PCR_OK) r.why = last_error();
    clear_error();
  }
  return r;
}

Screened screen(const pcr_problem& p, const Bound* bound, const pcr_verdict* verdicts,
                const int32_t* order, int nfam) {
  Screened s;
  bool exact = false, fast = false;
  for (int32_t k = 0; k < kKernelCount; ++k) {
    const pcr_kernel_desc& kd = kKernels[k]->info;
    if (!same_kind(kd, p)) continue;
    const Refusal r = refusal_of(k, p, bound, verdicts, order, nfam);
    if (r.status != PCR_OK) {
      s.reasons += std::string("\n  ") + kd.name + ": " + r.why;
      continue;
    }
    exact |= kd.epilogue == p.epilogue;
    fast |= is_fast_accum(kd);
    s.accepted.push_back(k);
  }
  auto drop = [&s](auto gone, Dropped why) {
    auto last = std::remove_if(s.accepted.begin(), s.accepted.end(), [&](int32_t k) {
      if (!gone(kKernels[k]->info)) return false;
      s.dropped.push_back({k, why});
      return true;
    });
    s.accepted.erase(last, s.accepted.end());
  };
  // fast accumulation allowed: its kernels only, where the build holds one that runs it
  if (fast) drop([](const pcr_kernel_desc& kd) { return !is_fast_accum(kd); }, Dropped::kFastAccum);
  // a richer epilogue (slower) only where no kernel has the problem's own; forcing one works
  if (exact)
    drop([&](const pcr_kernel_desc& kd) { return kd.epilogue != p.epilogue; }, Dropped::kEpilogue);
  return s;
}

// Where the selector says why it passes kernels over (pcr_select_passed_over's records, the
// first `count` kernels'); each kernel keeps the first reason said.
struct PassedOver {
  pcr_verdict* records;
  int32_t count;
  void note(int32_t k, int status, const std::string& why) const {
    if (k >= count || records[k].status != PCR_OK) return;
    records[k].status = status;
    std::snprintf(records[k].reason, sizeof records[k].reason, "%s", why.c_str());
  }
};

int no_kernel_for_arch(const pcr_problem& p) {
  std::vector<int> held;
  for (int k = 0; k < kKernelCount; ++k) held.push_back(kKernels[k]->info.family);
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  std::string families;
  for (int f : held) families += (families.empty() ? "sm" : ", sm") + std::to_string(f);
  return set_error(PCR_ERR_NO_KERNEL_FOR_ARCH,
                   "this GPU is compute %d.%d, and the build holds kernels only for %s: rebuild "
                   "with PYCUTLASS_RT_ARCHS=native (or include this GPU's arch)",
                   p.cc / 10, p.cc % 10, families.empty() ? "no arch" : families.c_str());
}

// choose, saying in `passed` (NULL: nowhere) why it leaves kernels out where it decides so:
// the screen's drops and a pin's; select_passed_over says the rest.
int choose_noting(const pcr_problem& p, const Bound* bound, const pcr_verdict* verdicts, int flags,
                  std::vector<pcr_ranked>* out, int32_t* unused_tuned, const PassedOver* passed) {
  out->clear();
  *unused_tuned = -1;
  std::shared_ptr<const Say> say = flags & PCR_SELECT_UNTUNED ? nullptr : say_of(int(p.device));
  if (say && say->refuses) return set_error(PCR_ERR_UNSUPPORTED, "%s", say->refusal.c_str());
  int32_t order[4];
  const int nfam = std::min(kernel_families(p.cc, order, 4), 4);
  bool any_here = false;
  for (int k = 0; k < kKernelCount && !any_here; ++k)
    any_here = runs_here(kKernels[k]->info, order, nfam);
  if (!any_here) return no_kernel_for_arch(p);
  Screened s = screen(p, bound, verdicts, order, nfam);
  if (passed)
    for (const auto& [k, why] : s.dropped)
      passed->note(k, PCR_ERR_UNSUPPORTED, dropped_words(k, why));

  const Tuned* tuned = nullptr;
  if (say) {
    auto it = say->entries.find(identity_key(p));
    if (it != say->entries.end()) tuned = &it->second;
  }
  if (tuned) {
    const Tuned t = *tuned;
    if (std::find(s.accepted.begin(), s.accepted.end(), t.kernel) != s.accepted.end()) {
      out->push_back({t.kernel, t.pinned ? PCR_RANK_PINNED : PCR_RANK_TUNED, -1, -1, 0.0});
      if (t.pinned) {
        if (passed)
          for (int32_t k : s.accepted)
            if (k != t.kernel)
              passed->note(k, PCR_ERR_UNSUPPORTED, "pinned: another kernel alone runs it");
        return PCR_OK;
      }
      s.accepted.erase(std::find(s.accepted.begin(), s.accepted.end(), t.kernel));
    } else if (t.pinned) {
      std::string why = refusal_of(t.kernel, p, bound, verdicts, order, nfam).why;
      for (const auto& [k, dropped] : s.dropped)
        if (k == t.kernel) why = dropped_words(k, dropped);
      if (why.empty()) why = kNoCandidate;
      return set_error(PCR_ERR_UNSUPPORTED,
                       "kernel %s is pinned for this problem (%s, tune(strict=True)) but cannot "
                       "run it: %s. Re-run pycutlass_rt.tune(..., strict=True) with this build "
                       "and device, or remove the entry from the cache file",
                       kKernels[t.kernel]->info.name,
                       say->source.empty() ? "a tuned entry" : say->source.c_str(), why.c_str());
    } else {
      *unused_tuned = t.kernel;
    }
  }
  const size_t first = out->size();
  out->resize(first + s.accepted.size());
  out->resize(first + rank_kernels(p, order, nfam, s.accepted, out->data() + first));
  if (!out->empty()) return PCR_OK;
  const std::string needs = needs_words(p.epilogue);
  const std::string reasons =
      s.reasons.empty() ? "\n  (no kernel has these dtypes and layouts" + needs + ")" : s.reasons;
  return set_error(PCR_ERR_UNSUPPORTED,
                   "no kernel of this build can run this problem (%lldx%lldx%lld%s); candidates "
                   "and why they were rejected:%s",
                   static_cast<long long>(p.m), static_cast<long long>(p.n),
                   static_cast<long long>(p.k), needs.c_str(), reasons.c_str());
}

}  // namespace

int choose(const pcr_problem& p, const Bound* bound, const pcr_verdict* verdicts, int flags,
           std::vector<pcr_ranked>* out, int32_t* unused_tuned) {
  return choose_noting(p, bound, verdicts, flags, out, unused_tuned, nullptr);
}

void observe(const pcr_problem& p, const std::vector<pcr_ranked>& ranked, int32_t unused_tuned) {
  pcr_select_observer_fn observer;
  void* context;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    observer = g_observer;
    context = g_observer_context;
  }
  if (observer) observer(&p, ranked.data(), int32_t(ranked.size()), unused_tuned, context);
}

int select_rank(const pcr_problem* p, const pcr_verdict* verdicts, int32_t flags, pcr_ranked* out,
                int32_t capacity, int32_t* count) {
  if (!p || !count || capacity < 0 || (capacity > 0 && !out))
    return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_select_rank: bad arguments");
  *count = 0;
  if (!has_gemm_work(*p)) return PCR_OK;  // it takes no kernel
  std::vector<pcr_ranked> ranked;
  int32_t unused;
  const int st = choose(*p, nullptr, verdicts, flags, &ranked, &unused);
  if (st != PCR_OK) return st;
  *count = std::min(capacity, int32_t(ranked.size()));
  std::copy(ranked.begin(), ranked.begin() + *count, out);
  return PCR_OK;
}

int select_passed_over(const pcr_problem* p, const pcr_verdict* verdicts, int32_t flags,
                       pcr_verdict* passed, int32_t count) {
  if (!p || count < 0 || (count > 0 && !passed))
    return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_select_passed_over: bad arguments");
  const PassedOver notes{passed, std::min(count, kKernelCount)};
  for (int32_t k = 0; k < notes.count; ++k) passed[k].status = PCR_OK, passed[k].reason[0] = 0;
  std::vector<pcr_ranked> ranked;
  int32_t unused;
  int st = PCR_ERR_UNSUPPORTED;
  std::string error = "no GEMM work (M, N, K or the batch is 0): no kernel runs";
  if (has_gemm_work(*p)) {
    st = choose_noting(*p, nullptr, verdicts, flags, &ranked, &unused, &notes);
    error = st == PCR_OK ? "" : last_error();
  }
  std::vector<bool> held(kKernelCount);
  for (const pcr_ranked& r : ranked) held[r.candidate] = true;
  // the rest: their verdicts' or families' refusals, else what kept the problem from a
  // ranking (a device's refusal, an impossible pin)
  int32_t order[4];
  const int nfam = std::min(kernel_families(p->cc, order, 4), 4);
  for (int32_t k = 0; k < notes.count; ++k) {
    if (held[k] || passed[k].status != PCR_OK) continue;
    const Refusal r = refusal_of(k, *p, nullptr, verdicts, order, nfam);
    if (r.status != PCR_OK)
      notes.note(k, r.status, r.why);
    else if (st != PCR_OK)
      notes.note(k, st, error);
    else  // the screen leaves out only what it refuses or drops
      notes.note(k, PCR_ERR_UNSUPPORTED, kNoCandidate);
  }
  clear_error();
  return PCR_OK;
}

int select_tuned(int32_t device, const pcr_tuned* entries, int32_t count, const char* source,
                 const char* refusal) {
  if (device < 0 || device >= kMaxDevices || count < 0 || (count > 0 && !entries))
    return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_select_tuned: bad arguments");
  auto say = std::make_shared<Say>();
  say->generation = g_say_generation.load(std::memory_order_acquire);
  say->source = source ? source : "";
  say->refuses = refusal != nullptr;
  say->refusal = refusal ? refusal : "";
  for (int32_t i = 0; i < count; ++i) {
    const pcr_tuned& e = entries[i];
    if (e.kernel < 0 || e.kernel >= kKernelCount)
      return set_error(PCR_ERR_KERNEL_NOT_FOUND, "pcr_select_tuned: entry %d names kernel %d", i,
                       e.kernel);
    say->entries[identity_key(e.identity)] = {e.kernel, e.pinned != 0};
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_say[device] = std::move(say);
  }
  forget_choices();
  return PCR_OK;
}

int select_provider(pcr_select_provider_fn provider, void* context) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_provider = provider;
    g_provider_context = context;
  }
  select_clear();
  return PCR_OK;
}

int select_observe(pcr_select_observer_fn observer, void* context) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_observer = observer;
  g_observer_context = context;
  return PCR_OK;
}

void forget_says() { g_say_generation.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace pcr
