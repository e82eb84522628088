// What the files of libgmlake_torch_alloc.so (PyTorch's entry points; links nothing of Node)
// share: the embedding once loaded, the process's state, and each file's calls the others
// make. torch_alloc.cc: the hot path (alloc, free, empty_cache, record_stream, budget, text,
// timing); alloc_start.cc: gmlake_start (finding libnode, loading the embedding, fork);
// capture.cc: CUDA-graph capture (the driver's question, frees deferred); private_pools.cc:
// private pools and PyTorch's allocate-to-pool windows.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "embed.h"

#define GMLAKE_EXPORT extern "C" __attribute__((visibility("default")))

// The entry points one file calls from another.
GMLAKE_EXPORT int gmlake_pool_alloc(size_t size, int ordinal, int capturing, void* stream, void** out);
GMLAKE_EXPORT int gmlake_pool_begin(unsigned long long first, unsigned long long second, int window);
GMLAKE_EXPORT int gmlake_pool_end(int ordinal);
GMLAKE_EXPORT double gmlake_pool_release(unsigned long long first, unsigned long long second);
GMLAKE_EXPORT int gmlake_pool_use_count(unsigned long long first, unsigned long long second);
GMLAKE_EXPORT char* gmlake_text(int op, const char* arg);

namespace gmlake {

// ---- torch_alloc.cc ----
// The embedding's entry points, set by gmlake_start once it started (null before).
extern gmlake_embed_call_fn g_call;
extern gmlake_embed_text_fn g_text;
extern gmlake_embed_times_fn g_embedTimes;
// Set at exit, before libnode's static destructors run (our handler is registered after
// libnode was loaded, so it runs first): what libtorch's own static destructors free
// after that (cached workspaces) is left to the process's end instead of a torn-down Node.
extern std::atomic<bool> g_exiting;
// A child of fork() after start has the engine's memory but none of its threads (the JS
// thread, libuv's and V8's workers): a Locker there crashes, a post to the JS thread waits
// for ever, and at exit libuv's destructor joins threads that are not there (SIGSEGV). So
// the child marks itself exiting (every hot-path check refuses) and forked (the reason), and
// its exit ends the process before the teardown of that state (alloc_start.cc).
extern std::atomic<bool> g_forked;
extern const char kForkedError[];
// The last error of the calling thread (gmlake_last_error).
extern thread_local std::string t_error;
// GMLAKE_TIME_CALLS=1 or total (the embedding's answer at start): the calls are timed.
extern bool g_timeCalls;

// The block goes back to the engine now (a failure is said on stderr: free cannot fail towards PyTorch).
void FreeNow(void* ptr, size_t size, void* stream);
// A call into the engine; a status < 0 leaves the engine's message in t_error.
double PoolCall(int op, double a, double b, double c);

// ---- capture.cc ----
// cuStreamIsCapturing and the context calls, from the libcuda PyTorch loaded (cuda driver only).
void LoadCaptureCheck();
// Whether `stream` is capturing a CUDA graph (asked only when the capture check mode says so).
bool Capturing(void* stream, int device);
// A free that arrived during capture waits; FlushDeferred frees those whose stream no longer captures.
void DeferFree(void* ptr, size_t size, int device, void* stream);
void FlushDeferred();

// ---- private_pools.cc ----
// beginAllocateToPool calls not ended yet.
extern std::atomic<int> g_poolWindows;
// The ordinal of the open window whose filter takes `stream`, or 0.
int PoolFor(void* stream);

}  // namespace gmlake
