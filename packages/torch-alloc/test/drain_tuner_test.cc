// GMLAKE_DRAIN_US=auto's choice (native/drain_tuner.h) on its own, no Node. Run by
// test/harness.py (case "drain-tuner"):
//   drain_tuner_test   -> exit 0 and one line per check, or exit 1 naming each that failed
// 1. a number is kept as it is; learned, frees are handed over once they stop coming, unless no
//    answer is worked out at a drain
// 2. requests posted during the drains' turns make it hold the frees (kCarryUs), and one batch
//    in kProbeEvery is still handed over at once; turns that end before the next request
//    bring it back, not one sample at a time
// 3. a request before the drain counts as too soon when it came within a turn of the last free
// 4. the turn's length: cut-short turns are not counted, a long one counts 4 x the mean at most
#include <cstdio>

#include "../native/drain_tuner.h"
#include "check.h"

namespace {

using gmlake::DrainTuner;
using gmlake_check::Check;
using gmlake_check::g_failed;

void Fixed() {
  DrainTuner t(20);
  Check(!t.learning() && t.WaitUs() == 20 && t.NextWaitUs() == 20, "GMLAKE_DRAIN_US=20: 20 us, not learned");
  for (int i = 0; i < 100; i++) t.Drained(1, true);
  Check(t.WaitUs() == 20, "whatever happens");
  DrainTuner l;
  Check(l.learning() && l.WaitUs() == DrainTuner::kQuietUs, "learned: at first once the frees stop coming");
  Check(l.NextWaitUs(false) == DrainTuner::kCarryUs && l.WaitUs(false) == DrainTuner::kCarryUs,
        "with no answer worked out at a drain (GMLAKE_SPECULATE=0), 2 us: an early drain gains nothing");
}

void Flips() {
  DrainTuner t;
  for (int i = 0; i < 10; i++) t.Drained(1, true);
  Check(t.WaitUs() == DrainTuner::kQuietUs, "a few requests in a turn do not flip it");
  for (int i = 0; i < 60; i++) t.Drained(1, true);
  Check(t.WaitUs() == DrainTuner::kCarryUs, "most requests came during the turn: the frees are held for them");
  int probes = 0;
  for (unsigned i = 0; i < 4 * DrainTuner::kProbeEvery; i++) probes += t.NextWaitUs() < DrainTuner::kCarryUs ? 1 : 0;
  Check(probes == 4, "held, 1 batch in kProbeEvery is still handed over at once (" + std::to_string(probes) + " of " +
                         std::to_string(4 * DrainTuner::kProbeEvery) + ")");
  for (int i = 0; i < 5; i++) t.Drained(1, false);
  Check(t.WaitUs() == DrainTuner::kCarryUs, "a few turns with no request do not flip it back");
  for (int i = 0; i < 60; i++) t.Drained(1, false);
  Check(t.WaitUs() == DrainTuner::kQuietUs && t.NextWaitUs() == DrainTuner::kQuietUs, "most turns end before the request: at once again");
}

void Carried() {
  DrainTuner t;
  for (int i = 0; i < 40; i++) t.Drained(0.6, false);
  for (int i = 0; i < 100; i++) t.Carried(0.5);
  Check(t.WaitUs() == DrainTuner::kCarryUs, "requests 0.5 us after the last free, a turn 0.6 us: too soon, held");
  for (int i = 0; i < 100; i++) t.Carried(1.5);
  Check(t.WaitUs() == DrainTuner::kQuietUs, "1.5 us after it: later than the quiet wait and a turn, at once");
}

void Turn() {
  DrainTuner t;
  for (int i = 0; i < 200; i++) t.Drained(0.5, false);
  Check(t.turnUs() > 0.49 && t.turnUs() < 0.51, "the turn's mean follows its turns");
  for (int i = 0; i < 200; i++) t.Drained(0.01, true);
  Check(t.turnUs() > 0.49 && t.turnUs() < 0.51, "turns cut short by a request are not counted");
  t.Drained(1000, false);
  Check(t.turnUs() < 0.7, "a turn with a garbage collection counts 4 x the mean at most (" + std::to_string(t.turnUs()) + ")");
}

}  // namespace

int main() {
  Fixed();
  Flips();
  Carried();
  Turn();
  if (g_failed == 0) std::printf("drain_tuner_test: all checks passed\n");
  return g_failed == 0 ? 0 : 1;
}
