// The VMM operations on Linux host memory, one JS function per syscall:
//   memfd          = memfd_create + ftruncate (hostMemCreate); grown with ftruncate
//                    (hostMemResize); a range given back with fallocate(PUNCH_HOLE)
//                    (hostMemPunch); closed by hostMemRelease. The driver keeps its
//                    physical chunks as ranges of a few such memfds (host-driver.ts).
//   reserve        = mmap PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE
//   map            = mmap MAP_SHARED|MAP_FIXED of a memfd range at the address (PROT_NONE)
//   set access     = mprotect PROT_READ|PROT_WRITE
//   unmap          = mmap MAP_FIXED anonymous PROT_NONE over the range (keeps it reserved)
//   address free   = munmap
// errno is reported as the CUDA error the real driver gives for the same condition,
// except where the process, not the device, ran out: EMFILE/ENFILE (file descriptors)
// and ENOMEM from mmap/mprotect (vm.max_map_count, RLIMIT_AS) are host resource errors
// of their own, never CUDA_ERROR_OUT_OF_MEMORY, which an allocator would answer by
// freeing its cache and retrying (or report as a device out-of-memory). The misuse
// rules (overlaps, unmapped bytes, alignment) are checked in TypeScript first.
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "addon.h"

namespace gmvmm {
namespace {

struct HostHandle {
  int fd;
  uint64_t size;
  // A handle nobody released is closed when collected; its mappings keep the memfd alive.
  static void Finalize(HostHandle* h) {
    if (h->fd >= 0) close(h->fd);
    delete h;
  }
};

const napi_type_tag kHostHandleTag = {0x6d6c616b65686f73ULL, 0x68616e646c653031ULL};  // "gmlake host handle"

// ENOMEM means different things by call: a reservation or plain allocation that does not
// fit the address space is what CUDA reports as out of memory too (cuMemAddressReserve
// of 1 PiB on an H200), but mapping or protecting a range that fits can only fail for
// the process's own limits (vm.max_map_count, RLIMIT_AS): a host resource error.
const char* CodeForErrno(int e, const char* call) {
  switch (e) {
    case EMFILE:
    case ENFILE:
      return "HOST_ERROR_TOO_MANY_OPEN_FILES";
    case ENOMEM:
      if (std::strcmp(call, "hostMemMap") == 0 || std::strcmp(call, "hostMemUnmap") == 0 ||
          std::strcmp(call, "hostMemSetAccess") == 0) {
        return "HOST_ERROR_ADDRESS_SPACE";
      }
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case ENOSPC:
    case EFBIG:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case EINVAL:
    case EBADF:
    case EOVERFLOW:
      return "CUDA_ERROR_INVALID_VALUE";
    case EPERM:
    case EACCES:
      return "CUDA_ERROR_NOT_PERMITTED";
    default:
      return "CUDA_ERROR_UNKNOWN";
  }
}

[[noreturn]] void ThrowErrno(Napi::Env env, int e, const char* call, const std::string& args, const char* syscall) {
  const char* code = CodeForErrno(e, call);
  ThrowVmmError(env, code, call,
                std::string(call) + "(" + args + ") failed: " + code + " (" + syscall + ": " + std::strerror(e) + ")");
}

// Saves errno before the message is formatted (formatting may allocate and change it).
#define THROW_ERRNO(env, call, args, syscall) \
  do {                                        \
    int e_ = errno;                           \
    ThrowErrno(env, e_, call, args, syscall); \
  } while (0)

HostHandle* LiveHandle(const Napi::CallbackInfo& info, size_t index, const char* call) {
  auto* h = Unwrap<HostHandle>(info, index, &kHostHandleTag, "a host physical handle (from hostMemCreate)");
  if (h->fd < 0) ThrowVmmError(info.Env(), "CUDA_ERROR_INVALID_VALUE", call, std::string(call) + ": handle was already released");
  return h;
}

Napi::Value PageSize(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(sysconf(_SC_PAGESIZE)));
}

Napi::Value MemCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t size = ArgU64(info, 0, "size");
  uint64_t id = ArgU64(info, 1, "id");
  auto args = [&] { return "size=" + std::to_string(size); };
  int fd = memfd_create("gmlake-vmm", MFD_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    ThrowErrno(env, e, "hostMemCreate", args(), "memfd_create");
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int e = errno;
    close(fd);
    ThrowErrno(env, e, "hostMemCreate", args(), "ftruncate");
  }
  Napi::Object obj = MakeTagged(env, &kHostHandleTag, new HostHandle{fd, size});
  obj.DefineProperties({
      Napi::PropertyDescriptor::Value("id", Napi::Number::New(env, static_cast<double>(id)), napi_enumerable),
      Napi::PropertyDescriptor::Value("size", Napi::Number::New(env, static_cast<double>(size)), napi_enumerable),
  });
  return obj;
}

// Sets the memfd's size (growing it costs nothing: pages come on first touch).
Napi::Value MemResize(const Napi::CallbackInfo& info) {
  HostHandle* h = LiveHandle(info, 0, "hostMemResize");
  uint64_t size = ArgU64(info, 1, "size");
  if (ftruncate(h->fd, static_cast<off_t>(size)) != 0) {
    THROW_ERRNO(info.Env(), "hostMemResize", "size=" + std::to_string(size), "ftruncate");
  }
  return info.Env().Undefined();
}

// Gives the pages of [offset, offset+size) back to the kernel; they read as zeroes after.
Napi::Value MemPunch(const Napi::CallbackInfo& info) {
  HostHandle* h = LiveHandle(info, 0, "hostMemPunch");
  uint64_t offset = ArgU64(info, 1, "offset");
  uint64_t size = ArgU64(info, 2, "size");
  if (fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset), static_cast<off_t>(size)) != 0) {
    THROW_ERRNO(info.Env(), "hostMemPunch", "offset=" + std::to_string(offset) + ", size=" + std::to_string(size), "fallocate");
  }
  return info.Env().Undefined();
}

Napi::Value MemRelease(const Napi::CallbackInfo& info) {
  HostHandle* h = LiveHandle(info, 0, "hostMemRelease");
  int fd = h->fd;
  h->fd = -1;
  if (close(fd) != 0) THROW_ERRNO(info.Env(), "hostMemRelease", "fd=" + std::to_string(fd), "close");
  return info.Env().Undefined();
}

// Over-reserves by `alignment` and trims, so the range starts aligned.
Napi::Value MemAddressReserve(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t size = ArgU64(info, 0, "size");
  uint64_t alignment = ArgU64(info, 1, "alignment");
  auto args = [&] { return "size=" + std::to_string(size) + ", alignment=" + std::to_string(alignment); };
  uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (alignment < page) alignment = page;
  if ((alignment & (alignment - 1)) != 0 || size == 0) ThrowErrno(env, EINVAL, "hostMemAddressReserve", args(), "mmap");
  uint64_t span = size + alignment;
  if (span < size) ThrowErrno(env, ENOMEM, "hostMemAddressReserve", args(), "mmap");
  void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    ThrowErrno(env, e, "hostMemAddressReserve", args(), "mmap");
  }
  uint64_t base = reinterpret_cast<uint64_t>(p);
  uint64_t start = (base + alignment - 1) & ~(alignment - 1);
  if (start > base) munmap(p, start - base);
  uint64_t end = start + size, spanEnd = base + span;
  if (spanEnd > end) munmap(reinterpret_cast<void*>(end), spanEnd - end);
  return Napi::Number::New(env, static_cast<double>(start));
}

Napi::Value MemAddressFree(const Napi::CallbackInfo& info) {
  uint64_t ptr = ArgU64(info, 0, "address");
  uint64_t size = ArgU64(info, 1, "size");
  if (munmap(reinterpret_cast<void*>(ptr), size) != 0) {
    THROW_ERRNO(info.Env(), "hostMemAddressFree", "ptr=" + Hex(ptr) + ", size=" + std::to_string(size), "munmap");
  }
  return info.Env().Undefined();
}

Napi::Value MemMap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint64_t ptr = ArgU64(info, 0, "address");
  uint64_t size = ArgU64(info, 1, "size");
  uint64_t offset = ArgU64(info, 2, "offset");
  HostHandle* h = LiveHandle(info, 3, "hostMemMap");
  // Mapped without access, as cuMemMap leaves it: cuMemSetAccess grants it.
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) {
    THROW_ERRNO(env, "hostMemMap",
               "ptr=" + Hex(ptr) + ", size=" + std::to_string(size) + ", offset=" + std::to_string(offset), "mmap");
  }
  return env.Undefined();
}

Napi::Value MemUnmap(const Napi::CallbackInfo& info) {
  uint64_t ptr = ArgU64(info, 0, "address");
  uint64_t size = ArgU64(info, 1, "size");
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                 -1, 0);
  if (p == MAP_FAILED) {
    THROW_ERRNO(info.Env(), "hostMemUnmap", "ptr=" + Hex(ptr) + ", size=" + std::to_string(size), "mmap");
  }
  return info.Env().Undefined();
}

Napi::Value MemSetAccess(const Napi::CallbackInfo& info) {
  uint64_t ptr = ArgU64(info, 0, "address");
  uint64_t size = ArgU64(info, 1, "size");
  if (mprotect(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE) != 0) {
    THROW_ERRNO(info.Env(), "hostMemSetAccess", "ptr=" + Hex(ptr) + ", size=" + std::to_string(size), "mprotect");
  }
  return info.Env().Undefined();
}

// A plain allocation, the host twin of cuMemAlloc.
Napi::Value MemAlloc(const Napi::CallbackInfo& info) {
  uint64_t size = ArgU64(info, 0, "size");
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) THROW_ERRNO(info.Env(), "hostMemAlloc", "size=" + std::to_string(size), "mmap");
  return Napi::Number::New(info.Env(), static_cast<double>(reinterpret_cast<uint64_t>(p)));
}

Napi::Value MemFree(const Napi::CallbackInfo& info) {
  uint64_t ptr = ArgU64(info, 0, "address");
  uint64_t size = ArgU64(info, 1, "size");
  if (munmap(reinterpret_cast<void*>(ptr), size) != 0) {
    THROW_ERRNO(info.Env(), "hostMemFree", "ptr=" + Hex(ptr) + ", size=" + std::to_string(size), "munmap");
  }
  return info.Env().Undefined();
}

// Data access: the caller (TypeScript) has checked the bytes are mapped read-write.
Napi::Value Memset(const Napi::CallbackInfo& info) {
  uint64_t ptr = ArgU64(info, 0, "address");
  uint64_t value = ArgU64(info, 1, "value");
  uint64_t size = ArgU64(info, 2, "size");
  std::memset(reinterpret_cast<void*>(ptr), static_cast<int>(value & 0xff), size);
  return info.Env().Undefined();
}

Napi::Value Write(const Napi::CallbackInfo& info) {
  uint64_t ptr = ArgU64(info, 0, "address");
  Napi::Uint8Array data = BytesArg(info, 1);
  std::memcpy(reinterpret_cast<void*>(ptr), data.Data(), data.ByteLength());
  return info.Env().Undefined();
}

Napi::Value Read(const Napi::CallbackInfo& info) {
  uint64_t ptr = ArgU64(info, 0, "address");
  Napi::Uint8Array out = BytesArg(info, 1);
  std::memcpy(out.Data(), reinterpret_cast<const void*>(ptr), out.ByteLength());
  return info.Env().Undefined();
}

}  // namespace

void InitHost(Napi::Env env, Napi::Object exports) {
  auto fn = [&](const char* name, Napi::Function::Callback cb) { exports.Set(name, Napi::Function::New(env, cb, name)); };
  fn("hostPageSize", PageSize);
  fn("hostMemCreate", MemCreate);
  fn("hostMemResize", MemResize);
  fn("hostMemPunch", MemPunch);
  fn("hostMemRelease", MemRelease);
  fn("hostMemAddressReserve", MemAddressReserve);
  fn("hostMemAddressFree", MemAddressFree);
  fn("hostMemMap", MemMap);
  fn("hostMemUnmap", MemUnmap);
  fn("hostMemSetAccess", MemSetAccess);
  fn("hostMemAlloc", MemAlloc);
  fn("hostMemFree", MemFree);
  fn("hostMemset", Memset);
  fn("hostWrite", Write);
  fn("hostRead", Read);
}

}  // namespace gmvmm
