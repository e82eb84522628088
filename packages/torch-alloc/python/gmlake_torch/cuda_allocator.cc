// The engine as PyTorch's CUDA allocator without the pluggable interface: a class derived
// from c10::cuda::CUDACachingAllocator::CUDAAllocator (the interface PyTorch's own caching
// and cudaMallocAsync allocators implement), built against the installed PyTorch at first
// use (python -m gmlake_torch build-cuda-allocator; enable(interface="native")) and put in
// place of PyTorch's allocator before its first CUDA allocation, as
// changeCurrentAllocator does. It forwards to the C entry points of libgmlake_torch_alloc.so
// (gmlake_try_alloc, gmlake_free, gmlake_empty_cache, gmlake_record_stream, gmlake_text, the
// pool-window hooks, the pool checkpoints), so every memory decision stays the engine's.
//
// Why (docs/design-cuda-allocator.md): CUDAPluggableAllocator takes one global mutex and
// inserts into / erases from an unordered_map on every alloc and free before our library is
// called (~1.1 us a pair on the H200, BENCHMARKS run 35), and refuses memory_stats,
// memory_fraction, cacheInfo (cudnn.benchmark) and OOM observers. Here the live blocks'
// size and stream sit in an open-addressed table split into shards with a spin lock each (no
// node allocation, the two threads that allocate rarely meet on a shard), and those calls
// are answered.
//
// Beside it, for benchmarks only: the allocator PyTorch had before the install stays callable;
// gmlake_native_route(1) sends allocations to it, (2) to cudaMallocAsync, (0) back to the engine,
// and each block goes back to the one that gave it. scripts/gpu/alternate_steps.py runs a job's
// steps through the engine and PyTorch's own inside one process (fresh processes on the H200
// host differ by up to 30%), each pair after a step through cudaMallocAsync on the same shapes,
// which warms the process's per-shape caches (cuDNN plans) and neither allocator.
//
// Versions: written for torch 2.11's header. `override` marks only the methods every torch 2.x
// declares alike; the others (their parameter types moved between versions) override
// PyTorch's where the installed header matches, else are unused extras, and a pure method of
// the installed header that none matches is a build error naming it.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

// Stand-ins for names a given PyTorch may lack: an unqualified name inside the namespace
// below finds PyTorch's own first (CUDACachingAllocator, then c10), this one only when
// PyTorch has none, and then the method that uses it overrides nothing.
namespace gmlake_compat {
struct Absent {};
using OomRejectionObserver = Absent;
}  // namespace gmlake_compat

namespace c10::cuda::CUDACachingAllocator {
using namespace ::gmlake_compat;
namespace gmlake_native {

// libgmlake_torch_alloc.so's entry points (native/torch_alloc.h lists its files), found with dlsym at install.
struct Api {
  int (*try_alloc)(size_t, int, void*, void**) = nullptr;
  void (*free)(void*, size_t, int, void*) = nullptr;
  void (*empty_cache)() = nullptr;
  void (*record_stream)(void*, void*) = nullptr;
  char* (*text)(int, const char*) = nullptr;
  void (*text_free)(char*) = nullptr;
  const char* (*last_error)() = nullptr;
  void (*begin_pool)(int, std::pair<unsigned long long, unsigned long long>, std::function<bool(CUstream_st*)>) = nullptr;
  void (*end_pool)(int, std::pair<unsigned long long, unsigned long long>) = nullptr;
  void (*set_memory_fraction)(double, int) = nullptr;  // the memory budget (optional: newer builds)
  // private pools (optional: newer builds): a graph's reset, MemPool's creation, its uses
  void (*release_pool)(int, std::pair<unsigned long long, unsigned long long>) = nullptr;
  void (*create_pool)(int, std::pair<unsigned long long, unsigned long long>) = nullptr;
  int (*pool_use_count)(unsigned long long, unsigned long long) = nullptr;
  int (*pool_live)(unsigned long long, unsigned long long, void*) = nullptr;
  // pool checkpoints (optional: newer builds): cudagraph trees' getCheckpointState / setCheckpointPoolState
  long long (*pool_checkpoint)(unsigned long long, unsigned long long) = nullptr;
  char* (*pool_restore)(long long) = nullptr;
  int (*pool_drop_checkpoint)(long long) = nullptr;
};
Api g_api;
constexpr int kTextStats = 1;  // native/contract.h (test/contract.test.ts checks these copies)
constexpr int kStatusOom = -1;

// ---- the live blocks: address -> (size, stream) ------------------------------------------
class SpinLock {
  std::atomic<bool> held_{false};

 public:
  void lock() {
    for (int spins = 0; held_.exchange(true, std::memory_order_acquire); spins++) {
      while (held_.load(std::memory_order_relaxed)) {
        if (++spins > 64) std::this_thread::yield();
      }
    }
  }
  void unlock() { held_.store(false, std::memory_order_release); }
};

struct Slot {
  uintptr_t key = 0;  // 0: empty
  size_t size = 0;
  cudaStream_t stream = nullptr;
};

inline uint64_t Mix(uintptr_t k) {
  uint64_t x = static_cast<uint64_t>(k);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

// Linear probing, deletion by backward shift (no tombstones), grown at half full.
struct alignas(64) Shard {
  SpinLock lock;
  std::vector<Slot> slots = std::vector<Slot>(256);
  size_t used = 0;

  size_t Home(uintptr_t k) const { return Mix(k) & (slots.size() - 1); }

  void Put(uintptr_t k, size_t size, cudaStream_t stream) {
    if (2 * (used + 1) > slots.size()) Grow();
    size_t i = Home(k);
    while (slots[i].key != 0 && slots[i].key != k) i = (i + 1) & (slots.size() - 1);
    if (slots[i].key == 0) used++;
    slots[i] = {k, size, stream};
  }

  bool Find(uintptr_t k, size_t* size) const {
    const size_t mask = slots.size() - 1;
    for (size_t i = Home(k); slots[i].key != 0; i = (i + 1) & mask) {
      if (slots[i].key == k) {
        *size = slots[i].size;
        return true;
      }
    }
    return false;
  }

  bool Mark(uintptr_t k, size_t bits) {
    const size_t mask = slots.size() - 1;
    for (size_t i = Home(k); slots[i].key != 0; i = (i + 1) & mask) {
      if (slots[i].key == k) {
        slots[i].size |= bits;
        return true;
      }
    }
    return false;
  }

  bool Take(uintptr_t k, size_t* size, cudaStream_t* stream) {
    const size_t mask = slots.size() - 1;
    size_t i = Home(k);
    while (slots[i].key != k) {
      if (slots[i].key == 0) return false;
      i = (i + 1) & mask;
    }
    *size = slots[i].size;
    *stream = slots[i].stream;
    for (size_t j = (i + 1) & mask; slots[j].key != 0; j = (j + 1) & mask) {
      size_t h = Home(slots[j].key);
      // slot j may move to the hole at i unless its home lies cyclically in (i, j]
      bool stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
      if (!stays) {
        slots[i] = slots[j];
        i = j;
      }
    }
    slots[i] = Slot{};
    used--;
    return true;
  }

  void Grow() {
    std::vector<Slot> old(slots.size() * 2);
    old.swap(slots);
    used = 0;
    for (const Slot& s : old) {
      if (s.key != 0) Put(s.key, s.size, s.stream);
    }
  }
};

constexpr int kShards = 64;
// Never destroyed: PyTorch frees tensors from its own static destructors at exit, which run
// after ours (this library was loaded after it); gmlake_free ignores them once exiting.
Shard* const g_shards = new Shard[kShards];
inline Shard& ShardOf(uintptr_t k) { return g_shards[Mix(k) >> 58]; }  // the top 6 bits

inline void Track(void* p, size_t n, cudaStream_t stream) {
  auto k = reinterpret_cast<uintptr_t>(p);
  Shard& s = ShardOf(k);
  s.lock.lock();
  s.Put(k, n, stream);
  s.lock.unlock();
}

inline bool Untrack(void* p, size_t* n, cudaStream_t* stream) {
  auto k = reinterpret_cast<uintptr_t>(p);
  Shard& s = ShardOf(k);
  s.lock.lock();
  bool found = s.Take(k, n, stream);
  s.lock.unlock();
  return found;
}

// ---- PyTorch's own allocator beside the engine (benchmarks: the header above) -------------
enum Route : int { kOurs = 0, kTheirs = 1, kPrime = 2 };
CUDAAllocator* g_theirs = nullptr;    // the allocator found at install
std::atomic<int> g_route{kOurs};      // who allocates now
std::atomic<bool> g_routed{false};    // ever routed: no pool windows (their blocks would mix)
// set in a live block's size: who gave it, and a cudaMallocAsync block another stream used
constexpr size_t kGaveTheirs = size_t{1} << 63, kGavePrime = size_t{1} << 62, kRecorded = size_t{1} << 61;
constexpr size_t kTags = kGaveTheirs | kGavePrime | kRecorded;

inline size_t TagsOf(void* p) {
  auto k = reinterpret_cast<uintptr_t>(p);
  Shard& s = ShardOf(k);
  size_t size = 0;
  s.lock.lock();
  bool found = s.Find(k, &size);
  if (found && (size & kGavePrime) != 0) s.Mark(k, kRecorded);  // only asked by recordStream
  s.lock.unlock();
  return found ? size & kTags : 0;
}

// ---- statistics that PyTorch's DeviceStats has and the engine does not keep ---------------
struct Counter {
  std::atomic<int64_t> current{0}, peak{0}, allocated{0}, freed{0};
  void Add(int64_t n) {
    int64_t now = current.fetch_add(n, std::memory_order_relaxed) + n;
    allocated.fetch_add(n, std::memory_order_relaxed);
    int64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  void Sub(int64_t n) {
    current.fetch_sub(n, std::memory_order_relaxed);
    freed.fetch_add(n, std::memory_order_relaxed);
  }
  template <class S>
  void Fill(S& s) const {
    s.current = current.load();
    s.peak = peak.load();
    s.allocated = allocated.load();
    s.freed = freed.load();
  }
};

// A number in the engine's statistics JSON ("key":value), or 0.
double JsonNumber(const std::string& json, const char* key) {
  std::string k = std::string("\"") + key + "\":";
  size_t at = json.find(k);
  return at == std::string::npos ? 0 : std::strtod(json.c_str() + at + k.size(), nullptr);
}

// DeviceStats' fields of newer versions, set where the installed header has them.
template <class S, class = void>
struct HasDeviceCalls : std::false_type {};
template <class S>
struct HasDeviceCalls<S, std::void_t<decltype(std::declval<S&>().num_device_alloc)>> : std::true_type {};
template <class S, class = void>
struct HasSyncs : std::false_type {};
template <class S>
struct HasSyncs<S, std::void_t<decltype(std::declval<S&>().num_sync_all_streams)>> : std::true_type {};

template <class S>
void FillNewer(S& s, const std::string& json) {
  if constexpr (HasDeviceCalls<S>::value) {
    s.num_device_alloc = static_cast<int64_t>(JsonNumber(json, "num_device_alloc"));
    s.num_device_free = static_cast<int64_t>(JsonNumber(json, "num_device_free"));
  }
  if constexpr (HasSyncs<S>::value) s.num_sync_all_streams = static_cast<int64_t>(JsonNumber(json, "num_sync_all_streams"));
}

void Deleter(void* ptr);

// getCheckpointState's answer: the id of the copy of a pool's blocks the engine keeps, dropped
// with the last reference (cudagraph trees keep one per recorded graph).
struct PoolCheckpoint final : AllocatorState {
  explicit PoolCheckpoint(long long checkpoint) : id(checkpoint) {}
  ~PoolCheckpoint() override {
    if (g_api.pool_drop_checkpoint != nullptr) g_api.pool_drop_checkpoint(id);
  }
  const long long id;
};

class StitchAllocator final : public CUDAAllocator {
 public:
  int device_ = 0;  // the one device the engine serves

  // ---- the hot path ----
  void* Malloc(size_t n, cudaStream_t stream) {
    if (n == 0) return nullptr;
    if (int route = g_route.load(std::memory_order_relaxed); route != kOurs) {
      void* q = nullptr;
      if (route == kTheirs) {
        q = g_theirs->raw_alloc_with_stream(n, stream);
      } else {
        C10_CUDA_CHECK(cudaMallocAsync(&q, n, stream));
      }
      Track(q, n | (route == kTheirs ? kGaveTheirs : kGavePrime), stream);
      return q;
    }
    void* p = nullptr;
    int status = g_api.try_alloc(n, device_, stream, &p);
    if (status != 0) Fail(status, n);
    Track(p, n, stream);
    allocations_.Add(1);
    requested_.Add(static_cast<int64_t>(n));
    return p;
  }

  void Free(void* p) {
    if (p == nullptr) return;
    size_t size = 0;
    cudaStream_t stream = nullptr;
    TORCH_CHECK(Untrack(p, &size, &stream), "gmlake: free of ", p, ", which this allocator did not hand out");
    if ((size & kGaveTheirs) != 0) {
      g_theirs->raw_delete(p);
      return;
    }
    if ((size & kGavePrime) != 0) {
      // in its stream's order, as PyTorch's own allocator reuses it; used on other streams: after them
      if ((size & kRecorded) != 0) C10_CUDA_CHECK(cudaDeviceSynchronize());
      C10_CUDA_CHECK(cudaFreeAsync(p, stream));
      return;
    }
    allocations_.Sub(1);
    requested_.Sub(static_cast<int64_t>(size));
    g_api.free(p, size, device_, stream);
  }

  [[noreturn]] void Fail(int status, size_t n) {
    std::string msg = g_api.last_error();
    if (status == kStatusOom) {
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      int64_t allocated = requested_.current.load();
      for (auto& observer : oom_observers_) observer(device_, allocated, total, free);
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    }
    TORCH_CHECK(false, msg.empty() ? "gmlake: allocation of " + std::to_string(n) + " bytes failed" : msg);
  }

  // ---- c10::Allocator ----
  DataPtr allocate(size_t n) override {
    c10::DeviceIndex device = -1;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    void* p = Malloc(n, c10::cuda::getCurrentCUDAStream(device).stream());
    return {p, p, &Deleter, c10::Device(c10::DeviceType::CUDA, device)};
  }
  DeleterFnPtr raw_deleter() const override { return &Deleter; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }

  // ---- CUDAAllocator ----
  void* raw_alloc(size_t nbytes) override {
    c10::DeviceIndex device = -1;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    return Malloc(nbytes, c10::cuda::getCurrentCUDAStream(device).stream());
  }
  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override { return Malloc(nbytes, stream); }
  void raw_delete(void* ptr) override { Free(ptr); }
  void init(int /*device_count*/) override { initialized_.store(true); }
  bool initialized() override { return initialized_.load(); }

  // torch.cuda.set_per_process_memory_fraction: the engine's memory budget, where the library
  // has one (gmlake_set_memory_fraction); else refused rather than ignored.
  double getMemoryFraction(c10::DeviceIndex /*device*/) { return fraction_.load(); }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) {
    if (g_api.set_memory_fraction == nullptr) {
      TORCH_CHECK(fraction >= 1.0, "gmlake: set_per_process_memory_fraction needs a libgmlake_torch_alloc.so with a memory "
                                   "budget (gmlake_set_memory_fraction); give gmlake_torch.enable(capacity_bytes=...) instead");
      return;
    }
    g_api.set_memory_fraction(fraction, device);  // throws with the engine's reason
    fraction_.store(fraction);
  }
  std::vector<StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex /*device*/) { return {}; }
  void enable(bool value) { enabled_.store(value); }
  bool isEnabled() const { return enabled_.load(); }

  void emptyCache(MempoolId_t /*mempool_id*/) {
    g_api.empty_cache();
    if (g_routed.load()) g_theirs->emptyCache();
  }
  // cudnn.benchmark sizes its workspace from this: what the device has free (the engine
  // frees what it caches when a request would not fit, as PyTorch's allocator does).
  void cacheInfo(c10::DeviceIndex /*device*/, size_t* largestBlock) {
    size_t free = 0, total = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    *largestBlock = free;
  }
  void* getBaseAllocation(void* ptr, size_t* /*size*/) override { return ptr; }
  void recordStream(const DataPtr& ptr, CUDAStream stream) override {
    // only blocks of ours (a tensor of another allocator or from IPC is not ours to track)
    if (ptr.get() == nullptr || ptr.get_deleter() != &Deleter) return;
    if (size_t tags = g_routed.load() ? TagsOf(ptr.get()) : 0; tags != 0) {
      if ((tags & kGaveTheirs) != 0) {
        // theirs checks the deleter is its own; the stand-in must not free on destruction
        DataPtr theirs(ptr.get(), ptr.get(), g_theirs->raw_deleter(), ptr.device());
        g_theirs->recordStream(theirs, stream);
        (void)theirs.release_context();
      }
      return;  // a cudaMallocAsync block: TagsOf marked it, its free waits for the device
    }
    g_api.record_stream(ptr.get(), stream.stream());
  }

  DeviceStats getDeviceStats(c10::DeviceIndex /*device*/) {
    std::string json = EngineStats();
    DeviceStats s;
    // [0]: StatType::AGGREGATE, [2]: LARGE_POOL (the types' namespace moved between versions)
    auto fill = [&](auto& a, const char* name) {
      auto& st = a[0];
      st.current = static_cast<int64_t>(JsonNumber(json, (std::string(name) + ".all.current").c_str()));
      st.peak = static_cast<int64_t>(JsonNumber(json, (std::string(name) + ".all.peak").c_str()));
      a[2] = st;  // one pool: all of it counts as large
    };
    fill(s.allocated_bytes, "allocated_bytes");
    fill(s.active_bytes, "active_bytes");
    fill(s.reserved_bytes, "reserved_bytes");
    fill(s.segment, "segment");
    // counted here, where every call passes: exact, and reset_peak_memory_stats resets them
    allocations_.Fill(s.allocation[0]);
    allocations_.Fill(s.active[0]);
    requested_.Fill(s.requested_bytes[0]);
    s.num_alloc_retries = static_cast<int64_t>(JsonNumber(json, "num_alloc_retries"));
    s.num_ooms = static_cast<int64_t>(JsonNumber(json, "num_ooms"));
    FillNewer(s, json);
    return s;
  }
  void resetAccumulatedStats(c10::DeviceIndex /*device*/) {
    for (Counter* c : {&allocations_, &requested_}) {
      c->allocated.store(0);
      c->freed.store(0);
    }
  }
  void resetPeakStats(c10::DeviceIndex /*device*/) {
    for (Counter* c : {&allocations_, &requested_}) c->peak.store(c->current.load());
    static std::once_flag said;
    std::call_once(said, [] {
      std::fprintf(stderr, "gmlake: reset_peak_memory_stats resets the allocation and requested-bytes peaks; "
                           "the engine's allocated, active and reserved peaks stay those since start\n");
    });
  }

  // The engine keeps its own history (enable(record=True)), written by gmlake_torch.snapshot().
  SnapshotInfo snapshot(MempoolId_t /*mempool_id*/) { return Refused<SnapshotInfo>("memory_snapshot"); }
  SnapshotInfo snapshot(MempoolId_t /*mempool_id*/, bool /*include_traces*/) { return Refused<SnapshotInfo>("memory_snapshot"); }
  void recordHistory(bool enabled, CreateContextFn, size_t, RecordContext, bool, const std::vector<std::string>&) {
    TORCH_CHECK(!enabled, "gmlake: _record_memory_history: start with gmlake_torch.enable(record=True) and write the "
                          "history with gmlake_torch.snapshot(path) (the same pickle format)");
  }
  bool isHistoryEnabled() { return false; }

  // Private pools (docs/design-private-pools.md): PyTorch opens a pool window before every
  // capture it makes and for use_mem_pool; allocations on the streams the filter takes go to
  // the pool (the engine's private-pools.ts), and the pool's last release gives its memory back.
  void beginAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id, std::function<bool(cudaStream_t)> filter) {
    TORCH_CHECK(!g_routed.load(), "gmlake: CUDA-graph pools are not supported while steps alternate with PyTorch's own allocator");
    g_api.begin_pool(device, mempool_id, std::move(filter));  // throws when the engine refuses
  }
  void endAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id) { g_api.end_pool(device, mempool_id); }
  void releasePool(c10::DeviceIndex device, MempoolId_t mempool_id) {
    if (g_api.release_pool != nullptr) g_api.release_pool(device, mempool_id);
  }
  // torch.cuda.MemPool(): a pool of the engine's; MemPool(allocator=...) would put another
  // allocator under ours, which the engine cannot hand memory to. Two spellings, as torch's
  // virtual takes a raw pointer (2.6-2.7) or a shared_ptr (later; 2.11 on the H200 did not
  // call the raw one: MemPool fell to the base class's "does not yet support").
  void createOrIncrefPool(c10::DeviceIndex device, MempoolId_t mempool_id, CUDAAllocator* allocator) {
    TORCH_CHECK(allocator == nullptr || allocator == this,
                "gmlake: torch.cuda.MemPool(allocator=...) is not supported by the stitching allocator: its pools take "
                "memory from the engine (use torch.cuda.MemPool() without an allocator)");
    TORCH_CHECK(g_api.create_pool != nullptr, "gmlake: torch.cuda.MemPool needs a libgmlake_torch_alloc.so with private pools");
    g_api.create_pool(device, mempool_id);
  }
  void createOrIncrefPool(c10::DeviceIndex device, MempoolId_t mempool_id, std::shared_ptr<CUDAAllocator> allocator) {
    createOrIncrefPool(device, mempool_id, allocator.get());
  }
  int getPoolUseCount(c10::DeviceIndex /*device*/, MempoolId_t mempool_id) {
    return g_api.pool_use_count != nullptr ? g_api.pool_use_count(mempool_id.first, mempool_id.second) : 0;
  }
  // cudagraph trees' slow-path check: the pool's live blocks are exactly the storages they expect
  bool checkPoolLiveAllocations(c10::DeviceIndex /*device*/, MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected_live_allocations) {
    TORCH_CHECK(g_api.pool_live != nullptr, "gmlake: checkPoolLiveAllocations needs a libgmlake_torch_alloc.so with private pools");
    auto [a, b] = mempool_id;
    if (g_api.pool_live(a, b, nullptr) != static_cast<int>(expected_live_allocations.size())) return false;
    for (void* p : expected_live_allocations) {
      if (g_api.pool_live(a, b, p) != 1) return false;
    }
    return true;
  }
  // use_on_oom (a pool lends its free memory to allocations outside it before an OOM): not ours,
  // a pool's memory is reused only inside it. torch 2.11's ~MemPool calls (..., false) on every
  // pool: that one has nothing to undo (the refusal there would terminate the process).
  void setUseOnOOM(c10::DeviceIndex /*device*/, MempoolId_t /*mempool_id*/) {
    Refused<void>("torch.cuda.MemPool(use_on_oom=True)");
  }
  void setUseOnOOM(c10::DeviceIndex device, MempoolId_t mempool_id, bool use_on_oom) {
    if (use_on_oom) setUseOnOOM(device, mempool_id);
  }
  void setNoSplit(c10::DeviceIndex /*device*/, MempoolId_t /*mempool_id*/) {
    Refused<void>("torch.cuda.MemPool(no_split=True)");
  }

  ShareableHandle shareIpcHandle(void* /*ptr*/) { return Refused<ShareableHandle>("IPC handles"); }
  std::shared_ptr<void> getIpcDevPtr(std::string /*handle*/) { return Refused<std::shared_ptr<void>>("IPC handles"); }

  void attachOutOfMemoryObserver(OutOfMemoryObserver observer) { oom_observers_.push_back(std::move(observer)); }
  // never called: the engine refuses no request ahead of the driver
  void attachOomRejectionObserver(OomRejectionObserver /*observer*/) {}
  // PyTorch's own trace events (its memory-history recorder); the engine has its own history
  void attachAllocatorTraceTracker(AllocatorTraceTracker /*tracker*/) {}

  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
    c10::cuda::CUDAGuard guard(dev);
    cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
    } else {
      C10_CUDA_CHECK(err);
    }
  }
  cudaError_t memcpyAsync(void* dst, int /*dstDevice*/, const void* src, int /*srcDevice*/, size_t count, cudaStream_t stream,
                          bool /*p2p_enabled*/) override {
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  }
  // CUDA-graph trees (torch.compile mode="reduce-overhead") checkpoint a pool after each
  // recording and put the checkpoint back before recording off a path they replayed (a replay
  // changes no allocator state): the engine copies and restores the pool's carve state
  // (docs/design-private-pools.md "Checkpoints").
  std::shared_ptr<AllocatorState> getCheckpointState(c10::DeviceIndex /*device*/, MempoolId_t id) {
    TORCH_CHECK(g_api.pool_checkpoint != nullptr && g_api.pool_restore != nullptr && g_api.pool_drop_checkpoint != nullptr,
                "gmlake: ", kCheckpoints, " need a libgmlake_torch_alloc.so with gmlake_pool_checkpoint");
    long long checkpoint = g_api.pool_checkpoint(id.first, id.second);
    TORCH_CHECK(checkpoint > 0, "gmlake: ", g_api.last_error());
    return std::make_shared<PoolCheckpoint>(checkpoint);
  }
  // The pool's blocks live now are freed (they leave the live table without a free: PyTorch
  // drops their storages' deleters), the checkpoint's are live again at their addresses, with
  // their size and stream, behind DataPtrs with allocate()'s deleter.
  CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device, std::shared_ptr<AllocatorState> pps) {
    auto* checkpoint = dynamic_cast<PoolCheckpoint*>(pps.get());
    TORCH_CHECK(checkpoint != nullptr, "gmlake: setCheckpointPoolState: not a checkpoint of this allocator's getCheckpointState");
    char* text = g_api.pool_restore(checkpoint->id);
    std::string answer = text != nullptr ? text : "";
    g_api.text_free(text);
    // "F A", F addresses freed, A allocated as "address size stream" (private_pools.cc); else the engine's reason
    std::vector<unsigned long long> n;
    const char* at = answer.c_str();
    for (char* end = nullptr;; at = end) {
      unsigned long long v = std::strtoull(at, &end, 10);
      if (end == at) break;
      n.push_back(v);
    }
    bool whole = !answer.empty() && std::isdigit(static_cast<unsigned char>(answer[0])) && n.size() >= 2 && n.size() == 2 + n[0] + 3 * n[1];
    TORCH_CHECK(whole, answer.empty() ? "gmlake: setCheckpointPoolState: the engine gave no answer" : answer);
    CheckpointDelta delta;
    auto ptr = [](unsigned long long v) { return reinterpret_cast<void*>(static_cast<uintptr_t>(v)); };
    for (size_t i = 0; i < n[0]; i++) {
      size_t size = 0;
      cudaStream_t stream = nullptr;
      if (Untrack(ptr(n[2 + i]), &size, &stream)) {
        allocations_.Sub(1);
        requested_.Sub(static_cast<int64_t>(size));
      }
      delta.ptrs_freed.push_back(ptr(n[2 + i]));
    }
    for (size_t i = 0, k = 2 + n[0]; i < n[1]; i++, k += 3) {
      Track(ptr(n[k]), n[k + 1], static_cast<cudaStream_t>(ptr(n[k + 2])));
      allocations_.Add(1);
      requested_.Add(static_cast<int64_t>(n[k + 1]));
      delta.dataptrs_allocd.emplace_back(ptr(n[k]), ptr(n[k]), &Deleter, c10::Device(c10::DeviceType::CUDA, device));
    }
    return delta;
  }
  static constexpr const char* kCheckpoints =
      "CUDA-graph pool checkpoints (a cudagraph tree re-recording off a replayed path; "
      "torch._inductor.config.triton.cudagraph_trees = False captures each graph without them)";
  std::string name() override { return "gmlake"; }

 private:
  std::atomic<bool> initialized_{false};
  std::atomic<bool> enabled_{true};
  std::atomic<double> fraction_{1.0};
  Counter allocations_, requested_;
  std::vector<OutOfMemoryObserver> oom_observers_;

  std::string EngineStats() {
    char* text = g_api.text(kTextStats, "");
    std::string json = text != nullptr ? text : "";
    g_api.text_free(text);
    return json;
  }

  template <class T>
  [[noreturn]] T Refused(const char* what) {
    TORCH_CHECK(false, "gmlake: ", what, " is not supported by the stitching allocator");
  }
};

StitchAllocator& g_allocator = *new StitchAllocator();  // never destroyed, as g_shards
void Deleter(void* ptr) { g_allocator.Free(ptr); }

}  // namespace gmlake_native
}  // namespace c10::cuda::CUDACachingAllocator

namespace {
template <class F>
bool Sym(void* lib, const char* name, F& out, std::string& missing) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (out == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  return out != nullptr;
}
}  // namespace

/**
 * Puts the engine in place of PyTorch's CUDA allocator: lib_path is the loaded
 * libgmlake_torch_alloc.so (its engine started), device the one it serves. Returns 0, or -1
 * with a one-line reason in err. Must run before PyTorch's allocator is initialized (its
 * first CUDA allocation), as changeCurrentAllocator requires.
 */
extern "C" __attribute__((visibility("default"))) int gmlake_native_install(const char* lib_path, int device, char* err,
                                                                          size_t errlen) {
  namespace A = c10::cuda::CUDACachingAllocator;
  namespace G = A::gmlake_native;
  auto fail = [&](const std::string& m) {
    std::snprintf(err, errlen, "%s", m.c_str());
    return -1;
  };
  A::CUDAAllocator* current = A::allocator.load();
  if (current == &G::g_allocator) return 0;
  if (current != nullptr && current->initialized()) {
    return fail("gmlake: PyTorch's CUDA allocator is already initialized: call gmlake_torch.enable() before the first CUDA tensor");
  }
  void* lib = dlopen(lib_path, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return fail(std::string("gmlake: ") + lib_path + " is not loaded in this process");
  std::string missing;
  Sym(lib, "gmlake_try_alloc", G::g_api.try_alloc, missing);
  Sym(lib, "gmlake_free", G::g_api.free, missing);
  Sym(lib, "gmlake_empty_cache", G::g_api.empty_cache, missing);
  Sym(lib, "gmlake_record_stream", G::g_api.record_stream, missing);
  Sym(lib, "gmlake_text", G::g_api.text, missing);
  Sym(lib, "gmlake_text_free", G::g_api.text_free, missing);
  Sym(lib, "gmlake_last_error", G::g_api.last_error, missing);
  Sym(lib, "gmlake_begin_allocate_to_pool", G::g_api.begin_pool, missing);
  Sym(lib, "gmlake_end_allocate_to_pool", G::g_api.end_pool, missing);
  G::g_api.set_memory_fraction = reinterpret_cast<void (*)(double, int)>(dlsym(lib, "gmlake_set_memory_fraction"));
  G::g_api.release_pool = reinterpret_cast<decltype(G::g_api.release_pool)>(dlsym(lib, "gmlake_release_pool"));
  G::g_api.create_pool = reinterpret_cast<decltype(G::g_api.create_pool)>(dlsym(lib, "gmlake_create_pool"));
  G::g_api.pool_use_count = reinterpret_cast<decltype(G::g_api.pool_use_count)>(dlsym(lib, "gmlake_pool_use_count"));
  G::g_api.pool_live = reinterpret_cast<decltype(G::g_api.pool_live)>(dlsym(lib, "gmlake_pool_live"));
  G::g_api.pool_checkpoint = reinterpret_cast<decltype(G::g_api.pool_checkpoint)>(dlsym(lib, "gmlake_pool_checkpoint"));
  G::g_api.pool_restore = reinterpret_cast<decltype(G::g_api.pool_restore)>(dlsym(lib, "gmlake_pool_restore"));
  G::g_api.pool_drop_checkpoint = reinterpret_cast<decltype(G::g_api.pool_drop_checkpoint)>(dlsym(lib, "gmlake_pool_drop_checkpoint"));
  dlclose(lib);  // the reference NOLOAD took; ctypes keeps the library loaded
  if (!missing.empty()) return fail(std::string("gmlake: ") + lib_path + " lacks " + missing);
  G::g_allocator.device_ = device;
  G::g_theirs = current;
  A::allocator.store(&G::g_allocator);
  return 0;
}

/**
 * Benchmarks only: route 1 sends every allocation from now on to the allocator PyTorch had
 * before gmlake_native_install (initialized here at the first switch), 2 to cudaMallocAsync,
 * 0 back to the engine; a free goes to whichever gave the block. Call it between steps, with
 * no allocation running. Returns 0, or -1 with a one-line reason in err.
 */
extern "C" __attribute__((visibility("default"))) int gmlake_native_route(int route, char* err, size_t errlen) {
  namespace A = c10::cuda::CUDACachingAllocator;
  namespace G = A::gmlake_native;
  if (A::allocator.load() != &G::g_allocator || G::g_theirs == nullptr) {
    std::snprintf(err, errlen, "gmlake: the native CUDAAllocator is not installed over one of PyTorch's");
    return -1;
  }
  if (route < G::kOurs || route > G::kPrime) {
    std::snprintf(err, errlen, "gmlake: route %d is not 0 (the engine), 1 (PyTorch's) or 2 (cudaMallocAsync)", route);
    return -1;
  }
  if (route == G::kTheirs && !G::g_theirs->initialized()) {
    try {
      G::g_theirs->init(c10::cuda::device_count());
    } catch (const std::exception& e) {
      std::snprintf(err, errlen, "gmlake: PyTorch's own allocator did not start: %s", e.what());
      return -1;
    }
  }
  if (route != G::kOurs) G::g_routed.store(true);
  G::g_route.store(route);
  return 0;
}
