// The CUDA side of the addon, shared by its files: the dlopen'ed driver table and its
// error mapping (cuda_driver.cc), the device every call runs on (cuda_device.cc), and the
// JS functions, one per driver call: cuda_device.cc (devices, contexts), cuda_memory.cc
// (physical handles, mappings, copies), cuda_stream.cc (streams and events).
#pragma once

#include <string>

#include "addon.h"
#include "cuda_api.h"

namespace gmvmm {

struct Api {
  cu::PFN_cuGetErrorName cuGetErrorName = nullptr;
  cu::PFN_cuGetErrorString cuGetErrorString = nullptr;
  cu::PFN_cuInit cuInit = nullptr;
  cu::PFN_cuDriverGetVersion cuDriverGetVersion = nullptr;
  cu::PFN_cuDeviceGetCount cuDeviceGetCount = nullptr;
  cu::PFN_cuDeviceGet cuDeviceGet = nullptr;
  cu::PFN_cuDeviceGetName cuDeviceGetName = nullptr;
  cu::PFN_cuDeviceTotalMem_v2 cuDeviceTotalMem = nullptr;
  cu::PFN_cuDeviceGetAttribute cuDeviceGetAttribute = nullptr;
  cu::PFN_cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRetain = nullptr;
  cu::PFN_cuDevicePrimaryCtxRelease_v2 cuDevicePrimaryCtxRelease = nullptr;
  cu::PFN_cuCtxSetCurrent cuCtxSetCurrent = nullptr;
  cu::PFN_cuCtxSynchronize cuCtxSynchronize = nullptr;
  cu::PFN_cuMemGetAllocationGranularity cuMemGetAllocationGranularity = nullptr;
  cu::PFN_cuMemCreate cuMemCreate = nullptr;
  cu::PFN_cuMemRelease cuMemRelease = nullptr;
  cu::PFN_cuMemAddressReserve cuMemAddressReserve = nullptr;
  cu::PFN_cuMemAddressFree cuMemAddressFree = nullptr;
  cu::PFN_cuMemMap cuMemMap = nullptr;
  cu::PFN_cuMemUnmap cuMemUnmap = nullptr;
  cu::PFN_cuMemSetAccess cuMemSetAccess = nullptr;
  cu::PFN_cuMemGetInfo_v2 cuMemGetInfo = nullptr;
  cu::PFN_cuMemAlloc_v2 cuMemAlloc = nullptr;
  cu::PFN_cuMemFree_v2 cuMemFree = nullptr;
  cu::PFN_cuMemsetD8_v2 cuMemsetD8 = nullptr;
  cu::PFN_cuMemcpyHtoD_v2 cuMemcpyHtoD = nullptr;
  cu::PFN_cuMemcpyDtoH_v2 cuMemcpyDtoH = nullptr;
  cu::PFN_cuEventCreate cuEventCreate = nullptr;
  cu::PFN_cuEventRecord cuEventRecord = nullptr;
  cu::PFN_cuEventQuery cuEventQuery = nullptr;
  cu::PFN_cuEventSynchronize cuEventSynchronize = nullptr;
  cu::PFN_cuEventDestroy_v2 cuEventDestroy = nullptr;
  cu::PFN_cuStreamWaitEvent cuStreamWaitEvent = nullptr;
  cu::PFN_cuStreamSynchronize cuStreamSynchronize = nullptr;
};

// Process-wide, like libcuda itself; filled by EnsureLoaded.
extern Api g_api;

/** Loads libcuda and runs cuInit once; afterwards reports the same outcome (throws on failure). */
void EnsureLoaded(Napi::Env env);

/** Throws the VmmError of a failed driver call: its code is the CUDA error's name. */
[[noreturn]] void Fail(Napi::Env env, cu::CUresult r, const char* call, const std::string& args);

// The argument text is built only on failure: formatting it on every call would cost
// more than the binding itself.
#define CU_CHECK(env, expr, call, args)    \
  do {                                     \
    cu::CUresult r_ = (expr);              \
    if (r_ != 0) Fail(env, r_, call, args); \
  } while (0)

struct Device {
  int ordinal;
  cu::CUdevice dev;
  cu::CUcontext ctx;
  bool open;
  static void Finalize(Device* d) { delete d; }
};

/** The open device of argument `index`, its context made current on this thread. */
Device* OpenDevice(const Napi::CallbackInfo& info, size_t index);

/** [first, second] as a JS array of two numbers (granularities, free and total bytes). */
inline Napi::Array SizePair(Napi::Env env, size_t first, size_t second) {
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, Napi::Number::New(env, static_cast<double>(first)));
  out.Set(1u, Napi::Number::New(env, static_cast<double>(second)));
  return out;
}

/** The allocation property of a pinned device allocation on `ordinal`. */
cu::CUmemAllocationProp DeviceProp(int ordinal);

// The JS functions, one per driver call, registered by InitCuda (cuda_driver.cc). In a
// namespace of their own: host_binding.cc has functions of the same names.
namespace cuda {
// cuda_driver.cc
Napi::Value Load(const Napi::CallbackInfo& info);
Napi::Value LoadedHere(const Napi::CallbackInfo& info);
// cuda_device.cc
Napi::Value DeviceCount(const Napi::CallbackInfo& info);
Napi::Value DeviceName(const Napi::CallbackInfo& info);
Napi::Value DeviceTotalMem(const Napi::CallbackInfo& info);
Napi::Value DeviceVmmSupported(const Napi::CallbackInfo& info);
Napi::Value Granularity(const Napi::CallbackInfo& info);
Napi::Value DeviceOpen(const Napi::CallbackInfo& info);
Napi::Value DeviceClose(const Napi::CallbackInfo& info);
// cuda_memory.cc
Napi::Value MemCreate(const Napi::CallbackInfo& info);
Napi::Value MemRelease(const Napi::CallbackInfo& info);
Napi::Value MemAddressReserve(const Napi::CallbackInfo& info);
Napi::Value MemAddressFree(const Napi::CallbackInfo& info);
Napi::Value MemMap(const Napi::CallbackInfo& info);
Napi::Value MemUnmap(const Napi::CallbackInfo& info);
Napi::Value MemSetAccess(const Napi::CallbackInfo& info);
Napi::Value MemGetInfo(const Napi::CallbackInfo& info);
Napi::Value MemAlloc(const Napi::CallbackInfo& info);
Napi::Value MemFree(const Napi::CallbackInfo& info);
Napi::Value Memset(const Napi::CallbackInfo& info);
Napi::Value Write(const Napi::CallbackInfo& info);
Napi::Value Read(const Napi::CallbackInfo& info);
Napi::Value Synchronize(const Napi::CallbackInfo& info);
// cuda_stream.cc
Napi::Value EventCreate(const Napi::CallbackInfo& info);
Napi::Value EventRecord(const Napi::CallbackInfo& info);
Napi::Value EventQuery(const Napi::CallbackInfo& info);
Napi::Value EventSynchronize(const Napi::CallbackInfo& info);
Napi::Value EventDestroy(const Napi::CallbackInfo& info);
Napi::Value StreamWaitEvent(const Napi::CallbackInfo& info);
Napi::Value StreamSynchronize(const Napi::CallbackInfo& info);
}  // namespace cuda

}  // namespace gmvmm
