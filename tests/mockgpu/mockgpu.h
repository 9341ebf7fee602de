// CUDA's execution model on the host, for the library's hand-written kernels (the CUDA-core
// ones: no tensor-core instructions, no inline PTX), so that their device code runs in the
// CPU tests: a launch runs its CTAs one after another on one OS thread per CUDA thread of a
// CTA, which meet at __syncthreads, with one dynamic shared memory buffer poisoned (all bits
// set: NaN in 16-bit floats) before every CTA, so that a read of shared memory nobody
// wrote shows in the results. The harness (driver.cpp) builds with AddressSanitizer, so
// a global read or write outside an operand fails the run.
//
// Included before the kernels' headers, compiled by the host's C++ compiler with
// PCR_EMULATE defined: a kernel's host side then calls emulate::launch where the GPU
// build has a triple-chevron launch.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#ifndef PCR_EMULATE
#error "mockgpu.h is for host emulation builds (PCR_EMULATE)"
#endif

// device-side names CUDA compilers provide
using std::max;
using std::min;
#define __launch_bounds__(...)
template <class T>
inline T __ldg(const T* p) {
  return *p;
}
// declared for CUTLASS's device-only paths in headers the kernels include; never called here
int __dp4a(int, int, int);
unsigned __byte_perm(unsigned, unsigned, unsigned);
__half2 __hfma2(__half2, __half2, __half2);

// the running thread's coordinates
inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

namespace pcr::emulate {

// A CTA's barrier: threads that have returned no longer count, as on the GPU. reset()
// readies it for the next CTA.
class Cta {
 public:
  explicit Cta(int threads) : threads_(threads), alive_(threads) {}
  void sync() {
    std::unique_lock<std::mutex> lock(m_);
    const long generation = generation_;
    if (++arrived_ == alive_) return release();
    cv_.wait(lock, [&] { return generation_ != generation; });
  }
  void exit() {
    std::unique_lock<std::mutex> lock(m_);
    if (--alive_ > 0 && arrived_ == alive_) release();
  }
  void reset() { alive_ = threads_, arrived_ = 0; }

 private:
  void release() {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  }
  std::mutex m_;
  std::condition_variable cv_;
  const int threads_;
  int alive_, arrived_ = 0;
  long generation_ = 0;
};

// The launch's threads meet here after each CTA; the last to arrive runs `between` (the
// next CTA's setup) before any goes on.
class Team {
 public:
  explicit Team(int threads) : threads_(threads) {}
  template <class F>
  void meet(F&& between) {
    std::unique_lock<std::mutex> lock(m_);
    const long generation = generation_;
    if (++arrived_ == threads_) {
      between();
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  const int threads_;
  int arrived_ = 0;
  long generation_ = 0;
};

inline thread_local Cta* current_cta = nullptr;

// The dynamic shared memory of the running launch: exactly the bytes it asked for, on the
// heap, so that AddressSanitizer reports a read or write past them.
struct SharedMemory {
  unsigned char* bytes = nullptr;
  size_t size = 0;
};
inline SharedMemory& shared_memory() {
  static SharedMemory s;
  return s;
}

// Runs kernel(args...) over grid x block, CTA by CTA.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args&&... args) {
  std::vector<unsigned char> buffer(smem);
  SharedMemory& sm = shared_memory();
  sm = {buffer.data(), smem};
  const int threads = int(block.x * block.y * block.z);
  const long ctas = long(grid.x) * grid.y * grid.z;
  Cta cta(threads);
  Team team(threads);
  // one OS thread per CUDA thread of a CTA, running the CTAs in turn
  auto worker = [&](int t) {
    threadIdx = uint3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
    blockDim = block;
    gridDim = grid;
    current_cta = &cta;
    for (long i = 0; i < ctas; ++i) {
      team.meet([&] {  // shared memory as uninitialized as it would be: all bits set
        if (sm.size) std::memset(sm.bytes, 0xff, sm.size);
        cta.reset();
      });
      blockIdx = uint3{unsigned(i % grid.x), unsigned(i / grid.x % grid.y),
                       unsigned(i / (long(grid.x) * grid.y))};
      kernel(args...);
      cta.exit();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  for (auto& th : pool) th.join();
}

}  // namespace pcr::emulate

inline void __syncthreads() { pcr::emulate::current_cta->sync(); }
