// The one-slot mailbox between callers and the JS thread, spin then futex (handoff.h).
#include "handoff.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <thread>

#include "timing.h"

namespace gmlake {

namespace {

long Futex(std::atomic<uint32_t>* addr, int op, uint32_t val) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op | FUTEX_PRIVATE_FLAG, val, nullptr, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void Handoff::Configure(double spinUs, bool drain, DrainTuner tuner, const std::atomic<uint32_t>* pending,
                        const std::atomic<uint32_t>* pendingFrees, bool timed) {
  spinUs_ = spinUs;
  drain_ = drain;
  tuner_ = tuner;
  freeWaitUs_.store(tuner.WaitUs());
  pending_ = pending;
  pendingFrees_ = pendingFrees;
  timed_ = timed;
}

bool Handoff::Start(Worker* worker, std::string* err) {
  std::mutex m;
  std::condition_variable cv;
  bool ready = false;
  std::string startErr;
  std::thread([this, worker, &m, &cv, &ready, &startErr] {
    std::string e;
    bool ok = worker->Boot(&e);
    {
      // notified under the lock: the starter returns, and m and cv go, only once it is released
      std::lock_guard<std::mutex> lock(m);
      startErr = e;
      ready = true;
      cv.notify_all();
    }
    if (ok) Run(worker);
  }).detach();
  std::unique_lock<std::mutex> wait(m);
  cv.wait(wait, [&] { return ready; });
  if (startErr.empty()) return true;
  *err = startErr;
  return false;
}

void Handoff::Run(Worker* worker) {
  // The JS thread holds the isolate for good.
  worker->Enter();
  uint32_t seen = 0;
  for (;;) {
    uint32_t p = box_.posted.load(std::memory_order_acquire);
    if (p == seen) {
      double t0 = NowUs();
      // when this wait first saw frees queued, and the last free come
      double freesSince = -1, lastFreeAt = -1, freeWait = 0;
      uint32_t freesSeen = 0;
      while ((p = box_.posted.load(std::memory_order_acquire)) == seen) {
        double now = NowUs();
        if (drain_ && pending_->load(std::memory_order_relaxed) != 0) {
          const uint32_t frees = pendingFrees_->load(std::memory_order_relaxed);
          if (frees != 0 && freesSince < 0) {
            freesSince = now;
            freeWait = tuner_.NextWaitUs(worker->Foreseeing());
          }
          if (frees != freesSeen) {
            freesSeen = frees;
            lastFreeAt = now;
          }
          // learned, not holding them: handed over once the frees stop coming (a drain per free
          // would work out answers the next free makes void); otherwise timed from the first
          const bool quiet = tuner_.learning() && freeWait < DrainTuner::kCarryUs;
          // allocations that took answers alone go over at once: the drain is the peek for the
          // next answer, which an allocation 2 us later then finds (threading_bench, 4 allocations
          // 2 us apart: half answered ahead after a 2 us wait, 97% at once)
          if (frees == 0 || now - (quiet ? lastFreeAt : freesSince) >= freeWait) {
            worker->Drain(seen);
            if (frees && tuner_.learning()) {
              tuner_.Drained(NowUs() - now, PostedSince(seen));
              freeWaitUs_.store(tuner_.WaitUs(worker->Foreseeing()), std::memory_order_relaxed);
            }
            worker->Idle(seen);
            freesSince = lastFreeAt = -1;
            freesSeen = 0;
            t0 = NowUs();  // frees coming in: the job is busy, keep spinning
            continue;
          }
        }
        if (now - t0 >= spinUs_) break;
        CpuRelax();
      }
      if (p != seen && freesSince >= 0 && tuner_.learning()) {  // a request came before the drain: it takes them along
        tuner_.Carried(NowUs() - lastFreeAt);
        freeWaitUs_.store(tuner_.WaitUs(worker->Foreseeing()), std::memory_order_relaxed);
      }
      if (p == seen) {
        box_.jsSleeping.store(1, std::memory_order_seq_cst);
        while ((p = box_.posted.load(std::memory_order_seq_cst)) == seen) Futex(&box_.posted, FUTEX_WAIT, seen);
        box_.jsSleeping.store(0, std::memory_order_relaxed);
      }
    }
    seen = p;
    box_.error.clear();
    if (box_.isText) {
      box_.textOut = worker->Text(box_.op, box_.textArg);
    } else {
      box_.result = worker->Call(box_.op, box_.a, box_.b, box_.c, box_.postedNs, &box_.error);
    }
    box_.done.store(seen, std::memory_order_seq_cst);
    if (box_.callerSleeping.load(std::memory_order_seq_cst)) Futex(&box_.done, FUTEX_WAKE, 1);
    worker->Idle(seen);
  }
}

// Posts the request held in box_ (submit mutex held) and waits for its answer.
void Handoff::PostAndWait() {
  uint32_t n = box_.posted.load(std::memory_order_relaxed) + 1;
  box_.posted.store(n, std::memory_order_seq_cst);
  if (box_.jsSleeping.load(std::memory_order_seq_cst)) Futex(&box_.posted, FUTEX_WAKE, 1);
  double t0 = NowUs();
  while (box_.done.load(std::memory_order_acquire) != n) {
    if (NowUs() - t0 < spinUs_) {
      CpuRelax();
      continue;
    }
    box_.callerSleeping.store(1, std::memory_order_seq_cst);
    while (box_.done.load(std::memory_order_seq_cst) != n) Futex(&box_.done, FUTEX_WAIT, n - 1);
    box_.callerSleeping.store(0, std::memory_order_relaxed);
  }
}

double Handoff::Call(int op, double a, double b, double c, std::string* err) {
  std::lock_guard<std::mutex> lock(box_.submit);
  box_.isText = false;
  box_.op = op;
  box_.a = a;
  box_.b = b;
  box_.c = c;
  if (timed_) box_.postedNs = NowNs();
  PostAndWait();
  if (box_.result < 0) *err = box_.error;
  return box_.result;
}

char* Handoff::Text(int op, const std::string& arg) {
  std::lock_guard<std::mutex> lock(box_.submit);
  box_.isText = true;
  box_.op = op;
  box_.textArg = arg;
  PostAndWait();
  return box_.textOut;
}

}  // namespace gmlake
