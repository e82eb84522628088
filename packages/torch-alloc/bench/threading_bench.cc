// Per-call latency of the allocator library as PyTorch calls it, for choosing the
// threading design (README "Threading") and for the per-call cost part by part
// (BENCHMARKS.md). Loads libgmlake_torch_alloc.so with dlopen (RTLD_LOCAL, as ctypes
// does), and libgmlake_bench_calls.so beside it (bench/bench_calls.cc: the bench-only calls),
// starts it with one design, then times each call on its own:
//   ping_1/_n  the bare round trip C++ -> JS -> C++ (gmlake_ping), 1 and T threads
//   pair_1/_n  an alloc + free pair through the engine (a window of 64 live blocks per
//              thread, sizes 512 B to 8 MiB, random replacement, each thread on its own stream)
//   pb_pair    pairs in the pattern of the in-PyTorch benchmark (python/gmlake_torch/pair_bench.cc:
//              sizes 512 B << 0..17, the oldest of 64 replaced, stream 0), 1 thread, with
//   pb_alloc, pb_free  its two halves timed apart (a free only queues: contract.h)
//   hot_pair   a 1 MiB alloc and its free at once, again and again on stream 0 (Python's
//              torch.empty(n) then del in a loop): with GMLAKE_TAKEBACK=1 every alloc after the
//              first takes the queued free back (free_queue.h)
//   burst      allocations in bursts, as a compiled step makes them: K of a cycle of 24 sizes back
//              to back, the K oldest of the 2K live freed, then G us of the caller's own work (a
//              spin, as kernel launches): mean us per alloc (and its median, p99, max: a mean far
//              above the median is the scheduler, not the engine), and with one JS thread how its answers
//              worked out ahead went (stats(): taken, missed by why) for K x G in 1 x 5, 4 x 20,
//              4 x 5, 4 x 2, 4 x 0, then 4 x 5 with S us of work after each allocation (S = 1, 2,
//              4, 8: spacing_us); burst_after_hot: 1 x 5 again after the hot loops, from its
//              first allocation (how soon the throttle lets answers come back)
//   js_pair    the same loop run inside the embedded Node (gmlake_bench_js_pairs): the
//              JS engine's work alone, mean ns per pair
//   capture_check  one cuStreamIsCapturing(legacy stream) in a loop, when libcuda.so.1 loads and
//              cuInit succeeds (else {"skipped": why}); with --driver cuda every alloc
//              and free of the pairs above pays it too (native/capture.cc), unless
//              --capture-check pool (what enable() sets once PyTorch's pool-window hooks
//              are wired: no capture check outside a window)
// One design per process (Node starts once per process).
//   threading_bench LIB locker|thread [--threads T] [--calls N] [--policy P] [--driver host|sim|cuda]
//                  [--capture-check always|pool]
// prints one JSON object on one line: medians, p99 and means in microseconds.
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
using JsPairsFn = double (*)(int, void*);
using TextFn = char* (*)(int, const char*);

StartFn start;
ErrFn lastError;
PingFn ping;
TryAllocFn tryAlloc;
FreeFn freeFn;
JsPairsFn jsPairs;
TextFn text;

// libcuda, when present: PyTorch's threads have the device's primary context current;
// the benchmark's threads get it too (MakeCurrent), and the capture check is timed alone.
using CuInitFn = int (*)(unsigned);
using CuDeviceGetFn = int (*)(int*, int);
using CuPrimaryRetainFn = int (*)(void**, int);
using CuCtxSetCurrentFn = int (*)(void*);
using CuIsCapturingFn = int (*)(void*, int*);
void* g_ctx = nullptr;
CuCtxSetCurrentFn cuCtxSetCurrent = nullptr;
CuIsCapturingFn cuStreamIsCapturing = nullptr;
using CuStreamCreateFn = int (*)(void**, unsigned);
CuStreamCreateFn cuStreamCreate = nullptr;
// The pair threads' streams: thread 0 the legacy stream, the others their own (real ones
// on the cuda driver, where a made-up CUstream would crash the driver; raw values else).
std::vector<void*> g_streams;

// "" when libcuda is usable, else why not.
std::string LoadCuda() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return "no libcuda.so.1";
  auto init = reinterpret_cast<CuInitFn>(dlsym(cuda, "cuInit"));
  auto deviceGet = reinterpret_cast<CuDeviceGetFn>(dlsym(cuda, "cuDeviceGet"));
  auto retain = reinterpret_cast<CuPrimaryRetainFn>(dlsym(cuda, "cuDevicePrimaryCtxRetain"));
  cuCtxSetCurrent = reinterpret_cast<CuCtxSetCurrentFn>(dlsym(cuda, "cuCtxSetCurrent"));
  cuStreamIsCapturing = reinterpret_cast<CuIsCapturingFn>(dlsym(cuda, "cuStreamIsCapturing"));
  cuStreamCreate = reinterpret_cast<CuStreamCreateFn>(dlsym(cuda, "cuStreamCreate"));
  if (!init || !deviceGet || !retain || !cuCtxSetCurrent || !cuStreamIsCapturing || !cuStreamCreate) {
    return "libcuda.so.1 lacks an entry point";
  }
  int r = init(0), dev = 0;
  if (r != 0) return "cuInit failed (" + std::to_string(r) + ")";
  if ((r = deviceGet(&dev, 0)) != 0 || (r = retain(&g_ctx, dev)) != 0) return "no primary context (" + std::to_string(r) + ")";
  return "";
}

void MakeCurrent() {
  if (g_ctx != nullptr) cuCtxSetCurrent(g_ctx);
}

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
  MakeCurrent();
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
  MakeCurrent();
  out->reserve(calls);
  std::mt19937_64 rng(1234 + id);
  void* stream = g_streams[id];
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

// pair_bench.cc's pattern on stream 0, each pair and each of its halves timed.
void PbPairs(int calls, std::vector<double>* pair, std::vector<double>* alloc, std::vector<double>* free) {
  MakeCurrent();
  std::mt19937_64 rng(1234);
  std::vector<size_t> sizes(4096);
  for (size_t& s : sizes) s = size_t(512) << (rng() % 18);
  std::vector<void*> window(64);
  std::vector<size_t> windowSize(64);
  auto take = [&](size_t size) {
    void* p = nullptr;
    if (tryAlloc(size, 0, nullptr, &p) != 0) {
      std::fprintf(stderr, "alloc failed: %s\n", lastError());
      std::exit(1);
    }
    return p;
  };
  for (int i = 0; i < 64; ++i) window[i] = take(windowSize[i] = sizes[i]);
  const int warm = calls / 10;
  for (int i = 0; i < calls + warm; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    void* p = take(sizes[i & 4095]);
    auto t1 = std::chrono::steady_clock::now();
    freeFn(window[i & 63], windowSize[i & 63], 0, nullptr);
    auto t2 = std::chrono::steady_clock::now();
    window[i & 63] = p;
    windowSize[i & 63] = sizes[i & 4095];
    if (i >= warm) {
      pair->push_back(Us(t0, t2));
      alloc->push_back(Us(t0, t1));
      free->push_back(Us(t1, t2));
    }
  }
  for (int i = 0; i < 64; ++i) freeFn(window[i], windowSize[i], 0, nullptr);
}

// hot_pair: one size allocated and freed at once, stream 0, each pair timed.
void HotPairs(int calls, std::vector<double>* pair) {
  MakeCurrent();
  pair->reserve(calls);
  const size_t size = size_t(1) << 20;
  for (int i = 0; i < calls + calls / 10; ++i) {
    void* p = nullptr;
    auto t0 = std::chrono::steady_clock::now();
    int st = tryAlloc(size, 0, nullptr, &p);
    freeFn(p, size, 0, nullptr);
    auto t1 = std::chrono::steady_clock::now();
    if (st != 0) {
      std::fprintf(stderr, "alloc failed: %s\n", lastError());
      std::exit(1);
    }
    if (i >= calls / 10) pair->push_back(Us(t0, t1));
  }
}

// The number after "key": in the engine's statistics (JSON), 0 when absent.
double StatOf(const std::string& json, const char* key, size_t from = 0) {
  size_t at = json.find(std::string("\"") + key + "\":", from);
  return at == std::string::npos ? 0 : std::strtod(json.c_str() + at + std::strlen(key) + 3, nullptr);
}

// Answers taken and missed so far, and made, and how long frees wait for a drain now:
// {hits, none, other, behind, made, drain_wait_us, and none's parts: late, unforeseen, declined, throttled, after_answer}.
std::vector<double> AnswerCounts() {
  char* t = text(1 /* kTextStats */, "");
  std::string json = t ? t : "";
  std::free(t);
  size_t misses = json.find("\"num_speculation_misses\":");
  if (misses == std::string::npos) return {0, 0, 0, 0, 0, StatOf(json, "drain_wait_us"), 0, 0, 0, 0, 0};
  return {StatOf(json, "num_speculation_hits"), StatOf(json, "none", misses), StatOf(json, "other", misses), StatOf(json, "behind", misses),
          StatOf(json, "num_speculations"), StatOf(json, "drain_wait_us"), StatOf(json, "none_late", misses),
          StatOf(json, "none_unforeseen", misses), StatOf(json, "none_declined", misses), StatOf(json, "none_throttled", misses),
          StatOf(json, "none_after_answer", misses)};
}

// The caller's own work: a spin, as kernel launches are.
void Spin(double us) {
  for (auto s = std::chrono::steady_clock::now(); Us(s, std::chrono::steady_clock::now()) < us;) {
  }
}

// burst: K allocations back to back, the K oldest of 2K freed, then `gapUs` of the caller's work;
// counted after a tenth of `calls` (`fromStart`: from the first, to see how soon answers come back).
// `freeGapUs` >= 0: the work comes between the allocations and the frees instead, and the next
// allocations `freeGapUs` after the frees (a temporary dropped, then the next op's output).
// `spacingUs` > 0: that much of the caller's work after each allocation of a burst (a kernel
// launched between one output's allocation and the next), only the allocations timed.
std::string Bursts(int calls, int k, double gapUs, bool fromStart = false, double freeGapUs = -1, double spacingUs = 0) {
  MakeCurrent();
  std::vector<size_t> cycle(24);
  for (size_t i = 0; i < cycle.size(); ++i) cycle[i] = size_t(512) << ((i * 7) % 15);  // 512 B .. 8 MiB
  std::vector<std::pair<void*, size_t>> live;
  size_t next = 0;
  double sum = 0;
  int n = 0;
  std::vector<double> before, each;  // each: every counted allocation's time
  const int warm = fromStart ? 0 : calls / 10;
  for (int i = 0; n < calls; ++i) {
    if (i == warm) before = AnswerCounts();
    double took = 0;
    for (int j = 0; j < k; ++j) {
      size_t size = cycle[next++ % cycle.size()];
      void* p = nullptr;
      auto t0 = std::chrono::steady_clock::now();
      if (tryAlloc(size, 0, nullptr, &p) != 0) {
        std::fprintf(stderr, "alloc failed: %s\n", lastError());
        std::exit(1);
      }
      const double us = Us(t0, std::chrono::steady_clock::now());
      took += us;
      if (i >= warm) each.push_back(us);
      if (spacingUs > 0) Spin(spacingUs);
      live.push_back({p, size});
    }
    const bool freeLast = freeGapUs >= 0;
    if (freeLast) Spin(gapUs);
    if (live.size() >= size_t(2 * k)) {
      for (int j = 0; j < k; ++j) freeFn(live[j].first, live[j].second, 0, nullptr);
      live.erase(live.begin(), live.begin() + k);
    }
    Spin(freeLast ? freeGapUs : gapUs);
    if (i >= warm) {
      sum += took;
      n += k;
    }
  }
  for (auto& l : live) freeFn(l.first, l.second, 0, nullptr);
  std::vector<double> after = AnswerCounts();
  auto per = [&](int i) { return (after[i] - before[i]) / n; };
  Summary s = Summarize(each);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"k\":%d,\"gap_us\":%.0f,\"free_gap_us\":%.1f,\"spacing_us\":%g,\"alloc_us\":%.3f,\"median_us\":%.3f,\"p99_us\":%.3f,\"max_us\":%.1f,\"answers_made\":%.3f,\"answered_ahead\":%.3f,\"missed\":{\"none\":%.3f,\"other\":%.3f,\"behind\":%.3f,"
                "\"none_late\":%.3f,\"none_after_answer\":%.3f,\"none_unforeseen\":%.3f,\"none_declined\":%.3f,\"none_throttled\":%.3f},\"drain_wait_us\":%g}",
                k, gapUs, freeGapUs, spacingUs, sum / n, s.median, s.p99, each.back(), per(4), per(0), per(1), per(2), per(3), per(6), per(10), per(7), per(8), per(9), after[5]);
  return buf;
}

// One cuStreamIsCapturing on the legacy stream (PyTorch's default), timed alone.
std::vector<double> CaptureChecks(int calls) {
  MakeCurrent();
  std::vector<double> t;
  t.reserve(calls);
  for (int i = 0; i < calls; ++i) {
    int status = 0;
    auto t0 = std::chrono::steady_clock::now();
    int r = cuStreamIsCapturing(nullptr, &status);
    auto t1 = std::chrono::steady_clock::now();
    if (r != 0 || status != 0) {
      std::fprintf(stderr, "cuStreamIsCapturing: %d (status %d)\n", r, status);
      std::exit(1);
    }
    t.push_back(Us(t0, t1));
  }
  return t;
}

std::string Json(const Summary& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "{\"median_us\":%.3f,\"p99_us\":%.3f,\"mean_us\":%.3f}", s.median, s.p99, s.mean);
  return buf;
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
    std::fprintf(stderr, "usage: threading_bench LIB locker|thread [--threads T] [--calls N] [--policy P] [--driver host|sim|cuda] [--capture-check always|pool]\n");
    return 2;
  }
  int threads = 2, calls = 20000;
  std::string policy = "caching", driver = "sim", captureCheck = "always";
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--threads") threads = std::atoi(argv[i + 1]);
    else if (k == "--calls") calls = std::atoi(argv[i + 1]);
    else if (k == "--policy") policy = argv[i + 1];
    else if (k == "--driver") driver = argv[i + 1];
    else if (k == "--capture-check") captureCheck = argv[i + 1];
    else {
      std::fprintf(stderr, "threading_bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (captureCheck != "always" && captureCheck != "pool") {
    std::fprintf(stderr, "threading_bench: --capture-check takes always or pool\n");
    return 2;
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
  tryAlloc = reinterpret_cast<TryAllocFn>(dlsym(lib, "gmlake_try_alloc"));
  freeFn = reinterpret_cast<FreeFn>(dlsym(lib, "gmlake_free"));
  text = reinterpret_cast<TextFn>(dlsym(lib, "gmlake_text"));
  if (!start || !lastError || !tryAlloc || !freeFn || !text) {
    std::fprintf(stderr, "threading_bench: %s lacks an entry point\n", argv[1]);
    return 1;
  }
  // the round trip and the pairs inside JS: libgmlake_bench_calls.so beside the library (a
  // library built before they moved out of it, a bundled baseline, has them itself)
  void* benchCalls = lib;
  if (dlsym(lib, "gmlake_ping") == nullptr) {
    std::string path = argv[1];
    size_t slash = path.rfind('/');
    path = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/libgmlake_bench_calls.so";
    benchCalls = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (benchCalls == nullptr) {
      std::fprintf(stderr, "threading_bench: %s\n", dlerror());
      return 1;
    }
  }
  ping = reinterpret_cast<PingFn>(dlsym(benchCalls, "gmlake_ping"));
  jsPairs = reinterpret_cast<JsPairsFn>(dlsym(benchCalls, "gmlake_bench_js_pairs"));
  if (!ping || !jsPairs) {
    std::fprintf(stderr, "threading_bench: no gmlake_ping / gmlake_bench_js_pairs for %s\n", argv[1]);
    return 1;
  }
  std::string noCuda = LoadCuda();
  if (driver == "cuda" && !noCuda.empty()) {
    std::fprintf(stderr, "threading_bench: --driver cuda: %s\n", noCuda.c_str());
    return 1;
  }
  MakeCurrent();
  for (int t = 0; t < threads; ++t) {
    void* st = reinterpret_cast<void*>(static_cast<uintptr_t>(t == 0 ? 0 : 0x1000 + t));
    if (driver == "cuda" && t > 0 && cuStreamCreate(&st, 1 /* CU_STREAM_NON_BLOCKING */) != 0) {
      std::fprintf(stderr, "threading_bench: cuStreamCreate failed\n");
      return 1;
    }
    g_streams.push_back(st);
  }
  std::string config = "{\"policy\":\"" + policy + "\",\"driver\":\"" + driver + "\",\"record\":false}";
  bool thread = std::strcmp(argv[2], "thread") == 0;
  auto t0 = std::chrono::steady_clock::now();
  if (start(config.c_str(), thread ? 1 : 0) != 0) {
    std::fprintf(stderr, "threading_bench: start failed: %s\n", lastError());
    return 1;
  }
  double startMs = Us(t0, std::chrono::steady_clock::now()) / 1000;
  auto setCaptureCheck = reinterpret_cast<int (*)(int)>(dlsym(lib, "gmlake_set_capture_check"));
  if (setCaptureCheck == nullptr || setCaptureCheck(captureCheck == "pool" ? 1 : 0) < 0) {
    std::fprintf(stderr, "threading_bench: %s cannot set the capture check\n", argv[1]);
    return 1;
  }
  RunThreads(1, [&](int, std::vector<double>* v) { PingThread(calls / 10 + 1, v); });  // warm-up
  Summary p1 = RunThreads(1, [&](int, std::vector<double>* v) { PingThread(calls, v); });
  Summary pn = RunThreads(threads, [&](int, std::vector<double>* v) { PingThread(calls, v); });
  // first, before the hot loops below can turn the foresight's throttle on (PeekThrottle: it
  // looks again only after 256 answers made at 1 in 16 chances), the gapped ones first
  std::string burst;
  for (auto [k, gap] : {std::pair<int, double>{1, 5}, {4, 20}, {4, 5}, {4, 2}, {4, 0}})
    burst += (burst.empty() ? "" : ",") + Bursts(calls, k, gap);
  // an allocation, 5 us of work, a free, and the next allocation F us after it
  for (double f : {0.0, 0.5, 1.0, 2.0, 4.0}) burst += "," + Bursts(calls, 1, 5, false, f);
  // 4 allocations S us apart (the caller's work between them), then 5 us
  for (double s : {1.0, 2.0, 4.0, 8.0}) burst += "," + Bursts(calls, 4, 5, false, -1, s);
  RunThreads(1, [&](int id, std::vector<double>* v) { PairThread(id, calls / 10 + 1, v); });  // warm-up
  Summary a1 = RunThreads(1, [&](int id, std::vector<double>* v) { PairThread(id, calls, v); });
  Summary an = RunThreads(threads, [&](int id, std::vector<double>* v) { PairThread(id, calls, v); });
  std::vector<double> pbPair, pbAlloc, pbFree;
  PbPairs(calls, &pbPair, &pbAlloc, &pbFree);
  std::vector<double> hotPair;
  HotPairs(calls, &hotPair);
  // the gapped pattern again after the hot loops, counted from its first allocation
  std::string burstAfter = Bursts(calls / 4, 1, 5, true);
  double jsNs = jsPairs(calls, nullptr);
  if (jsNs < 0) {
    std::fprintf(stderr, "threading_bench: js_pair failed: %s\n", lastError());
    return 1;
  }
  std::string capture = "{\"skipped\":\"" + noCuda + "\"}";
  if (noCuda.empty()) {
    std::vector<double> c = CaptureChecks(calls);
    capture = Json(Summarize(c));
  }
  std::printf(
      "{\"threading\":\"%s\",\"policy\":\"%s\",\"driver\":\"%s\",\"capture_check_mode\":\"%s\",\"threads\":%d,\"calls\":%d,\"start_ms\":%.1f,"
      "\"ping_1\":%s,\"ping_n\":%s,\"pair_1\":%s,\"pair_n\":%s,\"pb_pair\":%s,\"pb_alloc\":%s,\"pb_free\":%s,\"hot_pair\":%s,"
      "\"burst\":[%s],\"burst_after_hot\":%s,\"js_pair\":{\"mean_us\":%.3f},\"capture_check\":%s}\n",
      argv[2], policy.c_str(), driver.c_str(), captureCheck.c_str(), threads, calls, startMs, Json(p1).c_str(), Json(pn).c_str(), Json(a1).c_str(),
      Json(an).c_str(), Json(Summarize(pbPair)).c_str(), Json(Summarize(pbAlloc)).c_str(), Json(Summarize(pbFree)).c_str(),
      Json(Summarize(hotPair)).c_str(), burst.c_str(), burstAfter.c_str(), jsNs / 1000, capture.c_str());
  return 0;
}
