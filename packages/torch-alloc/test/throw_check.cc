// What PyTorch sees when an allocation fails: gmlake_alloc (the entry point PyTorch calls)
// throws a C++ exception, never returns null. Run by test/harness.py (case "throw"):
//   throw_check LIB   -> exit 0 and one line per check, or exit 1 naming what failed
// 1. out of memory without a registered thrower: std::runtime_error "CUDA out of memory..."
// 2. with a thrower registered (what the OOM shim does with c10::OutOfMemoryError): its type
// 3. an allocation of another device: std::runtime_error naming the device
// and after each, the allocator still serves a request.
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "entry_points.h"

namespace {
struct FakeTorchOom : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void Thrower(const char* msg) { throw FakeTorchOom(msg); }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  EntryPoints lib;
  if (!lib.Load(argv[1])) return std::printf("FAIL dlopen: %s\n", lib.lib == nullptr ? dlerror() : "an entry point is missing"), 1;
  auto alloc = lib.alloc;
  auto freeFn = lib.free;
  auto setThrower = lib.Sym<void (*)(void (*)(const char*))>("gmlake_set_oom_thrower");
  if (lib.start("{\"policy\":\"vms\",\"driver\":\"host\",\"capacityBytes\":67108864}", 0) != 0) {
    return std::printf("FAIL start: %s\n", lib.lastError()), 1;
  }
  auto stillWorks = [&](const char* after) {
    void* p = alloc(1 << 20, 0, nullptr);
    std::memset(p, 1, 1 << 20);
    freeFn(p, 1 << 20, 0, nullptr);
    std::printf("ok: allocations work after %s\n", after);
  };
  try {
    alloc(size_t(1) << 30, 0, nullptr);
    return std::printf("FAIL: 1 GiB on a 64 MiB device returned\n"), 1;
  } catch (const std::runtime_error& e) {
    if (std::strncmp(e.what(), "CUDA out of memory. Tried to allocate 1.00 GiB", 46) != 0) {
      return std::printf("FAIL: out-of-memory message: %s\n", e.what()), 1;
    }
    std::printf("ok: std::runtime_error: %.80s...\n", e.what());
  }
  stillWorks("an out of memory");
  setThrower(Thrower);
  try {
    alloc(size_t(1) << 30, 0, nullptr);
    return std::printf("FAIL: returned with a thrower registered\n"), 1;
  } catch (const FakeTorchOom& e) {
    std::printf("ok: the registered thrower's type (as c10::OutOfMemoryError would be)\n");
  } catch (const std::exception& e) {
    return std::printf("FAIL: not the thrower's type: %s\n", e.what()), 1;
  }
  stillWorks("the thrower");
  try {
    alloc(4096, 1, nullptr);
    return std::printf("FAIL: device 1 served\n"), 1;
  } catch (const FakeTorchOom&) {
    return std::printf("FAIL: a wrong device reported as out of memory\n"), 1;
  } catch (const std::runtime_error& e) {
    if (std::strstr(e.what(), "device 1") == nullptr) return std::printf("FAIL: message: %s\n", e.what()), 1;
    std::printf("ok: %s\n", e.what());
  }
  stillWorks("a wrong device");
  return 0;
}
