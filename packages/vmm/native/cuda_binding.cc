// CUDA driver calls, one JS function per call. libcuda.so.1 is dlopen'ed on the first
// cudaLoad() (never linked), so the addon loads on machines without a driver.
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "addon.h"
#include "cuda_api.h"

namespace gmvmm {
namespace {

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

// Process-wide, like libcuda itself.
std::mutex g_mutex;
bool g_attempted = false;
Api g_api;
std::string g_library;
int g_driverVersion = 0;
std::string g_failCode, g_failCall, g_failMessage;  // why loading failed (sticky)
thread_local cu::CUcontext t_current = nullptr;

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

[[noreturn]] void Fail(Napi::Env env, cu::CUresult r, const char* call, const std::string& args) {
  std::string name = ErrorName(r);
  ThrowVmmError(env, name, call, std::string(call) + "(" + args + ") failed: " + name + " (" + ErrorString(r) + ")");
}

// The argument text is built only on failure: formatting it on every call would cost
// more than the binding itself.
#define CU_CHECK(env, expr, call, args)    \
  do {                                     \
    cu::CUresult r_ = (expr);              \
    if (r_ != 0) Fail(env, r_, call, args); \
  } while (0)

template <class F>
bool Sym(void* lib, const char* name, F& out, std::string& missing) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (out == nullptr && missing.empty()) missing = name;
  return out != nullptr;
}

// Loads libcuda and runs cuInit once; afterwards reports the same outcome.
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

struct Device {
  int ordinal;
  cu::CUdevice dev;
  cu::CUcontext ctx;
  bool open;
  static void Finalize(Device* d) { delete d; }
};

struct Handle {
  cu::CUmemGenericAllocationHandle h;
  uint64_t size;
  bool released;
  static void Finalize(Handle* h) { delete h; }
};

const napi_type_tag kDeviceTag = {0x6d6c616b65637564ULL, 0x6465766963653031ULL};  // "gmlake cuda device"
const napi_type_tag kHandleTag = {0x6d6c616b65637564ULL, 0x68616e646c653031ULL};  // "gmlake cuda handle"
const napi_type_tag kEventTag = {0x6d6c616b65637564ULL, 0x6576656e74303031ULL};  // "gmlake cuda event"

struct Event {
  cu::CUevent ev;
  bool destroyed;
  // An event nobody destroyed is leaked rather than destroyed from the GC thread
  // without its context current.
  static void Finalize(Event* e) { delete e; }
};

cu::CUdevice GetDevice(Napi::Env env, int ordinal, const char* call) {
  cu::CUdevice dev = 0;
  CU_CHECK(env, g_api.cuDeviceGet(&dev, ordinal), "cuDeviceGet", "ordinal=" + std::to_string(ordinal));
  (void)call;
  return dev;
}

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
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, Napi::Number::New(env, static_cast<double>(minimum)));
  out.Set(1u, Napi::Number::New(env, static_cast<double>(recommended)));
  return out;
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

Napi::Value MemCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Device* d = OpenDevice(info, 0);
  uint64_t size = ArgU64(info, 1, "size");
  uint64_t id = ArgU64(info, 2, "id");
  cu::CUmemAllocationProp prop = DeviceProp(d->ordinal);
  cu::CUmemGenericAllocationHandle h = 0;
  CU_CHECK(env, g_api.cuMemCreate(&h, size, &prop, 0), "cuMemCreate",
        "size=" + std::to_string(size) + ", device=" + std::to_string(d->ordinal));
  Napi::Object obj = MakeTagged(env, &kHandleTag, new Handle{h, size, false});
  obj.DefineProperties({
      Napi::PropertyDescriptor::Value("id", Napi::Number::New(env, static_cast<double>(id)), napi_enumerable),
      Napi::PropertyDescriptor::Value("size", Napi::Number::New(env, static_cast<double>(size)), napi_enumerable),
  });
  return obj;
}

Handle* LiveHandle(const Napi::CallbackInfo& info, size_t index, const char* call) {
  Handle* h = Unwrap<Handle>(info, index, &kHandleTag, "a CUDA physical handle (from cudaMemCreate)");
  if (h->released) ThrowVmmError(info.Env(), "CUDA_ERROR_INVALID_VALUE", call, std::string(call) + ": handle was already released");
  return h;
}

Napi::Value MemRelease(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  Handle* h = LiveHandle(info, 1, "cuMemRelease");
  CU_CHECK(env, g_api.cuMemRelease(h->h), "cuMemRelease", "handle of " + std::to_string(h->size) + " bytes");
  h->released = true;
  return env.Undefined();
}

Napi::Value MemAddressReserve(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  uint64_t size = ArgU64(info, 1, "size");
  uint64_t alignment = ArgU64(info, 2, "alignment");
  cu::CUdeviceptr ptr = 0;
  CU_CHECK(env, g_api.cuMemAddressReserve(&ptr, size, alignment, 0, 0), "cuMemAddressReserve",
        "size=" + std::to_string(size) + ", alignment=" + std::to_string(alignment));
  return Napi::Number::New(env, static_cast<double>(ptr));
}

Napi::Value MemAddressFree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  uint64_t ptr = ArgU64(info, 1, "address");
  uint64_t size = ArgU64(info, 2, "size");
  CU_CHECK(env, g_api.cuMemAddressFree(ptr, size), "cuMemAddressFree", "ptr=" + Hex(ptr) + ", size=" + std::to_string(size));
  return env.Undefined();
}

Napi::Value MemMap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  uint64_t ptr = ArgU64(info, 1, "address");
  uint64_t size = ArgU64(info, 2, "size");
  uint64_t offset = ArgU64(info, 3, "offset");
  Handle* h = LiveHandle(info, 4, "cuMemMap");
  CU_CHECK(env, g_api.cuMemMap(ptr, size, offset, h->h, 0), "cuMemMap",
        "ptr=" + Hex(ptr) + ", size=" + std::to_string(size) + ", offset=" + std::to_string(offset) +
            ", handle of " + std::to_string(h->size) + " bytes");
  return env.Undefined();
}

Napi::Value MemUnmap(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  uint64_t ptr = ArgU64(info, 1, "address");
  uint64_t size = ArgU64(info, 2, "size");
  CU_CHECK(env, g_api.cuMemUnmap(ptr, size), "cuMemUnmap", "ptr=" + Hex(ptr) + ", size=" + std::to_string(size));
  return env.Undefined();
}

Napi::Value MemSetAccess(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Device* d = OpenDevice(info, 0);
  uint64_t ptr = ArgU64(info, 1, "address");
  uint64_t size = ArgU64(info, 2, "size");
  cu::CUmemAccessDesc desc{};
  desc.location.type = GMLAKE_CU_CONST(CU_MEM_LOCATION_TYPE_DEVICE);
  desc.location.id = d->ordinal;
  desc.flags = GMLAKE_CU_CONST(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CU_CHECK(env, g_api.cuMemSetAccess(ptr, size, &desc, 1), "cuMemSetAccess",
        "ptr=" + Hex(ptr) + ", size=" + std::to_string(size) + ", READWRITE for device " + std::to_string(d->ordinal));
  return env.Undefined();
}

Napi::Value MemGetInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  size_t freeBytes = 0, total = 0;
  CU_CHECK(env, g_api.cuMemGetInfo(&freeBytes, &total), "cuMemGetInfo_v2", "");
  Napi::Array out = Napi::Array::New(env, 2);
  out.Set(0u, Napi::Number::New(env, static_cast<double>(freeBytes)));
  out.Set(1u, Napi::Number::New(env, static_cast<double>(total)));
  return out;
}

Napi::Value MemAlloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  uint64_t size = ArgU64(info, 1, "size");
  cu::CUdeviceptr ptr = 0;
  CU_CHECK(env, g_api.cuMemAlloc(&ptr, size), "cuMemAlloc_v2", "size=" + std::to_string(size));
  return Napi::Number::New(env, static_cast<double>(ptr));
}

Napi::Value MemFree(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  uint64_t ptr = ArgU64(info, 1, "address");
  CU_CHECK(env, g_api.cuMemFree(ptr), "cuMemFree_v2", "ptr=" + Hex(ptr));
  return env.Undefined();
}

Napi::Value Memset(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  uint64_t ptr = ArgU64(info, 1, "address");
  uint64_t value = ArgU64(info, 2, "value");
  uint64_t size = ArgU64(info, 3, "size");
  CU_CHECK(env, g_api.cuMemsetD8(ptr, static_cast<unsigned char>(value), size), "cuMemsetD8_v2",
        "ptr=" + Hex(ptr) + ", value=" + std::to_string(value & 0xff) + ", size=" + std::to_string(size));
  return env.Undefined();
}

Napi::Uint8Array BytesArg(const Napi::CallbackInfo& info, size_t index) {
  if (index >= info.Length() || !info[index].IsTypedArray() ||
      info[index].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    throw Napi::TypeError::New(info.Env(), "expected a Uint8Array");
  }
  return info[index].As<Napi::Uint8Array>();
}

Napi::Value Write(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  uint64_t ptr = ArgU64(info, 1, "address");
  Napi::Uint8Array data = BytesArg(info, 2);
  CU_CHECK(env, g_api.cuMemcpyHtoD(ptr, data.Data(), data.ByteLength()), "cuMemcpyHtoD_v2",
        "dst=" + Hex(ptr) + ", bytes=" + std::to_string(data.ByteLength()));
  return env.Undefined();
}

Napi::Value Read(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  uint64_t ptr = ArgU64(info, 1, "address");
  Napi::Uint8Array out = BytesArg(info, 2);
  CU_CHECK(env, g_api.cuMemcpyDtoH(out.Data(), ptr, out.ByteLength()), "cuMemcpyDtoH_v2",
        "src=" + Hex(ptr) + ", bytes=" + std::to_string(out.ByteLength()));
  return env.Undefined();
}

Napi::Value Synchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenDevice(info, 0);
  CU_CHECK(env, g_api.cuCtxSynchronize(), "cuCtxSynchronize", "");
  return env.Undefined();
}

// ---- streams and events ------------------------------------------------------------------
// A stream argument is the raw CUstream value as a number (0 = legacy default stream).

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

}  // namespace

void InitCuda(Napi::Env env, Napi::Object exports) {
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
