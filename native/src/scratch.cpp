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
// - At most kKeptStreams streams per device keep buffers: a stream's buffers go only
//   with the process (nothing says when a stream is destroyed, and a destroyed stream's
//   last work may still be running), so an application that makes a new stream per call
//   (cupy.cuda.Stream() in a loop) would otherwise hold buffers for every stream it ever
//   used; later streams' scratch is the call's own (~1 us more per call).
// - Kept buffers stop at kKeptMax. Larger scratch (staged operands of big problems: GBs)
//   is the call's own, allocated and freed on its stream, so the pool hands the same
//   memory to the next call on any stream: kept per stream, a sweep of odd-N problems over
//   torch's 32 pooled streams held a copy of its largest output per stream and filled a
//   141 GB H200. Allocating costs ~1 us, against a copy of >= 64 MiB (>= 25 us).
// - Inside stream capture, a call whose capturing stream already keeps a large enough
//   buffer captures that buffer (replays then cost no more than eager calls: graph memory
//   nodes around every kernel measured up to 2x slower replays on the H200); the buffer is
//   then never freed, only retired when the stream needs a larger one, so no graph can
//   replay into freed memory. Any other call's scratch is the graph's own
//   (cudaMallocFromPoolAsync / cudaFreeAsync on the capturing stream become its memory
//   nodes), so capture needs no warm-up.
// Host-array copies are always the call's own. Memory comes from the library's pool per
// device, so the application's default pool and its settings are untouched; the pool keeps
// up to kPoolKeep of freed memory across synchronizations (a steady state allocates from
// it) and hands the rest back to the device there (one huge call's scratch is not held).
#include <algorithm>
#include <climits>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "runtime.h"

namespace pcr {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kKeptMax = size_t(64) << 20;  // larger scratch is the call's own
constexpr size_t kKeptStreams = 64;            // torch's pooled streams per device: 32 per priority
constexpr uint64_t kPoolKeep = uint64_t(1) << 30;  // freed memory the pool holds on to
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

// A stream's kept buffer of one kind.
struct Kept {
  std::mutex mutex;  // held by the call using the buffer until its launches are enqueued
  void* ptr = nullptr;
  size_t bytes = 0;
  bool captured = false;  // a graph may hold ptr: retired, never freed, when it grows
};
std::mutex g_kept_mutex;
std::map<std::tuple<int, unsigned long long, int>, Kept> g_kept;  // (device, stream id, kind)
std::map<int, std::set<unsigned long long>> g_keeping;  // device -> ids of streams keeping
// The id of each stream handle seen outside capture (a capturing stream cannot be asked).
std::map<std::pair<int, cudaStream_t>, unsigned long long> g_ids;

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

// The kept buffer a capture on `stream` may use for `bytes`, or nullptr.
Kept* kept_for_capture(int device, cudaStream_t stream, size_t bytes, ScratchKind kind) {
  std::lock_guard<std::mutex> lock(g_kept_mutex);
  auto id = g_ids.find({device, stream});
  if (id == g_ids.end()) return nullptr;
  auto it = g_kept.find({device, id->second, int(kind)});
  return it != g_kept.end() && it->second.bytes >= bytes ? &it->second : nullptr;
}

}  // namespace

int Scratch::allocate(int device, cudaStream_t stream, size_t bytes, ScratchKind kind,
                      bool zeroed) {
  release();
  if (bytes == 0) return PCR_OK;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  int st = cuda_status(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  if (st != PCR_OK) return st;
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  if (capturing && kind != ScratchKind::kHostCopy) {
    if (Kept* kept = kept_for_capture(device, stream, bytes, kind)) {
      lock_ = std::unique_lock<std::mutex>(kept->mutex);
      if (kept->bytes >= bytes) {  // still: it may have grown meanwhile (a larger block)
        kept->captured = true;
        ptr_ = kept->ptr;
        return PCR_OK;
      }
      lock_.unlock();
    }
  }
  Kept* kept = nullptr;
  if (!capturing && kind != ScratchKind::kHostCopy && bytes <= kKeptMax) {
    unsigned long long id = 0;
    if ((st = cuda_status(cudaStreamGetId(stream, &id), "cudaStreamGetId"))) return st;
    kept = kept_for(device, stream, id, kind);
  }
  if (!kept) {
    st = stream_alloc(device, stream, bytes, zeroed, &ptr_);
    if (st == PCR_OK) owned_ = true, stream_ = stream;  // freed on the stream by release()
    return st;
  }
  lock_ = std::unique_lock<std::mutex>(kept->mutex);
  if (kept->bytes < bytes) {
    // after the stream's uses so far; a block a graph may replay into is kept for good
    // (doubling bounds those to twice kKeptMax per stream and kind)
    if (kept->ptr && !kept->captured) cudaFreeAsync(kept->ptr, stream);
    const size_t grown = std::max(bytes, std::min(2 * kept->bytes, kKeptMax));
    kept->captured = false;
    kept->ptr = nullptr;
    kept->bytes = 0;
    if ((st = stream_alloc(device, stream, grown, true, &kept->ptr))) return st;
    kept->bytes = grown;
  }
  ptr_ = kept->ptr;
  return PCR_OK;
}

void Scratch::release() noexcept {
  if (ptr_ && owned_) cudaFreeAsync(ptr_, stream_);  // after the work enqueued so far
  ptr_ = nullptr;
  owned_ = false;
  stream_ = nullptr;
  if (lock_.owns_lock()) lock_.unlock();
}

}  // namespace pcr
