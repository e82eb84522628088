// libgmlake_embed.so's C entry points (embed.h), which libgmlake_torch_alloc.so finds with
// dlsym: the routing of each call between the free queue, the front cache, the take-back, the
// answers worked out ahead and the one call into JS (embedding.h).
#include <cstdio>
#include <cstring>
#include <string>

#include "embed.h"
#include "embedding.h"

using gmlake::Embedding;
using gmlake::g_embedding;

extern "C" int gmlake_embed_start(const char* boot, const char* config_json, int threading, char* err, size_t errlen) {
  std::string e;
  if (g_embedding.Start(boot, config_json, threading, &e)) return 0;
  std::snprintf(err, errlen, "%s", e.c_str());
  return -1;
}

extern "C" double gmlake_embed_call(int op, double a, double b, double c) {
  if (!g_embedding.started()) {
    Embedding::lastError = "gmlake allocator: not started";
    return kStatusNotStarted;
  }
  gmlake::FreeQueue& queue = g_embedding.queue();
  bool frontCache = queue.frontCacheEntries() != 0;
  if ((op == kOpFree || op == kOpFreeInPoolWindow) && queue.on()) {
    // full: hand the queue over now, as any call would, then queue this free
    while (!queue.Free(a, b, c, frontCache, op == kOpFreeInPoolWindow)) {
      double r = g_embedding.Dispatch(kOpFlush, 0, 0, 0);
      if (r < 0) return r;
    }
    return 0;
  }
  double served;  // a queued free taken back, or the answer worked out ahead
  if (op == kOpAlloc && queue.servesAllocs() && queue.TakeAlloc(a, b, c, &served)) return served;
  if (frontCache) {
    if (op == kOpAlloc) return g_embedding.AllocFrontCached(a, b, c);
    if (op == kOpEmptyCache) {
      queue.GiveBackHeld();
    } else if (op == kOpRecordStream) {
      queue.RecordStream(a);
    }
  } else if (op == kOpRecordStream && queue.takingBack()) {
    queue.RecordStream(a);
  }
  double r = g_embedding.Dispatch(op, a, b, c);
  // the block the engine handed out, known before its caller has it (so its free may be taken
  // back); registered by the caller, which frees it most often (no cache line of it to fetch then)
  if (op == kOpAlloc && r >= 0 && queue.takingBack()) queue.Allocated(r, a, c);
  return r;
}

/**
 * GMLAKE_TIME_CALLS=1: out[0..2] ns taking the isolate, preparing, in JS; out[3] calls; 1.
 * =total: 2 (the library times the whole calls only; out untouched). 0 when off.
 */
extern "C" int gmlake_embed_times(double* out) { return g_embedding.parts().Read(out); }

extern "C" char* gmlake_embed_text(int op, const char* arg) {
  if (op == kTextLastError) return strdup(Embedding::lastError.c_str());
  if (!g_embedding.started()) return strdup("gmlake allocator: not started");
  std::string a = arg != nullptr ? arg : "";
  gmlake::FreeQueue& queue = g_embedding.queue();
  // nothing is foreseen or taken back after close (the engine hands nothing out)
  if (op == kTextClose) queue.StopForeseeing();
  // statistics count, snapshots show and close frees what the engine has: the held blocks too
  if (op != kTextFreeErrors && queue.frontCacheEntries() != 0) queue.GiveBackHeld(op == kTextClose);
  return g_embedding.DispatchText(op, a);
}
