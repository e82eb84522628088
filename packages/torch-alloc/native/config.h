// The one reader of the environment in the native libraries: each variable read once,
// validated, and refused with a message that names it (a value is never quietly read as 0).
// Plain C++, compiled into both libraries.
#pragma once

#include <string>
#include <vector>

#include "foresight.h"  // kAheadMax, kAheadDefault

namespace gmlake {

// What libgmlake_embed.so takes from the environment at gmlake_embed_start.
struct EmbedConfig {
  // GMLAKE_SPIN_US: how long either side of the hand-off spins before it sleeps. 1 ms, longer than the gaps
  // between a training step's calls (with 50 us the JS thread slept between them and every
  // wake-up was paid: +4-6% of step on the H200, docs/notebook/2026-12-01-live-runs.md, runs 14 to 16).
  double spinUs = 1000;
  // GMLAKE_DRAIN_US (one JS thread only; a number of us, 2 by default; "auto": learned,
  // drain_tuner.h; "off": off): while that thread waits for a request it hands frees queued
  // for this long to the engine itself.
  double drainUs = -1;
  bool drainAuto = false;
  // GMLAKE_SPECULATE=K (one JS thread only; 0: off); asked: set, so a start that cannot have it is refused, not quietly off
  int speculate = 0;
  bool speculateAsked = false;
  // GMLAKE_AHEAD=N (1 .. kAheadMax; default kAheadDefault): answers worked out ahead at once, each
  // after the ones before it are made (free_queue.h); 1: one at a time, as before
  int ahead = kAheadDefault;
  // GMLAKE_TAKEBACK=1 (default 0): an alloc takes back a queued free of its size and stream
  // (free_queue.h); off by default, as the engine would have placed some of those allocations elsewhere
  bool takeBack = false;
  // GMLAKE_TIME_CALLS: =1 the embedding's parts too, =total the library's whole-call timer only
  bool timeParts = false;
  bool timeWhole = false;
  // GMLAKE_NODE_FLAGS: our Node's own flags (e.g. V8's --prof to profile the policy in place),
  // as given (for messages) and split; NODE_OPTIONS stays off (the training job's settings are not ours)
  std::string nodeFlagsText;
  std::vector<std::string> nodeFlags;
};

// Reads EmbedConfig for `threading` (embed.h GmlakeThreading). False with err set on a bad value.
bool ReadEmbedConfig(int threading, EmbedConfig* out, std::string* err);

// GMLAKE_LIBNODE_DIR (libgmlake_torch_alloc.so's gmlake_start): the folder that holds
// libnode.so.108, or `fallback` when unset.
std::string ReadLibnodeDir(const std::string& fallback);

}  // namespace gmlake
