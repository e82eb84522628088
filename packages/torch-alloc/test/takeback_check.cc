// GMLAKE_TAKEBACK=1 around a pool window PyTorch opens (the set_begin_allocate_to_pool hook,
// which Python's ctypes cannot call: it takes a std::function). Run by test/harness.py (case
// "takeback-pool-window", with GMLAKE_TAKEBACK=1):
//   takeback_check LIB   -> exit 0 and one line per check, or exit 1 naming what failed
// 1. before the window: an alloc right after a free of its size and stream takes it back
// 2. while a window is open (its filter takes another stream): a free of an ordinary block is
//    never taken back (kOpFreeInPoolWindow), nor a pool block's free (the pool's own)
// 3. after the window closed: a pool block's free never taken by an ordinary alloc; an
//    ordinary block's taken back again
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "check.h"
#include "entry_points.h"

struct CUstream_st;  // cudaStream_t's, as PyTorch's hook signature has it

namespace {
using Pool = std::pair<unsigned long long, unsigned long long>;
void* const kCaptureStream = reinterpret_cast<void*>(0x7777);
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  EntryPoints lib;
  bool loaded = lib.Load(argv[1]);
  auto alloc = lib.alloc;
  auto freeFn = lib.free;
  auto text = lib.Sym<char* (*)(int, const char*)>("gmlake_text");
  auto begin = lib.Sym<void (*)(int, Pool, std::function<bool(CUstream_st*)>)>("gmlake_begin_allocate_to_pool");
  auto end = lib.Sym<void (*)(int, Pool)>("gmlake_end_allocate_to_pool");
  if (!loaded || !text || !begin || !end) return std::printf("FAIL: %s\n", lib.lib == nullptr ? dlerror() : "an entry point is missing"), 1;
  if (lib.start("{\"policy\":\"vms\",\"driver\":\"host\"}", 0) != 0) return std::printf("FAIL start: %s\n", lib.lastError()), 1;
  auto takebacks = [&] {
    char* s = text(1 /* kTextStats */, "");
    const char* at = std::strstr(s, "\"num_queue_takebacks\":");
    double n = at != nullptr ? std::strtod(at + std::strlen("\"num_queue_takebacks\":"), nullptr) : -1;
    std::free(s);
    return n;
  };
  using gmlake_check::Check;
  const size_t MiB = 1 << 20;
  // 1. before any window
  void* a = alloc(MiB, 0, nullptr);
  freeFn(a, MiB, 0, nullptr);
  void* a2 = alloc(MiB, 0, nullptr);
  Check(a2 == a && takebacks() == 1, "before the window: the free taken back (" + std::to_string(takebacks()) + ")");
  // 2. a window on pool (3, 0) whose filter takes kCaptureStream only (PyTorch's: the capturing stream)
  begin(0, Pool{3, 0}, [](CUstream_st* s) { return static_cast<void*>(s) == kCaptureStream; });
  freeFn(a2, MiB, 0, nullptr);  // an ordinary block freed on the default stream during the window
  void* b = alloc(MiB, 0, nullptr);
  Check(takebacks() == 1, "during the window: an ordinary block's free not taken back");
  void* p = alloc(2 * MiB, 0, kCaptureStream);  // the pool's, kept
  void* q = alloc(2 * MiB, 0, kCaptureStream);
  freeFn(q, 2 * MiB, 0, kCaptureStream);
  alloc(2 * MiB, 0, kCaptureStream);  // the pool's reuse of q (the pool's own, kept till close)
  Check(takebacks() == 1, "during the window: a pool block's free not taken back (the pool reuses its own)");
  end(0, Pool{3, 0});
  // 3. after it
  freeFn(p, 2 * MiB, 0, kCaptureStream);  // a pool block freed after its window: still never an ordinary alloc's
  void* d = alloc(2 * MiB, 0, kCaptureStream);
  Check(d != p && takebacks() == 1, "after the window: a pool block's free not taken back by an ordinary alloc");
  freeFn(d, 2 * MiB, 0, kCaptureStream);
  freeFn(b, MiB, 0, nullptr);
  void* b2 = alloc(MiB, 0, nullptr);
  Check(b2 == b && takebacks() == 2, "after the window: an ordinary block's free taken back again");
  freeFn(b2, MiB, 0, nullptr);
  char* closed = text(4 /* kTextClose */, "");
  Check(std::strstr(closed, "\"liveBytes\":0") != nullptr, std::string("closed clean: ") + closed);
  std::free(closed);
  return gmlake_check::g_failed == 0 ? 0 : 1;
}
