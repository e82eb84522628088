// libgmlake_bench_calls.so: the benchmarks' own calls into the engine, kept out of the shipped
// libraries (built next to threading_bench into build/lib; the wheel ships it not). It calls
// the embedding that libgmlake_torch_alloc.so's gmlake_start loaded (RTLD_GLOBAL), so load it
// in the same process after or before that start, and before any fork():
//   gmlake_ping(x)                 the bare round trip C++ -> JS -> C++ (kOpPing): x
//   gmlake_bench_js_pairs(n, s)    ns per alloc+free pair of bench/live-pair.mjs's loop, run
//                                  inside the embedded Node on stream s (kOpBenchPairs)
// Either is kStatusNotStarted before the engine started, and kStatusError in a child forked
// after this library was loaded (the engine's threads stayed in the parent).
#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "../native/embed.h"

#define GMLAKE_BENCH_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::atomic<bool> g_forked{false};

__attribute__((constructor)) void WatchForks() {
  pthread_atfork(nullptr, nullptr, [] { g_forked.store(true); });
}

double Call(int op, double a, double b, double c) {
  if (g_forked.load()) return kStatusError;
  // the embedding's entry point once libgmlake_torch_alloc.so loaded it (not looked up before)
  static std::atomic<gmlake_embed_call_fn> call{nullptr};
  gmlake_embed_call_fn fn = call.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = reinterpret_cast<gmlake_embed_call_fn>(dlsym(RTLD_DEFAULT, "gmlake_embed_call"));
    if (fn == nullptr) return kStatusNotStarted;
    call.store(fn, std::memory_order_release);
  }
  return fn(op, a, b, c);
}

}  // namespace

GMLAKE_BENCH_EXPORT double gmlake_ping(double x) { return Call(kOpPing, x, 0, 0); }

GMLAKE_BENCH_EXPORT double gmlake_bench_js_pairs(int pairs, void* stream) {
  return Call(kOpBenchPairs, pairs, 0, static_cast<double>(reinterpret_cast<uintptr_t>(stream)));
}
