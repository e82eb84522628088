"""The engine as PyTorch's CUDAAllocator itself (enable(interface="native")), without the
pluggable interface's mutex and map per call: cuda_allocator.cc, built against the installed
PyTorch at first use, one library per PyTorch version and C++ ABI beside
libgmlake_torch_alloc.so (docs/design-cuda-allocator.md).

    python -m gmlake_torch build-cuda-allocator   # or at the first enable(interface="native")
"""
import ctypes
import os
import re

from . import GmlakeError, _build_against_torch, library_path

INTERFACES = ("pluggable", "native")


def resolve_interface(interface=None):
    """pluggable (the default) or native: the argument, else $GMLAKE_INTERFACE."""
    interface = interface or os.environ.get("GMLAKE_INTERFACE") or "pluggable"
    if interface not in INTERFACES:
        raise GmlakeError(f"gmlake: interface must be one of {', '.join(INTERFACES)}, not {interface!r}")
    return interface


def _torch():
    try:
        import torch
    except ImportError as e:
        raise GmlakeError(f"gmlake: the native CUDAAllocator is built against PyTorch, which is not importable here ({e})") from None
    return torch


def path():
    """libgmlake_cuda_allocator-<torch version>-abi<0|1>.so: a build per PyTorch ABI."""
    torch = _torch()

    tag = re.sub(r"[^A-Za-z0-9.]+", "_", torch.__version__)
    return os.path.join(os.path.dirname(library_path()), f"libgmlake_cuda_allocator-{tag}-abi{int(torch._C._GLIBCXX_USE_CXX11_ABI)}.so")


def first_error(text):
    """The line of a compiler's output that says what went wrong (not the caret or context lines)."""
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    return next((l for l in lines if "error" in l), lines[-1] if lines else "unknown error")


def build(verbose=False):
    """Builds the library against this PyTorch (g++, its headers, libc10 and libc10_cuda, the
    CUDA headers); returns its path. A failure is a GmlakeError of one line: the first error."""
    out = path()
    tmp = out + f".tmp{os.getpid()}"  # a half-written library is never loaded by another process
    try:
        _build_against_torch("cuda_allocator.cc", tmp, ["c10", "c10_cuda"], cuda_headers=True)
    except GmlakeError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise GmlakeError(f"gmlake: building the native CUDAAllocator failed: {first_error(str(e))[:400]}") from None
    os.replace(tmp, out)
    if verbose:
        print(out)
    return out


def install(native, device):
    """Puts the engine (started, `native`) in place of PyTorch's CUDA allocator for `device`,
    building the library first if this PyTorch has none. Raises GmlakeError."""
    lib_path = path()
    if not os.path.exists(lib_path):
        build()
    lib = ctypes.CDLL(lib_path)
    lib.gmlake_native_install.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    lib.gmlake_native_install.restype = ctypes.c_int
    err = ctypes.create_string_buffer(1024)
    if lib.gmlake_native_install(os.path.abspath(native.path).encode(), int(device), err, len(err)) != 0:
        raise GmlakeError(err.value.decode("utf-8", "replace"))
    native.cuda_allocator = lib  # kept alive
    # PyTorch calls beginAllocateToPool / endAllocateToPool around every capture it makes,
    # which the class forwards: outside such a window no call asks the driver about capture
    if os.environ.get("GMLAKE_CAPTURE_CHECK", "pool") != "always":
        native.lib.gmlake_set_capture_check(1)
    return lib_path


ROUTES = ("ours", "pytorch", "prime")


def route(to):
    """Benchmarks only (scripts/gpu/alternate_steps.py): "pytorch" sends the allocations from
    now on to the allocator PyTorch had before enable(interface="native"), "prime" to
    cudaMallocAsync, "ours" back to the engine; each block is freed by the one that gave it.
    Call it between steps. Raises GmlakeError."""
    from . import _require

    if to not in ROUTES:
        raise GmlakeError(f"gmlake: route is one of {', '.join(ROUTES)}, not {to!r}")
    lib = getattr(_require(), "cuda_allocator", None)
    if lib is None:
        raise GmlakeError('gmlake: routing needs enable(interface="native")')
    lib.gmlake_native_route.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    lib.gmlake_native_route.restype = ctypes.c_int
    err = ctypes.create_string_buffer(512)
    if lib.gmlake_native_route(ROUTES.index(to), err, len(err)) != 0:
        raise GmlakeError(err.value.decode("utf-8", "replace"))
