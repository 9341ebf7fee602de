// Scratch pools: one device buffer per (device, stream, pool), never grown inside capture.
#include <mutex>
#include <unordered_map>

#include "runtime.h"

namespace pcr {
namespace {

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

}  // namespace pcr
