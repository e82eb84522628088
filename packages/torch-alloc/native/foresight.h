// GMLAKE_SPECULATE's predictor: which allocation follows the last K ones (the same size and
// stream that followed them the last time). Plain C++, no Node: the JS thread learns the
// allocations callers made and asks it for the next (embedding.cc), test/foresight_test.cc
// checks it on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gmlake {

// One allocation request as the predictor sees it.
struct Req {
  double size, stream;
  // no free came between it and the allocation before it (a burst's): only then is it worth
  // making the one before ahead (GMLAKE_AHEAD), as a free in between drops the answers standing
  bool direct = false;
};

// The most allocations the foresight looks back on (GMLAKE_SPECULATE's upper bound).
constexpr int kSpecMaxContext = 8;
// The default with one JS thread (H200, BENCHMARKS.md "Host time per step (runs 31 to 33)": vms's host time in
// alloc+free fell to or below PyTorch expandable_segments' own on lora, fsdp and gpt2_ft).
constexpr int kSpecDefault = 6;
// Answers worked out ahead at once (GMLAKE_AHEAD): each after the ones before it are made, so
// that a burst of allocations finds one standing for each, not only the first. Default 1 (one at
// a time): on the compiled GPT-2 (H100, docs/notebook/2026-12-07-answers-in-chains.md) 4 took the
// share answered ahead only from 68% to 70-76% and no step time was gained.
constexpr int kAheadMax = 8;
constexpr int kAheadDefault = 1;

// Which allocation followed the last k ones (k = K .. 1), in a direct-mapped table (a
// collision only makes a wrong guess, which the caller's exact match turns into a miss),
// and the last K allocations.
class Foresight {
 public:
  static constexpr size_t kSlots = size_t{1} << 16;

  // Looks back on `context` allocations (1 .. kSpecMaxContext); the table is allocated here.
  void Configure(int context);
  int context() const { return context_; }
  // One allocation made, in the order callers made them.
  void Learn(const Req& r);
  // The allocation that followed the longest context seen before that matches the last ones.
  bool Foresee(Req* out) const;
  // The same, as if `n` more allocations (`extra`, n <= kAheadMax) had followed the last ones.
  bool ForeseeAfter(const Req* extra, int n, Req* out) const;

  // The tag of the last k of `hist` (never 0, which marks an empty slot); its low bits pick the slot.
  static uint64_t ContextTag(const Req* hist, int len, int k);

 private:
  // What followed the longest context of the last `hl` of `hist` seen before.
  bool Lookup(const Req* hist, int hl, Req* out) const;
  struct Slot {
    uint64_t tag;  // 0: empty
    Req next;
  };
  std::vector<Slot> table_;
  Req hist_[kSpecMaxContext];
  int histLen_ = 0;
  int context_ = 0;
};

// While callers take few answers (under 1 in 8 of the last 256 made: no pattern to foresee,
// or no gap between calls, as in a hot loop), the JS thread peeks at 1 in 16 chances only,
// and looks again after 16 answers made (about as many chances as 256 unthrottled). Which
// chances is drawn at random: the JS thread gets two chances per allocation (after the call,
// after the drain of its free), and every 16th of them was always the first kind, whose
// answer the drain then voids, so a throttled job never took one again (bench/threading_bench.cc,
// burst_after_hot).
class PeekThrottle {
 public:
  // few: under 1 in `divisor` of the answers made taken (8 for peeks; making ahead, which costs
  // an allocation and its undo, is throttled under 1 in 2)
  explicit PeekThrottle(double divisor = 8) : divisor_(divisor) {}
  // The answers made and taken so far: a window of 256 made closes and says whether few were taken.
  void Observe(double made, double taken);
  // Whether this chance to peek is taken.
  bool Allow();

 private:
  double divisor_;
  double windowMade_ = 0, windowTaken_ = 0;
  bool few_ = false;
  uint32_t draw_ = 0x9e3779b9u;  // xorshift32's state (never 0)
};

}  // namespace gmlake
