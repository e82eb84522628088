// GMLAKE_TIME_CALLS's parts of a call inside the embedding (timing.h).
#include "timing.h"

namespace gmlake {

int CallParts::Read(double* out) const {
  if (whole_) return 2;
  if (!parts_) return 0;
  for (int k = 0; k < 3; k++) out[k] = static_cast<double>(ns_[k].load(std::memory_order_relaxed));
  out[3] = static_cast<double>(calls_.load(std::memory_order_relaxed));
  return 1;
}

}  // namespace gmlake
