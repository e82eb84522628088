// The one place the native libraries read the environment (config.h).
#include "config.h"

#include <cstdlib>
#include <cstring>

#include "embed.h"      // GmlakeThreading
#include "foresight.h"  // kSpecMaxContext

namespace gmlake {

namespace {

// microseconds, a number >= 0: anything else is refused, not read as 0
std::string Micros(const char* name, double* out) {
  const char* s = std::getenv(name);
  if (s == nullptr) return "";
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (*s == '\0' || *end != '\0' || !(v >= 0) || v > 1e9) return std::string(name) + " takes microseconds (a number >= 0), not '" + s + "'";
  *out = v;
  return "";
}

// GMLAKE_NODE_FLAGS split at blanks; every word a flag (beginning with --).
bool NodeFlags(EmbedConfig* out, std::string* err) {
  const char* f = std::getenv("GMLAKE_NODE_FLAGS");
  if (f == nullptr) return true;
  out->nodeFlagsText = f;
  std::string w;
  for (const char* c = f;; ++c) {
    if (*c != '\0' && *c != ' ' && *c != '\t') {
      w += *c;
      continue;
    }
    if (!w.empty() && w.rfind("--", 0) != 0) {
      *err = "GMLAKE_NODE_FLAGS takes flags only (each beginning with --), not '" + w + "'";
      return false;
    }
    if (!w.empty()) out->nodeFlags.push_back(w);
    w.clear();
    if (*c == '\0') break;
  }
  return true;
}

}  // namespace

bool ReadEmbedConfig(int threading, EmbedConfig* out, std::string* err) {
  std::string bad = Micros("GMLAKE_SPIN_US", &out->spinUs);
  if (!bad.empty()) return *err = bad, false;
  const char* drain = std::getenv("GMLAKE_DRAIN_US");
  bool drainOff = drain != nullptr && std::strcmp(drain, "off") == 0;
  if (drain != nullptr && !drainOff && threading != kThreadingThread) {
    *err = "GMLAKE_DRAIN_US needs GMLAKE_THREADING=thread: with a Locker per call no thread waits to hand frees over";
    return false;
  }
  if (const char* k = std::getenv("GMLAKE_SPECULATE")) {
    char* end = nullptr;
    long v = std::strtol(k, &end, 10);
    if (*k == '\0' || *end != '\0' || v < 0 || v > kSpecMaxContext) {
      *err = std::string("GMLAKE_SPECULATE takes how many allocations the foresight looks back on, 0 (off) to ") +
             std::to_string(kSpecMaxContext) + ", not '" + k + "'";
      return false;
    }
    if (v > 0 && threading != kThreadingThread) {
      *err = "GMLAKE_SPECULATE needs GMLAKE_THREADING=thread: only a waiting JS thread works answers out ahead";
      return false;
    }
    out->speculate = static_cast<int>(v);
    out->speculateAsked = true;
  }
  if (const char* k = std::getenv("GMLAKE_AHEAD")) {
    char* end = nullptr;
    long v = std::strtol(k, &end, 10);
    if (*k == '\0' || *end != '\0' || v < 1 || v > kAheadMax) {
      *err = std::string("GMLAKE_AHEAD takes how many answers are worked out ahead at once, 1 to ") + std::to_string(kAheadMax) + ", not '" + k + "'";
      return false;
    }
    out->ahead = static_cast<int>(v);
  }
  if (const char* t = std::getenv("GMLAKE_TAKEBACK")) {
    if (std::strcmp(t, "0") != 0 && std::strcmp(t, "1") != 0) {
      *err = std::string("GMLAKE_TAKEBACK takes 0 (off) or 1 (an allocation takes back a queued free of its size and stream), not '") + t + "'";
      return false;
    }
    out->takeBack = *t == '1';
  }
  if (threading == kThreadingThread && !drainOff) {
    // the default with one JS thread: 2 us, so that an allocation within that of a free takes
    // the frees along in its own call (H200, docs/notebook/2026-12-01-live-runs.md, runs 31 to 33:
    // a hot loop's pair 3.20 -> 2.58 us at 2 us, training's host time as at 0 us). `auto`
    // (drain_tuner.h) helped allocations 1-4 us after a free on the CPU but moved nothing on the
    // GPU: the compiled GPT-2's misses are not after frees (docs/notebook/2026-12-07-drain-after-free.md).
    if (drain == nullptr) {
      out->drainUs = 2;
    } else if (std::strcmp(drain, "auto") == 0) {
      out->drainAuto = true;
    } else {
      bad = Micros("GMLAKE_DRAIN_US", &out->drainUs);
      if (!bad.empty()) return *err = bad + " (or auto, or off)", false;
    }
  }
  // "total": only the library's whole-call timer (two clock reads a call, as the plug's for
  // PyTorch's own allocator), not these parts (four more reads on every call into JS)
  if (const char* s = std::getenv("GMLAKE_TIME_CALLS")) {
    out->timeWhole = std::strcmp(s, "total") == 0;
    out->timeParts = *s != '\0' && std::strcmp(s, "0") != 0 && !out->timeWhole;
  }
  return NodeFlags(out, err);
}

std::string ReadLibnodeDir(const std::string& fallback) {
  const char* dir = std::getenv("GMLAKE_LIBNODE_DIR");
  return dir != nullptr ? dir : fallback;
}

}  // namespace gmlake
