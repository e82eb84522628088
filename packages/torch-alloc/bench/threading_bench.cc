// Per-call latency of the allocator library as PyTorch calls it, for choosing the
// threading design (README "Threading", BENCHMARKS.md). Loads libgmlake_torch_alloc.so
// with dlopen (RTLD_LOCAL, as ctypes does), starts it with one design, then from T
// threads at once times each call on its own:
//   ping - the bare round trip C++ -> JS -> C++ (gmlake_ping)
//   pair - an alloc + free pair through the engine (a window of 64 live blocks per
//          thread, sizes 512 B to 8 MiB, each thread on its own stream)
// One design per process (Node starts once per process).
//   threading_bench LIB locker|thread [--threads T] [--calls N] [--policy P] [--driver host|sim]
// prints one JSON object: medians and p99 in microseconds.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using StartFn = int (*)(const char*, int);
using ErrFn = const char* (*)();
using PingFn = double (*)(double);
using TryAllocFn = int (*)(size_t, int, void*, void**);
using FreeFn = void (*)(void*, size_t, int, void*);

StartFn start;
ErrFn lastError;
PingFn ping;
TryAllocFn tryAlloc;
FreeFn freeFn;

struct Summary {
  double median, p99, mean;
};

Summary Summarize(std::vector<double>& xs) {
  std::sort(xs.begin(), xs.end());
  double sum = 0;
  for (double x : xs) sum += x;
  return {xs[xs.size() / 2], xs[std::min(xs.size() - 1, xs.size() * 99 / 100)], sum / xs.size()};
}

double Us(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

void PingThread(int calls, std::vector<double>* out) {
  out->reserve(calls);
  for (int i = 0; i < calls; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    double r = ping(i);
    auto t1 = std::chrono::steady_clock::now();
    if (r != i) {
      std::fprintf(stderr, "ping: expected %d, got %g (%s)\n", i, r, lastError());
      std::exit(1);
    }
    out->push_back(Us(t0, t1));
  }
}

void PairThread(int id, int calls, std::vector<double>* out) {
  out->reserve(calls);
  std::mt19937_64 rng(1234 + id);
  void* stream = reinterpret_cast<void*>(static_cast<uintptr_t>(id == 0 ? 0 : 0x1000 + id));
  struct Live {
    void* p;
    size_t size;
  };
  std::vector<Live> window;
  auto size = [&] { return static_cast<size_t>(512) << (rng() % 15); };  // 512 B .. 8 MiB
  for (int i = 0; i < 64; ++i) {
    Live l{nullptr, size()};
    if (tryAlloc(l.size, 0, stream, &l.p) != 0) {
      std::fprintf(stderr, "alloc failed: %s\n", lastError());
      std::exit(1);
    }
    window.push_back(l);
  }
  for (int i = 0; i < calls; ++i) {
    size_t k = rng() % window.size();
    Live l{nullptr, size()};
    auto t0 = std::chrono::steady_clock::now();
    int st = tryAlloc(l.size, 0, stream, &l.p);
    freeFn(window[k].p, window[k].size, 0, stream);
    auto t1 = std::chrono::steady_clock::now();
    if (st != 0) {
      std::fprintf(stderr, "alloc failed: %s\n", lastError());
      std::exit(1);
    }
    window[k] = l;
    out->push_back(Us(t0, t1));
  }
  for (const Live& l : window) freeFn(l.p, l.size, 0, stream);
}

template <class F>
Summary RunThreads(int threads, F body) {
  std::vector<std::vector<double>> per(threads);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) ts.emplace_back([&, t] { body(t, &per[t]); });
  for (auto& t : ts) t.join();
  std::vector<double> all;
  for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
  return Summarize(all);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || (std::strcmp(argv[2], "locker") != 0 && std::strcmp(argv[2], "thread") != 0)) {
    std::fprintf(stderr, "usage: threading_bench LIB locker|thread [--threads T] [--calls N] [--policy P] [--driver host|sim]\n");
    return 2;
  }
  int threads = 2, calls = 20000;
  std::string policy = "caching", driver = "sim";
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--threads") threads = std::atoi(argv[i + 1]);
    else if (k == "--calls") calls = std::atoi(argv[i + 1]);
    else if (k == "--policy") policy = argv[i + 1];
    else if (k == "--driver") driver = argv[i + 1];
    else {
      std::fprintf(stderr, "threading_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (threads < 1 || calls < 1) {
    std::fprintf(stderr, "threading_bench: --threads and --calls must be positive\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "threading_bench: %s\n", dlerror());
    return 1;
  }
  start = reinterpret_cast<StartFn>(dlsym(lib, "gmlake_start"));
  lastError = reinterpret_cast<ErrFn>(dlsym(lib, "gmlake_last_error"));
  ping = reinterpret_cast<PingFn>(dlsym(lib, "gmlake_ping"));
  tryAlloc = reinterpret_cast<TryAllocFn>(dlsym(lib, "gmlake_try_alloc"));
  freeFn = reinterpret_cast<FreeFn>(dlsym(lib, "gmlake_free"));
  std::string config = "{\"policy\":\"" + policy + "\",\"driver\":\"" + driver + "\",\"record\":false}";
  bool thread = std::strcmp(argv[2], "thread") == 0;
  auto t0 = std::chrono::steady_clock::now();
  if (start(config.c_str(), thread ? 1 : 0) != 0) {
    std::fprintf(stderr, "threading_bench: start failed: %s\n", lastError());
    return 1;
  }
  double startMs = Us(t0, std::chrono::steady_clock::now()) / 1000;
  RunThreads(1, [&](int, std::vector<double>* v) { PingThread(calls / 10 + 1, v); });  // warm-up
  Summary p1 = RunThreads(1, [&](int, std::vector<double>* v) { PingThread(calls, v); });
  Summary pn = RunThreads(threads, [&](int, std::vector<double>* v) { PingThread(calls, v); });
  RunThreads(1, [&](int id, std::vector<double>* v) { PairThread(id, calls / 10 + 1, v); });  // warm-up
  Summary a1 = RunThreads(1, [&](int id, std::vector<double>* v) { PairThread(id, calls, v); });
  Summary an = RunThreads(threads, [&](int id, std::vector<double>* v) { PairThread(id, calls, v); });
  std::printf(
      "{\"threading\":\"%s\",\"policy\":\"%s\",\"driver\":\"%s\",\"threads\":%d,\"calls\":%d,\"start_ms\":%.1f,"
      "\"ping_1\":{\"median_us\":%.3f,\"p99_us\":%.3f,\"mean_us\":%.3f},"
      "\"ping_n\":{\"median_us\":%.3f,\"p99_us\":%.3f,\"mean_us\":%.3f},"
      "\"pair_1\":{\"median_us\":%.3f,\"p99_us\":%.3f,\"mean_us\":%.3f},"
      "\"pair_n\":{\"median_us\":%.3f,\"p99_us\":%.3f,\"mean_us\":%.3f}}\n",
      argv[2], policy.c_str(), driver.c_str(), threads, calls, startMs, p1.median, p1.p99, p1.mean, pn.median, pn.p99,
      pn.mean, a1.median, a1.p99, a1.mean, an.median, an.p99, an.mean);
  return 0;
}
