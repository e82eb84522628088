// The free queue's take-back (GMLAKE_TAKEBACK, native/free_queue.h) on its own, no Node. Run by
// test/harness.py (case "free-queue"):
//   free_queue_test   -> exit 0 and one line per check, or exit 1 naming each that failed
// 1. a queued free of a block the engine handed out is taken back by an alloc of its size and
//    stream, out of the queue, counted (takebacks, bytes); never with another size, stream or
//    device, after record_stream, during a pool window, for an address never handed out, once
//    handed to the engine, nor with the take-back off
// 2. the newest matching free first (LIFO); the other frees stay queued, in order
// 3. a second free of a queued block, record_stream after the free, the engine handing the
//    address out again: the frees are the engine's, never taken back
// 4. answers worked out ahead: an alloc after a pair taken back still takes the answer (engine
//    and queue as they were), both allocations logged for the foresight; a foreseen block's
//    free taken back leaves the engine's allocation queued
// 4b. the allocations that took no answer, counted by why: none standing, one for another
//    request, frees queued after it; none counted with the foresight off
// 4c. a chain of answers (GMLAKE_AHEAD): taken in order, back to back; kept through kOpMakeAhead's
//    hand-over of nothing but takes, dropped by a free and by any other hand-over; the log says
//    which allocations came right after another
// 4d. the queue's length and its frees mirrored for the JS thread's spin loop (GMLAKE_DRAIN_US):
//    an allocation that took an answer counts in the length, not as a free; a take-back or a
//    hand-over lowers both; whether an answer stands
// 5. only the last kTakeBackScan takeable frees are looked at; close stops the take-back
// 6. the entries of frees the engine took are swept once there are many; the take-back goes on
#include <cstdio>
#include <string>
#include <vector>

#include "../native/free_queue.h"
#include "check.h"

namespace {

using gmlake::FreeQueue;
using gmlake::Req;
using gmlake_check::Check;
using gmlake_check::g_failed;

constexpr double kDevice = 0, kS = 0x5000;  // the device, a second stream
constexpr double MiB = 1 << 20;

// A queue as the embedding sets it up with the take-back on (device 0).
struct Queue {
  FreeQueue q;
  explicit Queue(bool takeBack = true, int foresight = 0) {
    q.Attach();
    q.SetDevice(kDevice);
    if (foresight > 0) q.EnableForesight(foresight);
    if (takeBack) q.EnableTakeBack();
  }
  // The address an alloc got without the engine, or 0.
  double Alloc(double size, double stream = 0, double device = kDevice) {
    double a = 0;
    return q.TakeAlloc(size, device, stream, &a) ? a : 0;
  }
  // The engine handed `addr` out (the call into JS did: Embedding::CallEngine).
  void Engine(double addr, double size, double stream = 0) { q.Allocated(addr, size, stream); }
  // What the engine gets at the next call: (address, size) of each entry, in order.
  std::vector<std::pair<double, double>> HandOver() {
    q.HandOver(false);
    std::vector<std::pair<double, double>> out;
    double* s = q.slots();
    for (int i = 0; i < s[kQueueFrees]; i++) out.push_back({s[kFreeQueueHeader + 3 * i], s[kFreeQueueHeader + 3 * i + 1]});
    s[kQueueFrees] = 0;  // the bridge's takeFrees
    return out;
  }
  double Slot(int k) {
    q.HandOver(false);
    return q.slots()[k];
  }
};

using Entries = std::vector<std::pair<double, double>>;

void TakesBack() {
  Queue t;
  t.Engine(0x1000, MiB);
  t.q.Free(0x1000, MiB, 0, false);
  Check(t.Alloc(MiB) == 0x1000, "an alloc of the size and stream takes the queued free back");
  Check(t.HandOver().empty(), "the pair never reaches the engine (the queue is empty again)");
  Check(t.Slot(kQueueTakebacks) == 1 && t.Slot(kQueueTakebackBytes) == MiB && t.Slot(kQueueTakebackOn) == 1,
        "counted: one take-back of 1 MiB, the take-back on");
  t.q.Free(0x1000, MiB, 0, false);
  Check(t.Alloc(MiB) == 0x1000, "a block taken back and freed again is taken back again");
  Check(t.Slot(kQueueTakebacks) == 2, "counted twice");

  struct Miss {
    const char* what;
    double size, stream, device;
  };
  for (const Miss& m : {Miss{"another size (1 byte more)", MiB + 1, 0, kDevice}, Miss{"another stream", MiB, kS, kDevice},
                        Miss{"another device", MiB, 0, 1}}) {
    Queue u;
    u.Engine(0x1000, MiB);
    u.q.Free(0x1000, MiB, 0, false);
    Check(u.Alloc(m.size, m.stream, m.device) == 0 && u.HandOver() == Entries{{0x1000, MiB}},
          std::string("missed with ") + m.what + ": the free stays queued for the engine");
  }
  {
    Queue u;
    u.Engine(0x1000, MiB);
    u.q.RecordStream(0x1000);
    u.q.Free(0x1000, MiB, 0, false);
    Check(u.Alloc(MiB) == 0, "missed: record_stream'ed (its free waits on the other stream's events)");
  }
  {
    Queue u;
    u.Engine(0x1000, MiB);
    u.q.Free(0x1000, MiB, 0, false, /*inPoolWindow=*/true);
    Check(u.Alloc(MiB) == 0 && u.HandOver() == Entries{{0x1000, MiB}}, "missed: freed while a pool window is open");
  }
  {
    Queue u;
    u.q.Free(0x2000, MiB, 0, false);  // a pool's block (kOpPoolAlloc never registers), or a stray address
    Check(u.Alloc(MiB) == 0, "missed: an address the engine's ordinary alloc did not hand out");
  }
  {
    Queue u;
    u.Engine(0x4000, MiB);
    u.q.Free(0x4000, 2 * MiB, 0, false);  // freed with another size than allocated
    Check(u.Alloc(2 * MiB) == 0 && u.Alloc(MiB) == 0, "missed: a free whose size is not the alloc's");
  }
  {
    Queue u;
    u.Engine(0x1000, MiB);
    u.q.Free(0x1000, MiB, 0, false);
    Check(u.HandOver() == Entries{{0x1000, MiB}} && u.Alloc(MiB) == 0, "missed: a free the engine took already");
    u.q.Free(0x1000, MiB, 0, false);  // its second free: the engine's
    Check(u.Alloc(MiB) == 0, "and its next free is the engine's (the block is no longer ours)");
  }
  {
    Queue u(/*takeBack=*/false);
    u.Engine(0x1000, MiB);
    u.q.Free(0x1000, MiB, 0, false);
    Check(!u.q.servesAllocs() && u.Alloc(MiB) == 0 && u.Slot(kQueueTakebackOn) == 0, "off: nothing taken back");
  }
}

void Lifo() {
  Queue t;
  for (double a : {0x1000, 0x2000, 0x3000}) t.Engine(a, MiB);
  t.Engine(0x4000, 2 * MiB);
  t.q.Free(0x1000, MiB, 0, false);
  t.q.Free(0x4000, 2 * MiB, 0, false);
  t.q.Free(0x2000, MiB, 0, false);
  t.q.Free(0x3000, MiB, 0, false);
  Check(t.Alloc(MiB) == 0x3000 && t.Alloc(MiB) == 0x2000, "the newest matching free first (LIFO)");
  Check(t.HandOver() == Entries{{0x1000, MiB}, {0x4000, 2 * MiB}}, "the others stay queued, in their order");
  Check(t.Alloc(MiB) == 0, "handed over: none left to take back");
}

void EngineDecides() {
  {
    Queue t;
    t.Engine(0x1000, MiB);
    t.q.Free(0x1000, MiB, 0, false);
    t.q.Free(0x1000, MiB, 0, false);
    Check(t.Alloc(MiB) == 0 && t.HandOver() == Entries{{0x1000, MiB}, {0x1000, MiB}},
          "a second free of a queued block: both go to the engine (which says so), none taken back");
  }
  {
    Queue t;
    t.Engine(0x1000, MiB);
    t.q.Free(0x1000, MiB, 0, false);
    t.q.RecordStream(0x1000);
    Check(t.Alloc(MiB) == 0, "record_stream after the free: the engine's to judge");
  }
  {
    Queue t;
    t.Engine(0x1000, MiB);
    t.q.Free(0x1000, MiB, 0, false);
    t.Engine(0x1000, MiB);  // handed out again while its free is queued: only a broken caller gets here
    Check(t.Alloc(MiB) == 0, "an address the engine handed out again: its queued free is not taken back");
  }
}

void WithForesight() {
  Queue t(true, 6);
  t.Engine(0x1000, MiB);
  t.q.Foresee(2 * MiB, 0, 0x8000);  // the JS thread: an alloc of 2 MiB lands at 0x8000 now
  t.q.Free(0x1000, MiB, 0, false);
  Check(t.Alloc(MiB) == 0x1000, "a pair taken back while an answer is worked out ahead");
  Check(t.Alloc(2 * MiB) == 0x8000, "the answer still taken after it (the engine and the queue as it was computed on)");
  std::vector<Req> learned;
  double made = 0, taken = 0;
  t.q.TakeLearned(&learned, &made, &taken);
  Check(learned.size() == 2 && learned[0].size == MiB && learned[1].size == 2 * MiB && taken == 1,
        "both allocations logged for the foresight, in order; one answer taken");
  t.q.Free(0x8000, 2 * MiB, 0, false);
  Check(t.Alloc(2 * MiB) == 0x8000, "a foreseen block's free taken back");
  Check(t.HandOver() == Entries{{0x8000, -2 * MiB}}, "the engine still makes the foreseen allocation, at its address");
}

void MissReasons() {
  Queue t(false, 6);
  auto misses = [&] { return std::vector<double>{t.Slot(kQueueSpecMissNone), t.Slot(kQueueSpecMissOther), t.Slot(kQueueSpecMissBehind)}; };
  Check(t.Alloc(MiB) == 0, "no answer worked out: the engine's");
  t.q.Foresee(2 * MiB, 0, 0x8000);
  Check(t.Alloc(MiB) == 0 && t.Alloc(2 * MiB, kS) == 0, "an answer for 2 MiB on stream 0: not for 1 MiB nor for stream kS");
  t.q.Free(0x1000, MiB, 0, false);
  Check(t.Alloc(2 * MiB) == 0, "a free queued after the answer: it may land elsewhere now");
  Check(misses() == std::vector<double>{1, 2, 1}, "the misses by why: none standing 1, another request 2, frees behind 1");
  Check(t.Slot(kQueueSpecMissNoneAfterFree) == 1, "the first, with no allocation before it, counts as after a free");
  t.q.Foresee(2 * MiB, 0, 0x8000);  // worked out again after the hand-over (Slot hands the queue over)
  Check(t.Alloc(2 * MiB) == 0x8000 && misses() == std::vector<double>{1, 2, 1}, "a hit counts no miss");
  Check(t.Alloc(2 * MiB) == 0 && misses()[0] == 2, "an answer is taken once: the next finds none standing");
  Check(t.Slot(kQueueSpecMissNoneAfterFree) == 1, "right after the allocation before it: not after a free");
  t.q.Free(0x8000, 2 * MiB, 0, false);
  t.HandOver();
  Check(t.Alloc(2 * MiB) == 0 && t.Slot(kQueueSpecMissNoneAfterFree) == 2, "after a free: counted so");
  Queue off(false, 0);
  off.Alloc(MiB);
  Check(off.Slot(kQueueSpecMissNone) == 0, "the foresight off: no miss counted");
}

// kQueueSpecMissNone's parts: each allocation that finds none is counted by what the JS thread
// last said it found since the engine changed; before it looks that is "late", or "after an
// answer" where the allocation before took the last answer standing.
void NoneByWhy() {
  using W = FreeQueue::NoAnswer;
  Queue t(false, 6);
  auto by = [&] {
    return std::vector<double>{t.Slot(kQueueSpecMissNoneLate), t.Slot(kQueueSpecMissNoneUnforeseen), t.Slot(kQueueSpecMissNoneDeclined),
                               t.Slot(kQueueSpecMissNoneThrottled), t.Slot(kQueueSpecMissNoneAfterAnswer)};
  };
  Check(t.Alloc(MiB) == 0 && by() == std::vector<double>{1, 0, 0, 0, 0}, "before the JS thread looked: late");
  t.q.Unanswered(W::kUnforeseen);
  Check(t.Alloc(MiB) == 0 && t.Alloc(MiB) == 0 && by() == std::vector<double>{1, 2, 0, 0, 0},
        "it foresaw nothing: both after it unforeseen (no hand-over between them)");
  t.q.Unanswered(W::kDeclined);
  Check(t.Alloc(MiB) == 0 && by() == std::vector<double>{1, 2, 1, 0, 0}, "the policy's peek had none: declined");
  t.q.Unanswered(W::kThrottled);
  t.q.HandOver(false);
  Check(t.Alloc(MiB) == 0 && by() == std::vector<double>{2, 2, 1, 0, 0}, "the engine changed since it looked: late again");
  t.q.Unanswered(W::kThrottled);
  Check(t.Alloc(MiB) == 0 && by() == std::vector<double>{2, 2, 1, 1, 0}, "the throttle passed the chance up: throttled");
  t.q.Foresee(2 * MiB, 0, 0x8000);
  t.q.Unanswered(W::kDeclined);  // ignored: an answer stands
  Check(t.Alloc(2 * MiB) == 0x8000 && t.Alloc(2 * MiB) == 0 && by() == std::vector<double>{2, 2, 1, 1, 1},
        "right after the answer was taken: after an answer, not what was said while it stood");
  t.q.Foresee(2 * MiB, 0, 0x8000);
  Check(t.Alloc(2 * MiB) == 0x8000, "taken");
  t.q.HandOver(false);  // the JS thread's drain of it: still nothing said
  Check(t.Alloc(2 * MiB) == 0 && t.Alloc(2 * MiB) == 0 && by() == std::vector<double>{3, 2, 1, 1, 2},
        "after an answer through the drain that makes it; the one after a miss: late");
  Check(t.Slot(kQueueSpecMissNone) == 9, "the five parts add up to none (9)");
}

void Chain() {
  Queue t(false, 6);
  t.q.Foresee(MiB, 0, 0x1000);
  Check(t.q.Foresee(2 * MiB, 0, 0x9000, 1) && !t.q.Foresee(MiB, 0, 0x5000, 3), "answers appended in order only (the 2nd after the 1st, never a gap)");
  Check(t.Alloc(2 * MiB) == 0, "the 2nd holds only once the 1st is taken");
  Check(t.Alloc(MiB) == 0x1000 && t.Alloc(2 * MiB) == 0x9000, "allocations back to back take one answer each, in order");
  Check(t.Alloc(MiB) == 0 && t.Slot(kQueueSpecMissNone) == 1, "then none stands");
  t.q.Foresee(MiB, 0, 0x1000);
  t.q.Foresee(2 * MiB, 0, 0x9000, 1);
  Check(t.Alloc(MiB) == 0x1000, "a new chain");
  t.q.HandOver(false, true);  // kOpMakeAhead's own: nothing but the take handed over
  Check(t.q.slots()[kQueueFrees] == 1 && t.q.slots()[kFreeQueueHeader + 1] == -MiB, "the take handed to the engine");
  t.q.slots()[kQueueFrees] = 0;
  Check(t.q.Foresee(4 * MiB, 0, 0xa000, 2), "the chain stands through kOpMakeAhead's hand-over, and grows");
  Check(t.Alloc(2 * MiB) == 0x9000, "its next answer is still taken");
  t.q.Free(0x1000, MiB, 0, false);
  Check(t.Alloc(4 * MiB) == 0 && t.Slot(kQueueSpecMissBehind) == 1, "a free queued after it: behind");
  Check(t.Alloc(4 * MiB) == 0 && t.Slot(kQueueSpecMissNone) == 2, "a hand-over with a free in it drops the chain");
  t.q.Foresee(MiB, 0, 0x1000);
  t.q.Foresee(2 * MiB, 0, 0x9000, 1);
  t.q.HandOver(false, false);  // any other call
  Check(t.Alloc(MiB) == 0 && !t.q.Foresee(4 * MiB, 0, 0xa000, 2), "any other call's hand-over drops it too");
  t.q.Foresee(MiB, 0, 0x1000);
  t.q.Free(0x2000, MiB, 0, false);
  t.q.HandOver(false, true);
  Check(!t.q.Foresee(2 * MiB, 0, 0x9000, 1), "kOpMakeAhead's hand-over of a free drops it");
  std::vector<Req> learned;
  double made = 0, taken = 0;
  t.Alloc(MiB);
  t.Alloc(MiB);
  t.q.Free(0x3000, MiB, 0, false);
  t.Alloc(MiB);
  t.q.TakeLearned(&learned, &made, &taken);
  size_t n = learned.size();
  Check(n >= 3 && learned[n - 2].direct && !learned[n - 1].direct, "an allocation right after another is logged direct, one after a free not");
}

void Pending() {
  Queue t(true, 6);
  t.q.MirrorPending();
  auto pending = [&] { return std::vector<uint32_t>{t.q.pending().load(), t.q.pendingFrees().load()}; };
  Check(!t.q.Standing(), "no answer stands at first");
  t.q.Foresee(MiB, 0, 0x1000);
  Check(t.q.Standing(), "a foreseen answer stands");
  Check(t.Alloc(MiB) == 0x1000 && !t.q.Standing(), "taken, it stands no more");
  Check(pending() == std::vector<uint32_t>{1, 0}, "the allocation that took it: queued, not a free");
  t.Engine(0x9000, 2 * MiB);
  t.q.Free(0x9000, 2 * MiB, 0, false);
  t.q.Free(0x1000, MiB, 0, false);
  Check(pending() == std::vector<uint32_t>{3, 2}, "two frees behind it");
  Check(t.Alloc(2 * MiB) == 0x9000 && pending() == std::vector<uint32_t>{2, 1}, "a free taken back: one entry and one free fewer");
  t.HandOver();
  Check(pending() == std::vector<uint32_t>{0, 0}, "handed over: none pending");
}

void ScanAndClose() {
  Queue t;
  for (int i = 0; i < 40; i++) t.Engine(0x100000 + i * 0x1000, 512 * (i + 1));
  for (int i = 0; i < 40; i++) t.q.Free(0x100000 + i * 0x1000, 512 * (i + 1), 0, false);
  Check(t.Alloc(512 * 1) == 0, "a free older than the last 32 takeable ones is not looked at");
  Check(t.Alloc(512 * 9) == 0x100000 + 8 * 0x1000, "the 32nd newest is");
  t.Engine(0x9000, MiB);
  t.q.Free(0x9000, MiB, 0, false);
  t.q.StopForeseeing();  // close
  Check(t.Alloc(MiB) == 0 && !t.q.servesAllocs() && t.HandOver().size() == 40, "after close nothing is taken back; every free goes to the engine");
  Queue full;
  int queued = 0;
  while (full.q.Free(0x1000 + queued * 0x1000, MiB, 0, false)) queued++;
  Check(queued == kFreeQueueSlots, "the queue refuses a free once it holds kFreeQueueSlots");
}

void Sweep() {
  Queue t;
  for (int i = 0; i < 100000; i++) {  // blocks the engine handed out once, freed, taken by the engine
    double a = 0x100000 + i * 4096.0;
    t.Engine(a, 4096);
    t.q.Free(a, 4096, 0, false);
    t.HandOver();
  }
  size_t n = t.q.liveEntries();
  Check(n < 70000, "the entries of frees the engine took are swept (" + std::to_string(n) + " of 100000 left)");
  t.Engine(0x1000, MiB);
  t.q.Free(0x1000, MiB, 0, false);
  Check(t.Alloc(MiB) == 0x1000, "and the take-back goes on after a sweep");
  t.q.Free(0x100000, 4096, 0, false);  // a block whose free the engine took, never handed out again through the engine's alloc
  Check(t.Alloc(4096) == 0, "a free of a swept block is the engine's");
}

}  // namespace

int main() {
  TakesBack();
  Lifo();
  EngineDecides();
  WithForesight();
  MissReasons();
  NoneByWhy();
  Chain();
  Pending();
  ScanAndClose();
  Sweep();
  if (g_failed == 0) std::printf("free_queue_test: all checks passed\n");
  return g_failed == 0 ? 0 : 1;
}
