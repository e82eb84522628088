// How long queued frees wait before the waiting JS thread hands them to the engine
// (GMLAKE_DRAIN_US=auto, an option with one JS thread; handoff.cc asks and tells it).
//
// Handed over at once, the engine takes the frees and the JS thread works out where the next
// allocation lands, so that allocation, if it comes later than that turn takes (about a
// microsecond), takes its answer with no hand-off. If it comes sooner, it posts its call
// while the turn runs and waits for the turn and then its call: there it is cheaper to hold
// the frees (kCarryUs) and let the allocation take them along in its own call. Which of the
// two a job's allocations do is learned from what the JS thread sees: how soon a request
// follows the first queued free when it comes before a drain, and whether one was posted
// while a drain's turn ran. Threading bench, 2-core VM, an allocation 0 to 4 us after a free:
// at 2 us, none of those at 1 to 2 us took an answer (1.3-5 us each); at once, 91% did
// (0.4-0.7 us), but a hot loop's pair cost 2.2 us against 1.4 (docs/notebook/2026-12-07-drain-after-free.md).
#pragma once

#include <algorithm>

namespace gmlake {

class DrainTuner {
 public:
  // Held frees' wait when the allocations come sooner than a turn (the fixed default).
  static constexpr double kCarryUs = 2;
  // Not holding them, how long no new free comes before they are handed over: a job frees
  // several blocks back to back, and each free would make the answer worked out after the one
  // before void.
  static constexpr double kQuietUs = 0.25;
  // Holding them, 1 batch of frees in kProbeEvery is still handed over at once: the turn's
  // length and whether a request comes during it are measured, not remembered from another phase.
  // (1 in 16 cost a hot loop's pair 0.2 us, a probe's turn meeting the allocation.)
  static constexpr unsigned kProbeEvery = 64;

  // fixedUs >= 0: always that long (GMLAKE_DRAIN_US=N); < 0: learned.
  explicit DrainTuner(double fixedUs = -1) : fixed_(fixedUs) {}

  bool learning() const { return fixed_ < 0; }
  // How long frees wait now, as stats() say it (`foreseeing` as NextWaitUs's).
  double WaitUs(bool foreseeing = true) const { return fixed_ >= 0 ? fixed_ : (carry_ || !foreseeing ? kCarryUs : kQuietUs); }
  // How long the batch of frees just begun waits (once per batch: a probe now and then).
  // `foreseeing`: the drain would work out the next answer; if not, an early drain is a turn
  // of its own for nothing the allocation after it gains (it posts its call anyway), so they
  // wait kCarryUs.
  double NextWaitUs(bool foreseeing = true) {
    if (fixed_ >= 0) return fixed_;
    if (!foreseeing) return kCarryUs;
    if (carry_ && ++batches_ % kProbeEvery == 0) return kQuietUs;
    return WaitUs();
  }

  // A drain of frees took turnUs; `posted`: a request came while it ran (it came too soon).
  void Drained(double turnUs, bool posted) {
    // a turn cut short by the request (it skips the peek) is not a turn's length; one with a
    // garbage collection in it says nothing of the next: counted as 4 x the mean at most
    if (!posted) turnUs_ += (std::min(turnUs, 4 * turnUs_) - turnUs_) / 16;
    Sample(posted);
  }
  // A request came gapUs after the last queued free, before the drain: it takes them along
  // (handed over once they stopped coming, they would have been in a turn still).
  void Carried(double gapUs) { Sample(gapUs < kQuietUs + turnUs_); }

  // The share of recent requests that came sooner than a turn, and the turn's mean (tests).
  double soonShare() const { return soon_; }
  double turnUs() const { return turnUs_; }

 private:
  // A moving share over about 32 requests; the choice flips at 0.6 and back at 0.4, not
  // back and forth on every sample.
  void Sample(bool soon) {
    soon_ += ((soon ? 1.0 : 0.0) - soon_) / 32;
    if (!carry_ && soon_ > 0.6) carry_ = true;
    if (carry_ && soon_ < 0.4) carry_ = false;
  }

  double fixed_;
  double soon_ = 0;
  double turnUs_ = 1;  // until measured: about a turn's length on the H200 and this VM
  bool carry_ = false;
  unsigned batches_ = 0;
};

}  // namespace gmlake
