// CUDA-graph capture (torch_alloc.h): whether a stream captures, asked of the libcuda PyTorch
// loaded (cuda driver only) when the capture check mode says so, and the frees that arrive
// during a capture, deferred until it ended.
#include <dlfcn.h>

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

#include "torch_alloc.h"

namespace gmlake {

namespace {

// CUDA-graph capture: cuStreamIsCapturing from the libcuda PyTorch loaded (cuda driver only).
using IsCapturingFn = int (*)(void* stream, int* status);
IsCapturingFn g_isCapturing = nullptr;
constexpr int kCaptureStatusNone = 0;

struct DeferredFree {
  void* ptr;
  size_t size;
  int device;
  void* stream;
};
std::mutex g_deferredMutex;
std::vector<DeferredFree> g_deferred;  // frees that arrived during capture
std::atomic<size_t> g_deferredCount{0};  // its size, read without the lock on every call

// A thread that has made no CUDA runtime call yet (PyTorch's autograd thread, which only
// records its device) has no current context: cuStreamIsCapturing answers
// CUDA_ERROR_INVALID_CONTEXT there (seen on the H200: every backward allocation was refused
// as "during capture"). Then the device's primary context, the one PyTorch uses, is made
// current on this thread and the question asked again.
using DeviceGetFn = int (*)(int* dev, int ordinal);
using PrimaryRetainFn = int (*)(void** ctx, int dev);
using CtxSetCurrentFn = int (*)(void* ctx);
using CtxGetCurrentFn = int (*)(void** ctx);
CtxGetCurrentFn g_ctxGetCurrent = nullptr;
DeviceGetFn g_deviceGet = nullptr;
PrimaryRetainFn g_primaryRetain = nullptr;
CtxSetCurrentFn g_ctxSetCurrent = nullptr;
constexpr int kCudaErrorInvalidContext = 201;

bool MakePrimaryCurrent(int device) {
  if (g_deviceGet == nullptr || g_primaryRetain == nullptr || g_ctxSetCurrent == nullptr) return false;
  int dev = 0;
  void* ctx = nullptr;
  // One retain per thread that needs it: the primary context lives as long as the process.
  return g_deviceGet(&dev, device) == 0 && g_primaryRetain(&ctx, dev) == 0 && g_ctxSetCurrent(ctx) == 0;
}

// When to ask the driver (README "CUDA-graph capture"). PyTorch starts every capture it
// makes (torch.cuda.graph, CUDAGraph.capture_begin; also torch.cuda.use_mem_pool) inside
// the allocator's beginAllocateToPool / endAllocateToPool window, and its own caching
// allocator looks at streams only while such a window is open (captures_underway). The
// Python module wires these hooks (torch >= 2.3) and then switches to kCapturePoolWindows:
// no driver call per alloc or free outside a window. Until then, and under
// GMLAKE_CAPTURE_CHECK=always, every alloc and free asks.
enum : int { kCaptureEveryCall = 0, kCapturePoolWindows = 1 };
std::atomic<int> g_captureCheck{kCaptureEveryCall};

thread_local bool t_contextChecked = false;  // this thread's current context looked at (Capturing)

}  // namespace

// Whether `stream` is capturing a CUDA graph (any answer but "no" counts as capturing:
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT on the legacy stream during a global capture too).
bool Capturing(void* stream, int device) {
  if (g_isCapturing == nullptr) return false;
  if (g_captureCheck.load(std::memory_order_relaxed) == kCapturePoolWindows &&
      g_poolWindows.load(std::memory_order_acquire) == 0) {
    return false;
  }
  // Once per thread, before the first question: asking without a context is an API error
  // that compute-sanitizer reports (and that costs a failed call).
  if (!t_contextChecked) {
    void* cur = nullptr;
    if (g_ctxGetCurrent != nullptr && g_ctxGetCurrent(&cur) == 0 && cur == nullptr) MakePrimaryCurrent(device);
    t_contextChecked = true;
  }
  int status = kCaptureStatusNone;
  int r = g_isCapturing(stream, &status);
  if (r == kCudaErrorInvalidContext && MakePrimaryCurrent(device)) {
    status = kCaptureStatusNone;
    r = g_isCapturing(stream, &status);
  }
  return r != 0 || status != kCaptureStatusNone;
}

void LoadCaptureCheck() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (cuda == nullptr) cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return;
  g_isCapturing = reinterpret_cast<IsCapturingFn>(dlsym(cuda, "cuStreamIsCapturing"));
  g_deviceGet = reinterpret_cast<DeviceGetFn>(dlsym(cuda, "cuDeviceGet"));
  g_primaryRetain = reinterpret_cast<PrimaryRetainFn>(dlsym(cuda, "cuDevicePrimaryCtxRetain"));
  g_ctxSetCurrent = reinterpret_cast<CtxSetCurrentFn>(dlsym(cuda, "cuCtxSetCurrent"));
  g_ctxGetCurrent = reinterpret_cast<CtxGetCurrentFn>(dlsym(cuda, "cuCtxGetCurrent"));
}

void DeferFree(void* ptr, size_t size, int device, void* stream) {
  std::lock_guard<std::mutex> lock(g_deferredMutex);
  g_deferred.push_back({ptr, size, device, stream});
  g_deferredCount.store(g_deferred.size(), std::memory_order_release);
}

void FlushDeferred() {
  if (g_deferredCount.load(std::memory_order_acquire) == 0) return;
  std::vector<DeferredFree> ready;
  {
    std::lock_guard<std::mutex> lock(g_deferredMutex);
    if (g_deferred.empty()) return;
    std::vector<DeferredFree> keep;
    for (const DeferredFree& f : g_deferred) (Capturing(f.stream, f.device) ? keep : ready).push_back(f);
    g_deferred.swap(keep);
    g_deferredCount.store(g_deferred.size(), std::memory_order_release);
  }
  for (const DeferredFree& f : ready) FreeNow(f.ptr, f.size, f.stream);
}

}  // namespace gmlake

/**
 * How allocs and frees look for a capture: 0 = ask the driver every call (the default),
 * 1 = only inside pool windows (set once PyTorch's pool-window hooks, private_pools.cc, are wired). Returns the
 * previous mode, or -1 for an unknown one (nothing changed).
 */
GMLAKE_EXPORT int gmlake_set_capture_check(int mode) {
  if (mode != gmlake::kCaptureEveryCall && mode != gmlake::kCapturePoolWindows) return -1;
  return gmlake::g_captureCheck.exchange(mode);
}
