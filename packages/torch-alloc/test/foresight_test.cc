// GMLAKE_SPECULATE's predictor on its own (native/foresight.h, no Node). Run by
// test/harness.py (case "foresight"):
//   foresight_test   -> exit 0 and one line per check, or exit 1 naming each that failed
// 1. a repeating pattern is foreseen at every step once learned; nothing before it is
// 2. the context K: a follower that depends on the allocation K+1 back is missed with K and
//    foreseen with K+1; the history never reaches further back than K
// 3. size and stream both make the context
// 4. a collision in the direct-mapped table (two contexts, one slot): the later overwrites,
//    and the earlier is then a miss, never the other's answer
// 1b. the allocations after the next, as if the foreseen ones had come (GMLAKE_AHEAD)
// 5. the peek throttle: 1 chance in 16 while few answers were taken, every chance otherwise
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "../native/foresight.h"
#include "check.h"

namespace {

using gmlake::Foresight;
using gmlake::PeekThrottle;
using gmlake::Req;
using gmlake_check::Check;
using gmlake_check::g_failed;

Req R(double size, double stream = 0) { return {size, stream}; }

bool Same(const Req& a, const Req& b) { return a.size == b.size && a.stream == b.stream; }

// Whether f foresees `want` next.
bool Foresees(const Foresight& f, const Req& want) {
  Req got{-1, -1};
  return f.Foresee(&got) && Same(got, want);
}

void RepeatingPattern() {
  const std::vector<Req> cycle = {R(512), R(4096), R(1 << 20), R(512, 0x5000), R(3 << 20)};
  Foresight f;
  f.Configure(2);
  Req none;
  Check(!f.Foresee(&none), "nothing foreseen before anything was learned");
  for (int rep = 0; rep < 2; rep++) {
    for (const Req& r : cycle) f.Learn(r);
  }
  int right = 0;
  for (int rep = 0; rep < 3; rep++) {
    for (size_t i = 0; i < cycle.size(); i++) {
      right += Foresees(f, cycle[i]) ? 1 : 0;
      f.Learn(cycle[i]);
    }
  }
  Check(right == 3 * static_cast<int>(cycle.size()),
        "a 5-allocation cycle is foreseen at every step once learned (" + std::to_string(right) + "/15)");
  // GMLAKE_AHEAD: the next ones as if the foreseen had come, as far as the chain goes
  Req chain[3] = {cycle[0], cycle[1], cycle[2]};
  Req got{-1, -1};
  Check(f.ForeseeAfter(chain, 1, &got) && Same(got, cycle[1]) && f.ForeseeAfter(chain, 3, &got) && Same(got, cycle[3]),
        "after the foreseen 1 and 3 of the cycle: its 2nd and its 4th");
  Check(f.ForeseeAfter(nullptr, 0, &got) && Same(got, cycle[0]), "after none: what Foresee says");
  // whether a free came in between is part of the context: bursts of 2 of one size, then frees
  Foresight b;
  b.Configure(2);
  Req a{512, 0, false}, a2{512, 0, true}, c{4096, 0, false};
  for (int rep = 0; rep < 3; rep++) {
    b.Learn(a);
    b.Learn(a2);
    b.Learn(c);
  }
  Req after[1] = {a};
  Check(b.ForeseeAfter(after, 1, &got) && Same(got, a2) && got.direct, "after a burst's first, its second, right after it");
  Req after2[2] = {a, a2};
  Check(b.ForeseeAfter(after2, 2, &got) && Same(got, c) && !got.direct, "after the second (same size, no free between): the next after a free");
  Foresight unconfigured;
  unconfigured.Learn(R(512));
  unconfigured.Learn(R(4096));
  unconfigured.Learn(R(512));
  Check(!unconfigured.Foresee(&none), "a predictor with no context (off) learns and foresees nothing");
}

// X A B P, Y A B Q, again and again: after A B, P or Q depends on the allocation 3 back.
int RightAfterAB(int context) {
  Foresight f;
  f.Configure(context);
  const Req X = R(1 << 10), Y = R(1 << 11), A = R(1 << 12), B = R(1 << 13), P = R(1 << 14), Q = R(1 << 15);
  int right = 0;
  for (int rep = 0; rep < 6; rep++) {
    for (const Req& first : {X, Y}) {
      f.Learn(first);
      f.Learn(A);
      f.Learn(B);
      const Req& next = Same(first, X) ? P : Q;
      if (rep >= 2) right += Foresees(f, next) ? 1 : 0;  // learned twice by then
      f.Learn(next);
    }
  }
  return right;  // of 8
}

void ContextLimit() {
  int k2 = RightAfterAB(2), k3 = RightAfterAB(3);
  Check(k2 == 0, "K=2 looks no further back than 2: after X A B / Y A B it foresees the last follower, wrong every time (" +
                     std::to_string(k2) + "/8 right)");
  Check(k3 == 8, "K=3 tells X A B from Y A B (" + std::to_string(k3) + "/8 right)");
  Foresight f;
  f.Configure(gmlake::kSpecMaxContext + 5);
  Check(f.context() == gmlake::kSpecMaxContext, "a context above kSpecMaxContext is kSpecMaxContext");
  f.Configure(0);
  Check(f.context() == 0, "a context of 0 is off");
}

void StreamsCount() {
  Foresight f;
  f.Configure(1);
  const Req s0 = R(512, 0), s1 = R(512, 0x5000);
  for (int rep = 0; rep < 3; rep++) {
    f.Learn(s0);
    f.Learn(R(1024));
    f.Learn(s1);
    f.Learn(R(2048));
  }
  f.Learn(s0);
  bool first = Foresees(f, R(1024));
  f.Learn(R(1024));
  f.Learn(s1);
  Check(first && Foresees(f, R(2048)), "one size on two streams: two contexts, each with its own follower");
}

void Collision() {
  // two one-allocation contexts whose tags differ and pick the same slot
  std::unordered_map<uint64_t, double> bySlot;
  double c1 = 0, c2 = 0;
  for (int i = 1; i < 1000000 && c2 == 0; i++) {
    Req r = R(512.0 * i);
    uint64_t tag = Foresight::ContextTag(&r, 1, 1);
    auto [it, fresh] = bySlot.emplace(tag & (Foresight::kSlots - 1), r.size);
    if (!fresh) c1 = it->second, c2 = r.size;
  }
  Check(c2 != 0, "two contexts that share a slot exist among the first sizes");
  const Req n1 = R(7), n2 = R(9), d = R(11);
  Foresight control;
  control.Configure(1);
  for (const Req& r : {R(c1), n1, d, n2, R(c1)}) control.Learn(r);
  Check(Foresees(control, n1), "without the collision, c1 is followed by n1 again");
  Foresight f;
  f.Configure(1);
  for (const Req& r : {R(c1), n1, R(c2), n2, R(c1)}) f.Learn(r);
  Req got{-1, -1};
  bool hit = f.Foresee(&got);
  Check(!hit, "c2 took c1's slot: after c1 nothing is foreseen (a miss, not c2's n2)" +
                  std::string(hit ? ", foresaw size " + std::to_string(got.size) : ""));
  Foresight g;
  g.Configure(1);
  for (const Req& r : {R(c1), n1, R(c2), n2, R(c2)}) g.Learn(r);
  Check(Foresees(g, n2), "c2's own answer stands in the slot");
}

void Tags() {
  const Req hist[3] = {R(512), R(4096), R(512, 0x5000)};
  bool odd = true;
  for (int k = 1; k <= 3; k++) odd = odd && (Foresight::ContextTag(hist, 3, k) & 1) == 1;
  Check(odd, "every tag is odd (0 marks an empty slot)");
  Check(Foresight::ContextTag(hist, 3, 1) != Foresight::ContextTag(hist, 3, 2) &&
            Foresight::ContextTag(hist, 3, 2) != Foresight::ContextTag(hist, 3, 3),
        "the last 1, 2 and 3 allocations are three tags");
  const Req one[1] = {R(512, 0x5000)};
  Check(Foresight::ContextTag(hist, 3, 1) == Foresight::ContextTag(one, 1, 1), "a tag is of the last k only");
}

int Allowed(PeekThrottle* t, int chances) {
  int n = 0;
  for (int i = 0; i < chances; i++) n += t->Allow() ? 1 : 0;
  return n;
}

void Throttle() {
  PeekThrottle t;
  Check(Allowed(&t, 32) == 32, "before any window closed, every chance is taken");
  t.Observe(256, 0);
  int n = Allowed(&t, 1600);
  Check(n > 60 && n < 140, "256 answers made, none taken: about 1 chance in 16 (" + std::to_string(n) + " of 1600)");
  // two kinds of chance taking turns (after a call, after a drain): both get peeks
  int even = 0, odd = 0;
  for (int i = 0; i < 1600; i++) {
    if (t.Allow()) (i % 2 ? odd : even) += 1;
  }
  Check(even > 20 && odd > 20, "throttled, both of two alternating kinds of chance peek (" + std::to_string(even) + ", " + std::to_string(odd) + ")");
  t.Observe(270, 1);
  Check(Allowed(&t, 1600) < 140, "throttled: 14 more made, no new window before 16");
  t.Observe(272, 1);
  Check(Allowed(&t, 1600) < 140, "16 made throttled, 1 taken (under 1 in 8): still about 1 chance in 16");
  t.Observe(288, 12);
  Check(Allowed(&t, 32) == 32, "the next 16 made, 11 taken (1 in 8 or more): every chance again");
  t.Observe(400, 30);
  Check(Allowed(&t, 32) == 32, "unthrottled, no new window before 256 more are made");
  t.Observe(544, 40);
  Check(Allowed(&t, 1600) < 140, "the next 256 made, 28 taken (under 1 in 8): about 1 in 16 again");
}

}  // namespace

int main() {
  RepeatingPattern();
  ContextLimit();
  StreamsCount();
  Collision();
  Tags();
  Throttle();
  if (g_failed != 0) std::printf("%d check(s) failed\n", g_failed);
  return g_failed == 0 ? 0 : 1;
}
