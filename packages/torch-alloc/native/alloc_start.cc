// gmlake_start (torch_alloc.h): finds libnode and the builtin files it reads, loads
// libgmlake_embed.so and starts the engine through it; and what a fork() after that leaves.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "config.h"
#include "torch_alloc.h"

namespace gmlake {

namespace {

std::mutex g_startMutex;
std::string g_startError;

// The fd through which the patched libnode reads its builtin JS files (scripts/fetch-libnode.sh).
constexpr int kBuiltinFd = 987;

std::string Dir(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The folder this library was loaded from (build/lib in the package).
std::string SelfDir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&SelfDir), &info) == 0 || info.dli_fname == nullptr) return ".";
  char* real = realpath(info.dli_fname, nullptr);
  std::string p = real != nullptr ? real : info.dli_fname;
  std::free(real);
  return Dir(p);
}

void OnForkChild() {
  g_forked.store(true);
  g_exiting.store(true);
}

// Registered after libnode was loaded, so it runs before libnode's and libuv's destructors;
// in the parent it does nothing.
void ExitForkedChild(int status, void*) {
  if (!g_forked.load()) return;
  std::fflush(nullptr);
  _exit(status);
}

}  // namespace

}  // namespace gmlake

using namespace gmlake;

/**
 * Starts the engine: config_json is what the bridge takes (policy, knobs, driver, ...),
 * threading 0 = a Locker per call, 1 = one JS thread. Returns 0, or -1 with
 * gmlake_last_error() saying why. A second call after success is a no-op; after a failure
 * it fails again with the same message (Node cannot be started twice in a process).
 */
GMLAKE_EXPORT int gmlake_start(const char* config_json, int threading) {
  std::lock_guard<std::mutex> lock(g_startMutex);
  if (g_forked.load()) {
    t_error = kForkedError;
    return -1;
  }
  if (g_call != nullptr) return 0;
  if (!g_startError.empty()) {
    t_error = g_startError;
    return -1;
  }
  auto fail = [&](const std::string& m) {
    g_startError = m;
    t_error = m;
    return -1;
  };
  std::string dir = SelfDir();
  std::string pkg = Dir(Dir(dir));  // <pkg>/build/lib -> <pkg>
  std::string libnodeDir = ReadLibnodeDir(pkg + "/build/libnode/usr/lib/x86_64-linux-gnu");  // GMLAKE_LIBNODE_DIR
  if (!Exists(libnodeDir + "/libnode.so.108")) {
    return fail("gmlake: libnode.so.108 not found in " + libnodeDir +
                " (run `pnpm --filter @gmlake/torch-alloc build`, which fetches Debian's libnode108, or set GMLAKE_LIBNODE_DIR)");
  }
  // libnode reads these builtin files when it creates its context and aborts the process
  // without them. scripts/fetch-libnode.sh patched its /usr/share/nodejs/ to
  // /proc/self/fd/987/: that fd is the unpacked share/nodejs folder, kept open.
  std::string builtinDir = Dir(Dir(libnodeDir)) + "/share/nodejs";
  const char* builtins[] = {"cjs-module-lexer/lexer.js", "cjs-module-lexer/dist/lexer.js", "undici/undici-fetch.js",
                            "acorn/dist/acorn.js", "acorn-walk/dist/walk.js"};
  for (const char* b : builtins) {
    if (!Exists(builtinDir + "/" + b)) {
      return fail("gmlake: " + builtinDir + "/" + b + " is missing; libnode aborts without it (rerun scripts/fetch-libnode.sh --force)");
    }
  }
  if (fcntl(kBuiltinFd, F_GETFD) == -1) {
    int fd = open(builtinDir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || dup3(fd, kBuiltinFd, O_CLOEXEC) < 0) {
      if (fd >= 0) close(fd);
      return fail("gmlake: cannot open " + builtinDir + " as fd " + std::to_string(kBuiltinFd) + ": " + std::strerror(errno));
    }
    close(fd);
  } else {
    char link[64], target[4096];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", kBuiltinFd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    char* real = realpath(builtinDir.c_str(), nullptr);
    bool ours = n > 0 && real != nullptr && std::string(target, n) == real;
    std::free(real);
    if (!ours) return fail("gmlake: fd " + std::to_string(kBuiltinFd) + " is taken by the process; libnode's builtin files are read through it");
  }
  std::string embedPath = dir + "/libgmlake_embed.so";
  // libnode goes to global scope: the vmm addon's napi_* symbols resolve against it.
  void* embed = dlopen(embedPath.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (embed == nullptr) {
    const char* e = dlerror();
    return fail(std::string("gmlake: cannot load ") + embedPath + ": " + (e != nullptr ? e : "unknown error"));
  }
  dlopen("libnode.so.108", RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  auto start = reinterpret_cast<gmlake_embed_start_fn>(dlsym(embed, "gmlake_embed_start"));
  auto call = reinterpret_cast<gmlake_embed_call_fn>(dlsym(embed, "gmlake_embed_call"));
  auto text = reinterpret_cast<gmlake_embed_text_fn>(dlsym(embed, "gmlake_embed_text"));
  if (start == nullptr || call == nullptr || text == nullptr) return fail("gmlake: " + embedPath + " lacks its entry points");
  g_embedTimes = reinterpret_cast<gmlake_embed_times_fn>(dlsym(embed, "gmlake_embed_times"));
  std::string boot = pkg + "/native/boot.cjs";
  char err[4096] = {0};
  if (start(boot.c_str(), config_json, threading, err, sizeof err) != 0) return fail(std::string("gmlake: ") + err);
  if (std::strstr(config_json, "\"driver\":\"cuda\"") != nullptr) LoadCaptureCheck();
  // the embedding reads GMLAKE_TIME_CALLS at its start; its answer: off, the parts too (1), or the
  // whole calls only (total)
  double probe[4];
  g_timeCalls = g_embedTimes != nullptr && g_embedTimes(probe) != 0;
  g_text = text;
  g_call = call;
  std::atexit([] { g_exiting.store(true); });
  pthread_atfork(nullptr, nullptr, OnForkChild);
  on_exit(ExitForkedChild, nullptr);
  return 0;
}
