// benchLoop: the test-only half of bench/binding-overhead.mjs, an addon of its own
// (gmlake_vmm_bench.node, CMake target gmlake_vmm_bench, built by
// `pnpm --filter @gmlake/vmm build:bench`), so the shipped gmlake_vmm.node carries no
// benchmark code. It shares the argument helpers (native/args.cc) and reads the handle
// objects the main addon made.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <string>

#include "../native/addon.h"
#include "../native/cuda_api.h"

namespace gmvmm {
namespace {

// benchLoop(call, iterations, ...args) runs the driver call behind the addon function `call`
// `iterations` times in a plain C++ loop, inside this process, on the handles and addresses
// given (the same arguments as the addon function, minus the cuda device), and returns the
// loop's wall time in microseconds. The binding's overhead per call is then
// (addon call time - this loop's time) with everything else (process, driver state, caches,
// handles) held equal. Pairs ("cudaMemMap+cudaMemUnmap") run both calls per iteration.
// cuda calls run on the calling thread's current context: make any cuda call on the device
// first. Not part of the driver API (src/ never calls it). Like the addon functions, the
// cuda data calls trust the caller that the bytes are mapped (the driver reports it if
// not); the host ones check once, since a bad address there would be a segfault.

// The handle objects are made in cuda_memory.cc / host_binding.cc; these mirror the
// leading members of their wrapped structs. Checked at run time: the type tag, and that
// the mirrored size equals the object's own `size` property (catches layout drift).
struct CudaHandleView {
  cu::CUmemGenericAllocationHandle h;
  uint64_t size;
  bool released;
};
struct HostHandleView {
  int fd;
  uint64_t size;
};
const napi_type_tag kCudaHandleTag = {0x6d6c616b65637564ULL, 0x68616e646c653031ULL};
const napi_type_tag kHostHandleTag = {0x6d6c616b65686f73ULL, 0x68616e646c653031ULL};

template <class T>
T* BenchHandle(const Napi::CallbackInfo& info, size_t index, const napi_type_tag* tag) {
  T* h = Unwrap<T>(info, index, tag, "a physical handle of the matching driver");
  double size = info[index].As<Napi::Object>().Get("size").As<Napi::Number>().DoubleValue();
  if (static_cast<double>(h->size) != size) {
    throw Napi::Error::New(info.Env(), "benchLoop: handle layout does not match the binding's (rebuild the addon)");
  }
  return h;
}

Napi::Uint8Array BenchBytes(const Napi::CallbackInfo& info, size_t index) {
  if (index >= info.Length() || !info[index].IsTypedArray() ||
      info[index].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw Napi::TypeError::New(info.Env(), "benchLoop: expected a Uint8Array as argument " + std::to_string(index + 1));
  }
  return info[index].As<Napi::Uint8Array>();
}

// Whether n bytes at p can be read (or written): the kernel answers EFAULT instead of a
// segfault. Checked once before a hostRead/hostWrite loop (writing zeroes the bytes).
bool HostAccessible(void* p, size_t n, bool forWrite) {
  int fds[2];
  if (forWrite) {
    int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = read(fd, p, n) == static_cast<ssize_t>(n);
    close(fd);
    return ok;
  }
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
  bool ok = true;
  char sink[4096];
  for (size_t off = 0; ok && off < n; off += sizeof sink) {  // a page at a time: the pipe never fills
    size_t k = n - off < sizeof sink ? n - off : sizeof sink;
    ok = write(fds[1], static_cast<char*>(p) + off, k) == static_cast<ssize_t>(k) &&
         read(fds[0], sink, k) == static_cast<ssize_t>(k);
  }
  close(fds[0]);
  close(fds[1]);
  return ok;
}

// Keeps the compiler from merging or dropping the repeated memory accesses of a loop.
inline void Clobber() { asm volatile("" ::: "memory"); }

template <class A>
using CUresultFn = cu::CUresult (*)(A);

struct CudaBench {
  cu::PFN_cuGetErrorName errorName;
  CUresultFn<cu::CUcontext*> ctxGetCurrent;
  CUresultFn<cu::CUdevice*> ctxGetDevice;
  cu::PFN_cuMemGetInfo_v2 memGetInfo;
  cu::PFN_cuMemMap memMap;
  cu::PFN_cuMemUnmap memUnmap;
  cu::PFN_cuMemSetAccess memSetAccess;
  cu::PFN_cuMemcpyHtoD_v2 htoD;
  cu::PFN_cuMemcpyDtoH_v2 dtoH;
  cu::PFN_cuMemCreate memCreate;
  cu::PFN_cuMemRelease memRelease;
  cu::PFN_cuMemAddressReserve reserve;
  cu::PFN_cuMemAddressFree addressFree;
};

// The symbols of the libcuda the addon already loaded (cudaLoad() first), looked up once.
const CudaBench& Cuda(Napi::Env env) {
  static std::mutex mutex;  // worker threads may call it at once
  static CudaBench api{};
  static bool ok = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (ok) return api;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) ThrowVmmError(env, "CUDA_DRIVER_NOT_FOUND", "benchLoop", "benchLoop: libcuda is not loaded (call cudaLoad() first)");
  auto sym = [&](const char* name) {
    void* p = dlsym(lib, name);
    if (p == nullptr) ThrowVmmError(env, "CUDA_DRIVER_TOO_OLD", "benchLoop", std::string("benchLoop: libcuda lacks ") + name);
    return p;
  };
  api.errorName = reinterpret_cast<cu::PFN_cuGetErrorName>(sym("cuGetErrorName"));
  api.ctxGetCurrent = reinterpret_cast<CUresultFn<cu::CUcontext*>>(sym("cuCtxGetCurrent"));
  api.ctxGetDevice = reinterpret_cast<CUresultFn<cu::CUdevice*>>(sym("cuCtxGetDevice"));
  api.memGetInfo = reinterpret_cast<cu::PFN_cuMemGetInfo_v2>(sym("cuMemGetInfo_v2"));
  api.memMap = reinterpret_cast<cu::PFN_cuMemMap>(sym("cuMemMap"));
  api.memUnmap = reinterpret_cast<cu::PFN_cuMemUnmap>(sym("cuMemUnmap"));
  api.memSetAccess = reinterpret_cast<cu::PFN_cuMemSetAccess>(sym("cuMemSetAccess"));
  api.htoD = reinterpret_cast<cu::PFN_cuMemcpyHtoD_v2>(sym("cuMemcpyHtoD_v2"));
  api.dtoH = reinterpret_cast<cu::PFN_cuMemcpyDtoH_v2>(sym("cuMemcpyDtoH_v2"));
  api.memCreate = reinterpret_cast<cu::PFN_cuMemCreate>(sym("cuMemCreate"));
  api.memRelease = reinterpret_cast<cu::PFN_cuMemRelease>(sym("cuMemRelease"));
  api.reserve = reinterpret_cast<cu::PFN_cuMemAddressReserve>(sym("cuMemAddressReserve"));
  api.addressFree = reinterpret_cast<cu::PFN_cuMemAddressFree>(sym("cuMemAddressFree"));
  ok = true;
  return api;
}

[[noreturn]] void BenchCudaFail(Napi::Env env, const CudaBench& a, cu::CUresult r, const char* call) {
  const char* name = nullptr;
  std::string code = a.errorName(r, &name) == 0 && name != nullptr ? name : "CUDA_ERROR_" + std::to_string(static_cast<int>(r));
  ThrowVmmError(env, code, call, std::string("benchLoop: ") + call + " failed: " + code);
}

[[noreturn]] void BenchErrno(Napi::Env env, const char* call) {
  int e = errno;
  ThrowVmmError(env, e == ENOMEM ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_INVALID_VALUE", call,
                std::string("benchLoop: ") + call + " failed: " + std::strerror(e));
}

// Times `iters` runs of body (which returns false on failure, leaving the error to the caller).
template <class F>
double TimeLoop(uint64_t iters, F body) {
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < iters; ++i) {
    if (!body()) return -1;
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

double CudaLoop(const Napi::CallbackInfo& info, const std::string& call, uint64_t iters) {
  Napi::Env env = info.Env();
  const CudaBench& a = Cuda(env);
  cu::CUcontext ctx = nullptr;
  cu::CUdevice dev = 0;
  if (a.ctxGetCurrent(&ctx) != 0 || ctx == nullptr || a.ctxGetDevice(&dev) != 0) {
    ThrowVmmError(env, "CUDA_ERROR_INVALID_CONTEXT", "benchLoop", "benchLoop: no current context (make a cuda call on the device first)");
  }
  cu::CUresult r{};
  const char* failed = call.c_str();
  double us = -1;
  if (call == "cudaMemGetInfo") {
    size_t freeB = 0, total = 0;
    us = TimeLoop(iters, [&] { return (r = a.memGetInfo(&freeB, &total)) == 0; });
  } else if (call == "cudaMemMap+cudaMemUnmap") {
    uint64_t ptr = ArgU64(info, 2, "address"), size = ArgU64(info, 3, "size"), offset = ArgU64(info, 4, "offset");
    auto* h = BenchHandle<CudaHandleView>(info, 5, &kCudaHandleTag);
    if (h->released) throw Napi::Error::New(env, "benchLoop: handle was released");
    us = TimeLoop(iters, [&] {
      if ((r = a.memMap(ptr, size, offset, h->h, 0)) != 0) return failed = "cuMemMap", false;
      if ((r = a.memUnmap(ptr, size)) != 0) return failed = "cuMemUnmap", false;
      return true;
    });
  } else if (call == "cudaMemSetAccess") {
    uint64_t ptr = ArgU64(info, 2, "address"), size = ArgU64(info, 3, "size");
    cu::CUmemAccessDesc desc{};
    desc.location.type = GMLAKE_CU_CONST(CU_MEM_LOCATION_TYPE_DEVICE);
    desc.location.id = dev;
    desc.flags = GMLAKE_CU_CONST(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    us = TimeLoop(iters, [&] { return (r = a.memSetAccess(ptr, size, &desc, 1)) == 0; });
  } else if (call == "cudaWrite") {
    uint64_t ptr = ArgU64(info, 2, "address");
    Napi::Uint8Array data = BenchBytes(info, 3);
    us = TimeLoop(iters, [&] { return (r = a.htoD(ptr, data.Data(), data.ByteLength())) == 0; });
  } else if (call == "cudaRead") {
    uint64_t ptr = ArgU64(info, 2, "address");
    Napi::Uint8Array out = BenchBytes(info, 3);
    us = TimeLoop(iters, [&] { return (r = a.dtoH(out.Data(), ptr, out.ByteLength())) == 0; });
  } else if (call == "cudaMemCreate+cudaMemRelease") {
    uint64_t size = ArgU64(info, 2, "size");
    cu::CUmemAllocationProp prop{};
    prop.type = GMLAKE_CU_CONST(CU_MEM_ALLOCATION_TYPE_PINNED);
    prop.requestedHandleTypes = GMLAKE_CU_CONST(CU_MEM_HANDLE_TYPE_NONE);
    prop.location.type = GMLAKE_CU_CONST(CU_MEM_LOCATION_TYPE_DEVICE);
    prop.location.id = dev;
    us = TimeLoop(iters, [&] {
      cu::CUmemGenericAllocationHandle h = 0;
      if ((r = a.memCreate(&h, size, &prop, 0)) != 0) return failed = "cuMemCreate", false;
      if ((r = a.memRelease(h)) != 0) return failed = "cuMemRelease", false;
      return true;
    });
  } else if (call == "cudaMemAddressReserve+cudaMemAddressFree") {
    uint64_t size = ArgU64(info, 2, "size"), alignment = ArgU64(info, 3, "alignment");
    us = TimeLoop(iters, [&] {
      cu::CUdeviceptr p = 0;
      if ((r = a.reserve(&p, size, alignment, 0, 0)) != 0) return failed = "cuMemAddressReserve", false;
      if ((r = a.addressFree(p, size)) != 0) return failed = "cuMemAddressFree", false;
      return true;
    });
  } else {
    throw Napi::RangeError::New(env, "benchLoop: unknown call '" + call + "'");
  }
  if (us < 0) BenchCudaFail(env, a, r, failed);
  return us;
}

// The same syscalls as host_binding.cc.
double HostLoop(const Napi::CallbackInfo& info, const std::string& call, uint64_t iters) {
  Napi::Env env = info.Env();
  const char* failed = call.c_str();
  double us = -1;
  if (call == "hostMemMap+hostMemUnmap") {
    uint64_t ptr = ArgU64(info, 2, "address"), size = ArgU64(info, 3, "size"), offset = ArgU64(info, 4, "offset");
    auto* h = BenchHandle<HostHandleView>(info, 5, &kHostHandleTag);
    if (h->fd < 0) throw Napi::Error::New(env, "benchLoop: handle was released");
    void* va = reinterpret_cast<void*>(ptr);
    us = TimeLoop(iters, [&] {
      if (mmap(va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, static_cast<off_t>(offset)) == MAP_FAILED) {
        return failed = "mmap (map)", false;
      }
      if (mmap(va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED) {
        return failed = "mmap (unmap)", false;
      }
      return true;
    });
  } else if (call == "hostMemSetAccess") {
    void* va = reinterpret_cast<void*>(ArgU64(info, 2, "address"));
    uint64_t size = ArgU64(info, 3, "size");
    us = TimeLoop(iters, [&] { return mprotect(va, size, PROT_READ | PROT_WRITE) == 0; });
  } else if (call == "hostWrite") {
    void* va = reinterpret_cast<void*>(ArgU64(info, 2, "address"));
    Napi::Uint8Array data = BenchBytes(info, 3);
    if (!HostAccessible(va, data.ByteLength(), true)) BenchErrno(env, "hostWrite (bytes not mapped read-write)");
    us = TimeLoop(iters, [&] {
      std::memcpy(va, data.Data(), data.ByteLength());
      Clobber();
      return true;
    });
  } else if (call == "hostRead") {
    const void* va = reinterpret_cast<const void*>(ArgU64(info, 2, "address"));
    Napi::Uint8Array out = BenchBytes(info, 3);
    if (!HostAccessible(const_cast<void*>(va), out.ByteLength(), false)) BenchErrno(env, "hostRead (bytes not mapped readable)");
    us = TimeLoop(iters, [&] {
      std::memcpy(out.Data(), va, out.ByteLength());
      Clobber();
      return true;
    });
  } else if (call == "hostMemCreate+hostMemRelease") {
    uint64_t size = ArgU64(info, 2, "size");
    us = TimeLoop(iters, [&] {
      int fd = memfd_create("gmlake-vmm", MFD_CLOEXEC);
      if (fd < 0) return failed = "memfd_create", false;
      if (ftruncate(fd, static_cast<off_t>(size)) != 0) return close(fd), failed = "ftruncate", false;
      return close(fd) == 0 || (failed = "close", false);
    });
  } else if (call == "hostMemAddressReserve+hostMemAddressFree") {
    uint64_t size = ArgU64(info, 2, "size"), alignment = ArgU64(info, 3, "alignment");
    uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    if (alignment < page) alignment = page;
    us = TimeLoop(iters, [&] {
      uint64_t span = size + alignment;
      void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) return failed = "mmap (reserve)", false;
      uint64_t base = reinterpret_cast<uint64_t>(p), start = (base + alignment - 1) & ~(alignment - 1);
      if (start > base) munmap(p, start - base);
      uint64_t end = start + size, spanEnd = base + span;
      if (spanEnd > end) munmap(reinterpret_cast<void*>(end), spanEnd - end);
      return munmap(reinterpret_cast<void*>(start), size) == 0 || (failed = "munmap", false);
    });
  } else {
    throw Napi::RangeError::New(env, "benchLoop: unknown call '" + call + "'");
  }
  if (us < 0) BenchErrno(env, failed);
  return us;
}

Napi::Value BenchLoop(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString()) throw Napi::TypeError::New(env, "benchLoop(call, iterations, ...args)");
  std::string call = info[0].As<Napi::String>().Utf8Value();
  uint64_t iters = ArgU64(info, 1, "iterations");
  double us = call.rfind("cuda", 0) == 0 ? CudaLoop(info, call, iters) : HostLoop(info, call, iters);
  return Napi::Number::New(env, us);
}

}  // namespace
}  // namespace gmvmm

static Napi::Object InitBench(Napi::Env env, Napi::Object exports) {
  env.SetInstanceData(new gmvmm::AddonState());  // errors: plain Errors with `code`
  exports.Set("benchLoop", Napi::Function::New(env, gmvmm::BenchLoop, "benchLoop"));
  return exports;
}

NODE_API_MODULE(gmlake_vmm_bench, InitBench)
