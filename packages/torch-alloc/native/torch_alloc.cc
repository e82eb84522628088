// PyTorch's pluggable-allocator entry points (libgmlake_torch_alloc.so):
//   torch.cuda.memory.CUDAPluggableAllocator(path, "gmlake_alloc", "gmlake_free")
// plus the empty_cache and record_stream hooks and the calls the Python module makes.
//
// This library links nothing of Node: gmlake_start() dlopens libgmlake_embed.so (which
// links Debian's libnode.so.108 from build/libnode) and reports any failure as a message,
// so a missing or broken libnode is a Python exception, never a crash or a failed load.
//
// Failures the caller cannot be handed as a value become C++ exceptions, which PyTorch
// turns into Python exceptions: out of memory (torch.cuda.OutOfMemoryError through the
// thrower the Python module registers, else a RuntimeError that starts "CUDA out of
// memory"), an allocation during CUDA-graph capture. Never a null pointer.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "embed.h"

#define GMLAKE_EXPORT extern "C" __attribute__((visibility("default")))
GMLAKE_EXPORT int gmlake_pool_alloc(size_t size, int ordinal, int capturing, void* stream, void** out);

namespace {

gmlake_embed_call_fn g_call = nullptr;
// Set at exit, before libnode's static destructors run (our handler is registered after
// libnode was loaded, so it runs first): what libtorch's own static destructors free
// after that (cached workspaces) is left to the process's end instead of a torn-down Node.
std::atomic<bool> g_exiting{false};
// A child of fork() after start has the engine's memory but none of its threads (the JS
// thread, libuv's and V8's workers): a Locker there crashes, a post to the JS thread waits
// for ever, and at exit libuv's destructor joins threads that are not there (SIGSEGV). So
// the child marks itself exiting (every hot-path check refuses) and forked (the reason), and
// its exit ends the process before the teardown of that state.
std::atomic<bool> g_forked{false};
const char kForkedError[] =
    "gmlake: this process was forked after the allocator started; the engine's threads stayed in the parent, so this "
    "child cannot allocate through it (use multiprocessing's 'spawn' start method, or fork before the allocator starts)";
gmlake_embed_text_fn g_text = nullptr;
gmlake_embed_times_fn g_embedTimes = nullptr;
std::mutex g_startMutex;
std::string g_startError;
thread_local std::string t_error;

// OOM: a function that throws torch.cuda.OutOfMemoryError's C++ type (c10::OutOfMemoryError),
// registered by the Python module when its shim is built (python/gmlake_torch/oom_shim.cc).
using OomThrower = void (*)(const char* message);
OomThrower g_oomThrower = nullptr;

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

// GMLAKE_TIME_CALLS=1 or total: the time the calling threads spend inside alloc and free, summed
// (stats()'s call_time_us). It tells the allocator's host time in a training step from the
// GPU's; off by default because the two clock reads cost ~0.04 us of a ~1.3 us pair.
enum : int { kCallAlloc = 0, kCallFree = 1 };
bool g_timeCalls = false;
std::atomic<uint64_t> g_callNs[2];
std::atomic<uint64_t> g_callCount[2];

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

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

// The fd through which the patched libnode reads its builtin JS files (scripts/fetch-libnode.sh).
constexpr int kBuiltinFd = 987;

std::string Dir(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The folder this library was loaded from (build/lib in the package).
std::string SelfDir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&SelfDir), &info) == 0 || info.dli_fname == nullptr) return ".";
  char* real = realpath(info.dli_fname, nullptr);
  std::string p = real != nullptr ? real : info.dli_fname;
  std::free(real);
  return Dir(p);
}

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
std::atomic<int> g_poolWindows{0};  // beginAllocateToPool calls not ended yet

// The open allocate-to-pool windows: an allocation on a stream that a window's filter takes
// (PyTorch's: the stream captures this graph; use_mem_pool's: this thread) goes to its pool,
// and a free there goes to the engine at once (a pool's blocks are reused inside it during a
// capture). Which block is whose, and everything else, is the engine's (src/private-pools.ts).
struct CUstream_st;  // cudaStream_t's
struct PoolWindow {
  unsigned long long first, second;
  int ordinal;
  std::function<bool(CUstream_st*)> filter;
};
std::mutex g_windowMutex;
std::vector<PoolWindow> g_windowList;

// The ordinal of the window whose filter takes `stream`, or 0.
int PoolFor(void* stream) {
  if (g_poolWindows.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard<std::mutex> lock(g_windowMutex);
  for (const PoolWindow& w : g_windowList) {
    if (w.filter && w.filter(static_cast<CUstream_st*>(stream))) return w.ordinal;
  }
  return 0;
}

// Whether `stream` is capturing a CUDA graph (any answer but "no" counts as capturing:
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT on the legacy stream during a global capture too).
thread_local bool t_contextChecked = false;

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

void FreeNow(void* ptr, size_t size, void* stream) {
  double r = g_call(kOpFree, static_cast<double>(reinterpret_cast<uintptr_t>(ptr)), static_cast<double>(size),
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

void OnForkChild() {
  g_forked.store(true);
  g_exiting.store(true);
}

// Registered after libnode was loaded, so it runs before libnode's and libuv's destructors;
// in the parent it does nothing.
void ExitForkedChild(int status, void*) {
  if (!g_forked.load()) return;
  std::fflush(nullptr);
  _exit(status);
}

}  // namespace

/**
 * Starts the engine: config_json is what the bridge takes (policy, knobs, driver, ...),
 * threading 0 = a Locker per call, 1 = one JS thread. Returns 0, or -1 with
 * gmlake_last_error() saying why. A second call after success is a no-op; after a failure
 * it fails again with the same message (Node cannot be started twice in a process).
 */
GMLAKE_EXPORT int gmlake_start(const char* config_json, int threading) {
  std::lock_guard<std::mutex> lock(g_startMutex);
  if (g_forked.load()) {
    t_error = kForkedError;
    return -1;
  }
  if (g_call != nullptr) return 0;
  if (!g_startError.empty()) {
    t_error = g_startError;
    return -1;
  }
  auto fail = [&](const std::string& m) {
    g_startError = m;
    t_error = m;
    return -1;
  };
  std::string dir = SelfDir();
  std::string pkg = Dir(Dir(dir));  // <pkg>/build/lib -> <pkg>
  const char* libnodeEnv = std::getenv("GMLAKE_LIBNODE_DIR");
  std::string libnodeDir = libnodeEnv != nullptr ? libnodeEnv : pkg + "/build/libnode/usr/lib/x86_64-linux-gnu";
  if (!Exists(libnodeDir + "/libnode.so.108")) {
    return fail("gmlake: libnode.so.108 not found in " + libnodeDir +
                " (run `pnpm --filter @gmlake/torch-alloc build`, which fetches Debian's libnode108, or set GMLAKE_LIBNODE_DIR)");
  }
  // libnode reads these builtin files when it creates its context and aborts the process
  // without them. scripts/fetch-libnode.sh patched its /usr/share/nodejs/ to
  // /proc/self/fd/987/: that fd is the unpacked share/nodejs folder, kept open.
  std::string builtinDir = Dir(Dir(libnodeDir)) + "/share/nodejs";
  const char* builtins[] = {"cjs-module-lexer/lexer.js", "cjs-module-lexer/dist/lexer.js", "undici/undici-fetch.js",
                            "acorn/dist/acorn.js", "acorn-walk/dist/walk.js"};
  for (const char* b : builtins) {
    if (!Exists(builtinDir + "/" + b)) {
      return fail("gmlake: " + builtinDir + "/" + b + " is missing; libnode aborts without it (rerun scripts/fetch-libnode.sh --force)");
    }
  }
  if (fcntl(kBuiltinFd, F_GETFD) == -1) {
    int fd = open(builtinDir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || dup3(fd, kBuiltinFd, O_CLOEXEC) < 0) {
      if (fd >= 0) close(fd);
      return fail("gmlake: cannot open " + builtinDir + " as fd " + std::to_string(kBuiltinFd) + ": " + std::strerror(errno));
    }
    close(fd);
  } else {
    char link[64], target[4096];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", kBuiltinFd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    char* real = realpath(builtinDir.c_str(), nullptr);
    bool ours = n > 0 && real != nullptr && std::string(target, n) == real;
    std::free(real);
    if (!ours) return fail("gmlake: fd " + std::to_string(kBuiltinFd) + " is taken by the process; libnode's builtin files are read through it");
  }
  std::string embedPath = dir + "/libgmlake_embed.so";
  // libnode goes to global scope: the vmm addon's napi_* symbols resolve against it.
  void* embed = dlopen(embedPath.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (embed == nullptr) {
    const char* e = dlerror();
    return fail(std::string("gmlake: cannot load ") + embedPath + ": " + (e != nullptr ? e : "unknown error"));
  }
  dlopen("libnode.so.108", RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  auto start = reinterpret_cast<gmlake_embed_start_fn>(dlsym(embed, "gmlake_embed_start"));
  auto call = reinterpret_cast<gmlake_embed_call_fn>(dlsym(embed, "gmlake_embed_call"));
  auto text = reinterpret_cast<gmlake_embed_text_fn>(dlsym(embed, "gmlake_embed_text"));
  if (start == nullptr || call == nullptr || text == nullptr) return fail("gmlake: " + embedPath + " lacks its entry points");
  g_embedTimes = reinterpret_cast<gmlake_embed_times_fn>(dlsym(embed, "gmlake_embed_times"));
  std::string boot = pkg + "/native/boot.cjs";
  char err[4096] = {0};
  if (start(boot.c_str(), config_json, threading, err, sizeof err) != 0) return fail(std::string("gmlake: ") + err);
  if (std::strstr(config_json, "\"driver\":\"cuda\"") != nullptr) LoadCaptureCheck();
  // embed.cc reads GMLAKE_TIME_CALLS at its start; its answer: off, the parts too (1), or the
  // whole calls only (total)
  double probe[4];
  g_timeCalls = g_embedTimes != nullptr && g_embedTimes(probe) != 0;
  g_text = text;
  g_call = call;
  std::atexit([] { g_exiting.store(true); });
  pthread_atfork(nullptr, nullptr, OnForkChild);
  on_exit(ExitForkedChild, nullptr);
  return 0;
}

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

/**
 * An allocation from private pool `ordinal` (gmlake_pool_begin's); capturing: the stream is
 * capturing, so only the pool's free memory may serve it (no driver call). 0 and *out set,
 * or a status < 0 (-1 out of memory, -4 no room during capture) with gmlake_last_error().
 */
GMLAKE_EXPORT int gmlake_pool_alloc(size_t size, int ordinal, int capturing, void* stream, void** out) {
  *out = nullptr;
  double r = PoolCall(kOpPoolAlloc, static_cast<double>(size), 2.0 * ordinal + (capturing ? 1 : 0),
                      static_cast<double>(reinterpret_cast<uintptr_t>(stream)));
  if (r < 0) return static_cast<int>(r);
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
    std::lock_guard<std::mutex> lock(g_deferredMutex);
    g_deferred.push_back({ptr, size, device, stream});
    g_deferredCount.store(g_deferred.size(), std::memory_order_release);
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

/** The bare round trip into JS and back (the threading benchmark's unit). */
GMLAKE_EXPORT double gmlake_ping(double x) {
  if (g_forked.load()) return kStatusError;
  return g_call != nullptr ? g_call(kOpPing, x, 0, 0) : static_cast<double>(kStatusNotStarted);
}

/** The JS side alone: ns per alloc+free pair of bench/live-pair.mjs's loop, run inside the embedded Node. */
GMLAKE_EXPORT double gmlake_bench_js_pairs(int pairs, void* stream) {
  if (g_forked.load()) return kStatusError;
  return g_call != nullptr ? g_call(kOpBenchPairs, pairs, 0, static_cast<double>(reinterpret_cast<uintptr_t>(stream)))
                           : static_cast<double>(kStatusNotStarted);
}

/**
 * Private pool (first, second): window 1 opens an allocate-to-pool window on it (created with
 * one use, or one use more; the engine takes memory ahead now, before the capture begins),
 * window 0 only creates it or adds a use (MemPool). Returns its ordinal (> 0), or a status < 0.
 */
GMLAKE_EXPORT int gmlake_pool_begin(unsigned long long first, unsigned long long second, int window) {
  return static_cast<int>(PoolCall(kOpPoolBegin, static_cast<double>(first), static_cast<double>(second), window ? 1 : 0));
}

/** The window of pool `ordinal` closes (the capture ended, or use_mem_pool's block). */
GMLAKE_EXPORT int gmlake_pool_end(int ordinal) { return static_cast<int>(PoolCall(kOpPoolEnd, ordinal, 0, 0)); }

/** One use of pool (first, second) fewer; at none its memory goes back once its last block is freed. Bytes given back now, or a status < 0. */
GMLAKE_EXPORT double gmlake_pool_release(unsigned long long first, unsigned long long second) {
  return PoolCall(kOpPoolRelease, static_cast<double>(first), static_cast<double>(second), 0);
}

/** The uses of pool (first, second) (0: none), or a status < 0. */
GMLAKE_EXPORT int gmlake_pool_use_count(unsigned long long first, unsigned long long second) {
  return static_cast<int>(PoolCall(kOpPoolUseCount, static_cast<double>(first), static_cast<double>(second), 0));
}

/** 1 when a live block of pool (first, second) starts at ptr, else 0; ptr null: its live blocks; or a status < 0. */
GMLAKE_EXPORT int gmlake_pool_live(unsigned long long first, unsigned long long second, void* ptr) {
  return static_cast<int>(PoolCall(kOpPoolLive, static_cast<double>(first), static_cast<double>(second),
                                   static_cast<double>(reinterpret_cast<uintptr_t>(ptr))));
}

/**
 * set_begin_allocate_to_pool: PyTorch opens a pool window (before it begins a CUDA-graph
 * capture, or for torch.cuda.use_mem_pool): allocations on the streams `filter` takes go to
 * the pool from now on. Throws when the engine refuses (a window already open on the pool).
 * The signature is PyTorch's (CUDAPluggableAllocator.h).
 */
GMLAKE_EXPORT void gmlake_begin_allocate_to_pool(int /*device*/, std::pair<unsigned long long, unsigned long long> pool,
                                                 std::function<bool(CUstream_st*)> filter) {
  int ordinal = 0;
  if (g_call != nullptr) {
    ordinal = gmlake_pool_begin(pool.first, pool.second, 1);
    if (ordinal < 0) throw std::runtime_error(t_error);
  }
  {
    std::lock_guard<std::mutex> lock(g_windowMutex);
    g_windowList.push_back({pool.first, pool.second, ordinal, ordinal > 0 ? std::move(filter) : nullptr});
  }
  g_poolWindows.fetch_add(1, std::memory_order_acq_rel);
}

// Takes the open window of `pool` off the list: its ordinal, 0 if it had none, or -1 if none was open.
static int TakeWindow(std::pair<unsigned long long, unsigned long long> pool) {
  std::lock_guard<std::mutex> lock(g_windowMutex);
  for (auto it = g_windowList.begin(); it != g_windowList.end(); ++it) {
    if (it->first == pool.first && it->second == pool.second) {
      int ordinal = it->ordinal;
      g_windowList.erase(it);
      g_poolWindows.fetch_sub(1, std::memory_order_acq_rel);
      return ordinal;
    }
  }
  return -1;
}

/** set_end_allocate_to_pool_fn: the window closes (after the capture ended); one not open is ignored. */
GMLAKE_EXPORT void gmlake_end_allocate_to_pool(int /*device*/, std::pair<unsigned long long, unsigned long long> pool) {
  int ordinal = TakeWindow(pool);
  if (ordinal > 0) gmlake_pool_end(ordinal);
  FlushDeferred();
}

/**
 * set_release_pool: a graph (or MemPool) using the pool is gone; at its last use a window
 * still open (a capture that failed half-way) closes. Cannot fail towards PyTorch: a refusal is said.
 */
GMLAKE_EXPORT void gmlake_release_pool(int /*device*/, std::pair<unsigned long long, unsigned long long> pool) {
  if (g_call != nullptr && gmlake_pool_release(pool.first, pool.second) < 0) {
    std::fprintf(stderr, "gmlake: releasePool(%llu, %llu) failed: %s\n", pool.first, pool.second, t_error.c_str());
  }
  // a window still open with no use left (another graph may capture into a pool that keeps uses)
  if (gmlake_pool_use_count(pool.first, pool.second) == 0 && TakeWindow(pool) >= 0) FlushDeferred();
}

/** createOrIncrefPool (torch.cuda.MemPool): pool (first, second) created with one use, or one use more. Throws when refused. */
GMLAKE_EXPORT void gmlake_create_pool(int /*device*/, std::pair<unsigned long long, unsigned long long> pool) {
  if (gmlake_pool_begin(pool.first, pool.second, 0) < 0) throw std::runtime_error(t_error);
}

/**
 * How allocs and frees look for a capture: 0 = ask the driver every call (the default),
 * 1 = only inside pool windows (set once the two hooks above are wired). Returns the
 * previous mode, or -1 for an unknown one (nothing changed).
 */
GMLAKE_EXPORT int gmlake_set_capture_check(int mode) {
  if (mode != kCaptureEveryCall && mode != kCapturePoolWindows) return -1;
  return g_captureCheck.exchange(mode);
}

GMLAKE_EXPORT void gmlake_set_oom_thrower(OomThrower fn) { g_oomThrower = fn; }

/**
 * The summed time inside alloc and free (GMLAKE_TIME_CALLS=1): out[0] alloc ns, out[1]
 * allocs, out[2] free ns, out[3] frees; then the embedding's parts of the calls that entered
 * JS (embed.cc): out[4] ns taking the isolate, out[5] preparing (scopes, the queued frees'
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
