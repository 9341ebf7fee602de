// Scratch memory: the kernel workspaces, staging buffers and grouped-GEMM argument arrays
// a call needs, and who owns them.
//
// - Outside capture, a call uses its stream's buffer of that kind, kept from call to call
//   so that a steady state allocates nothing (no host cost, and launch parameters built
//   for the buffer's address stay valid). The buffer is keyed by device, the stream's
//   process-unique id (cudaStreamGetId: a new stream never inherits an old one's buffer)
//   and kind, so nothing is shared across devices, streams or kinds. It grows
//   stream-ordered (the old block freed on the stream, a larger one allocated on it: no
//   synchronization), at least doubling, and a call holds it locked until its launches
//   are enqueued, so threads sharing a stream never see it move under them.
// - Kept buffers stop at kKeptMax each, at kKeptStreams streams per device, and at the
//   scratch limit (pcr_set_scratch_limit, PYCUTLASS_RT_SCRATCH_LIMIT) per device in all.
//   Past those, a call's scratch is its own, allocated and freed on its stream (~1 us more
//   per call): a stream's buffers otherwise go only with the process (nothing says when a
//   stream is destroyed), and large scratch (staged operands of big problems: GBs) kept per
//   stream would hold a copy of the largest output for every stream a sweep used.
//   pcr_empty_cache frees the kept buffers.
// - Scratch a graph captures belongs to that graph, so graphs replay concurrently with
//   eager calls and with each other on any streams. The first call of a capture on a
//   stream that keeps a large enough buffer takes that buffer over: it is retired from
//   eager use (the stream's next eager call gets a new one) and serves that capture's later
//   calls on the stream, and it is never freed, as the graph may replay for as long as the
//   process lives. Replays then cost no more than eager calls (graph memory nodes around
//   every kernel replay slower). Any other captured call's scratch is the graph's own
//   (cudaMallocFromPoolAsync / cudaFreeAsync on the capturing stream become its memory
//   nodes, freed with the graph), so capture needs no warm-up.
// - With the caller's allocator set (pcr_set_allocator: pycutlass_rt.torch lends torch's
//   caching allocator, so that torch's statistics see the workspaces), every eager call's
//   scratch is its own, from that allocator, given back when the call returns: nothing is
//   kept, and no lock of the library is held while the allocator runs (it may wait for
//   Python's GIL, which another thread inside the library may hold).
// Host-array copies are always the call's own. Memory comes from the library's pool per
// device, so the application's default pool and its settings are untouched; the pool keeps
// up to kPoolKeep of freed memory across synchronizations (a steady state allocates from
// it) and hands the rest back to the device there (one huge call's scratch is not held).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "runtime.h"

namespace pcr {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kKeptMax = size_t(64) << 20;  // larger scratch is the call's own
constexpr size_t kKeptStreams = 64;            // torch's pooled streams per device: 32 per priority
constexpr uint64_t kPoolKeep = uint64_t(1) << 30;      // freed memory the pool holds on to
constexpr uint64_t kDefaultLimit = uint64_t(1) << 30;  // kept scratch per device, all streams
std::mutex g_pool_mutex;
cudaMemPool_t g_pools[kMaxDevices] = {};

int pool_for(int device, cudaMemPool_t* out) {
  if (device < 0 || device >= kMaxDevices)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "device ordinal %d is out of range", device);
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (!g_pools[device]) {
    // The first call may come inside a capture (no warm-up), whose global mode forbids
    // creating a pool; this thread's relaxed mode allows it, and nothing here is captured.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    struct Restore {
      cudaStreamCaptureMode mode;
      ~Restore() { cudaThreadExchangeStreamCaptureMode(&mode); }
    } restore{mode};
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    int st = cuda_status(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate(scratch)");
    if (st != PCR_OK) return st;
    uint64_t keep = kPoolKeep;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    g_pools[device] = pool;
  }
  *out = g_pools[device];
  return PCR_OK;
}

int stream_alloc(int device, cudaStream_t stream, size_t bytes, bool zeroed, void** out) {
  cudaMemPool_t pool = nullptr;
  int st = pool_for(device, &pool);
  if (st == PCR_OK) {
    cudaError_t e = cudaMallocFromPoolAsync(out, bytes, pool, stream);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (e == cudaErrorMemoryAllocation && cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
        capture == cudaStreamCaptureStatusNone) {
      // Out of memory: what pools cache may be what is missing. CUDA keeps graphs' freed
      // memory for later graphs until trimmed (destroyed graphs' included), and this pool
      // keeps kPoolKeep; give both back and try once more.
      cudaGetLastError();
      cudaDeviceGraphMemTrim(device);
      cudaMemPoolTrimTo(pool, 0);
      e = cudaMallocFromPoolAsync(out, bytes, pool, stream);
    }
    st = cuda_status(e, "cudaMallocFromPoolAsync(scratch)");
  }
  if (st != PCR_OK) {
    *out = nullptr;
    return st;
  }
  // The pointer-array kernels write their TMA descriptors into their workspace with
  // tensormap.cp_fenceproxy, which compute-sanitizer's initcheck does not count as a
  // write; kept buffers are zeroed when they grow, so no read of them is uninitialized.
  return zeroed ? cuda_status(cudaMemsetAsync(*out, 0, bytes, stream), "cudaMemsetAsync(scratch)")
                : PCR_OK;
}

// A kept buffer: a stream's, for its eager calls, or one retired into a capture.
struct Kept {
  std::mutex mutex;  // held by the call using the buffer until its launches are enqueued
  void* ptr = nullptr;
  size_t bytes = 0;
};
std::mutex g_kept_mutex;  // the maps below; never held while waiting for a Kept's mutex
std::map<std::tuple<int, unsigned long long, int>, Kept> g_kept;  // (device, stream id, kind)
std::map<int, std::set<unsigned long long>> g_keeping;  // device -> ids of streams keeping
// The id of each stream handle seen outside capture (a capturing stream cannot be asked).
std::map<std::pair<int, cudaStream_t>, unsigned long long> g_ids;
// Buffers retired into captures: (device, capture id, capturing stream, kind).
std::map<std::tuple<int, unsigned long long, cudaStream_t, int>, Kept> g_retired;
std::atomic<uint64_t> g_kept_bytes[kMaxDevices];  // kept for eager calls, per device

// The caller's allocator (pcr_set_allocator), read whole under its lock.
struct Lender {
  pcr_alloc_fn alloc = nullptr;
  pcr_release_fn release = nullptr;
  void* context = nullptr;
};
std::mutex g_lender_mutex;
Lender g_lender;

Lender lender() {
  std::lock_guard<std::mutex> lock(g_lender_mutex);
  return g_lender;
}
std::atomic<uint64_t> g_retired_bytes[kMaxDevices];  // retired into graphs, per device

// "1073741824", "512M", "2GiB": bytes, with an optional binary K/M/G suffix; -1: not one.
int64_t parse_bytes(const char* text) {
  char* end = nullptr;
  const unsigned long long n = strtoull(text, &end, 10);
  if (end == text) return -1;
  while (*end == ' ') ++end;
  int shift = 0;
  switch (toupper(static_cast<unsigned char>(*end))) {
    case 'K':
      shift = 10;
      break;
    case 'M':
      shift = 20;
      break;
    case 'G':
      shift = 30;
      break;
    case '\0':
      break;
    default:
      return -1;
  }
  if (shift) {
    ++end;
    if (toupper(static_cast<unsigned char>(*end)) == 'I') ++end;
    if (toupper(static_cast<unsigned char>(*end)) == 'B') ++end;
  } else if (toupper(static_cast<unsigned char>(*end)) == 'B') {
    ++end;
  }
  if (*end || n > (uint64_t(INT64_MAX) >> shift)) return -1;
  return int64_t(n << shift);
}

std::atomic<uint64_t>& limit() {
  static std::atomic<uint64_t> value{[] {
    const char* env = getenv("PYCUTLASS_RT_SCRATCH_LIMIT");
    const int64_t n = env ? parse_bytes(env) : -1;
    return n >= 0 ? uint64_t(n) : kDefaultLimit;
  }()};
  return value;
}

// The kept buffer of an eager call on `stream` (whose id is `id`), made if new; nullptr
// once kKeptStreams other streams of the device keep buffers.
Kept* kept_for(int device, cudaStream_t stream, unsigned long long id, ScratchKind kind) {
  std::lock_guard<std::mutex> lock(g_kept_mutex);
  g_ids[{device, stream}] = id;  // a handle reused by a new stream gets the new id
  std::set<unsigned long long>& keeping = g_keeping[device];
  if (!keeping.count(id)) {
    if (keeping.size() >= kKeptStreams) return nullptr;
    keeping.insert(id);
  }
  return &g_kept[{device, id, int(kind)}];  // std::map: entries never move
}

// The buffer a capture (`capture` its id) may use for `bytes` on `stream`, or nullptr
// (the graph's own memory then): the one the capture already holds there, or, at its
// first call there, the stream's eager buffer, retired into the capture.
Kept* retired_for(int device, cudaStream_t stream, unsigned long long capture, size_t bytes,
                  ScratchKind kind) {
  Kept* eager = nullptr;
  Kept* retired = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_kept_mutex);
    auto held = g_retired.find({device, capture, stream, int(kind)});
    if (held != g_retired.end()) return held->second.bytes >= bytes ? &held->second : nullptr;
    auto id = g_ids.find({device, stream});
    if (id == g_ids.end()) return nullptr;
    auto it = g_kept.find({device, id->second, int(kind)});
    if (it == g_kept.end() || it->second.bytes < bytes) return nullptr;
    eager = &it->second;
    retired = &g_retired[{device, capture, stream, int(kind)}];
  }
  // Both locked: no eager call (another thread's, on this stream) is using it, and no
  // later call of this capture takes `retired` before it holds the block.
  std::scoped_lock both(eager->mutex, retired->mutex);
  if (eager->bytes < bytes) return nullptr;  // it moved meanwhile: retire nothing
  retired->ptr = eager->ptr, retired->bytes = eager->bytes;
  eager->ptr = nullptr, eager->bytes = 0;
  g_kept_bytes[device] -= retired->bytes;
  g_retired_bytes[device] += retired->bytes;
  return retired;
}

}  // namespace

int Scratch::allocate(int device, cudaStream_t stream, size_t bytes, ScratchKind kind,
                      bool zeroed) {
  release();
  if (bytes == 0) return PCR_OK;
  if (device < 0 || device >= kMaxDevices)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "device ordinal %d is out of range", device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  unsigned long long capture_id = 0;
  int st = cuda_status(cudaStreamGetCaptureInfo(stream, &capture, &capture_id),
                       "cudaStreamGetCaptureInfo");
  if (st != PCR_OK) return st;
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (const Lender lend = lender(); lend.alloc && !capturing) {
    ptr_ = lend.alloc(bytes, device, stream, lend.context);
    if (!ptr_)
      return set_error(PCR_ERR_CUDA,
                       "the allocator set by pcr_set_allocator has no %zu bytes of scratch on "
                       "device %d",
                       bytes, device);
    owned_ = true, give_back_ = lend.release, lender_ = lend.context;
    bytes_ = bytes, device_ = device, stream_ = stream;
    return zeroed ? cuda_status(cudaMemsetAsync(ptr_, 0, bytes, stream), "cudaMemsetAsync(scratch)")
                  : PCR_OK;
  }
  Kept* kept = nullptr;
  if (capturing && kind != ScratchKind::kHostCopy) {
    kept = retired_for(device, stream, capture_id, bytes, kind);
  } else if (!capturing && kind != ScratchKind::kHostCopy && bytes <= kKeptMax) {
    unsigned long long id = 0;
    if ((st = cuda_status(cudaStreamGetId(stream, &id), "cudaStreamGetId"))) return st;
    kept = kept_for(device, stream, id, kind);
  }
  if (kept) {
    lock_ = std::unique_lock<std::mutex>(kept->mutex);
    if (kept->bytes >= bytes) {
      ptr_ = kept->ptr;
      return PCR_OK;
    }
    // An eager buffer grows, within the device's limit (a retired one never does: it was
    // found large enough, and only its capture uses it).
    const size_t grown = std::max(bytes, std::min(2 * kept->bytes, kKeptMax));
    if (!capturing && g_kept_bytes[device] - kept->bytes + grown <= limit()) {
      if (kept->ptr) cudaFreeAsync(kept->ptr, stream);  // after the stream's uses so far
      g_kept_bytes[device] -= kept->bytes;
      kept->ptr = nullptr;
      kept->bytes = 0;
      if ((st = stream_alloc(device, stream, grown, true, &kept->ptr))) return st;
      kept->bytes = grown;
      g_kept_bytes[device] += grown;
      ptr_ = kept->ptr;
      return PCR_OK;
    }
    lock_.unlock();
  }
  st = stream_alloc(device, stream, bytes, zeroed, &ptr_);
  if (st == PCR_OK) owned_ = true, stream_ = stream;  // freed on the stream by release()
  return st;
}

void Scratch::release() noexcept {
  if (ptr_ && give_back_) {
    give_back_(ptr_, bytes_, device_, stream_, lender_);  // to the allocator that lent it
  } else if (ptr_ && owned_) {
    cudaFreeAsync(ptr_, stream_);  // after the work enqueued so far
  }
  ptr_ = nullptr;
  owned_ = false;
  give_back_ = nullptr;
  lender_ = nullptr;
  bytes_ = 0;
  device_ = -1;
  stream_ = nullptr;
  if (lock_.owns_lock()) lock_.unlock();
}

int empty_cache(int device) {
  int32_t count = 0;
  int st = cuda_status(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (st != PCR_OK) return st;
  if (device < -1 || device >= count)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "device %d: there are %d devices", device, count);
  std::vector<std::pair<int, Kept*>> kept;
  {
    std::lock_guard<std::mutex> lock(g_kept_mutex);
    for (auto& [key, k] : g_kept)
      if (device < 0 || std::get<0>(key) == device) kept.emplace_back(std::get<0>(key), &k);
  }
  for (auto& [dev, k] : kept) {
    std::lock_guard<std::mutex> lock(k->mutex);  // no call is enqueueing work on it
    if (!k->ptr) continue;
    DeviceGuard guard;
    if ((st = guard.set(dev))) return st;
    // its last uses may be on any stream, some perhaps destroyed since: wait for them all
    if ((st = cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))) return st;
    if ((st = cuda_status(cudaFree(k->ptr), "cudaFree(scratch)"))) return st;
    g_kept_bytes[dev] -= k->bytes;
    k->ptr = nullptr, k->bytes = 0;
  }
  for (int dev = 0; dev < std::min(count, kMaxDevices); ++dev) {
    if (device >= 0 && dev != device) continue;
    cudaMemPool_t pool = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_pool_mutex);
      pool = g_pools[dev];
    }
    if (!pool) continue;
    DeviceGuard guard;
    if ((st = guard.set(dev))) return st;
    if ((st = cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))) return st;
    if ((st = cuda_status(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo"))) return st;
  }
  return PCR_OK;
}

int memory_stats(int device, pcr_memory_usage* out) {
  if (!out) return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_memory_stats: out is NULL");
  if (device < 0 || device >= kMaxDevices)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "device ordinal %d is out of range", device);
  *out = pcr_memory_usage{};
  out->kept_bytes = g_kept_bytes[device];
  out->graph_bytes = g_retired_bytes[device];
  out->limit = limit();
  out->lent = lender().alloc != nullptr;
  {
    std::lock_guard<std::mutex> lock(g_kept_mutex);
    auto keeping = g_keeping.find(device);
    out->kept_streams = keeping == g_keeping.end() ? 0 : int32_t(keeping->second.size());
  }
  cudaMemPool_t pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    pool = g_pools[device];
  }
  if (pool) {
    uint64_t reserved = 0, used = 0;
    int st =
        cuda_status(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved),
                    "cudaMemPoolGetAttribute");
    if (st == PCR_OK)
      st = cuda_status(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used),
                       "cudaMemPoolGetAttribute");
    if (st != PCR_OK) return st;
    out->pool_reserved = reserved, out->pool_used = used;
  }
  return PCR_OK;
}

int set_scratch_limit(int64_t bytes) {
  if (bytes < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "the scratch limit is %lld bytes: not >= 0",
                     (long long)bytes);
  limit() = uint64_t(bytes);
  return PCR_OK;
}

int set_allocator(pcr_alloc_fn alloc, pcr_release_fn release, void* context) {
  if (!alloc != !release)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "pcr_set_allocator: alloc and release come together (both NULL: none)");
  std::lock_guard<std::mutex> lock(g_lender_mutex);
  g_lender = Lender{alloc, release, context};
  return PCR_OK;
}

}  // namespace pcr
