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

void Handoff::Configure(double spinUs, double drainUs, const std::atomic<uint32_t>* pending, bool timed) {
  spinUs_ = spinUs;
  drainUs_ = drainUs;
  pending_ = pending;
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
  const bool drain = drainUs_ >= 0;
  for (;;) {
    uint32_t p = box_.posted.load(std::memory_order_acquire);
    if (p == seen) {
      double t0 = NowUs();
      double pendingSince = -1;  // when this wait first saw frees queued
      while ((p = box_.posted.load(std::memory_order_acquire)) == seen) {
        double now = NowUs();
        if (drain && pending_->load(std::memory_order_relaxed) != 0) {
          if (pendingSince < 0) pendingSince = now;
          if (now - pendingSince >= drainUs_) {
            worker->Drain();
            worker->Idle(seen);
            pendingSince = -1;
            t0 = NowUs();  // frees coming in: the job is busy, keep spinning
            continue;
          }
        }
        if (now - t0 >= spinUs_) break;
        CpuRelax();
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
