// The C ABI between the allocator entry points (torch_alloc.cc, loaded by PyTorch, which
// links nothing of Node) and the Node embedding (embed_abi.cc, libgmlake_embed.so, which links
// Debian's libnode.so.108). torch_alloc.cc dlopens the embedding on gmlake_start(), so a
// missing or broken libnode is an error message, never a failed load of the allocator.
#pragma once

#include <cstddef>

#include "contract.h"  // the numbers TypeScript shares (src/ops.ts, checked by test/contract.test.ts)

extern "C" {

// How callers reach the one V8 isolate.
enum GmlakeThreading {
  kThreadingLocker = 0,  // the calling thread takes a v8::Locker for each call
  kThreadingThread = 1,  // one JS thread; callers hand requests over (spin, then futex)
};

// Starts Node once (flags: no signal handlers, no stdio setup, no inspector), loads
// `boot` (a CommonJS file: module.exports = async (configJson) => ({ call, text })) and
// waits for it. Returns 0, or -1 with a message in err.
typedef int (*gmlake_embed_start_fn)(const char* boot, const char* config_json, int threading, char* err, size_t errlen);
typedef double (*gmlake_embed_call_fn)(int op, double a, double b, double c);
typedef char* (*gmlake_embed_text_fn)(int op, const char* arg);
// GMLAKE_TIME_CALLS, parsed by this library only (config.cc): 0 off, 1 the parts too (out[0..3]), 2 =total (out untouched).
typedef int (*gmlake_embed_times_fn)(double* out);

// The only symbols libgmlake_embed.so exports (it builds with -fvisibility=hidden).
#define GMLAKE_EMBED_EXPORT __attribute__((visibility("default")))
GMLAKE_EMBED_EXPORT int gmlake_embed_start(const char* boot, const char* config_json, int threading, char* err, size_t errlen);
GMLAKE_EMBED_EXPORT double gmlake_embed_call(int op, double a, double b, double c);
GMLAKE_EMBED_EXPORT char* gmlake_embed_text(int op, const char* arg);
GMLAKE_EMBED_EXPORT int gmlake_embed_times(double* out);
}
