// The JS-thread design (embed.h kThreadingThread): one thread owns the isolate for good; a
// caller hands its request over through a one-slot mailbox and spins, then sleeps on a futex,
// for the answer. Plain C++, no Node: what the JS thread does with a request is its Worker's
// (embedding.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "drain_tuner.h"

namespace gmlake {

class Handoff {
 public:
  // The JS thread's work, called on that thread only.
  class Worker {
   public:
    virtual ~Worker() = default;
    // Starts Node (false: err says why; the thread then ends).
    virtual bool Boot(std::string* err) = 0;
    // After the start was reported: the isolate taken for good.
    virtual void Enter() = 0;
    // A call; postedNs: when the caller posted it (GMLAKE_TIME_CALLS's "enter" part).
    virtual double Call(int op, double a, double b, double c, uint64_t postedNs, std::string* err) = 0;
    virtual char* Text(int op, const std::string& arg) = 0;
    // Waiting, with frees queued for GMLAKE_DRAIN_US: hands them to the engine (`seen` as Idle's).
    virtual void Drain(uint32_t seen) = 0;
    // After each call and drain; `seen`: the last request taken (PostedSince).
    virtual void Idle(uint32_t seen) = 0;
    // A drain now may work out the next answer (GMLAKE_SPECULATE on): only then is handing
    // frees over early worth a turn of its own (drain_tuner.h).
    virtual bool Foreseeing() const = 0;
  };

  // spinUs: how long either side spins before it sleeps; drain: no drains (`off`), or how long
  // frees wait queued before the waiting JS thread hands them over (drain_tuner.h: fixed or
  // learned; `pending`: the queue's entries, `pendingFrees`: of them frees). A queue of nothing
  // but allocations that took answers waits at least DrainTuner::kCarryUs: they come in bursts,
  // and the next one takes them along. timed: callers stamp their posts (GMLAKE_TIME_CALLS=1).
  void Configure(double spinUs, bool drain, DrainTuner tuner, const std::atomic<uint32_t>* pending,
                 const std::atomic<uint32_t>* pendingFrees, bool timed);
  // How long frees wait now (GMLAKE_DRAIN_US=auto: as learned so far; stats()).
  double freeWaitUs() const { return freeWaitUs_.load(std::memory_order_relaxed); }
  // Starts the JS thread and waits until its Worker::Boot returned.
  bool Start(Worker* worker, std::string* err);

  // A caller: the request handed over, the answer waited for (err: the JS thread's message
  // when the answer is < 0).
  double Call(int op, double a, double b, double c, std::string* err);
  char* Text(int op, const std::string& arg);

  // A request was posted after `seen` (the JS thread's own work gives way to it).
  bool PostedSince(uint32_t seen) const { return box_.posted.load(std::memory_order_acquire) != seen; }

 private:
  void Run(Worker* worker);
  void PostAndWait();

  // Each side spins on a line of its own that holds nothing but the counter it waits for: a
  // spinning reader takes a line back between the other side's stores to it, so a request's
  // fields written into the line the JS thread spins on would each cost a cross-core transfer.
  // The request (written by a caller before `posted`) and the answer (written by the JS thread
  // before `done`) sit on lines that nobody spins on. With answers worked out ahead this halved
  // the default's hot-loop pair on the H200 (3.33 -> 1.73 us, BENCHMARKS.md "Per-call cost in a hot loop (run 35)").
  struct Mailbox {
    alignas(64) std::mutex submit;  // one request in flight
    // the request
    bool isText = false;
    int op = 0;
    double a = 0, b = 0, c = 0;
    uint64_t postedNs = 0;  // GMLAKE_TIME_CALLS: when the caller posted it (the hand-off is the "enter" part)
    std::string textArg;
    alignas(64) std::atomic<uint32_t> posted{0};  // bumped by the caller; the JS thread spins on it
    alignas(64) std::atomic<uint32_t> done{0};    // set to `posted` by the JS thread; the caller spins on it
    // the answer
    alignas(64) double result = 0;
    char* textOut = nullptr;
    std::string error;
    alignas(64) std::atomic<uint32_t> jsSleeping{0};
    alignas(64) std::atomic<uint32_t> callerSleeping{0};
  };
  Mailbox box_;
  double spinUs_ = 1000;
  bool drain_ = false;
  DrainTuner tuner_;  // the JS thread's own
  std::atomic<double> freeWaitUs_{0};  // tuner_'s, for stats()
  const std::atomic<uint32_t>* pending_ = nullptr;
  const std::atomic<uint32_t>* pendingFrees_ = nullptr;
  bool timed_ = false;
};

}  // namespace gmlake
