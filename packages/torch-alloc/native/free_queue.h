// The free queue and the front cache (contract.h), with the answers worked out ahead that
// callers take (GMLAKE_SPECULATE): everything any calling thread changes under the one mutex,
// and the slots through which it reaches JS. Plain C++, no Node: whoever holds the isolate
// calls HandOver before its call into JS (embedding.cc).
//
// Frees need no answer, so they are queued (a mutex, no isolate) and handed to JS with the
// next call of any kind: one isolate entry per alloc+free pair, not two. With the front cache
// on, the last frees are held here instead and an alloc of the same size on the same stream
// takes one back without entering JS at all (README "Front cache"). With the take-back on
// (GMLAKE_TAKEBACK), an alloc takes back a free still queued, of a block the engine handed out
// with that size and stream: the engine never sees the pair, and its books already hold it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "contract.h"
#include "foresight.h"  // Req

namespace gmlake {

class FreeQueue {
 public:
  // ---- at start, before any call (the bridge's answers, embedding.cc) ----
  // The bridge took the slots (attachFreeQueue): frees are queued from now on.
  void Attach();
  // GMLAKE_DRAIN_US on: the queue's length is mirrored for the JS thread's spin loop (pending()).
  void MirrorPending() { mirror_ = true; }
  // The one device the engine serves.
  void SetDevice(double device) { device_ = device; }
  // The front cache holds the last `entries` frees (0 < entries <= kFrontCacheMaxEntries).
  void EnableFrontCache(size_t entries);
  // Answers worked out ahead looking back on `context` allocations (0: off).
  void EnableForesight(int context);
  // GMLAKE_TAKEBACK: an alloc takes back a queued free of its size and stream (not with the front cache).
  void EnableTakeBack();

  bool on() const { return on_; }
  double device() const { return device_; }
  double* slots() { return slots_; }
  static constexpr size_t kSlotCount = kFreeQueueLength;
  size_t frontCacheEntries() const { return frontCacheEntries_.load(std::memory_order_relaxed); }
  int foresightContext() const { return specContext_.load(std::memory_order_relaxed); }
  bool takingBack() const { return takeBack_.load(std::memory_order_relaxed); }
  // The blocks it knows (test/free_queue_test.cc: the entries of frees the engine took are swept).
  size_t liveEntries() {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.size();
  }
  // An alloc may be served here (TakeAlloc): answers worked out ahead, or the take-back.
  bool servesAllocs() const { return foresightContext() != 0 || takingBack(); }

  // ---- any calling thread ----
  // A free: queued, or held with the cache on. False: the queue is full (hand it over, then again).
  // `inPoolWindow` (kOpFreeInPoolWindow): a pool window is open, so it is never taken back.
  bool Free(double address, double size, double stream, bool frontCache, bool inPoolWindow = false);
  // An alloc, logged for the JS thread to learn from (answers worked out ahead on): true and
  // *address when
  // - the take-back is on and a queued free matches (TakeBackLocked): the newest of the last
  //   kTakeBackScan of a block of this size and stream, taken out of the queue; or
  // - it matches the answer worked out ahead and nothing happened since the peek (no free
  //   queued, no call into JS: a pair taken back leaves the engine and the queue as they were);
  //   the allocation is then queued for the engine to make, at that address, before anything
  //   after it (a negative size: never a size of 0, whose negative, -0, could not mark it).
  //   Answers come in a chain (GMLAKE_AHEAD): each holds once the ones before it are taken
  //   (the engine made them ahead), so allocations back to back take one each, in order.
  bool TakeAlloc(double size, double device, double stream, double* address);
  // An alloc with the cache on: the newest held block of this size and stream, or 0 (none);
  // *holding: blocks are held (then the engine serves from what it holds, kOpAllocCached).
  double TakeHeld(double size, double device, double stream, bool* holding);
  // The engine handed `address` out (the cache or the take-back on): only such a block is held
  // or taken back when freed.
  void Allocated(double address, double size, double stream);
  // record_stream on `address` (the cache or the take-back on): its free waits on events, so it
  // is never held or taken back.
  void RecordStream(double address);
  // Every held block to the queue, so the engine sees it at the next call: before it would
  // grow, before empty_cache and before statistics, snapshots and close. `closing`: after
  // close the engine hands nothing out, so nothing is held again.
  void GiveBackHeld(bool closing = false);
  // Close: nothing is foreseen or taken back after it (the engine hands nothing out).
  void StopForeseeing();

  // ---- whoever holds the isolate ----
  // The queued frees into the slots JS reads at its next call, and the counters into the
  // header. `draining`: the JS thread's own hand-over while it waited (counted). The answers
  // standing are dropped (the engine changes from here on), unless `extending` (kOpMakeAhead, or
  // kOpFlush: a drain) and nothing but allocations that took them is handed over.
  void HandOver(bool draining, bool extending = false);
  // Queued frees JS said failed (slots [1]): true once, the mark cleared.
  bool TakeFailedMark();

  // How long frees wait for the JS thread's drain now (-1: no drains), for the header at each hand-over.
  void SetDrainWait(double us) { drainWaitUs_.store(us, std::memory_order_relaxed); }

  // ---- the JS thread ----
  // The queue's length, mirrored (MirrorPending) for the spin loop: no mutex there; and how many
  // of its entries are frees (the rest: allocations that took an answer, for the engine to make).
  const std::atomic<uint32_t>& pending() const { return pending_; }
  const std::atomic<uint32_t>& pendingFrees() const { return pendingFrees_; }
  // The allocations logged since the last time into *learn (swapped); *made, *taken the
  // answers worked out ahead and taken so far. True: frees are queued.
  // *aheadMade, *aheadTaken (when given): of them, the answers after a chain's first (GMLAKE_AHEAD).
  bool TakeLearned(std::vector<Req>* learn, double* made, double* taken, double* aheadMade = nullptr, double* aheadTaken = nullptr);
  // An answer worked out ahead: an alloc of (size, stream) lands at `address` now (`index` 0),
  // or once the chain's `index` answers before it are taken (appended: false, nothing kept,
  // where the chain is not that long any more).
  bool Foresee(double size, double stream, double address, int index = 0);
  // Why no answer stands after the JS thread looked (kQueueSpecMissNone's parts): an allocation
  // that finds none is counted by the last one said since the engine changed, else as after an
  // answer (the allocation before took the last one standing) or late.
  enum class NoAnswer { kLate = 0, kUnforeseen = 1, kDeclined = 2, kThrottled = 3, kAfterAnswer = 4 };
  void Unanswered(NoAnswer why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (chainHead_ >= chainLen_) noAnswer_ = why;
  }
  // An answer stands that a caller could take now (the engine has not changed since it was worked out).
  bool Standing() {
    std::lock_guard<std::mutex> lock(mutex_);
    return chainHead_ < chainLen_;
  }

 private:
  // A held block stays allocated in the engine's books; `live_` knows every block the engine
  // handed out (its size and stream at the alloc), so that only a block of ours, freed once,
  // with its own size and stream and no other stream's use (record_stream: its free waits
  // on events), is ever handed out again. A queued free that may be taken back likewise.
  struct Held {
    double addr, size, stream;
  };
  struct LiveBlock {
    double size, stream;
    // the front cache: in held_ now; the take-back: freed, its free in takeable_ while gen is
    // takeGen_ (a hand-over only bumps takeGen_: the JS thread never touches a caller's entry)
    bool held;
    bool recorded;  // record_stream was called on it
    uint32_t gen;
  };
  // A queued free that an alloc may take back: its entry in queue_ (entries of 3), oldest first.
  struct Takeable {
    double size, stream;
    LiveBlock* block;  // live_'s (an unordered_map's elements stay put when it rehashes)
    size_t entry;
  };
  // How many of the newest takeable frees an alloc looks at: a short scan under the mutex.
  static constexpr size_t kTakeBackScan = 32;
  struct Spec {
    double size, stream, addr;
  };
  static uint64_t Key(double address) { return static_cast<uint64_t>(address); }
  void QueueLocked(double address, double size, double stream);
  void MirrorLocked();
  void GiveBackHeldLocked();
  void HoldOrQueueLocked(double address, double size, double stream);
  double TakeHeldLocked(double size, double device, double stream);
  void QueueTakeableLocked(double address, double size, double stream, bool inPoolWindow);
  double TakeBackLocked(double size, double device, double stream);
  void DropTakeableLocked(const LiveBlock* block);
  void AllocatedLocked(double address, double size, double stream);
  bool QueuedTakeable(const LiveBlock& b) const { return b.held && b.gen == takeGen_; }

  // The mutex on a line of its own: with answers worked out ahead every caller takes it on every
  // allocation, so nothing else hot may share its line (BENCHMARKS.md "Per-call cost in a hot loop (run 35)").
  alignas(64) std::mutex mutex_;
  // Under mutex_:
  alignas(64) std::vector<double> queue_;  // (address, size, stream) each
  uint32_t freesQueued_ = 0;               // of its entries, frees (a size >= 0)
  std::vector<Held> held_;                 // oldest first
  std::unordered_map<uint64_t, LiveBlock> live_;
  double frontCacheHits_ = 0, frontCacheHitBytes_ = 0, frontCachePasses_ = 0;
  double drains_ = 0, drainedFrees_ = 0;  // the JS thread's hand-overs while it waited, their frees
  std::vector<Takeable> takeable_;
  uint32_t takeGen_ = 0;      // bumped by each hand-over of takeable frees
  size_t sweepAt_ = 1 << 16;  // live_'s size at which entries of frees the engine took are dropped
  double takebacks_ = 0, takebackBytes_ = 0;
  // The answers standing, in the order callers take them: chain_[chainHead_ .. chainLen_);
  // chainTaken_ of the queue's entries are allocations that took one since the last hand-over
  // (an answer holds while nothing else is queued).
  Spec chain_[kAheadMax] = {};
  int chainLen_ = 0, chainHead_ = 0;
  size_t chainTaken_ = 0;
  std::vector<Req> reqLog_;  // every alloc, in the order callers took the mutex, for the JS thread to learn from
  bool freedSinceAlloc_ = true;  // a free came since the last alloc (the next is not Req::direct)
  double speculations_ = 0, specHits_ = 0;
  double aheadMade_ = 0, aheadTaken_ = 0;  // of them, the answers after a chain's first
  double specMiss_[3] = {0, 0, 0};  // allocations that took none: none standing, another request, frees behind it
  double specMissNoneAfterFree_ = 0;  // of none standing: a free came since the allocation before
  double specMissNoneBy_[5] = {0, 0, 0, 0, 0};  // of none standing, by NoAnswer
  NoAnswer noAnswer_ = NoAnswer::kLate;       // what the JS thread last found since the engine changed
  // The queue's length for the JS thread's spin loop, on a line of its own.
  alignas(64) std::atomic<uint32_t> pending_{0};
  std::atomic<uint32_t> pendingFrees_{0};
  std::atomic<double> drainWaitUs_{-1};
  // Set at start, read by every call without the mutex.
  alignas(64) std::atomic<size_t> frontCacheEntries_{0};  // the bridge's frontCacheEntries (0: off)
  std::atomic<int> specContext_{0};                        // GMLAKE_SPECULATE's K (0: off)
  std::atomic<bool> takeBack_{false};                      // GMLAKE_TAKEBACK (off at close)
  bool on_ = false;      // the bridge took the slots (attachFreeQueue)
  bool mirror_ = false;  // GMLAKE_DRAIN_US on: pending_ kept
  double device_ = 0;
  // The slots JS reads (a Float64Array there): the layout is contract.h's.
  alignas(64) double slots_[kFreeQueueLength] = {};
};

}  // namespace gmlake
