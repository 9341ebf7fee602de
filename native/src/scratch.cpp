// Scratch memory: stream-ordered, owned by the call (or the graph) that uses it.
//
// Every kernel workspace, staging buffer and grouped-GEMM argument array that a call needs
// is allocated on the call's stream (cudaMallocFromPoolAsync, from the library's pool of
// that device) and freed on it once the call's last launch is enqueued (cudaFreeAsync).
// The stream orders reuse: a later call on the stream gets the same memory back only
// after the earlier one's kernels are done with it, and a call on another stream never
// gets memory still in use. Inside stream capture the same two calls become the graph's
// own allocation and free nodes, so a graph owns its scratch: no eager call can free or
// overwrite memory a graph replays into, no warm-up is needed before capture, and nothing
// is shared across devices, streams or kinds of buffer, so nothing can be confused.
#include <climits>
#include <mutex>

#include "runtime.h"

namespace pcr {
namespace {

constexpr int kMaxDevices = 64;
std::mutex g_pool_mutex;
cudaMemPool_t g_pools[kMaxDevices] = {};

// The device's scratch pool: its memory is kept after frees (release threshold: all of
// it), so steady-state calls reuse it without asking the driver; it is the library's own,
// so the application's default pool and its settings stay untouched.
int pool_for(int device, cudaMemPool_t* out) {
  if (device < 0 || device >= kMaxDevices)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "device ordinal %d is out of range", device);
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (!g_pools[device]) {
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    int st = cuda_status(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate(scratch)");
    if (st != PCR_OK) return st;
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    g_pools[device] = pool;
  }
  *out = g_pools[device];
  return PCR_OK;
}

}  // namespace

int Scratch::allocate(int device, cudaStream_t stream, size_t bytes, bool zeroed) {
  release();
  if (bytes == 0) return PCR_OK;
  cudaMemPool_t pool = nullptr;
  int st = pool_for(device, &pool);
  if (st != PCR_OK) return st;
  st = cuda_status(cudaMallocFromPoolAsync(&ptr_, bytes, pool, stream),
                   "cudaMallocFromPoolAsync(scratch)");
  if (st != PCR_OK) {
    ptr_ = nullptr;
    return st;
  }
  stream_ = stream;
  // Zeroed on request: the pointer-array kernels write their TMA descriptors into their
  // workspace with tensormap.cp_fenceproxy, which compute-sanitizer's initcheck does not
  // count as a write; unzeroed, every descriptor fence reads as uninitialized memory.
  return zeroed ? cuda_status(cudaMemsetAsync(ptr_, 0, bytes, stream), "cudaMemsetAsync(scratch)")
                : PCR_OK;
}

void Scratch::release() noexcept {
  if (ptr_) cudaFreeAsync(ptr_, stream_);  // after the work enqueued on stream_ so far
  ptr_ = nullptr;
}

}  // namespace pcr
