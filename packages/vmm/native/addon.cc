// Module entry: the error-class hand-off; the helpers live in args.cc, the cuda functions
// in cuda_*.cc (cuda_driver.h says which file holds what), the host ones in
// host_binding.cc. Nothing test-only: the benchmark's in-process loop is an addon of its
// own (bench/bench_loop.cc).
#include "addon.h"

namespace gmvmm {

namespace {
Napi::Value SetErrorClass(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsFunction()) {
    throw Napi::TypeError::New(info.Env(), "setErrorClass expects a constructor");
  }
  auto* state = info.Env().GetInstanceData<AddonState>();
  state->errorClass = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

}  // namespace
}  // namespace gmvmm

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) {
  using namespace gmvmm;
  env.SetInstanceData(new AddonState());
  exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClass, "setErrorClass"));
  InitCuda(env, exports);
  InitHost(env, exports);
  return exports;
}

NODE_API_MODULE(gmlake_vmm, InitModule)
