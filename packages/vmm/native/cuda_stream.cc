// Streams and events. A stream argument is the raw CUstream value as a number
// (0 = legacy default stream).
#include <cstdint>
#include <string>

#include "cuda_driver.h"

namespace gmvmm {
namespace {

const napi_type_tag kEventTag = {0x6d6c616b65637564ULL, 0x6576656e74303031ULL};  // "gmlake cuda event"

struct Event {
  cu::CUevent ev;
  bool destroyed;
  // An event nobody destroyed is leaked rather than destroyed from the GC thread
  // without its context current.
  static void Finalize(Event* e) { delete e; }
};

cu::CUstream StreamArg(const Napi::CallbackInfo& info, size_t index) {
  return reinterpret_cast<cu::CUstream>(static_cast<uintptr_t>(ArgU64(info, index, "stream")));
}

// Not a live event of this addon: CUDA_ERROR_INVALID_HANDLE, as CUDA answers a bad CUevent
// (a destroyed one is never handed to CUDA: that would be a use after free).
Event* LiveEvent(const Napi::CallbackInfo& info, size_t index, const char* call) {
  Napi::Env env = info.Env();
  if (index >= info.Length() || !info[index].IsObject() || !info[index].As<Napi::Object>().CheckTypeTag(&kEventTag)) {
    ThrowVmmError(env, "CUDA_ERROR_INVALID_HANDLE", call, std::string(call) + ": not an event from cudaEventCreate");
  }
  void* p = nullptr;
  NAPI_THROW_IF_FAILED(env, napi_unwrap(env, info[index], &p), nullptr);
  auto* e = static_cast<Event*>(p);
  if (e->destroyed) ThrowVmmError(env, "CUDA_ERROR_INVALID_HANDLE", call, std::string(call) + ": event was destroyed");
  return e;
}

}  // namespace

namespace cuda {

Napi::Value EventCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  uint64_t id = ArgU64(info, 1, "id");
  cu::CUevent ev = nullptr;
  CU_CHECK(env, g_api.cuEventCreate(&ev, GMLAKE_CU_CONST(CU_EVENT_DISABLE_TIMING)), "cuEventCreate", "CU_EVENT_DISABLE_TIMING");
  Napi::Object obj = MakeTagged(env, &kEventTag, new Event{ev, false});
  obj.DefineProperty(Napi::PropertyDescriptor::Value("id", Napi::Number::New(env, static_cast<double>(id)), napi_enumerable));
  return obj;
}

Napi::Value EventRecord(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  Event* e = LiveEvent(info, 1, "cuEventRecord");
  cu::CUstream s = StreamArg(info, 2);
  CU_CHECK(env, g_api.cuEventRecord(e->ev, s), "cuEventRecord", "stream=" + Hex(reinterpret_cast<uintptr_t>(s)));
  return env.Undefined();
}

// true = complete (CUDA_SUCCESS), false = CUDA_ERROR_NOT_READY; anything else throws.
Napi::Value EventQuery(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  Event* e = LiveEvent(info, 1, "cuEventQuery");
  cu::CUresult r = g_api.cuEventQuery(e->ev);
  if (r == GMLAKE_CU_CONST(CUDA_ERROR_NOT_READY)) return Napi::Boolean::New(env, false);
  if (r != 0) Fail(env, r, "cuEventQuery", "");
  return Napi::Boolean::New(env, true);
}

Napi::Value EventSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  Event* e = LiveEvent(info, 1, "cuEventSynchronize");
  CU_CHECK(env, g_api.cuEventSynchronize(e->ev), "cuEventSynchronize", "");
  return env.Undefined();
}

Napi::Value EventDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  Event* e = LiveEvent(info, 1, "cuEventDestroy");
  CU_CHECK(env, g_api.cuEventDestroy(e->ev), "cuEventDestroy_v2", "");
  e->destroyed = true;
  return env.Undefined();
}

Napi::Value StreamWaitEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  cu::CUstream s = StreamArg(info, 1);
  Event* e = LiveEvent(info, 2, "cuStreamWaitEvent");
  CU_CHECK(env, g_api.cuStreamWaitEvent(s, e->ev, 0), "cuStreamWaitEvent", "stream=" + Hex(reinterpret_cast<uintptr_t>(s)));
  return env.Undefined();
}

Napi::Value StreamSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  cu::CUstream s = StreamArg(info, 1);
  CU_CHECK(env, g_api.cuStreamSynchronize(s), "cuStreamSynchronize", "stream=" + Hex(reinterpret_cast<uintptr_t>(s)));
  return env.Undefined();
}

}  // namespace cuda
}  // namespace gmvmm
