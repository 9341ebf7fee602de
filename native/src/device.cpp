// Devices: discovery, cached properties, current-device handling, image probes.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "runtime.h"

namespace pcr {
namespace {

constexpr int kMaxDevices = 64;
std::atomic<int> g_cc[kMaxDevices];  // 0 = not yet queried
std::atomic<int> g_sms[kMaxDevices];

// Per kernel and device: 0 unknown, 1 runs, 2 does not run.
std::mutex g_probe_mutex;
std::vector<uint8_t> g_probe;

}  // namespace

int cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return PCR_OK;
  cudaGetLastError();  // clear the sticky-free error so later calls start clean
  int driver = 0;
  if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess &&
      driver == 0)
    return set_error(PCR_ERR_NO_DEVICE,
                     "%s: no NVIDIA driver found (libcuda.so.1 could not be loaded); "
                     "pycutlass_rt needs an NVIDIA GPU with its driver",
                     what);
  if (e == cudaErrorInsufficientDriver && driver > 0) {
    // The runtime is linked statically, so the driver must know its major version;
    // CUDA's minor-version compatibility makes any driver of that major enough.
    int runtime = CUDART_VERSION;
    return set_error(PCR_ERR_NO_DEVICE,
                     "%s: the NVIDIA driver supports CUDA %d.%d, but this build of "
                     "pycutlass_rt uses the CUDA %d.%d runtime and needs a driver for CUDA "
                     "%d.0 or newer; update the driver (or use a build made with CUDA %d.x)",
                     what, driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10,
                     runtime / 1000, driver / 1000);
  }
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
      e == cudaErrorInitializationError || e == cudaErrorCompatNotSupportedOnDevice ||
      e == cudaErrorStubLibrary || e == cudaErrorDevicesUnavailable) {
    return set_error(PCR_ERR_NO_DEVICE,
                     "%s: no usable CUDA device (%s: %s). Looked for an NVIDIA driver "
                     "(libcuda.so.1) and a visible GPU (CUDA_VISIBLE_DEVICES=%s)",
                     what, cudaGetErrorName(e), cudaGetErrorString(e),
                     getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "<unset>");
  }
  return set_error(PCR_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

int device_info(int device, DeviceInfo* out) {
  if (device < 0 || device >= kMaxDevices)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "device ordinal %d is out of range", device);
  int cc = g_cc[device].load(std::memory_order_acquire);
  if (cc == 0) {
    int count = 0;
    int st = cuda_status(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (st != PCR_OK) return st;
    if (device >= count)
      return set_error(PCR_ERR_NO_DEVICE, "CUDA device %d does not exist (%d visible)", device,
                       count);
    int major = 0, minor = 0, sms = 0;
    st = cuda_status(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                     "cudaDeviceGetAttribute");
    if (st == PCR_OK)
      st = cuda_status(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                       "cudaDeviceGetAttribute");
    if (st == PCR_OK)
      st = cuda_status(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                       "cudaDeviceGetAttribute");
    if (st != PCR_OK) return st;
    g_sms[device].store(sms, std::memory_order_relaxed);
    cc = major * 10 + minor;
    g_cc[device].store(cc, std::memory_order_release);
  }
  out->cc = cc;
  out->sm_count = g_sms[device].load(std::memory_order_relaxed);
  return PCR_OK;
}

// The device whose primary context this thread made current through cudaSetDevice. A
// fresh thread reports device 0 from cudaGetDevice before any context is current there,
// and driver calls made for a launch (TMA descriptor encoding) then fail.
static thread_local int t_context_device = -1;

int DeviceGuard::set(int device) {
  int current = -1;
  int st = cuda_status(cudaGetDevice(&current), "cudaGetDevice");
  if (st != PCR_OK) return st;
  if (current != device || t_context_device != device) {
    st = cuda_status(cudaSetDevice(device), "cudaSetDevice");
    if (st != PCR_OK) return st;
    t_context_device = device;
    if (current != device) previous_ = current;
  }
  return PCR_OK;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && cudaSetDevice(previous_) == cudaSuccess) t_context_device = previous_;
}

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* v = getenv("PYCUTLASS_RT_PDL");
    return !(v && strcmp(v, "0") == 0);
  }();
  return enabled;
}

int ensure_smem_limit(const void* func, int device, int bytes, std::atomic<uint64_t>* done) {
  uint64_t bit = uint64_t(1) << (device & 63);
  if (bytes < (48 << 10) || (done->load(std::memory_order_acquire) & bit)) return PCR_OK;
  int st =
      cuda_status(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                  "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  if (st != PCR_OK) return st;
  done->fetch_or(bit, std::memory_order_acq_rel);
  return PCR_OK;
}

int kernel_runs_on(int k, int device, bool* runs) {
  if (k < 0 || k >= kKernelCount)
    return set_error(PCR_ERR_KERNEL_NOT_FOUND, "kernel index %d out of range", k);
  if (device < 0 || device >= kMaxDevices)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "device ordinal %d is out of range", device);
  size_t slot = size_t(k) * kMaxDevices + device;
  {
    std::lock_guard<std::mutex> lock(g_probe_mutex);
    if (g_probe.empty()) g_probe.assign(size_t(kKernelCount) * kMaxDevices, 0);
    if (g_probe[slot]) {
      *runs = g_probe[slot] == 1;
      return PCR_OK;
    }
  }
  DeviceInfo info{};
  int st = device_info(device, &info);
  if (st != PCR_OK) return st;
  // Arch-specific images (sm_90a, sm_100a) load only on their own GPU; the sm80 family's
  // SASS and PTX on 8.x and later.
  const pcr_kernel_desc& desc = kKernels[k]->info;
  const bool arch_specific = desc.family >= 90;
  bool ok = arch_specific ? info.cc == desc.family : info.cc >= desc.family;
  if (ok) {
    DeviceGuard guard;
    st = guard.set(device);
    if (st != PCR_OK) return st;
    cudaFuncAttributes attr;
    cudaError_t e = cudaFuncGetAttributes(&attr, kKernels[k]->ops.device_function());
    if (e != cudaSuccess) {
      cudaGetLastError();
      // Only a missing or unloadable image is remembered; anything else (out of memory
      // while loading the module, a busy device) fails this call and is asked again.
      if (e != cudaErrorInvalidDeviceFunction && e != cudaErrorNoKernelImageForDevice &&
          e != cudaErrorInvalidPtx && e != cudaErrorUnsupportedPtxVersion &&
          e != cudaErrorInvalidKernelImage && e != cudaErrorSharedObjectInitFailed)
        return cuda_status(e, "cudaFuncGetAttributes (loading the kernel's image)");
      ok = false;
    }
  }
  std::lock_guard<std::mutex> lock(g_probe_mutex);
  g_probe[slot] = ok ? 1 : 2;
  *runs = ok;
  return PCR_OK;
}

int driver_version(int32_t* version) {
  int v = 0;
  cudaError_t e = cudaDriverGetVersion(&v);  // 0 without a driver, not an error
  *version = e == cudaSuccess ? v : 0;
  return PCR_OK;
}

int runtime_version(int32_t* version) {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  *version = v;
  return PCR_OK;
}

int device_count(int32_t* count) {
  int n = 0;
  *count = 0;
  int st = cuda_status(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (st != PCR_OK) return st;
  *count = n;
  return PCR_OK;
}

int device_name(int32_t device, char* buf, size_t size) {
  DeviceInfo info{};
  int st = device_info(device, &info);
  if (st != PCR_OK) return st;
  cudaDeviceProp prop;
  st = cuda_status(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  if (st != PCR_OK) return st;
  snprintf(buf, size, "%s", prop.name);
  return PCR_OK;
}

int device_cc(int32_t device, int32_t* cc, int32_t* sm_count) {
  DeviceInfo info{};
  int st = device_info(device, &info);
  if (st != PCR_OK) return st;
  *cc = info.cc;
  *sm_count = info.sm_count;
  return PCR_OK;
}

int pointer_device(const void* ptr, int32_t* device) {
  cudaPointerAttributes attr;
  int st = cuda_status(cudaPointerGetAttributes(&attr, ptr), "cudaPointerGetAttributes");
  if (st != PCR_OK) return st;
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "pointer %p is not CUDA device memory", ptr);
  *device = attr.device;
  return PCR_OK;
}

int stream_wait(cudaStream_t consumer, cudaStream_t producer) {
  if (consumer == producer) return PCR_OK;
  cudaEvent_t done = nullptr;
  int st = cuda_status(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  if (st != PCR_OK) return st;
  st = cuda_status(cudaEventRecord(done, producer), "cudaEventRecord(producer's stream)");
  if (st == PCR_OK)
    st = cuda_status(cudaStreamWaitEvent(consumer, done, 0), "cudaStreamWaitEvent(call's stream)");
  cudaEventDestroy(done);  // released once the wait is satisfied
  return st;
}

}  // namespace pcr
