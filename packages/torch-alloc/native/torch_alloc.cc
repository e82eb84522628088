// PyTorch's pluggable-allocator entry points (libgmlake_torch_alloc.so):
//   torch.cuda.memory.CUDAPluggableAllocator(path, "gmlake_alloc", "gmlake_free")
// plus the empty_cache and record_stream hooks and the calls the Python module makes
// (torch_alloc.h lists the library's other files).
//
// This library links nothing of Node: gmlake_start() (alloc_start.cc) dlopens
// libgmlake_embed.so (which links Debian's libnode.so.108 from build/libnode) and reports any
// failure as a message, so a missing or broken libnode is a Python exception, never a crash or
// a failed load.
//
// Failures the caller cannot be handed as a value become C++ exceptions, which PyTorch
// turns into Python exceptions: out of memory (torch.cuda.OutOfMemoryError through the
// thrower the Python module registers, else a RuntimeError that starts "CUDA out of
// memory"), an allocation during CUDA-graph capture. Never a null pointer.
#include "torch_alloc.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "timing.h"

namespace gmlake {

gmlake_embed_call_fn g_call = nullptr;
gmlake_embed_text_fn g_text = nullptr;
gmlake_embed_times_fn g_embedTimes = nullptr;
std::atomic<bool> g_exiting{false};
std::atomic<bool> g_forked{false};
const char kForkedError[] =
    "gmlake: this process was forked after the allocator started; the engine's threads stayed in the parent, so this "
    "child cannot allocate through it (use multiprocessing's 'spawn' start method, or fork before the allocator starts)";
thread_local std::string t_error;
bool g_timeCalls = false;

namespace {

// OOM: a function that throws torch.cuda.OutOfMemoryError's C++ type (c10::OutOfMemoryError),
// registered by the Python module when its shim is built (python/gmlake_torch/oom_shim.cc).
using OomThrower = void (*)(const char* message);
OomThrower g_oomThrower = nullptr;

// GMLAKE_TIME_CALLS=1 or total: the time the calling threads spend inside alloc and free, summed
// (stats()'s call_time_us). It tells the allocator's host time in a training step from the
// GPU's; off by default because the two clock reads cost ~0.04 us of a ~1.3 us pair.
enum : int { kCallAlloc = 0, kCallFree = 1 };
std::atomic<uint64_t> g_callNs[2];
std::atomic<uint64_t> g_callCount[2];

struct CallTimer {
  int kind;
  uint64_t t0;
  explicit CallTimer(int k) : kind(k), t0(g_timeCalls ? NowNs() : 0) {}
  ~CallTimer() {
    if (!g_timeCalls) return;
    g_callNs[kind].fetch_add(NowNs() - t0, std::memory_order_relaxed);
    g_callCount[kind].fetch_add(1, std::memory_order_relaxed);
  }
};

}  // namespace

void FreeNow(void* ptr, size_t size, void* stream) {
  // while a pool window is open the free is the engine's to judge by its pool rules: never taken back
  int op = g_poolWindows.load(std::memory_order_acquire) != 0 ? kOpFreeInPoolWindow : kOpFree;
  double r = g_call(op, static_cast<double>(reinterpret_cast<uintptr_t>(ptr)), static_cast<double>(size),
                    static_cast<double>(reinterpret_cast<uintptr_t>(stream)));
  if (r < 0) {
    // free cannot fail towards PyTorch; say so loudly and go on (the block stays the engine's).
    char* msg = g_text(kTextLastError, "");
    std::fprintf(stderr, "gmlake: free(%p, %zu) failed: %s\n", ptr, size, msg != nullptr ? msg : "");
    std::free(msg);
  }
}

// A call into the engine; a status < 0 leaves the engine's message in t_error.
double PoolCall(int op, double a, double b, double c) {
  if (g_call == nullptr) {
    t_error = "gmlake: the allocator is not started";
    return kStatusNotStarted;
  }
  double r = g_call(op, a, b, c);
  if (r < 0) {
    char* msg = g_text(kTextLastError, "");
    t_error = msg != nullptr ? msg : "";
    std::free(msg);
  }
  return r;
}

}  // namespace gmlake

using namespace gmlake;

/** The last error of the calling thread (start, an OOM report, a refused call). */
GMLAKE_EXPORT const char* gmlake_last_error(void) { return t_error.c_str(); }

/**
 * The allocation without exceptions: 0 and *out set, or a status < 0 (-1 out of memory,
 * -2 error, -3 not started, -4 CUDA-graph capture) with gmlake_last_error() saying why.
 */
GMLAKE_EXPORT int gmlake_try_alloc(size_t size, int device, void* stream, void** out) {
  CallTimer timer(kCallAlloc);
  *out = nullptr;
  if (g_exiting.load(std::memory_order_relaxed)) {
    t_error = g_forked.load() ? kForkedError : "gmlake: the process is exiting";
    return kStatusError;
  }
  if (g_call == nullptr) {
    t_error = "gmlake: the allocator is not started (call gmlake_torch.enable() before the first CUDA tensor)";
    return kStatusNotStarted;
  }
  if (int ordinal = PoolFor(stream)) return gmlake_pool_alloc(size, ordinal, Capturing(stream, device) ? 1 : 0, stream, out);
  if (Capturing(stream, device)) {
    t_error = "gmlake: an allocation of " + std::to_string(size) +
              " bytes on a stream that captures a CUDA graph outside any pool window PyTorch opened (a capture begun "
              "behind PyTorch's back): capture with torch.cuda.graph or CUDAGraph.capture_begin, which give it a private pool";
    return kStatusCapture;
  }
  FlushDeferred();
  double r = g_call(kOpAlloc, static_cast<double>(size), device, static_cast<double>(reinterpret_cast<uintptr_t>(stream)));
  if (r < 0) {
    char* msg = g_text(kTextLastError, "");
    t_error = msg != nullptr ? msg : "";
    std::free(msg);
    return static_cast<int>(r);
  }
  *out = reinterpret_cast<void*>(static_cast<uintptr_t>(r));
  return 0;
}

/** PyTorch's alloc(size, device, stream). Throws on failure; never returns null. */
GMLAKE_EXPORT void* gmlake_alloc(size_t size, int device, void* stream) {
  void* p = nullptr;
  int status = gmlake_try_alloc(size, device, stream, &p);
  if (status == 0) return p;
  if (status == kStatusOom && g_oomThrower != nullptr) g_oomThrower(t_error.c_str());  // throws
  throw std::runtime_error(t_error);
}

/** PyTorch's free(ptr, size, device, stream): stream = the one the block was allocated on. */
GMLAKE_EXPORT void gmlake_free(void* ptr, size_t size, int device, void* stream) {
  if (g_call == nullptr || g_exiting.load(std::memory_order_relaxed)) return;
  CallTimer timer(kCallFree);
  // on a stream a pool window takes: the engine decides (a pool's block is reused in its pool;
  // another block waits there until no capture is underway)
  if (PoolFor(stream) != 0) {
    FreeNow(ptr, size, stream);
    return;
  }
  if (Capturing(stream, device)) {
    DeferFree(ptr, size, device, stream);
    return;
  }
  FlushDeferred();
  FreeNow(ptr, size, stream);
}

/** set_reset_fn: torch.cuda.empty_cache(). */
GMLAKE_EXPORT void gmlake_empty_cache(void) {
  if (g_call == nullptr || g_exiting.load(std::memory_order_relaxed)) return;
  FlushDeferred();
  if (g_call(kOpEmptyCache, 0, 0, 0) < 0) {
    char* msg = g_text(kTextLastError, "");
    std::fprintf(stderr, "gmlake: empty_cache failed: %s\n", msg != nullptr ? msg : "");
    std::free(msg);
  }
}

/**
 * The memory budget, from the next allocation on: kind 0 = `value` bytes, 1 = `value` x the
 * device's memory (set_per_process_memory_fraction's meaning). Returns the budget's bytes, or
 * a status < 0 with gmlake_last_error() saying why (-3: not started).
 */
GMLAKE_EXPORT double gmlake_set_budget(double value, int kind, int device) {
  if (g_forked.load()) {
    t_error = kForkedError;
    return kStatusError;
  }
  if (g_call == nullptr) {
    t_error = "gmlake: the allocator is not started";
    return kStatusNotStarted;
  }
  double r = g_call(kind == 1 ? kOpSetMemoryFraction : kOpSetCapacity, value, device, 0);
  if (r < 0) {
    char* msg = g_text(kTextLastError, "");
    t_error = msg != nullptr ? msg : "";
    std::free(msg);
    return r;
  }
  return kind == 1 ? r : value;
}

/** set_memory_fraction_fn: torch.cuda.set_per_process_memory_fraction(fraction, device). Throws on failure. */
GMLAKE_EXPORT void gmlake_set_memory_fraction(double fraction, int device) {
  if (gmlake_set_budget(fraction, 1, device) < 0) throw std::runtime_error(t_error);
}

/** set_record_stream_fn: tensor.record_stream(stream): the block is in use on `stream` too. */
GMLAKE_EXPORT void gmlake_record_stream(void* ptr, void* stream) {
  if (g_call == nullptr || g_exiting.load(std::memory_order_relaxed)) return;
  if (g_call(kOpRecordStream, static_cast<double>(reinterpret_cast<uintptr_t>(ptr)),
             static_cast<double>(reinterpret_cast<uintptr_t>(stream)), 0) < 0) {
    char* msg = g_text(kTextLastError, "");
    std::fprintf(stderr, "gmlake: record_stream(%p) failed: %s\n", ptr, msg != nullptr ? msg : "");
    std::free(msg);
  }
}

/** Text operations (embed.h GmlakeTextOp): statistics JSON, snapshot(path), close. Free with gmlake_text_free. */
GMLAKE_EXPORT char* gmlake_text(int op, const char* arg) {
  if (g_forked.load()) return strdup(kForkedError);
  if (g_text == nullptr) return strdup("gmlake: the allocator is not started");
  return g_text(op, arg);
}

GMLAKE_EXPORT void gmlake_text_free(char* s) { std::free(s); }

GMLAKE_EXPORT void gmlake_set_oom_thrower(OomThrower fn) { g_oomThrower = fn; }

/**
 * The summed time inside alloc and free (GMLAKE_TIME_CALLS=1): out[0] alloc ns, out[1]
 * allocs, out[2] free ns, out[3] frees; then the embedding's parts of the calls that entered
 * JS (timing.h CallParts): out[4] ns taking the isolate, out[5] preparing (scopes, the queued frees'
 * hand-over), out[6] in the JS function, out[7] those calls. Returns 1; 2 when only the whole
 * calls are timed (GMLAKE_TIME_CALLS=total: out[4..7] are 0); 0 (out untouched) when not timing.
 */
GMLAKE_EXPORT int gmlake_call_times(double* out) {
  if (!g_timeCalls) return 0;
  for (int k = 0; k < 2; k++) {
    out[2 * k] = static_cast<double>(g_callNs[k].load(std::memory_order_relaxed));
    out[2 * k + 1] = static_cast<double>(g_callCount[k].load(std::memory_order_relaxed));
  }
  for (int k = 4; k < 8; k++) out[k] = 0;
  return g_embedTimes(out + 4);  // 1 with the parts, 2 the whole calls only (GMLAKE_TIME_CALLS=total)
}
