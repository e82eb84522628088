// libgmlake_torch_alloc.so loaded as PyTorch loads it (dlopen, RTLD_LOCAL) and the entry points
// the C++ checks call (throw_check.cc, takeback_check.cc).
#pragma once

#include <dlfcn.h>

#include <cstddef>

struct EntryPoints {
  void* lib = nullptr;
  int (*start)(const char* config, int threading) = nullptr;
  const char* (*lastError)() = nullptr;
  void* (*alloc)(size_t size, int device, void* stream) = nullptr;
  void (*free)(void* ptr, size_t size, int device, void* stream) = nullptr;

  // False: dlopen failed (dlerror() says why) or an entry point above is missing.
  bool Load(const char* path) {
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return false;
    start = Sym<decltype(start)>("gmlake_start");
    lastError = Sym<decltype(lastError)>("gmlake_last_error");
    alloc = Sym<decltype(alloc)>("gmlake_alloc");
    free = Sym<decltype(free)>("gmlake_free");
    return start && lastError && alloc && free;
  }
  template <class F>
  F Sym(const char* name) const {
    return reinterpret_cast<F>(dlsym(lib, name));
  }
};
