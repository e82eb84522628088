// The free queue, the front cache, the take-back and the answers callers take (free_queue.h).
#include "free_queue.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>

namespace gmlake {

void FreeQueue::Attach() {
  queue_.reserve(3 * (kFreeQueueSlots + kFrontCacheMaxEntries));
  on_ = true;
}

void FreeQueue::EnableFrontCache(size_t entries) {
  held_.reserve(entries + 1);
  live_.reserve(16384);
  frontCacheEntries_.store(entries);
}

void FreeQueue::EnableForesight(int context) {
  specContext_.store(context);
  reqLog_.reserve(4096);
}

void FreeQueue::EnableTakeBack() {
  takeable_.reserve(kFreeQueueSlots);
  live_.reserve(16384);
  takeBack_.store(true);
}

void FreeQueue::QueueLocked(double address, double size, double stream) {
  queue_.push_back(address);
  queue_.push_back(size);
  queue_.push_back(stream);
  if (size >= 0) freesQueued_++;
  MirrorLocked();
}

void FreeQueue::MirrorLocked() {
  if (!mirror_) return;
  pending_.store(static_cast<uint32_t>(queue_.size() / 3), std::memory_order_relaxed);
  pendingFrees_.store(freesQueued_, std::memory_order_relaxed);
}

bool FreeQueue::Free(double address, double size, double stream, bool frontCache, bool inPoolWindow) {
  std::lock_guard<std::mutex> lock(mutex_);
  // room for one more entry (this free, or the held block it pushes out)
  if (queue_.size() >= 3 * static_cast<size_t>(kFreeQueueSlots)) return false;
  freedSinceAlloc_ = true;
  if (frontCache) {
    HoldOrQueueLocked(address, size, stream);
  } else if (takeBack_.load(std::memory_order_relaxed)) {
    QueueTakeableLocked(address, size, stream, inPoolWindow);
  } else {
    QueueLocked(address, size, stream);
  }
  return true;
}

// A free with the take-back on: queued, and takeable when it is of a block the engine handed
// out with this size and stream, freed once, never used on another stream, outside pool windows.
void FreeQueue::QueueTakeableLocked(double address, double size, double stream, bool inPoolWindow) {
  auto it = live_.find(Key(address));
  if (it != live_.end() && QueuedTakeable(it->second)) {
    // a second free while the first is queued: both go to the engine, which says so, as without the take-back
    DropTakeableLocked(&it->second);
  }
  if (it == live_.end() || it->second.held || it->second.recorded || it->second.size != size ||
      it->second.stream != stream || inPoolWindow) {
    // the engine's from now on (an address it did not hand out is an error there)
    if (it != live_.end()) live_.erase(it);
    QueueLocked(address, size, stream);
    return;
  }
  it->second.held = true;
  it->second.gen = takeGen_;
  takeable_.push_back({size, stream, &it->second, queue_.size() / 3});
  QueueLocked(address, size, stream);
}

// The newest of the last kTakeBackScan takeable frees of this size and stream, out of the
// queue (LIFO, as PyTorch's allocator reuses the block just freed): its address, or 0.
double FreeQueue::TakeBackLocked(double size, double device, double stream) {
  if (takeable_.empty() || device != device_) return 0;
  size_t n = takeable_.size();
  size_t low = n > kTakeBackScan ? n - kTakeBackScan : 0;
  for (size_t i = n; i-- > low;) {
    const Takeable& t = takeable_[i];
    if (t.size != size || t.stream != stream) continue;
    auto at = queue_.begin() + static_cast<std::ptrdiff_t>(3 * t.entry);
    double address = *at;
    t.block->held = false;  // live again, in the engine's books all along
    queue_.erase(at, at + 3);
    for (size_t j = i + 1; j < n; j++) takeable_[j].entry--;
    takeable_.erase(takeable_.begin() + static_cast<std::ptrdiff_t>(i));
    freesQueued_--;
    MirrorLocked();
    takebacks_ += 1;
    takebackBytes_ += size;
    return address;
  }
  return 0;
}

// `block`'s free is no longer takeable (it stays queued for the engine).
void FreeQueue::DropTakeableLocked(const LiveBlock* block) {
  for (size_t i = takeable_.size(); i-- > 0;) {
    if (takeable_[i].block == block) {
      takeable_.erase(takeable_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

bool FreeQueue::TakeAlloc(double size, double device, double stream, double* address) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (specContext_.load(std::memory_order_relaxed) != 0) {
    if (reqLog_.size() >= 4096) reqLog_.clear();  // the JS thread slept through them: start learning again
    reqLog_.push_back({size, stream, !freedSinceAlloc_});  // a pair taken back too: the foresight learns the real sequence
  }
  const bool afterFree = freedSinceAlloc_;
  freedSinceAlloc_ = false;
  if (takeBack_.load(std::memory_order_relaxed)) {
    double taken = TakeBackLocked(size, device, stream);
    if (taken != 0) {
      *address = taken;
      return true;
    }
  }
  if (specContext_.load(std::memory_order_relaxed) == 0) return false;
  if (chainHead_ >= chainLen_) {
    specMiss_[0] += 1;
    if (afterFree) specMissNoneAfterFree_ += 1;
    specMissNoneBy_[static_cast<int>(noAnswer_)] += 1;
    if (noAnswer_ == NoAnswer::kAfterAnswer) noAnswer_ = NoAnswer::kLate;  // the next follows this one's call
    return false;
  }
  const Spec& s = chain_[chainHead_];
  if (size <= 0 || s.size != size || s.stream != stream || device != device_) {
    specMiss_[1] += 1;
  } else if (queue_.size() != 3 * chainTaken_) {
    specMiss_[2] += 1;
  } else {
    if (chainHead_ > 0) aheadTaken_ += 1;
    chainHead_++;
    chainTaken_++;
    if (chainHead_ >= chainLen_) noAnswer_ = NoAnswer::kAfterAnswer;  // the next is for the JS thread to work out
    specHits_ += 1;
    QueueLocked(s.addr, -size, stream);
    if (takeBack_.load(std::memory_order_relaxed)) AllocatedLocked(s.addr, size, stream);
    *address = s.addr;
    return true;
  }
  return false;
}

void FreeQueue::GiveBackHeldLocked() {
  for (const Held& h : held_) {
    live_.erase(Key(h.addr));
    QueueLocked(h.addr, h.size, h.stream);
  }
  held_.clear();
}

void FreeQueue::GiveBackHeld(bool closing) {
  std::lock_guard<std::mutex> lock(mutex_);
  GiveBackHeldLocked();
  if (closing) {
    frontCacheEntries_.store(0);
    live_.clear();
  }
}

void FreeQueue::StopForeseeing() {
  std::lock_guard<std::mutex> lock(mutex_);
  specContext_.store(0);
  chainLen_ = chainHead_ = 0;
  // the queued frees stay queued, for the engine (close frees every block it has)
  takeBack_.store(false);
  takeable_.clear();
  if (frontCacheEntries_.load() == 0) live_.clear();
}

// A free with the cache on: held (the oldest held block queued when over the size), or queued.
void FreeQueue::HoldOrQueueLocked(double address, double size, double stream) {
  auto it = live_.find(Key(address));
  if (it != live_.end() && it->second.held) {
    // Handing it out twice would give two tensors one block: dropped, and said.
    std::fprintf(stderr, "gmlake: free(0x%llx, %.0f) of a block freed already (the front cache holds it); ignored\n",
                 static_cast<unsigned long long>(Key(address)), size);
    return;
  }
  if (it == live_.end() || it->second.recorded || it->second.size != size || it->second.stream != stream) {
    // Not one to hand out again: the engine decides (an address it did not hand out is an
    // error there; a block used on other streams is freed once their events complete).
    if (it != live_.end()) live_.erase(it);
    frontCachePasses_ += 1;
    QueueLocked(address, size, stream);
    return;
  }
  it->second.held = true;
  held_.push_back({address, size, stream});
  if (held_.size() > frontCacheEntries_.load(std::memory_order_relaxed)) {
    Held oldest = held_.front();
    held_.erase(held_.begin());
    live_.erase(Key(oldest.addr));
    QueueLocked(oldest.addr, oldest.size, oldest.stream);
  }
}

double FreeQueue::TakeHeldLocked(double size, double device, double stream) {
  if (device != device_) return 0;
  for (size_t i = held_.size(); i-- > 0;) {
    const Held& h = held_[i];
    if (h.size != size || h.stream != stream) continue;
    double address = h.addr;
    held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
    live_[Key(address)].held = false;
    frontCacheHits_ += 1;
    frontCacheHitBytes_ += size;
    return address;
  }
  return 0;
}

double FreeQueue::TakeHeld(double size, double device, double stream, bool* holding) {
  std::lock_guard<std::mutex> lock(mutex_);
  double address = TakeHeldLocked(size, device, stream);
  *holding = address == 0 && !held_.empty();
  return address;
}

void FreeQueue::Allocated(double address, double size, double stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  AllocatedLocked(address, size, stream);
}

void FreeQueue::AllocatedLocked(double address, double size, double stream) {
  bool takeBack = takeBack_.load(std::memory_order_relaxed);
  if (takeBack && live_.size() >= sweepAt_) {
    // the entries of frees the engine took (left by the hand-overs) go; the queued ones stay
    for (auto it = live_.begin(); it != live_.end();) it = it->second.held && !QueuedTakeable(it->second) ? live_.erase(it) : std::next(it);
    sweepAt_ = std::max(sweepAt_, 2 * live_.size());
  }
  LiveBlock& b = live_[Key(address)];
  // its free still queued (a caller's second free of it?): handed out by the engine again, that
  // free is the engine's to judge, never to be taken back
  if (takeBack && QueuedTakeable(b)) DropTakeableLocked(&b);
  b = {size, stream, false, false, 0};
}

void FreeQueue::RecordStream(double address) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(Key(address));
  if (it == live_.end()) return;
  it->second.recorded = true;
  // record_stream after its free (queued): the engine says so, as without the take-back
  if (takeBack_.load(std::memory_order_relaxed) && QueuedTakeable(it->second)) {
    DropTakeableLocked(&it->second);
    live_.erase(it);
  }
}

void FreeQueue::HandOver(bool draining, bool extending) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = queue_.size();
  // The queue holds at most kFreeQueueSlots frees plus one cache given back (a free that finds
  // it fuller hands it over first). Should it ever hold more, the rest waits for the next call.
  constexpr size_t kRoom = kFreeQueueLength - kFreeQueueHeader;
  size_t take = n < kRoom ? n : kRoom;
  // The engine's state changes from here on, so the answers standing no longer hold; but the JS
  // thread's kOpMakeAhead or drain, handed only the allocations that took them, changes nothing
  // else, and they all still do (the bridge keeps its side of the chain likewise).
  if (!extending || n != 3 * chainTaken_) chainLen_ = chainHead_ = 0;
  // (what the JS thread said no longer holds; that the allocation before took an answer does)
  if (chainHead_ >= chainLen_ && noAnswer_ != NoAnswer::kAfterAnswer) noAnswer_ = NoAnswer::kLate;
  chainTaken_ = 0;
  if (draining && take > 0) {
    drains_ += 1;
    for (size_t i = 1; i < take; i += 3) drainedFrees_ += queue_[i] >= 0 ? 1 : 0;  // not the foreseen allocations
  }
  if (!takeable_.empty()) {
    // the engine takes these frees now: their blocks are no longer ours to hand back (their
    // entries stay, held from an older generation, until the block is handed out again or a sweep)
    takeGen_++;
    size_t handed = take / 3, kept = 0;
    for (const Takeable& t : takeable_) {
      if (t.entry >= handed) {  // only if the queue held more than the slots take (not with the take-back, whose queue they take whole)
        t.block->gen = takeGen_;
        takeable_[kept++] = {t.size, t.stream, t.block, t.entry - handed};
      }
    }
    takeable_.resize(kept);
  }
  slots_[kQueueFrontCacheHits] = frontCacheHits_;
  slots_[kQueueFrontCacheHitBytes] = frontCacheHitBytes_;
  slots_[kQueueFrontCachePasses] = frontCachePasses_;
  slots_[kQueueDrains] = drains_;
  slots_[kQueueDrainedFrees] = drainedFrees_;
  slots_[kQueueSpeculations] = speculations_;
  slots_[kQueueSpecHits] = specHits_;
  slots_[kQueueSpecContext] = specContext_.load(std::memory_order_relaxed);
  slots_[kQueueTakebacks] = takebacks_;
  slots_[kQueueTakebackBytes] = takebackBytes_;
  slots_[kQueueTakebackOn] = takeBack_.load(std::memory_order_relaxed) ? 1 : 0;
  slots_[kQueueSpecMissNone] = specMiss_[0];
  slots_[kQueueSpecMissOther] = specMiss_[1];
  slots_[kQueueSpecMissBehind] = specMiss_[2];
  slots_[kQueueSpecMissNoneAfterFree] = specMissNoneAfterFree_;
  slots_[kQueueDrainWaitUs] = drainWaitUs_.load(std::memory_order_relaxed);
  slots_[kQueueSpecMissNoneLate] = specMissNoneBy_[0];
  slots_[kQueueSpecMissNoneUnforeseen] = specMissNoneBy_[1];
  slots_[kQueueSpecMissNoneDeclined] = specMissNoneBy_[2];
  slots_[kQueueSpecMissNoneThrottled] = specMissNoneBy_[3];
  slots_[kQueueSpecMissNoneAfterAnswer] = specMissNoneBy_[4];
  if (n == 0) return;
  std::memcpy(slots_ + kFreeQueueHeader, queue_.data(), take * sizeof(double));
  slots_[kQueueFrees] = static_cast<double>(take / 3);
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(take));
  freesQueued_ = 0;  // what stays (a queue longer than the slots take) is counted again
  for (size_t i = 1; i < queue_.size(); i += 3) freesQueued_ += queue_[i] >= 0 ? 1 : 0;
  MirrorLocked();
}

bool FreeQueue::TakeFailedMark() {
  if (slots_[kQueueFreeErrors] == 0) return false;
  slots_[kQueueFreeErrors] = 0;
  return true;
}

bool FreeQueue::TakeLearned(std::vector<Req>* learn, double* made, double* taken, double* aheadMade, double* aheadTaken) {
  std::lock_guard<std::mutex> lock(mutex_);
  learn->swap(reqLog_);
  *made = speculations_;
  *taken = specHits_;
  if (aheadMade != nullptr) *aheadMade = aheadMade_;
  if (aheadTaken != nullptr) *aheadTaken = aheadTaken_;
  return !queue_.empty();
}

bool FreeQueue::Foresee(double size, double stream, double address, int index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (index != 0 && (index != chainLen_ || index >= kAheadMax)) return false;
  if (index == 0) chainHead_ = 0;
  noAnswer_ = NoAnswer::kLate;  // an answer stands: whatever was said before is void
  chain_[index] = {size, stream, address};
  chainLen_ = index + 1;
  speculations_ += 1;
  if (index > 0) aheadMade_ += 1;
  return true;
}

}  // namespace gmlake
