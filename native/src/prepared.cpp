// Prepared launches: a kernel's parameters built once per (kernel, args, workspace), reused.
#include "runtime.h"

namespace pcr {
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

// Whether kernel k runs `g` as a programmatic dependent (PDL). PDL hides launch latency,
// but a ping-pong kernel whose CTAs each hold one tile over a long K, with two or more
// tile rows, or more tiles than SMs, runs slower as a dependent; those launch plainly.
// "Long" is K > 2048, and K > 4096 for 1-byte inputs (rows of 4 KB, as 16-bit inputs'
// at 2048). benchmarks/RESULTS.md, "PDL policy", has the measurements and commands.
bool programmatic_suits(const pcr_kernel_desc& d, const GemmArgs& g) {
  const int64_t short_k = esize_of(d.dtype_a) == 1 ? 4096 : 2048;
  const bool pingpong = d.schedule == PCR_SCHED_PINGPONG || d.schedule == PCR_SCHED_PINGPONGFA;
  if (!pingpong || g.k <= short_k) return true;
  const int64_t rows = (g.m + d.tile_m - 1) / d.tile_m;
  return rows == 1 && (g.n + d.tile_n - 1) / d.tile_n <= g.sm_count;
}

}  // namespace

size_t workspace_size(int k, const GemmArgs& g, const PreparedLaunch* own) {
  if (own && own->matches(k, g)) return own->workspace_bytes;
  if (!own)
    for (const PreparedLaunch& s : t_prepared.slot)
      if (s.matches(k, g)) return s.workspace_bytes;
  return kKernels[k]->ops.workspace_size(g);
}

int run_prepared(int k, const GemmArgs& g, cudaStream_t stream, PreparedLaunch* own, void* ws,
                 size_t bytes) {
  PreparedLaunch& prep = own ? *own : t_prepared.find(k, g);
  return prep.launch(k, g, bytes, ws, stream);
}

int run_prepared(int k, const GemmArgs& g, cudaStream_t stream, PreparedLaunch* own) {
  const size_t bytes = workspace_size(k, g, own);
  Scratch ws;  // kept, or lent by a caching allocator: mostly the same address, so the
               // prepared launch stays valid
  int st = ws.allocate(g.device, stream, bytes, ScratchKind::kWorkspace, kKernels[k]->info.grouped);
  return st != PCR_OK ? st : run_prepared(k, g, stream, own, ws.get(), bytes);
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

int PreparedLaunch::launch(int k, const GemmArgs& g, size_t bytes, void* ws, cudaStream_t stream) {
  if (!matches(k, g) || workspace != ws) {
    int st = prepare(k, g, bytes, ws);
    if (st != PCR_OK) return st;
  }
  return kKernels[k]->ops.launch(blob, ws, g.device, stream, programmatic);
}

}  // namespace pcr
