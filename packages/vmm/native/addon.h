// Shared pieces of the addon: per-environment state, the VmmError class handed in from
// JavaScript, argument parsing and type-tagged native handles.
#pragma once

#include <napi.h>

#include <cstdint>
#include <string>

namespace gmvmm {

struct AddonState {
  Napi::FunctionReference errorClass;  // VmmError, set once by setErrorClass()
};

/** Throws `new VmmError(code, call, message)` (a plain Error with `code` before setErrorClass). */
[[noreturn]] void ThrowVmmError(Napi::Env env, const std::string& code, const std::string& call,
                                const std::string& message);

/** A non-negative integer argument that fits a double exactly (addresses and sizes). */
uint64_t ArgU64(const Napi::CallbackInfo& info, size_t index, const char* what);
int ArgInt(const Napi::CallbackInfo& info, size_t index, const char* what);
/** A Uint8Array argument (the bytes of a write, the buffer of a read). */
Napi::Uint8Array BytesArg(const Napi::CallbackInfo& info, size_t index);
std::string Hex(uint64_t value);

/** Wraps `data` in a fresh object tagged with `tag`; the finalizer owns `data`. */
template <class T>
Napi::Object MakeTagged(Napi::Env env, const napi_type_tag* tag, T* data) {
  Napi::Object obj = Napi::Object::New(env);
  obj.TypeTag(tag);
  napi_status status = napi_wrap(
      env, obj, data, [](napi_env, void* p, void*) { T::Finalize(static_cast<T*>(p)); }, nullptr, nullptr);
  NAPI_THROW_IF_FAILED(env, status, obj);
  return obj;
}

/** The native data behind argument `index`, or a TypeError if it is not an object tagged `tag`. */
template <class T>
T* Unwrap(const Napi::CallbackInfo& info, size_t index, const napi_type_tag* tag, const char* what) {
  Napi::Env env = info.Env();
  if (index >= info.Length() || !info[index].IsObject() || !info[index].As<Napi::Object>().CheckTypeTag(tag)) {
    throw Napi::TypeError::New(env, std::string("expected ") + what + " as argument " + std::to_string(index + 1));
  }
  void* p = nullptr;
  NAPI_THROW_IF_FAILED(env, napi_unwrap(env, info[index], &p), nullptr);
  return static_cast<T*>(p);
}

void InitCuda(Napi::Env env, Napi::Object exports);
void InitHost(Napi::Env env, Napi::Object exports);

}  // namespace gmvmm
