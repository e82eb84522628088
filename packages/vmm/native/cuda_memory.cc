// Device memory: physical handles (cuMemCreate/Release), reserved address ranges, their
// mappings and access, plain cuMemAlloc'd memory, and the set/copy/synchronize calls.
#include <string>

#include "cuda_driver.h"

namespace gmvmm {
namespace {

// bench/bench_loop.cc mirrors the leading members (CudaHandleView): keep them in step.
struct Handle {
  cu::CUmemGenericAllocationHandle h;
  uint64_t size;
  bool released;
  static void Finalize(Handle* h) { delete h; }
};

const napi_type_tag kHandleTag = {0x6d6c616b65637564ULL, 0x68616e646c653031ULL};  // "gmlake cuda handle"

Handle* LiveHandle(const Napi::CallbackInfo& info, size_t index, const char* call) {
  Handle* h = Unwrap<Handle>(info, index, &kHandleTag, "a CUDA physical handle (from cudaMemCreate)");
  if (h->released) ThrowVmmError(info.Env(), "CUDA_ERROR_INVALID_VALUE", call, std::string(call) + ": handle was already released");
  return h;
}

}  // namespace

namespace cuda {

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
  return SizePair(env, freeBytes, total);
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

}  // namespace cuda
}  // namespace gmvmm
