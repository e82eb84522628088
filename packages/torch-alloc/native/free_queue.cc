// The free queue, the front cache and the answers callers take (free_queue.h).
#include "free_queue.h"

#include <cstdio>
#include <cstring>

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

void FreeQueue::QueueLocked(double address, double size, double stream) {
  queue_.push_back(address);
  queue_.push_back(size);
  queue_.push_back(stream);
  if (mirror_) pending_.store(static_cast<uint32_t>(queue_.size() / 3), std::memory_order_relaxed);
}

bool FreeQueue::Free(double address, double size, double stream, bool frontCache) {
  std::lock_guard<std::mutex> lock(mutex_);
  // room for one more entry (this free, or the held block it pushes out)
  if (queue_.size() >= 3 * static_cast<size_t>(kFreeQueueSlots)) return false;
  if (frontCache) {
    HoldOrQueueLocked(address, size, stream);
  } else {
    QueueLocked(address, size, stream);
  }
  return true;
}

bool FreeQueue::TakeForeseen(double size, double device, double stream, double* address) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (reqLog_.size() >= 4096) reqLog_.clear();  // the JS thread slept through them: start learning again
  reqLog_.push_back({size, stream});
  if (spec_.valid && size > 0 && spec_.size == size && spec_.stream == stream && device == device_ && queue_.empty()) {
    spec_.valid = false;
    specHits_ += 1;
    QueueLocked(spec_.addr, -size, stream);
    *address = spec_.addr;
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
  spec_.valid = false;
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
  live_[Key(address)] = {size, stream, false, false};
}

void FreeQueue::RecordStream(double address) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(Key(address));
  if (it != live_.end()) it->second.recorded = true;
}

void FreeQueue::HandOver(bool draining) {
  std::lock_guard<std::mutex> lock(mutex_);
  spec_.valid = false;  // the engine's state changes from here on: a foreseen answer no longer holds
  size_t n = queue_.size();
  // The queue holds at most kFreeQueueSlots frees plus one cache given back (a free that finds
  // it fuller hands it over first). Should it ever hold more, the rest waits for the next call.
  constexpr size_t kRoom = kFreeQueueLength - kFreeQueueHeader;
  size_t take = n < kRoom ? n : kRoom;
  if (draining && take > 0) {
    drains_ += 1;
    for (size_t i = 1; i < take; i += 3) drainedFrees_ += queue_[i] >= 0 ? 1 : 0;  // not the foreseen allocations
  }
  slots_[kQueueFrontCacheHits] = frontCacheHits_;
  slots_[kQueueFrontCacheHitBytes] = frontCacheHitBytes_;
  slots_[kQueueFrontCachePasses] = frontCachePasses_;
  slots_[kQueueDrains] = drains_;
  slots_[kQueueDrainedFrees] = drainedFrees_;
  slots_[kQueueSpeculations] = speculations_;
  slots_[kQueueSpecHits] = specHits_;
  slots_[kQueueSpecContext] = specContext_.load(std::memory_order_relaxed);
  if (n == 0) return;
  std::memcpy(slots_ + kFreeQueueHeader, queue_.data(), take * sizeof(double));
  slots_[kQueueFrees] = static_cast<double>(take / 3);
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(take));
  if (mirror_) pending_.store(static_cast<uint32_t>(queue_.size() / 3), std::memory_order_relaxed);
}

bool FreeQueue::TakeFailedMark() {
  if (slots_[kQueueFreeErrors] == 0) return false;
  slots_[kQueueFreeErrors] = 0;
  return true;
}

bool FreeQueue::TakeLearned(std::vector<Req>* learn, double* made, double* taken) {
  std::lock_guard<std::mutex> lock(mutex_);
  learn->swap(reqLog_);
  *made = speculations_;
  *taken = specHits_;
  return !queue_.empty();
}

void FreeQueue::Foresee(double size, double stream, double address) {
  std::lock_guard<std::mutex> lock(mutex_);
  spec_ = {true, size, stream, address};
  speculations_ += 1;
}

}  // namespace gmlake
