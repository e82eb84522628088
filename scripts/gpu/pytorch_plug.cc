// PyTorch's own caching allocator behind the pluggable-allocator interface, each call timed:
// the yardstick for ours' host time in a training step. Ours reaches PyTorch through
// CUDAPluggableAllocator (its own map and mutex per call) and is timed inside its alloc and
// free (GMLAKE_TIME_CALLS=1); this library goes through the same interface to the allocator
// PyTorch had before the swap, timed the same way. So the two host times compare one to one,
// and this one's step time against PyTorch's native run is what the interface itself costs.
// Built against the PyTorch in use by pytorch_plug.py (scripts/gpu/live-run.sh's setup).
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace {
namespace A = c10::cuda::CUDACachingAllocator;
A::CUDAAllocator* g_native = nullptr;  // PyTorch's own, saved before the swap
std::once_flag g_init;
// The saved allocator's deleter: its recordStream only acts on DataPtrs that carry it.
c10::DeleterFnPtr g_rawDelete = nullptr;
std::atomic<uint64_t> g_ns[2], g_n[2];

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

struct Timer {  // as torch_alloc.cc's CallTimer: the same two clock reads around the call
  int k;
  uint64_t t0 = NowNs();
  explicit Timer(int kind) : k(kind) {}
  ~Timer() {
    g_ns[k].fetch_add(NowNs() - t0, std::memory_order_relaxed);
    g_n[k].fetch_add(1, std::memory_order_relaxed);
  }
};
}  // namespace

#define PLUG_EXPORT extern "C" __attribute__((visibility("default")))

/** Before change_current_allocator: keeps the allocator PyTorch uses now. 0, or -1 if none. */
PLUG_EXPORT int plug_save_native() {
  g_native = A::get();
  return g_native != nullptr ? 0 : -1;
}

PLUG_EXPORT void* plug_alloc(size_t size, int /*device*/, cudaStream_t stream) {
  Timer t(0);
  // PyTorch initializes the current allocator (now the pluggable one), not the one saved
  std::call_once(g_init, [] {
    g_native->init(c10::cuda::device_count());
    c10::DataPtr probe = g_native->allocate(0);  // no memory; only to learn the deleter
    g_rawDelete = probe.get_deleter();
  });
  return g_native->raw_alloc_with_stream(size, stream);
}

PLUG_EXPORT void plug_free(void* ptr, size_t /*size*/, int /*device*/, cudaStream_t /*stream*/) {
  Timer t(1);
  g_native->raw_delete(ptr);
}

/** tensor.record_stream(): the saved allocator's own recordStream, through a view of the block. */
PLUG_EXPORT void plug_record_stream(void* ptr, cudaStream_t stream) {
  if (g_rawDelete == nullptr || ptr == nullptr) return;
  c10::DeviceIndex dev = c10::cuda::current_device();
  c10::DataPtr view(ptr, ptr, g_rawDelete, c10::Device(c10::DeviceType::CUDA, dev));
  g_native->recordStream(view, c10::cuda::getStreamFromExternal(stream, dev));
  (void)view.release_context();  // the block stays allocated: the view owned nothing
}

PLUG_EXPORT void plug_empty_cache() {
  if (g_native != nullptr) g_native->emptyCache();
}

/** out[0] alloc ns, out[1] allocs, out[2] free ns, out[3] frees (as gmlake_call_times). */
PLUG_EXPORT int plug_call_times(double* out) {
  for (int k = 0; k < 2; k++) {
    out[2 * k] = static_cast<double>(g_ns[k].load(std::memory_order_relaxed));
    out[2 * k + 1] = static_cast<double>(g_n[k].load(std::memory_order_relaxed));
  }
  return 1;
}

/** The saved allocator's peak reserved, peak allocated and allocated bytes on device 0 (torch.cuda's raise). */
PLUG_EXPORT int plug_peaks(double* out) {
  if (g_native == nullptr) return -1;
  auto st = g_native->getDeviceStats(0);
  out[0] = static_cast<double>(st.reserved_bytes[0].peak);  // [0]: StatType::AGGREGATE
  out[1] = static_cast<double>(st.allocated_bytes[0].peak);
  out[2] = static_cast<double>(st.allocated_bytes[0].current);
  return 0;
}
