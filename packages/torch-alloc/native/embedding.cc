// The process's one embedding (embedding.h): its start, its calls into JS by either design,
// and the JS thread's own work while it waits (drains, answers worked out ahead).
#include "embedding.h"

#include <cstdio>
#include <cstdlib>

namespace gmlake {

Embedding& g_embedding = *new Embedding;

bool Embedding::Start(const std::string& boot, const std::string& config, int threading, std::string* err) {
  std::lock_guard<std::mutex> lock(startMutex_);
  if (started_) return true;
  if (startError_.empty()) {
    std::string e;
    if (StartOnce(boot, config, threading, &e)) {
      started_ = true;
      return true;
    }
    startError_ = e;
  }
  *err = startError_;
  return false;
}

bool Embedding::StartOnce(const std::string& boot, const std::string& config, int threading, std::string* err) {
  if (!ReadEmbedConfig(threading, &config_, err)) return false;
  if (config_.drainUs >= 0 || config_.drainAuto) queue_.MirrorPending();
  parts_.Configure(config_.timeParts, config_.timeWhole);
  threading_ = threading;  // before Node starts: OnBridge reads it
  boot_ = boot;
  configJson_ = config;
  if (threading != kThreadingThread) return StartNode(err);
  handoff_.Configure(config_.spinUs, config_.drainUs >= 0 || config_.drainAuto, DrainTuner(config_.drainAuto ? -1 : config_.drainUs),
                     &queue_.pending(), &queue_.pendingFrees(), config_.timeParts);
  return handoff_.Start(this, err);
}

bool Embedding::StartNode(std::string* err) {
  return host_.Start(boot_, configJson_, config_.nodeFlagsText, config_.nodeFlags, queue_.slots(), FreeQueue::kSlotCount,
                     [this](const NodeHost::Bridge& b, std::string* e) { return OnBridge(b, e); }, err);
}

// What the bridge offers, taken up: the free queue, the front cache, answers worked out ahead.
bool Embedding::OnBridge(const NodeHost::Bridge& bridge, std::string* err) {
  if (bridge.freeQueue) {
    queue_.Attach();
    if (bridge.sized) {
      queue_.SetDevice(bridge.device);
      double n = bridge.frontCacheEntries;
      if (n > 0 && n <= kFrontCacheMaxEntries) queue_.EnableFrontCache(static_cast<size_t>(n));
    }
  }
  // GMLAKE_SPECULATE=K (one JS thread only): once the JS thread is idle it foresees the next
  // allocation from the last K and asks the engine where it would land (kOpPeek: no change).
  // An alloc that matches takes that address at once, without the hand-off, while nothing
  // happened in between (FreeQueue::TakeForeseen; the bridge checks). Unasked, on with one JS
  // thread for a built-in policy that peeks, the front cache off (an outside policy's peeks
  // are the user's to turn on); asked, refused below where it cannot be.
  int context = config_.speculate;
  if (!config_.speculateAsked && threading_ == kThreadingThread && bridge.speculatesByDefault &&
      queue_.frontCacheEntries() == 0) {
    context = kSpecDefault;
  }
  if (context > 0) {
    if (!bridge.peeks) {
      *err = "GMLAKE_SPECULATE needs a policy that can say where an allocation would land (peekCached, as every built-in has)";
      return false;
    }
    if (queue_.frontCacheEntries() != 0) {
      *err = "GMLAKE_SPECULATE and the front cache (frontCacheEntries) do not go together: the cache's held blocks are outside the engine's state the answers are worked out from";
      return false;
    }
    foresight_.Configure(context);
    learn_.reserve(4096);
    queue_.EnableForesight(context);
  }
  // GMLAKE_TAKEBACK=1: an alloc takes back a queued free of its size and stream (FreeQueue::TakeAlloc).
  if (config_.takeBack) {
    if (!bridge.freeQueue || !bridge.sized) {
      *err = "GMLAKE_TAKEBACK needs the bridge's free queue";
      return false;
    }
    if (queue_.frontCacheEntries() != 0) {
      *err = "GMLAKE_TAKEBACK and the front cache (frontCacheEntries) do not go together: the cache holds the frees the take-back would take";
      return false;
    }
    if (bridge.records) {
      *err = "GMLAKE_TAKEBACK needs record off: the pairs it takes back never reach the engine's history";
      return false;
    }
    queue_.EnableTakeBack();
  }
  return true;
}

double Embedding::CallEngine(int op, double a, double b, double c, std::string* err) {
  if (queue_.on()) {
    if (threading_ == kThreadingThread && (config_.drainUs >= 0 || config_.drainAuto)) queue_.SetDrainWait(handoff_.freeWaitUs());
    queue_.HandOver(draining_, op == kOpMakeAhead || op == kOpFlush);
  }
  const bool timed = parts_.on() && !ownCall_;  // the JS thread's own drains and peeks are nobody's call
  uint64_t js[2];
  double v;
  if (!host_.Call(op, a, b, c, &v, timed ? js : nullptr, err)) return kStatusError;
  if (timed) parts_.Called(js[0], js[1]);
  if (queue_.TakeFailedMark()) ReportFreeErrors();
  if (v < 0) host_.LastError(err);
  return v;
}

char* Embedding::TextEngine(int op, const std::string& arg) {
  if (queue_.on() && op != kTextFreeErrors) queue_.HandOver(draining_);
  return host_.Text(op, arg);
}

// Holding the isolate, after a call: queued frees that failed (a free cannot fail towards
// PyTorch) are said loudly, as an unqueued one would be.
void Embedding::ReportFreeErrors() {
  char* msg = host_.Text(kTextFreeErrors, "");
  std::fprintf(stderr, "%s\n", msg);
  std::free(msg);
}

double Embedding::Dispatch(int op, double a, double b, double c) {
  if (threading_ == kThreadingThread) return handoff_.Call(op, a, b, c, &lastError);
  uint64_t t0 = parts_.on() ? NowNs() : 0;
  double r = 0;
  std::string err;
  host_.Locked([&] {
    if (parts_.on()) parts_.Entered(t0, NowNs());
    r = CallEngine(op, a, b, c, &err);
  });
  if (r < 0) lastError = err;
  return r;
}

char* Embedding::DispatchText(int op, const std::string& arg) {
  if (threading_ == kThreadingThread) return handoff_.Text(op, arg);
  char* out = nullptr;
  host_.Locked([&] { out = TextEngine(op, arg); });
  return out;
}

double Embedding::AllocFrontCached(double size, double device, double stream) {
  bool holding;
  double address = queue_.TakeHeld(size, device, stream, &holding);
  if (address != 0) return address;
  double r = holding ? Dispatch(kOpAllocCached, size, device, stream) : Dispatch(kOpAlloc, size, device, stream);
  if (r == kStatusNotCached) {
    queue_.GiveBackHeld();
    r = Dispatch(kOpAlloc, size, device, stream);
  }
  if (r >= 0) queue_.Allocated(r, size, stream);
  return r;
}

double Embedding::Call(int op, double a, double b, double c, uint64_t postedNs, std::string* err) {
  if (parts_.on()) parts_.Entered(postedNs, NowNs());
  return CallEngine(op, a, b, c, err);
}

// GMLAKE_DRAIN_US: the JS thread, waiting, hands the queued frees to the engine (an OP_FLUSH
// of its own). The engine takes the same frees in the same order before the same alloc as
// without it, so it decides the same; only the work moves off the caller's wait. With answers
// worked out ahead, the peek for the next allocation hands them over instead: one call into
// JS, not a flush and then a peek, so the answer stands sooner after a free.
void Embedding::Drain(uint32_t seen) {
  draining_ = ownCall_ = true;
  if (!Speculate(seen, true) && !handoff_.PostedSince(seen)) {  // a request posted takes the frees itself
    std::string err;
    double r = CallEngine(kOpFlush, 0, 0, 0, &err);
    if (r < 0) std::fprintf(stderr, "gmlake: handing queued frees to the engine failed: %s\n", err.c_str());
  }
  draining_ = ownCall_ = false;
}

// After each of its calls and drains: learn the allocations since, foresee the next, peek,
// unless an answer stands (a drain of nothing but the allocations that took answers keeps the
// rest). `seen`: the last request taken; one posted since goes first (a peek would only delay
// it). `draining`: from Drain, with frees queued, which the peek hands over. True: it called
// into JS (the queue was handed over).
bool Embedding::Speculate(uint32_t seen, bool draining) {
  if (queue_.foresightContext() == 0) return false;
  double made, taken, aheadMade, aheadTaken;
  bool queued = queue_.TakeLearned(&learn_, &made, &taken, &aheadMade, &aheadTaken);
  for (const Req& r : learn_) foresight_.Learn(r);
  learn_.clear();
  throttle_.Observe(made, taken);
  aheadThrottle_.Observe(aheadMade, aheadTaken);
  if (!draining && deniedInDrain_) {  // this turn's chance was the drain's
    deniedInDrain_ = false;
    return false;
  }
  Req next;
  if (queued && !draining) return false;  // frees first (a drain follows, then this again)
  if (queue_.Standing()) return false;       // (before the lookup: nothing to work out)
  if (!foresight_.Foresee(&next)) {
    queue_.Unanswered(FreeQueue::NoAnswer::kUnforeseen);
    return false;
  }
  if (!throttle_.Allow()) {
    deniedInDrain_ = draining;
    queue_.Unanswered(FreeQueue::NoAnswer::kThrottled);
    return false;
  }
  if (handoff_.PostedSince(seen)) return false;
  const bool own = ownCall_;
  ownCall_ = true;
  std::string err;
  double addr = CallEngine(kOpPeek, next.size, queue_.device(), next.stream, &err);
  bool stands = addr > 0 && queue_.Foresee(next.size, next.stream, addr);
  if (!stands) queue_.Unanswered(FreeQueue::NoAnswer::kDeclined);
  if (stands && config_.ahead > 1 && aheadThrottle_.Allow()) {
    // the answers after it (GMLAKE_AHEAD): each foreseen as if the ones before had come, and
    // worked out once the engine made those (kOpMakeAhead), while no request waits; while few
    // of them are taken (a free comes between the allocations after all), at 1 chance in 16
    Req chain[kAheadMax];
    chain[0] = next;
    for (int i = 1; i < config_.ahead && !handoff_.PostedSince(seen); i++) {
      if (!foresight_.ForeseeAfter(chain, i, &next) || !next.direct) break;
      addr = CallEngine(kOpMakeAhead, next.size, queue_.device(), next.stream, &err);
      if (addr <= 0 || !queue_.Foresee(next.size, next.stream, addr, i)) break;
      chain[i] = next;
    }
  }
  ownCall_ = own;
  return true;
}

}  // namespace gmlake
