// The predictor behind GMLAKE_SPECULATE (foresight.h).
#include "foresight.h"

#include <cstring>

namespace gmlake {

namespace {
uint64_t MixIn(uint64_t h, double x) {
  uint64_t v;
  std::memcpy(&v, &x, sizeof v);
  return (h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2))) * 0xff51afd7ed558ccdull;
}
}  // namespace

uint64_t Foresight::ContextTag(const Req* hist, int len, int k) {
  uint64_t h = static_cast<uint64_t>(k);
  for (int i = len - k; i < len; i++) h = MixIn(MixIn(h, hist[i].size), hist[i].direct ? -hist[i].stream - 1 : hist[i].stream);
  // the table takes the low bits, which the products above barely move (sizes differ in high bits)
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  return h | 1;
}

void Foresight::Configure(int context) {
  context_ = context < 1 ? 0 : context > kSpecMaxContext ? kSpecMaxContext : context;
  histLen_ = 0;
  table_.assign(kSlots, Slot{0, {0, 0}});
}

void Foresight::Learn(const Req& r) {
  if (context_ == 0) return;
  for (int k = 1; k <= histLen_; k++) {
    uint64_t t = ContextTag(hist_, histLen_, k);
    table_[t & (kSlots - 1)] = {t, r};
  }
  if (histLen_ == context_) {
    std::memmove(hist_, hist_ + 1, sizeof(Req) * static_cast<size_t>(histLen_ - 1));
    histLen_--;
  }
  hist_[histLen_++] = r;
}

bool Foresight::Foresee(Req* out) const { return Lookup(hist_, histLen_, out); }

bool Foresight::ForeseeAfter(const Req* extra, int n, Req* out) const {
  // the last context_ of the history followed by `extra`
  Req h[kSpecMaxContext + kAheadMax];
  int len = 0;
  for (int i = 0; i < histLen_; i++) h[len++] = hist_[i];
  for (int i = 0; i < n && i < kAheadMax; i++) h[len++] = extra[i];
  int hl = len > context_ ? context_ : len;
  return Lookup(h + (len - hl), hl, out);
}

bool Foresight::Lookup(const Req* hist, int hl, Req* out) const {
  for (int k = hl; k >= 1; k--) {
    uint64_t t = ContextTag(hist, hl, k);
    const Slot& sl = table_[t & (kSlots - 1)];
    if (sl.tag == t) {
      *out = sl.next;
      return true;
    }
  }
  return false;
}

void PeekThrottle::Observe(double made, double taken) {
  // throttled, answers are made 16 times more slowly: a window of 16 spans as many chances
  // (~256) as one of 256 does unthrottled, so a pattern that comes back is seen as soon
  if (made - windowMade_ >= (few_ ? 16 : 256)) {
    few_ = (taken - windowTaken_) < (made - windowMade_) / divisor_;
    windowMade_ = made;
    windowTaken_ = taken;
  }
}

bool PeekThrottle::Allow() {
  if (!few_) return true;
  draw_ ^= draw_ << 13;
  draw_ ^= draw_ >> 17;
  draw_ ^= draw_ << 5;
  return (draw_ >> 28) == 0;  // 1 in 16, from the draw's high bits
}

}  // namespace gmlake
