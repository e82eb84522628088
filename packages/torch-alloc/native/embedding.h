// The process's one embedding (libgmlake_embed.so, linked against Debian's libnode.so.108):
// one Node environment per process, started on the first gmlake_embed_start() (embed_abi.cc),
// and the way PyTorch's threads (the Python thread, autograd's backward thread) reach its one
// isolate, chosen at start (README "Threading", BENCHMARKS.md):
//   locker - the calling thread takes a v8::Locker, enters the isolate and calls;
//   thread - a dedicated JS thread owns the isolate; a caller hands the request over
//            (handoff.h) and waits for the answer.
// Every call into JS first hands the queued frees over (free_queue.h), unless an alloc took one
// back (GMLAKE_TAKEBACK) with no call at all. With one JS thread,
// while it waits it hands over frees queued for GMLAKE_DRAIN_US, and once idle it foresees the
// next allocation (foresight.h, GMLAKE_SPECULATE) and asks the engine where it would land.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "embed.h"
#include "foresight.h"
#include "free_queue.h"
#include "handoff.h"
#include "node_host.h"
#include "timing.h"

namespace gmlake {

class Embedding : private Handoff::Worker {
 public:
  // Once per process: a second call after success does nothing, one after a failure fails
  // again with the same message (Node cannot be started twice in a process).
  bool Start(const std::string& boot, const std::string& config, int threading, std::string* err);
  bool started() const { return started_; }

  // One call into JS, by the threading chosen at start; a status < 0 leaves its message in lastError.
  double Dispatch(int op, double a, double b, double c);
  // A text operation into JS, by the threading chosen at start.
  char* DispatchText(int op, const std::string& arg);
  // An alloc with the front cache on: a held block of this size and stream, else the engine
  // (from what it holds while the cache holds blocks; else after it got them back).
  double AllocFrontCached(double size, double device, double stream);

  FreeQueue& queue() { return queue_; }
  const CallParts& parts() const { return parts_; }

  // The last error of this thread's design (OOM report or JS error).
  inline static thread_local std::string lastError;

 private:
  bool StartOnce(const std::string& boot, const std::string& config, int threading, std::string* err);
  bool StartNode(std::string* err);
  bool OnBridge(const NodeHost::Bridge& bridge, std::string* err);
  // Holding the isolate: one call into JS, the queued frees handed over first.
  double CallEngine(int op, double a, double b, double c, std::string* err);
  char* TextEngine(int op, const std::string& arg);
  void ReportFreeErrors();
  bool Speculate(uint32_t seen, bool draining = false);

  // Handoff::Worker: the JS thread's side.
  bool Boot(std::string* err) override { return StartNode(err); }
  void Enter() override { host_.HoldForGood(); }
  double Call(int op, double a, double b, double c, uint64_t postedNs, std::string* err) override;
  char* Text(int op, const std::string& arg) override { return TextEngine(op, arg); }
  void Drain(uint32_t seen) override;
  void Idle(uint32_t seen) override { Speculate(seen); }
  // (the peek throttle not asked: at 2 us its rare peeks would meet the allocation, never be
  // taken, and so never let early drains come back)
  bool Foreseeing() const override { return queue_.foresightContext() != 0; }

  FreeQueue queue_;
  Handoff handoff_;
  NodeHost host_;
  CallParts parts_;
  // Set at start, read by every call.
  alignas(64) int threading_ = kThreadingLocker;
  bool started_ = false;
  // The start's own.
  std::mutex startMutex_;
  std::string startError_;  // sticky: a failed start is reported again, never retried
  EmbedConfig config_;
  std::string boot_, configJson_;
  // The JS thread's (with a Locker per call they stay false and unused).
  alignas(64) bool draining_ = false;  // its hand-over in progress (counted by FreeQueue::HandOver)
  bool ownCall_ = false;               // a call it makes for itself (a drain, a peek): nobody's call, not timed
  Foresight foresight_;
  PeekThrottle throttle_;
  bool deniedInDrain_ = false;  // the throttle said no to the drain's peek: the Idle after it asks no more
  PeekThrottle aheadThrottle_{2};  // GMLAKE_AHEAD: chains grow past their first answer while 1 in 2 of those are taken
  std::vector<Req> learn_;  // the callers' allocations taken over from the queue's log
};

// The one embedding, never torn down: the JS thread runs on through the process's exit, so
// its members must outlive every static destructor (a global's did not: a crash at exit).
extern Embedding& g_embedding;

}  // namespace gmlake
