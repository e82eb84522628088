// The helpers every addon function uses (addon.h): the VmmError hand-off and argument
// parsing. Shared by gmlake_vmm.node and the bench addon (bench/bench_loop.cc).
#include <cmath>
#include <cstdio>
#include <string>

#include "addon.h"

namespace gmvmm {

void ThrowVmmError(Napi::Env env, const std::string& code, const std::string& call, const std::string& message) {
  auto* state = env.GetInstanceData<AddonState>();
  if (state != nullptr && !state->errorClass.IsEmpty()) {
    Napi::Object err = state->errorClass.New(
        {Napi::String::New(env, code), Napi::String::New(env, call), Napi::String::New(env, message)});
    throw Napi::Error(env, err);
  }
  Napi::Error err = Napi::Error::New(env, message);
  err.Set("code", Napi::String::New(env, code));
  err.Set("call", Napi::String::New(env, call));
  throw err;
}

uint64_t ArgU64(const Napi::CallbackInfo& info, size_t index, const char* what) {
  Napi::Env env = info.Env();
  if (index >= info.Length() || !info[index].IsNumber()) {
    throw Napi::TypeError::New(env, std::string("expected a number for ") + what);
  }
  double v = info[index].As<Napi::Number>().DoubleValue();
  if (!(v >= 0) || v > 9007199254740991.0 || std::floor(v) != v) {
    throw Napi::RangeError::New(env, std::string(what) + " must be a non-negative safe integer");
  }
  return static_cast<uint64_t>(v);
}

int ArgInt(const Napi::CallbackInfo& info, size_t index, const char* what) {
  uint64_t v = ArgU64(info, index, what);
  if (v > 0x7fffffff) throw Napi::RangeError::New(info.Env(), std::string(what) + " out of range");
  return static_cast<int>(v);
}

Napi::Uint8Array BytesArg(const Napi::CallbackInfo& info, size_t index) {
  if (index >= info.Length() || !info[index].IsTypedArray() ||
      info[index].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw Napi::TypeError::New(info.Env(), "expected a Uint8Array");
  }
  return info[index].As<Napi::Uint8Array>();
}

std::string Hex(uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace gmvmm
