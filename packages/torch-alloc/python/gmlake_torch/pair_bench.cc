// The per-call microbenchmark inside the PyTorch process, in C++: alloc+free pairs through
// c10::cuda::CUDACachingAllocator::raw_alloc / raw_delete, that is through whichever
// allocator PyTorch is using (its own caching allocator, or ours behind the pluggable
// interface), with no Python in the loop: both measured the same way. A window of 64 live
// blocks, sizes 512 B .. 64 MiB, each pair timed on its own. Built against the PyTorch in
// use by python -m gmlake_torch build-pair-bench (scripts/gpu/live-run.sh does).
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

extern "C" __attribute__((visibility("default"))) int gmlake_bench_pairs(int pairs, double* median_us, double* p99_us,
                                                                         double* mean_us) {
  namespace A = c10::cuda::CUDACachingAllocator;
  try {
    std::mt19937_64 rng(1234);
    std::vector<size_t> sizes(4096);
    for (size_t& s : sizes) s = size_t(512) << (rng() % 18);
    std::vector<void*> window(64);
    for (int i = 0; i < 64; ++i) window[i] = A::raw_alloc(sizes[i]);
    std::vector<double> t;
    t.reserve(pairs);
    const int warm = pairs / 10;
    for (int i = 0; i < pairs + warm; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      void* p = A::raw_alloc(sizes[i & 4095]);
      A::raw_delete(window[i & 63]);
      auto t1 = std::chrono::steady_clock::now();
      window[i & 63] = p;
      if (i >= warm) t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    for (void* p : window) A::raw_delete(p);
    double sum = 0;
    for (double x : t) sum += x;
    std::sort(t.begin(), t.end());
    *median_us = t[t.size() / 2];
    *p99_us = t[t.size() * 99 / 100];
    *mean_us = sum / t.size();
    return 0;
  } catch (...) {
    return -1;
  }
}
