// Devices and their contexts: the queries (count, name, memory, VMM support, granularity)
// and cudaDeviceOpen/Close, which retain and release the device's primary context.
#include <string>

#include "cuda_driver.h"

namespace gmvmm {
namespace {

const napi_type_tag kDeviceTag = {0x6d6c616b65637564ULL, 0x6465766963653031ULL};  // "gmlake cuda device"
// The context current on this thread, as set here: OpenDevice skips cuCtxSetCurrent when it is the device's.
thread_local cu::CUcontext t_current = nullptr;

cu::CUdevice GetDevice(Napi::Env env, int ordinal, const char* call) {
  cu::CUdevice dev = 0;
  CU_CHECK(env, g_api.cuDeviceGet(&dev, ordinal), "cuDeviceGet", "ordinal=" + std::to_string(ordinal));
  (void)call;
  return dev;
}

}  // namespace

Device* OpenDevice(const Napi::CallbackInfo& info, size_t index) {
  Device* d = Unwrap<Device>(info, index, &kDeviceTag, "a CUDA device (from cudaDeviceOpen)");
  if (!d->open) ThrowVmmError(info.Env(), "CUDA_ERROR_INVALID_CONTEXT", "cuCtxSetCurrent", "device was closed");
  if (t_current != d->ctx) {
    CU_CHECK(info.Env(), g_api.cuCtxSetCurrent(d->ctx), "cuCtxSetCurrent", "device=" + std::to_string(d->ordinal));
    t_current = d->ctx;
  }
  return d;
}

cu::CUmemAllocationProp DeviceProp(int ordinal) {
  cu::CUmemAllocationProp prop{};
  prop.type = GMLAKE_CU_CONST(CU_MEM_ALLOCATION_TYPE_PINNED);
  prop.requestedHandleTypes = GMLAKE_CU_CONST(CU_MEM_HANDLE_TYPE_NONE);
  prop.location.type = GMLAKE_CU_CONST(CU_MEM_LOCATION_TYPE_DEVICE);
  prop.location.id = ordinal;
  return prop;
}

namespace cuda {

Napi::Value DeviceCount(const Napi::CallbackInfo& info) {
  EnsureLoaded(info.Env());
  int n = 0;
  CU_CHECK(info.Env(), g_api.cuDeviceGetCount(&n), "cuDeviceGetCount", "");
  return Napi::Number::New(info.Env(), n);
}

Napi::Value DeviceName(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  EnsureLoaded(env);
  int ordinal = ArgInt(info, 0, "ordinal");
  char name[256] = {0};
  CU_CHECK(env, g_api.cuDeviceGetName(name, sizeof name - 1, GetDevice(env, ordinal, "cuDeviceGetName")),
        "cuDeviceGetName", "device=" + std::to_string(ordinal));
  return Napi::String::New(env, name);
}

Napi::Value DeviceTotalMem(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  EnsureLoaded(env);
  int ordinal = ArgInt(info, 0, "ordinal");
  size_t bytes = 0;
  CU_CHECK(env, g_api.cuDeviceTotalMem(&bytes, GetDevice(env, ordinal, "cuDeviceTotalMem")), "cuDeviceTotalMem_v2",
        "device=" + std::to_string(ordinal));
  return Napi::Number::New(env, static_cast<double>(bytes));
}

Napi::Value DeviceVmmSupported(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  EnsureLoaded(env);
  int ordinal = ArgInt(info, 0, "ordinal");
  int v = 0;
  CU_CHECK(env,
        g_api.cuDeviceGetAttribute(&v, GMLAKE_CU_CONST(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
                                   GetDevice(env, ordinal, "cuDeviceGetAttribute")),
        "cuDeviceGetAttribute", "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device=" + std::to_string(ordinal));
  return Napi::Boolean::New(env, v != 0);
}

Napi::Value Granularity(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  EnsureLoaded(env);
  int ordinal = ArgInt(info, 0, "ordinal");
  cu::CUmemAllocationProp prop = DeviceProp(ordinal);
  size_t minimum = 0, recommended = 0;
  CU_CHECK(env, g_api.cuMemGetAllocationGranularity(&minimum, &prop, GMLAKE_CU_CONST(CU_MEM_ALLOC_GRANULARITY_MINIMUM)),
        "cuMemGetAllocationGranularity", "MINIMUM, device=" + std::to_string(ordinal));
  CU_CHECK(env,
        g_api.cuMemGetAllocationGranularity(&recommended, &prop,
                                            GMLAKE_CU_CONST(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)),
        "cuMemGetAllocationGranularity", "RECOMMENDED, device=" + std::to_string(ordinal));
  return SizePair(env, minimum, recommended);
}

// Retains the device's primary context (released by cudaDeviceClose).
Napi::Value DeviceOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  EnsureLoaded(env);
  int ordinal = ArgInt(info, 0, "ordinal");
  cu::CUdevice dev = GetDevice(env, ordinal, "cuDevicePrimaryCtxRetain");
  cu::CUcontext ctx = nullptr;
  CU_CHECK(env, g_api.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain",
        "device=" + std::to_string(ordinal));
  CU_CHECK(env, g_api.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", "device=" + std::to_string(ordinal));
  t_current = ctx;
  return MakeTagged(env, &kDeviceTag, new Device{ordinal, dev, ctx, true});
}

Napi::Value DeviceClose(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Device* d = Unwrap<Device>(info, 0, &kDeviceTag, "a CUDA device (from cudaDeviceOpen)");
  if (d->open) {
    d->open = false;
    if (t_current == d->ctx) {
      g_api.cuCtxSetCurrent(nullptr);
      t_current = nullptr;
    }
    CU_CHECK(env, g_api.cuDevicePrimaryCtxRelease(d->dev), "cuDevicePrimaryCtxRelease_v2",
          "device=" + std::to_string(d->ordinal));
  }
  return env.Undefined();
}

}  // namespace cuda
}  // namespace gmvmm
