// The slice of the CUDA driver API this addon uses.
//
// The addon never links libcuda: it dlopens libcuda.so.1 at run time and looks the
// symbols up by name. The types come from cuda.h when CMake found it; otherwise from the
// minimal declarations below, so the addon still builds on a machine without CUDA.
// When both are present, static_asserts prove the two agree (sizes, offsets, constants,
// function shapes), so a vendored build is ABI-compatible with the real driver.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

namespace vendored {
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUevent_st* CUevent;
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef int CUdevice_attribute;
typedef int CUmemAllocationGranularity_flags;

enum : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999,
};
enum : int { CU_EVENT_DISABLE_TIMING = 0x2 };
enum : int { CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102 };
enum : int { CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1 };
enum CUmemAllocationType : int { CU_MEM_ALLOCATION_TYPE_PINNED = 1 };
enum CUmemAllocationHandleType : int { CU_MEM_HANDLE_TYPE_NONE = 0 };
enum CUmemLocationType : int { CU_MEM_LOCATION_TYPE_DEVICE = 1 };
enum CUmemAccess_flags : int { CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 };

struct CUmemLocation {
  CUmemLocationType type;
  int id;
};
struct CUmemAllocationProp {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};
struct CUmemAccessDesc {
  CUmemLocation location;
  CUmemAccess_flags flags;
};
}  // namespace vendored

#if defined(GMLAKE_HAVE_CUDA_H)
#include <cuda.h>
namespace cu {
using ::CUcontext;
using ::CUdevice;
using ::CUdevice_attribute;
using ::CUdeviceptr;
using ::CUevent;
using ::CUmemAccessDesc;
using ::CUmemAllocationGranularity_flags;
using ::CUmemAllocationProp;
using ::CUmemGenericAllocationHandle;
using ::CUresult;
using ::CUstream;
}  // namespace cu
#define GMLAKE_CU_CONST(name) (::name)
#else
namespace cu {
using vendored::CUcontext;
using vendored::CUdevice;
using vendored::CUdevice_attribute;
using vendored::CUdeviceptr;
using vendored::CUevent;
using vendored::CUmemAccessDesc;
using vendored::CUmemAllocationGranularity_flags;
using vendored::CUmemAllocationProp;
using vendored::CUmemGenericAllocationHandle;
using vendored::CUresult;
using vendored::CUstream;
}  // namespace cu
#define GMLAKE_CU_CONST(name) (vendored::name)
#endif

namespace cu {
// Function pointer types, spelled once. With cuda.h present the names below are the
// versioned ones (cuda.h #defines cuMemAlloc to cuMemAlloc_v2 and so on).
using PFN_cuGetErrorName = CUresult (*)(CUresult, const char**);
using PFN_cuGetErrorString = CUresult (*)(CUresult, const char**);
using PFN_cuInit = CUresult (*)(unsigned int);
using PFN_cuDriverGetVersion = CUresult (*)(int*);
using PFN_cuDeviceGetCount = CUresult (*)(int*);
using PFN_cuDeviceGet = CUresult (*)(CUdevice*, int);
using PFN_cuDeviceGetName = CUresult (*)(char*, int, CUdevice);
using PFN_cuDeviceTotalMem_v2 = CUresult (*)(size_t*, CUdevice);
using PFN_cuDeviceGetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);
using PFN_cuDevicePrimaryCtxRetain = CUresult (*)(CUcontext*, CUdevice);
using PFN_cuDevicePrimaryCtxRelease_v2 = CUresult (*)(CUdevice);
using PFN_cuCtxSetCurrent = CUresult (*)(CUcontext);
using PFN_cuCtxSynchronize = CUresult (*)(void);
using PFN_cuMemGetAllocationGranularity = CUresult (*)(size_t*, const CUmemAllocationProp*,
                                                       CUmemAllocationGranularity_flags);
using PFN_cuMemCreate = CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                     unsigned long long);
using PFN_cuMemRelease = CUresult (*)(CUmemGenericAllocationHandle);
using PFN_cuMemAddressReserve = CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
using PFN_cuMemAddressFree = CUresult (*)(CUdeviceptr, size_t);
using PFN_cuMemMap = CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
using PFN_cuMemUnmap = CUresult (*)(CUdeviceptr, size_t);
using PFN_cuMemSetAccess = CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
using PFN_cuMemGetInfo_v2 = CUresult (*)(size_t*, size_t*);
using PFN_cuMemAlloc_v2 = CUresult (*)(CUdeviceptr*, size_t);
using PFN_cuMemFree_v2 = CUresult (*)(CUdeviceptr);
using PFN_cuMemsetD8_v2 = CUresult (*)(CUdeviceptr, unsigned char, size_t);
using PFN_cuMemcpyHtoD_v2 = CUresult (*)(CUdeviceptr, const void*, size_t);
using PFN_cuMemcpyDtoH_v2 = CUresult (*)(void*, CUdeviceptr, size_t);
using PFN_cuEventCreate = CUresult (*)(CUevent*, unsigned int);
using PFN_cuEventRecord = CUresult (*)(CUevent, CUstream);
using PFN_cuEventQuery = CUresult (*)(CUevent);
using PFN_cuEventSynchronize = CUresult (*)(CUevent);
using PFN_cuEventDestroy_v2 = CUresult (*)(CUevent);
using PFN_cuStreamWaitEvent = CUresult (*)(CUstream, CUevent, unsigned int);
using PFN_cuStreamSynchronize = CUresult (*)(CUstream);
}  // namespace cu

#if defined(GMLAKE_HAVE_CUDA_H)
namespace vendored_check {
// Same arity and same parameter sizes: enough to prove the vendored ABI matches.
template <class F>
struct Shape;
template <class R, class... A>
struct Shape<R (*)(A...)> {
  static constexpr std::array<size_t, sizeof...(A) + 1> sizes{sizeof(R), sizeof(A)...};
};
template <class F, class G>
constexpr bool same_shape() {
  if (Shape<F>::sizes.size() != Shape<G>::sizes.size()) return false;
  for (size_t i = 0; i < Shape<F>::sizes.size(); ++i) {
    if (Shape<F>::sizes[i] != Shape<G>::sizes[i]) return false;
  }
  return true;
}
#define GMLAKE_SAME_FN(pfn, real) \
  static_assert(std::is_same_v<cu::pfn, decltype(&::real)>, #real " signature changed")
GMLAKE_SAME_FN(PFN_cuGetErrorName, cuGetErrorName);
GMLAKE_SAME_FN(PFN_cuInit, cuInit);
GMLAKE_SAME_FN(PFN_cuDriverGetVersion, cuDriverGetVersion);
GMLAKE_SAME_FN(PFN_cuDeviceGetCount, cuDeviceGetCount);
GMLAKE_SAME_FN(PFN_cuDeviceGet, cuDeviceGet);
GMLAKE_SAME_FN(PFN_cuDeviceGetName, cuDeviceGetName);
GMLAKE_SAME_FN(PFN_cuDeviceTotalMem_v2, cuDeviceTotalMem_v2);
GMLAKE_SAME_FN(PFN_cuDeviceGetAttribute, cuDeviceGetAttribute);
GMLAKE_SAME_FN(PFN_cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
GMLAKE_SAME_FN(PFN_cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2);
GMLAKE_SAME_FN(PFN_cuCtxSetCurrent, cuCtxSetCurrent);
GMLAKE_SAME_FN(PFN_cuCtxSynchronize, cuCtxSynchronize);
GMLAKE_SAME_FN(PFN_cuMemGetAllocationGranularity, cuMemGetAllocationGranularity);
GMLAKE_SAME_FN(PFN_cuMemCreate, cuMemCreate);
GMLAKE_SAME_FN(PFN_cuMemRelease, cuMemRelease);
GMLAKE_SAME_FN(PFN_cuMemAddressReserve, cuMemAddressReserve);
GMLAKE_SAME_FN(PFN_cuMemAddressFree, cuMemAddressFree);
GMLAKE_SAME_FN(PFN_cuMemMap, cuMemMap);
GMLAKE_SAME_FN(PFN_cuMemUnmap, cuMemUnmap);
GMLAKE_SAME_FN(PFN_cuMemSetAccess, cuMemSetAccess);
GMLAKE_SAME_FN(PFN_cuMemGetInfo_v2, cuMemGetInfo_v2);
GMLAKE_SAME_FN(PFN_cuMemAlloc_v2, cuMemAlloc_v2);
GMLAKE_SAME_FN(PFN_cuMemFree_v2, cuMemFree_v2);
GMLAKE_SAME_FN(PFN_cuMemsetD8_v2, cuMemsetD8_v2);
GMLAKE_SAME_FN(PFN_cuMemcpyHtoD_v2, cuMemcpyHtoD_v2);
GMLAKE_SAME_FN(PFN_cuMemcpyDtoH_v2, cuMemcpyDtoH_v2);
GMLAKE_SAME_FN(PFN_cuEventCreate, cuEventCreate);
GMLAKE_SAME_FN(PFN_cuEventRecord, cuEventRecord);
GMLAKE_SAME_FN(PFN_cuEventQuery, cuEventQuery);
GMLAKE_SAME_FN(PFN_cuEventSynchronize, cuEventSynchronize);
GMLAKE_SAME_FN(PFN_cuEventDestroy_v2, cuEventDestroy_v2);
GMLAKE_SAME_FN(PFN_cuStreamWaitEvent, cuStreamWaitEvent);
GMLAKE_SAME_FN(PFN_cuStreamSynchronize, cuStreamSynchronize);
#undef GMLAKE_SAME_FN

// The vendored declarations, checked against the real ones.
static_assert(sizeof(vendored::CUresult) == sizeof(::CUresult));
static_assert(sizeof(vendored::CUdevice) == sizeof(::CUdevice));
static_assert(sizeof(vendored::CUdeviceptr) == sizeof(::CUdeviceptr));
static_assert(sizeof(vendored::CUmemGenericAllocationHandle) == sizeof(::CUmemGenericAllocationHandle));
static_assert(sizeof(vendored::CUdevice_attribute) == sizeof(::CUdevice_attribute));
static_assert(sizeof(vendored::CUmemAllocationGranularity_flags) == sizeof(::CUmemAllocationGranularity_flags));
static_assert(sizeof(vendored::CUmemLocation) == sizeof(::CUmemLocation));
static_assert(offsetof(vendored::CUmemLocation, id) == offsetof(::CUmemLocation, id));
static_assert(sizeof(vendored::CUmemAllocationProp) == sizeof(::CUmemAllocationProp));
static_assert(offsetof(vendored::CUmemAllocationProp, requestedHandleTypes) ==
              offsetof(::CUmemAllocationProp, requestedHandleTypes));
static_assert(offsetof(vendored::CUmemAllocationProp, location) == offsetof(::CUmemAllocationProp, location));
static_assert(offsetof(vendored::CUmemAllocationProp, win32HandleMetaData) ==
              offsetof(::CUmemAllocationProp, win32HandleMetaData));
static_assert(offsetof(vendored::CUmemAllocationProp, allocFlags) == offsetof(::CUmemAllocationProp, allocFlags));
static_assert(sizeof(vendored::CUmemAccessDesc) == sizeof(::CUmemAccessDesc));
static_assert(offsetof(vendored::CUmemAccessDesc, flags) == offsetof(::CUmemAccessDesc, flags));
static_assert(static_cast<int>(vendored::CUDA_SUCCESS) == static_cast<int>(::CUDA_SUCCESS));
static_assert(static_cast<int>(vendored::CUDA_ERROR_INVALID_VALUE) == static_cast<int>(::CUDA_ERROR_INVALID_VALUE));
static_assert(static_cast<int>(vendored::CUDA_ERROR_OUT_OF_MEMORY) == static_cast<int>(::CUDA_ERROR_OUT_OF_MEMORY));
static_assert(static_cast<int>(vendored::CUDA_ERROR_NOT_INITIALIZED) == static_cast<int>(::CUDA_ERROR_NOT_INITIALIZED));
static_assert(static_cast<int>(vendored::CUDA_ERROR_NO_DEVICE) == static_cast<int>(::CUDA_ERROR_NO_DEVICE));
static_assert(static_cast<int>(vendored::CUDA_ERROR_INVALID_DEVICE) == static_cast<int>(::CUDA_ERROR_INVALID_DEVICE));
static_assert(static_cast<int>(vendored::CUDA_ERROR_INVALID_HANDLE) == static_cast<int>(::CUDA_ERROR_INVALID_HANDLE));
static_assert(static_cast<int>(vendored::CUDA_ERROR_NOT_READY) == static_cast<int>(::CUDA_ERROR_NOT_READY));
static_assert(static_cast<int>(vendored::CU_EVENT_DISABLE_TIMING) == static_cast<int>(::CU_EVENT_DISABLE_TIMING));
static_assert(sizeof(vendored::CUevent) == sizeof(::CUevent));
static_assert(sizeof(vendored::CUstream) == sizeof(::CUstream));
static_assert(static_cast<int>(vendored::CUDA_ERROR_NOT_SUPPORTED) == static_cast<int>(::CUDA_ERROR_NOT_SUPPORTED));
static_assert(static_cast<int>(vendored::CUDA_ERROR_UNKNOWN) == static_cast<int>(::CUDA_ERROR_UNKNOWN));
static_assert(static_cast<int>(vendored::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == static_cast<int>(::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED));
static_assert(static_cast<int>(vendored::CU_MEM_ALLOC_GRANULARITY_MINIMUM) == static_cast<int>(::CU_MEM_ALLOC_GRANULARITY_MINIMUM));
static_assert(static_cast<int>(vendored::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) == static_cast<int>(::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
static_assert(static_cast<int>(vendored::CU_MEM_ALLOCATION_TYPE_PINNED) == static_cast<int>(::CU_MEM_ALLOCATION_TYPE_PINNED));
static_assert(static_cast<int>(vendored::CU_MEM_HANDLE_TYPE_NONE) == static_cast<int>(::CU_MEM_HANDLE_TYPE_NONE));
static_assert(static_cast<int>(vendored::CU_MEM_LOCATION_TYPE_DEVICE) == static_cast<int>(::CU_MEM_LOCATION_TYPE_DEVICE));
static_assert(static_cast<int>(vendored::CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == static_cast<int>(::CU_MEM_ACCESS_FLAGS_PROT_READWRITE));

// The vendored function shapes match too (so a build without cuda.h calls the same ABI).
using VR = vendored::CUresult;
static_assert(same_shape<VR (*)(vendored::CUdeviceptr*, size_t, size_t, vendored::CUdeviceptr, unsigned long long),
                         decltype(&::cuMemAddressReserve)>());
static_assert(same_shape<VR (*)(vendored::CUmemGenericAllocationHandle*, size_t,
                                const vendored::CUmemAllocationProp*, unsigned long long),
                         decltype(&::cuMemCreate)>());
}  // namespace vendored_check
#endif
