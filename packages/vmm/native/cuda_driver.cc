// The dlopen'ed driver table and the CUDA error mapping, with the two calls about the
// driver itself (cudaLoad, cudaLoadedHere). libcuda.so.1 is dlopen'ed on the first
// cudaLoad() (never linked), so the addon loads on machines without a driver.
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "cuda_driver.h"

namespace gmvmm {

Api g_api;

namespace {

// Process-wide, like libcuda itself.
std::mutex g_mutex;
bool g_attempted = false;
std::string g_library;
int g_driverVersion = 0;
std::string g_failCode, g_failCall, g_failMessage;  // why loading failed (sticky)

std::string ErrorName(cu::CUresult r) {
  const char* name = nullptr;
  if (g_api.cuGetErrorName != nullptr && g_api.cuGetErrorName(r, &name) == 0 && name != nullptr) return name;
  return "CUDA_ERROR_" + std::to_string(static_cast<int>(r));
}

std::string ErrorString(cu::CUresult r) {
  const char* s = nullptr;
  if (g_api.cuGetErrorString != nullptr && g_api.cuGetErrorString(r, &s) == 0 && s != nullptr) return s;
  return "unknown error";
}

template <class F>
bool Sym(void* lib, const char* name, F& out, std::string& missing) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (out == nullptr && missing.empty()) missing = name;
  return out != nullptr;
}

}  // namespace

void Fail(Napi::Env env, cu::CUresult r, const char* call, const std::string& args) {
  std::string name = ErrorName(r);
  ThrowVmmError(env, name, call, std::string(call) + "(" + args + ") failed: " + name + " (" + ErrorString(r) + ")");
}

void EnsureLoaded(Napi::Env env) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_attempted) {
    g_attempted = true;
    const char* candidates[] = {"libcuda.so.1", "libcuda.so"};
    void* lib = nullptr;
    std::string dlerrors;
    for (const char* c : candidates) {
      lib = dlopen(c, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) {
        g_library = c;
        break;
      }
      const char* e = dlerror();
      dlerrors += std::string(dlerrors.empty() ? "" : "; ") + (e ? e : c);
    }
    if (lib == nullptr) {
      g_failCode = "CUDA_DRIVER_NOT_FOUND";
      g_failCall = "dlopen";
      g_failMessage = "no CUDA driver: dlopen(libcuda.so.1) failed: " + dlerrors;
    } else {
      std::string missing;
      Api& a = g_api;
      Sym(lib, "cuGetErrorName", a.cuGetErrorName, missing);
      Sym(lib, "cuGetErrorString", a.cuGetErrorString, missing);
      Sym(lib, "cuInit", a.cuInit, missing);
      Sym(lib, "cuDriverGetVersion", a.cuDriverGetVersion, missing);
      Sym(lib, "cuDeviceGetCount", a.cuDeviceGetCount, missing);
      Sym(lib, "cuDeviceGet", a.cuDeviceGet, missing);
      Sym(lib, "cuDeviceGetName", a.cuDeviceGetName, missing);
      Sym(lib, "cuDeviceTotalMem_v2", a.cuDeviceTotalMem, missing);
      Sym(lib, "cuDeviceGetAttribute", a.cuDeviceGetAttribute, missing);
      Sym(lib, "cuDevicePrimaryCtxRetain", a.cuDevicePrimaryCtxRetain, missing);
      Sym(lib, "cuDevicePrimaryCtxRelease_v2", a.cuDevicePrimaryCtxRelease, missing);
      Sym(lib, "cuCtxSetCurrent", a.cuCtxSetCurrent, missing);
      Sym(lib, "cuCtxSynchronize", a.cuCtxSynchronize, missing);
      Sym(lib, "cuMemGetAllocationGranularity", a.cuMemGetAllocationGranularity, missing);
      Sym(lib, "cuMemCreate", a.cuMemCreate, missing);
      Sym(lib, "cuMemRelease", a.cuMemRelease, missing);
      Sym(lib, "cuMemAddressReserve", a.cuMemAddressReserve, missing);
      Sym(lib, "cuMemAddressFree", a.cuMemAddressFree, missing);
      Sym(lib, "cuMemMap", a.cuMemMap, missing);
      Sym(lib, "cuMemUnmap", a.cuMemUnmap, missing);
      Sym(lib, "cuMemSetAccess", a.cuMemSetAccess, missing);
      Sym(lib, "cuMemGetInfo_v2", a.cuMemGetInfo, missing);
      Sym(lib, "cuMemAlloc_v2", a.cuMemAlloc, missing);
      Sym(lib, "cuMemFree_v2", a.cuMemFree, missing);
      Sym(lib, "cuMemsetD8_v2", a.cuMemsetD8, missing);
      Sym(lib, "cuMemcpyHtoD_v2", a.cuMemcpyHtoD, missing);
      Sym(lib, "cuMemcpyDtoH_v2", a.cuMemcpyDtoH, missing);
      Sym(lib, "cuEventCreate", a.cuEventCreate, missing);
      Sym(lib, "cuEventRecord", a.cuEventRecord, missing);
      Sym(lib, "cuEventQuery", a.cuEventQuery, missing);
      Sym(lib, "cuEventSynchronize", a.cuEventSynchronize, missing);
      Sym(lib, "cuEventDestroy_v2", a.cuEventDestroy, missing);
      Sym(lib, "cuStreamWaitEvent", a.cuStreamWaitEvent, missing);
      Sym(lib, "cuStreamSynchronize", a.cuStreamSynchronize, missing);
      if (!missing.empty()) {
        g_failCode = "CUDA_DRIVER_TOO_OLD";
        g_failCall = "dlsym";
        g_failMessage = "the CUDA driver in " + g_library + " lacks " + missing;
      } else {
        cu::CUresult r = a.cuInit(0);
        if (r != 0) {
          g_failCode = ErrorName(r);
          g_failCall = "cuInit";
          g_failMessage = "cuInit(0) failed: " + g_failCode + " (" + ErrorString(r) + ")";
        } else {
          a.cuDriverGetVersion(&g_driverVersion);
        }
      }
    }
  }
  if (!g_failCode.empty()) ThrowVmmError(env, g_failCode, g_failCall, g_failMessage);
}

namespace cuda {

Napi::Value Load(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  EnsureLoaded(env);
  Napi::Object out = Napi::Object::New(env);
  out.Set("library", g_library);
  out.Set("driverVersion", g_driverVersion);
  return out;
}

// Whether libcuda is in this process already (loaded by the host program, e.g. PyTorch,
// or by an earlier cudaLoad): dlopen with RTLD_NOLOAD loads nothing and runs no code.
Napi::Value LoadedHere(const Napi::CallbackInfo& info) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_NOLOAD);
  if (lib != nullptr) dlclose(lib);  // drop the reference NOLOAD took
  return Napi::Boolean::New(info.Env(), lib != nullptr);
}

}  // namespace cuda

void InitCuda(Napi::Env env, Napi::Object exports) {
  using namespace cuda;
  auto fn = [&](const char* name, Napi::Function::Callback cb) { exports.Set(name, Napi::Function::New(env, cb, name)); };
  fn("cudaLoad", Load);
  fn("cudaLoadedHere", LoadedHere);
  fn("cudaDeviceCount", DeviceCount);
  fn("cudaDeviceName", DeviceName);
  fn("cudaDeviceTotalMem", DeviceTotalMem);
  fn("cudaDeviceVmmSupported", DeviceVmmSupported);
  fn("cudaGranularity", Granularity);
  fn("cudaDeviceOpen", DeviceOpen);
  fn("cudaDeviceClose", DeviceClose);
  fn("cudaMemCreate", MemCreate);
  fn("cudaMemRelease", MemRelease);
  fn("cudaMemAddressReserve", MemAddressReserve);
  fn("cudaMemAddressFree", MemAddressFree);
  fn("cudaMemMap", MemMap);
  fn("cudaMemUnmap", MemUnmap);
  fn("cudaMemSetAccess", MemSetAccess);
  fn("cudaMemGetInfo", MemGetInfo);
  fn("cudaMemAlloc", MemAlloc);
  fn("cudaMemFree", MemFree);
  fn("cudaMemset", Memset);
  fn("cudaWrite", Write);
  fn("cudaRead", Read);
  fn("cudaSynchronize", Synchronize);
  fn("cudaEventCreate", EventCreate);
  fn("cudaEventRecord", EventRecord);
  fn("cudaEventQuery", EventQuery);
  fn("cudaEventSynchronize", EventSynchronize);
  fn("cudaEventDestroy", EventDestroy);
  fn("cudaStreamWaitEvent", StreamWaitEvent);
  fn("cudaStreamSynchronize", StreamSynchronize);
}

}  // namespace gmvmm
