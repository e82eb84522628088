// The same calls as bench/binding-overhead.mjs, from a plain C++ loop in a separate
// process: the bench's "C++ proc" column, kept for comparison with runs 1-2. The overhead
// itself is measured against the in-process benchLoop() (bench/bench_loop.cc), since
// this process's figures differ from the Node process's for reasons other than the
// binding. dlopens libcuda like the addon (never links it).
//   g++ -O2 -std=c++17 -o build/bench/binding_overhead bench/binding_overhead.cc -ldl
//   binding_overhead host|cuda ITERATIONS ROUNDS   -> one JSON object: op -> us per call
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../native/cuda_api.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median over rounds of (time of `iters` iterations / iters / callsPerIter), in us.
double Measure(int iters, int rounds, int callsPerIter, const std::function<void()>& body) {
  for (int i = 0; i < iters / 10 + 1; ++i) body();  // warm-up
  std::vector<double> perCall;
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) body();
    double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    perCall.push_back(us / iters / callsPerIter);
  }
  std::sort(perCall.begin(), perCall.end());
  return perCall[perCall.size() / 2];
}

void Die(const char* what) {
  std::fprintf(stderr, "binding_overhead: %s\n", what);
  std::exit(1);
}

std::string results = "{";
void Emit(const char* op, double us) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s\"%s\":%.4f", results.size() > 1 ? "," : "", op, us);
  results += buf;
}

void RunHost(int iters, int rounds) {
  const size_t g = 2u << 20;
  // Same syscalls as native/host_binding.cc.
  auto reserve = [&](size_t size, size_t align) {
    size_t span = size + align;
    void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) Die("mmap");
    uintptr_t base = reinterpret_cast<uintptr_t>(p), start = (base + align - 1) & ~(align - 1);
    if (start > base) munmap(p, start - base);
    if (base + span > start + size) munmap(reinterpret_cast<void*>(start + size), base + span - start - size);
    return reinterpret_cast<void*>(start);
  };
  int fd = memfd_create("bench", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, g) != 0) Die("memfd");
  void* va = reserve(g, g);
  Emit("memMap+memUnmap", Measure(iters, rounds, 2, [&] {
         if (mmap(va, g, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) Die("map");
         if (mmap(va, g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED) Die("unmap");
       }));
  if (mmap(va, g, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) Die("map");
  Emit("memSetAccess", Measure(iters, rounds, 1, [&] {
         if (mprotect(va, g, PROT_READ | PROT_WRITE) != 0) Die("mprotect");
       }));
  unsigned char small[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  volatile unsigned char* dst = static_cast<unsigned char*>(va);
  Emit("write 8 B", Measure(iters, rounds, 1, [&] { std::memcpy(const_cast<unsigned char*>(dst), small, 8); }));
  Emit("read 8 B", Measure(iters, rounds, 1, [&] { std::memcpy(small, const_cast<unsigned char*>(dst), 8); }));
  munmap(va, g);
  Emit("memCreate+memRelease", Measure(iters, rounds, 2, [&] {
         int f = memfd_create("bench", MFD_CLOEXEC);
         if (f < 0 || ftruncate(f, g) != 0) Die("memfd");
         close(f);
       }));
  Emit("memAddressReserve+memAddressFree", Measure(iters, rounds, 2, [&] { munmap(reserve(g, g), g); }));
  close(fd);
}

template <class F>
F Sym(void* lib, const char* name) {
  auto f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr) Die(name);
  return f;
}

void RunCuda(int iters, int rounds) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) Die("dlopen libcuda.so.1");
  auto cuInit = Sym<cu::PFN_cuInit>(lib, "cuInit");
  auto cuDeviceGet = Sym<cu::PFN_cuDeviceGet>(lib, "cuDeviceGet");
  auto cuRetain = Sym<cu::PFN_cuDevicePrimaryCtxRetain>(lib, "cuDevicePrimaryCtxRetain");
  auto cuRelease = Sym<cu::PFN_cuDevicePrimaryCtxRelease_v2>(lib, "cuDevicePrimaryCtxRelease_v2");
  auto cuCtxSetCurrent = Sym<cu::PFN_cuCtxSetCurrent>(lib, "cuCtxSetCurrent");
  auto cuGran = Sym<cu::PFN_cuMemGetAllocationGranularity>(lib, "cuMemGetAllocationGranularity");
  auto cuMemCreate = Sym<cu::PFN_cuMemCreate>(lib, "cuMemCreate");
  auto cuMemRelease = Sym<cu::PFN_cuMemRelease>(lib, "cuMemRelease");
  auto cuReserve = Sym<cu::PFN_cuMemAddressReserve>(lib, "cuMemAddressReserve");
  auto cuAddrFree = Sym<cu::PFN_cuMemAddressFree>(lib, "cuMemAddressFree");
  auto cuMemMap = Sym<cu::PFN_cuMemMap>(lib, "cuMemMap");
  auto cuMemUnmap = Sym<cu::PFN_cuMemUnmap>(lib, "cuMemUnmap");
  auto cuSetAccess = Sym<cu::PFN_cuMemSetAccess>(lib, "cuMemSetAccess");
  auto cuGetInfo = Sym<cu::PFN_cuMemGetInfo_v2>(lib, "cuMemGetInfo_v2");
  auto cuHtoD = Sym<cu::PFN_cuMemcpyHtoD_v2>(lib, "cuMemcpyHtoD_v2");
  auto cuDtoH = Sym<cu::PFN_cuMemcpyDtoH_v2>(lib, "cuMemcpyDtoH_v2");
  auto check = [](cu::CUresult r, const char* what) {
    if (r != 0) Die(what);
  };
  check(cuInit(0), "cuInit");
  cu::CUdevice dev;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  cu::CUcontext ctx;
  check(cuRetain(&ctx, dev), "retain");
  check(cuCtxSetCurrent(ctx), "setCurrent");
  cu::CUmemAllocationProp prop{};
  prop.type = GMLAKE_CU_CONST(CU_MEM_ALLOCATION_TYPE_PINNED);
  prop.location.type = GMLAKE_CU_CONST(CU_MEM_LOCATION_TYPE_DEVICE);
  prop.location.id = 0;
  size_t g = 0;
  check(cuGran(&g, &prop, GMLAKE_CU_CONST(CU_MEM_ALLOC_GRANULARITY_MINIMUM)), "granularity");
  cu::CUmemAccessDesc desc{};
  desc.location = prop.location;
  desc.flags = GMLAKE_CU_CONST(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

  size_t freeB, totalB;
  Emit("memGetInfo", Measure(iters, rounds, 1, [&] { check(cuGetInfo(&freeB, &totalB), "getinfo"); }));
  cu::CUmemGenericAllocationHandle h;
  check(cuMemCreate(&h, g, &prop, 0), "create");
  cu::CUdeviceptr va;
  check(cuReserve(&va, g, 0, 0, 0), "reserve");
  Emit("memMap+memUnmap", Measure(iters, rounds, 2, [&] {
         check(cuMemMap(va, g, 0, h, 0), "map");
         check(cuMemUnmap(va, g), "unmap");
       }));
  check(cuMemMap(va, g, 0, h, 0), "map");
  Emit("memSetAccess", Measure(iters, rounds, 1, [&] { check(cuSetAccess(va, g, &desc, 1), "setAccess"); }));
  unsigned char small[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  Emit("write 8 B", Measure(iters, rounds, 1, [&] { check(cuHtoD(va, small, 8), "htod"); }));
  Emit("read 8 B", Measure(iters, rounds, 1, [&] { check(cuDtoH(small, va, 8), "dtoh"); }));
  check(cuMemUnmap(va, g), "unmap");
  check(cuAddrFree(va, g), "free");
  check(cuMemRelease(h), "release");
  Emit("memCreate+memRelease", Measure(iters, rounds, 2, [&] {
         cu::CUmemGenericAllocationHandle x;
         check(cuMemCreate(&x, g, &prop, 0), "create");
         check(cuMemRelease(x), "release");
       }));
  Emit("memAddressReserve+memAddressFree", Measure(iters, rounds, 2, [&] {
         cu::CUdeviceptr p;
         check(cuReserve(&p, g, 0, 0, 0), "reserve");
         check(cuAddrFree(p, g), "free");
       }));
  cuCtxSetCurrent(nullptr);
  cuRelease(dev);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Die("usage: binding_overhead host|cuda [iterations] [rounds]");
  int iters = argc > 2 ? std::atoi(argv[2]) : 20000;
  int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  std::string mode = argv[1];
  if (mode == "host") RunHost(iters, rounds);
  else if (mode == "cuda") RunCuda(iters, rounds);
  else Die("mode must be host or cuda");
  std::printf("%s}\n", results.c_str());
  return 0;
}
