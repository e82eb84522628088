"""The CUDA driver's virtual-memory calls through ctypes (no torch), for the GPU host's probes.

One thread, the primary context of device 0, a read-write access descriptor and a pinned
device allocation property, as packages/vmm/native/cuda_device.cc and cuda_memory.cc make them.
"""
import ctypes as C
import os
import sys
import time

MiB = 1 << 20


def die(msg):
    """One line on stderr and exit 2: these probes run unattended on the GPU host."""
    print(f"{os.path.basename(sys.argv[0])}: {msg}", file=sys.stderr)
    sys.exit(2)


try:
    cu = C.CDLL(os.environ.get("GMLAKE_LIBCUDA", "libcuda.so.1"))
except OSError as e:
    die(f"cannot load the CUDA driver ({e}); run this on the GPU host")
if not hasattr(cu, "cuInit") or not hasattr(cu, "cuGetErrorName"):
    die(f"{cu._name} is not the CUDA driver (no cuInit)")


class Loc(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]


class Flags(C.Structure):
    _fields_ = [("compressionType", C.c_ubyte), ("gpuDirectRDMACapable", C.c_ubyte), ("usage", C.c_ushort), ("reserved", C.c_ubyte * 4)]


class Prop(C.Structure):
    _fields_ = [("type", C.c_int), ("requestedHandleTypes", C.c_int), ("location", Loc), ("win32HandleMetaData", C.c_void_p), ("allocFlags", Flags)]


class Access(C.Structure):
    _fields_ = [("location", Loc), ("flags", C.c_int)]


def name(rc):
    s = C.c_char_p()
    cu.cuGetErrorName(rc, C.byref(s))
    return s.value.decode() if s.value else str(rc)


class DriverError(RuntimeError):
    """A driver call failed: the probe stops with one line naming the call and the CUDA error."""


def _one_line(kind, value, tb):
    if issubclass(kind, DriverError):
        die(str(value))
    sys.__excepthook__(kind, value, tb)


sys.excepthook = _one_line


def ok(rc, what):
    if rc != 0:
        raise DriverError(f"{what}: {name(rc)}")


def timed(fn, *args):
    t = time.perf_counter_ns()
    rc = fn(*args)
    return rc, (time.perf_counter_ns() - t) / 1000.0


ok(cu.cuInit(0), "cuInit")
dev = C.c_int()
ok(cu.cuDeviceGet(C.byref(dev), 0), "cuDeviceGet")
ctx = C.c_void_p()
ok(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
prop = Prop()
prop.type = 1  # pinned
prop.requestedHandleTypes = 0
prop.location = Loc(1, dev.value)  # device
acc = Access(Loc(1, dev.value), 3)  # read-write
gran = C.c_size_t()
ok(cu.cuMemGetAllocationGranularity(C.byref(gran), C.byref(prop), 0), "granularity")
cu.cuMemMap.argtypes = [C.c_ulonglong, C.c_size_t, C.c_size_t, C.c_ulonglong, C.c_ulonglong]
cu.cuMemUnmap.argtypes = [C.c_ulonglong, C.c_size_t]
cu.cuMemSetAccess.argtypes = [C.c_ulonglong, C.c_size_t, C.c_void_p, C.c_size_t]
cu.cuMemCreate.argtypes = [C.c_void_p, C.c_size_t, C.c_void_p, C.c_ulonglong]
cu.cuMemRelease.argtypes = [C.c_ulonglong]
cu.cuMemAddressReserve.argtypes = [C.c_void_p, C.c_size_t, C.c_size_t, C.c_ulonglong, C.c_ulonglong]
cu.cuMemAddressFree.argtypes = [C.c_ulonglong, C.c_size_t]



def reserve(size, align=0):
    """cuMemAddressReserve: the range's start."""
    va = C.c_ulonglong()
    ok(cu.cuMemAddressReserve(C.byref(va), size, align, 0, 0), f"cuMemAddressReserve {size}")
    return va.value


def create(size):
    """cuMemCreate: (handle, microseconds)."""
    h = C.c_ulonglong()
    rc, us = timed(cu.cuMemCreate, C.byref(h), size, C.byref(prop), 0)
    ok(rc, f"cuMemCreate {size}")
    return h.value, us


def map_(addr, size, handle, offset=0):
    """cuMemMap: microseconds."""
    rc, us = timed(cu.cuMemMap, addr, size, offset, handle, 0)
    ok(rc, f"cuMemMap {size} at offset {offset}")
    return us


def set_access(addr, size):
    """cuMemSetAccess (read-write for device 0): microseconds."""
    rc, us = timed(cu.cuMemSetAccess, addr, size, C.byref(acc), 1)
    ok(rc, "cuMemSetAccess")
    return us


def unmap(addr, size):
    rc, us = timed(cu.cuMemUnmap, addr, size)
    ok(rc, "cuMemUnmap")
    return us


def release(handle):
    rc, us = timed(cu.cuMemRelease, handle)
    ok(rc, "cuMemRelease")
    return us
