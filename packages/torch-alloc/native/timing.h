// The clock both libraries read, and GMLAKE_TIME_CALLS=1's parts of a call inside the
// embedding (config.cc parses the variable; torch_alloc.cc times the whole calls).
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

namespace gmlake {

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline double NowUs() { return static_cast<double>(NowNs()) / 1e3; }

// Where a call's time goes on the embedding's side, summed over the calls that enter JS:
// taking the isolate (Locker, Isolate::Scope; with one JS thread: from the post to the JS
// thread's pick-up), the scopes and the hand-over of queued frees, and the JS function
// itself. The library's own timer has the whole; what is left is leaving (the scopes' and
// the Locker's destructors; the answer's way back).
class CallParts {
 public:
  // GMLAKE_TIME_CALLS: parts on (=1), or only the library's whole-call timer (=total).
  void Configure(bool parts, bool whole) {
    parts_ = parts;
    whole_ = whole;
  }
  bool on() const { return parts_; }
  // Taking the isolate, up to `start` (the call's own clock, kept for Prepared).
  void Entered(uint64_t since, uint64_t start) {
    callStart_ = start;
    ns_[0].fetch_add(start - since, std::memory_order_relaxed);
  }
  // The call's preparation (from Entered's start to jsStart) and its JS function (jsStart to jsEnd).
  void Called(uint64_t jsStart, uint64_t jsEnd) {
    ns_[1].fetch_add(jsStart - callStart_, std::memory_order_relaxed);
    ns_[2].fetch_add(jsEnd - jsStart, std::memory_order_relaxed);
    calls_.fetch_add(1, std::memory_order_relaxed);
  }
  // gmlake_embed_times: 1 and out[0..2] ns taking the isolate, preparing, in JS, out[3] calls;
  // 2 with =total (out untouched); 0 when off.
  int Read(double* out) const;

 private:
  bool parts_ = false;
  bool whole_ = false;
  std::atomic<uint64_t> ns_[3] = {};  // enter, prepare, js
  std::atomic<uint64_t> calls_{0};
  inline static thread_local uint64_t callStart_ = 0;  // set by Entered, read by Called, on the calling thread
};

}  // namespace gmlake
