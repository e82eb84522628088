// Private pools (CUDA graphs, torch.cuda.MemPool) and PyTorch's allocate-to-pool windows
// (torch_alloc.h, docs/design-private-pools.md): the pool entry points and the window hooks.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "torch_alloc.h"

namespace gmlake {

std::atomic<int> g_poolWindows{0};

namespace {

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

}  // namespace

// The ordinal of the window whose filter takes `stream`, or 0.
int PoolFor(void* stream) {
  if (g_poolWindows.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard<std::mutex> lock(g_windowMutex);
  for (const PoolWindow& w : g_windowList) {
    if (w.filter && w.filter(static_cast<CUstream_st*>(stream))) return w.ordinal;
  }
  return 0;
}

// Takes the open window of `pool` off the list: its ordinal, 0 if it had none, or -1 if none was open.
int TakeWindow(std::pair<unsigned long long, unsigned long long> pool) {
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

}  // namespace gmlake

using namespace gmlake;

/**
 * An allocation from private pool `ordinal` (gmlake_pool_begin's); capturing: the stream is
 * capturing, so only the pool's free memory may serve it (no driver call). 0 and *out set,
 * or a status < 0 (-1 out of memory, -4 refused during capture) with gmlake_last_error().
 */
GMLAKE_EXPORT int gmlake_pool_alloc(size_t size, int ordinal, int capturing, void* stream, void** out) {
  *out = nullptr;
  double r = PoolCall(kOpPoolAlloc, static_cast<double>(size), 2.0 * ordinal + (capturing ? 1 : 0),
                      static_cast<double>(reinterpret_cast<uintptr_t>(stream)));
  if (r < 0) return static_cast<int>(r);
  *out = reinterpret_cast<void*>(static_cast<uintptr_t>(r));
  return 0;
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
 * getCheckpointState (cudagraph trees): the engine keeps a copy of pool (first, second)'s
 * blocks. Its id (> 0), or a status < 0 with gmlake_last_error().
 */
GMLAKE_EXPORT long long gmlake_pool_checkpoint(unsigned long long first, unsigned long long second) {
  return static_cast<long long>(PoolCall(kOpPoolCheckpoint, static_cast<double>(first), static_cast<double>(second), 0));
}

/**
 * setCheckpointPoolState: the pool's blocks become checkpoint `id`'s (the ones live now freed,
 * the checkpoint's live again at their addresses). The engine's answer, as the text
 * operations give theirs (free it with gmlake_text_free): "F A", then the F addresses freed,
 * then the A blocks allocated as "address size stream"; or "gmlake: why" (nothing changed).
 */
GMLAKE_EXPORT char* gmlake_pool_restore(long long id) { return gmlake_text(kTextPoolRestore, std::to_string(id).c_str()); }

/** The checkpoint's copy goes (its AllocatorState is destroyed): 1, 0 if there was none, or a status < 0. */
GMLAKE_EXPORT int gmlake_pool_drop_checkpoint(long long id) {
  if (g_exiting.load(std::memory_order_relaxed)) return 0;  // PyTorch's static destructors, after the engine's
  return static_cast<int>(PoolCall(kOpPoolDropCheckpoint, static_cast<double>(id), 0, 0));
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
