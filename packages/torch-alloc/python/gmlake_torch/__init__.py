"""The stitching engine as PyTorch's CUDA allocator, in PyTorch's own process.

    import gmlake_torch
    gmlake_torch.enable("vms", record=True)  # before the first CUDA tensor; record: keep the history
    ...train...
    print(gmlake_torch.stats()["reserved_bytes.all.peak"])
    gmlake_torch.snapshot("live.pickle")     # gmlake inspect / compare read it (needs record=True)

Every alloc and free of PyTorch goes synchronously to @gmlake/stitch running in Node,
which libgmlake_torch_alloc.so embeds (Debian's libnode, Node 18.20). Settings come from
the call, else from the environment: GMLAKE_POLICY, GMLAKE_KNOBS ("k=v,k=v" or JSON),
GMLAKE_DRIVER (cuda | host | sim), GMLAKE_THREADING (auto | locker | thread),
GMLAKE_POLICY_MODULE, GMLAKE_RECORD (1: keep the history for snapshot()),
GMLAKE_RECORD_MAX_ENTRIES (the history's bound), GMLAKE_POOL_RESERVE_BYTES (the least a CUDA-graph
capture's private pool holds free when it begins), GMLAKE_CAPTURE_CHECK (always: ask the
driver about CUDA-graph capture on every call), GMLAKE_TIME_CALLS (1: stats() says the
time spent inside alloc and free, and its parts; total: the whole calls only, two clock reads
a call), GMLAKE_FRONT_CACHE_ENTRIES (the front cache's size in blocks; 0, the default: off),
GMLAKE_TORCH_ALLOC_LIB (the library's path), GMLAKE_MEMORY_FRACTION / GMLAKE_CAPACITY_BYTES (the
memory budget: a share of the device's memory, or bytes; torch.cuda.set_per_process_memory_fraction
and set_memory_fraction() change it while the job runs).
"""
import ctypes
import errno
import json
import os
import re
import socket
import stat
import subprocess

__all__ = ["enable", "start", "stats", "snapshot", "empty_cache", "close", "GmlakeError", "library_path", "build_oom_shim",
           "build_pair_bench", "usable_cpus", "resolve_threading", "set_memory_fraction", "set_capacity_bytes"]

_PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_engine")  # installed from the wheel (scripts/wheel)
if not os.path.isdir(_PKG):
    _PKG = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # the npm package or the source tree
_THREADING = {"locker": 0, "thread": 1}
# "auto" (the default): one JS thread where the process may use this many CPUs, else a Locker per call
_AUTO_THREAD_CPUS = 4
_TEXT_STATS, _TEXT_SNAPSHOT, _TEXT_CLOSE = 1, 2, 4


class GmlakeError(RuntimeError):
    """The allocator could not start or a call failed (the message says why)."""


def library_path():
    """libgmlake_torch_alloc.so: $GMLAKE_TORCH_ALLOC_LIB, else the package's build/lib."""
    return os.environ.get("GMLAKE_TORCH_ALLOC_LIB") or os.path.join(_PKG, "build", "lib", "libgmlake_torch_alloc.so")


class _Native:
    """The library through ctypes (argument and result types declared once)."""

    def __init__(self, path):
        if not os.path.exists(path):
            raise GmlakeError(f"gmlake: {path} does not exist (run `pnpm --filter @gmlake/torch-alloc build`)")
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise GmlakeError(f"gmlake: cannot load {path}: {e}") from None
        self.path = path
        self.threading = None  # set by the first start(): locker or thread
        self.device = 0  # the device it serves (the first start's)
        self.settings = None  # the first successful start's config and threading: a later start must match
        self.closed = False  # close() ran: Node starts once per process, so no start() after it
        self.lib = lib
        lib.gmlake_start.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.gmlake_start.restype = ctypes.c_int
        lib.gmlake_last_error.restype = ctypes.c_char_p
        lib.gmlake_try_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.gmlake_try_alloc.restype = ctypes.c_int
        lib.gmlake_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        lib.gmlake_free.restype = None
        lib.gmlake_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.gmlake_record_stream.restype = None
        lib.gmlake_empty_cache.restype = None
        lib.gmlake_text.argtypes = [ctypes.c_int, ctypes.c_char_p]
        lib.gmlake_text.restype = ctypes.c_void_p
        lib.gmlake_text_free.argtypes = [ctypes.c_void_p]
        lib.gmlake_set_oom_thrower.argtypes = [ctypes.c_void_p]
        lib.gmlake_set_capture_check.argtypes = [ctypes.c_int]
        lib.gmlake_set_capture_check.restype = ctypes.c_int
        lib.gmlake_call_times.argtypes = [ctypes.POINTER(ctypes.c_double)]
        lib.gmlake_call_times.restype = ctypes.c_int
        self.pools = hasattr(lib, "gmlake_pool_begin")  # private pools (CUDA graphs, MemPool); a bundled baseline may lack them
        if self.pools:
            pair = [ctypes.c_ulonglong, ctypes.c_ulonglong]
            lib.gmlake_pool_begin.argtypes = pair + [ctypes.c_int]
            lib.gmlake_pool_begin.restype = ctypes.c_int
            lib.gmlake_pool_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
            lib.gmlake_pool_alloc.restype = ctypes.c_int
            lib.gmlake_pool_end.argtypes = [ctypes.c_int]
            lib.gmlake_pool_end.restype = ctypes.c_int
            lib.gmlake_pool_release.argtypes = pair
            lib.gmlake_pool_release.restype = ctypes.c_double
            lib.gmlake_pool_use_count.argtypes = pair
            lib.gmlake_pool_use_count.restype = ctypes.c_int
            lib.gmlake_pool_live.argtypes = pair + [ctypes.c_void_p]
            lib.gmlake_pool_live.restype = ctypes.c_int
        self.checkpoints = self.pools and hasattr(lib, "gmlake_pool_checkpoint")  # cudagraph trees' pool checkpoints
        if self.checkpoints:
            lib.gmlake_pool_checkpoint.argtypes = pair
            lib.gmlake_pool_checkpoint.restype = ctypes.c_longlong
            lib.gmlake_pool_restore.argtypes = [ctypes.c_longlong]
            lib.gmlake_pool_restore.restype = ctypes.c_void_p
            lib.gmlake_pool_drop_checkpoint.argtypes = [ctypes.c_longlong]
            lib.gmlake_pool_drop_checkpoint.restype = ctypes.c_int
        self.budgets = hasattr(lib, "gmlake_set_budget")  # a library from before the memory budget (a bundled baseline) has none
        if self.budgets:
            lib.gmlake_set_budget.argtypes = [ctypes.c_double, ctypes.c_int, ctypes.c_int]
            lib.gmlake_set_budget.restype = ctypes.c_double

    def error(self):
        return (self.lib.gmlake_last_error() or b"").decode("utf-8", "replace")

    def start(self, config, threading):
        if self.lib.gmlake_start(json.dumps(config, separators=(",", ":")).encode(), _THREADING[threading]) != 0:
            raise GmlakeError(self.error())

    def text(self, op, arg=""):
        p = self.lib.gmlake_text(op, arg.encode())
        try:
            return ctypes.string_at(p).decode("utf-8", "replace")
        finally:
            self.lib.gmlake_text_free(p)

    def try_alloc(self, size, stream=0, device=0):
        """(status, address): status 0, or -1 out of memory, -2 error, -3 not started, -4 graph capture."""
        out = ctypes.c_void_p()
        st = self.lib.gmlake_try_alloc(size, device, stream, ctypes.byref(out))
        return st, (out.value or 0)

    def free(self, address, size, stream=0, device=0):
        self.lib.gmlake_free(address, size, device, stream)

    def record_stream(self, address, stream):
        self.lib.gmlake_record_stream(address, stream)

    def empty_cache(self):
        self.lib.gmlake_empty_cache()

    def pool_begin(self, pool, window=True):
        """Private pool `pool` (a MempoolId_t pair): a window opens on it (window), or it is only
        created / gets one use more. Its ordinal; raises GmlakeError."""
        r = self.lib.gmlake_pool_begin(pool[0], pool[1], 1 if window else 0)
        if r <= 0:
            raise GmlakeError(self.error())
        return r

    def pool_alloc(self, size, ordinal, capturing, stream=0):
        """(status, address) of an allocation to pool `ordinal`: -4 when it would need a driver call during capture."""
        out = ctypes.c_void_p()
        st = self.lib.gmlake_pool_alloc(size, ordinal, 1 if capturing else 0, stream, ctypes.byref(out))
        return st, (out.value or 0)

    def pool_end(self, ordinal):
        self.lib.gmlake_pool_end(ordinal)

    def pool_release(self, pool):
        """One use of `pool` fewer: the bytes it gave back to the engine now."""
        r = self.lib.gmlake_pool_release(pool[0], pool[1])
        if r < 0:
            raise GmlakeError(self.error())
        return int(r)

    def pool_use_count(self, pool):
        return self.lib.gmlake_pool_use_count(pool[0], pool[1])

    def pool_checkpoint(self, pool):
        """getCheckpointState: the id of the copy of `pool`'s blocks the engine keeps; raises GmlakeError."""
        r = self.lib.gmlake_pool_checkpoint(pool[0], pool[1])
        if r <= 0:
            raise GmlakeError(self.error())
        return r

    def pool_restore(self, checkpoint):
        """setCheckpointPoolState: (addresses freed, [(address, size, stream) allocated]); raises GmlakeError."""
        p = self.lib.gmlake_pool_restore(checkpoint)
        try:
            text = ctypes.string_at(p).decode("utf-8", "replace")
        finally:
            self.lib.gmlake_text_free(p)
        if not text[:1].isdigit():
            raise GmlakeError(text)
        n = [int(x) for x in text.split()]
        freed, at = n[2:2 + n[0]], 2 + n[0]
        return freed, [tuple(n[at + 3 * i:at + 3 * i + 3]) for i in range(n[1])]

    def pool_drop_checkpoint(self, checkpoint):
        """The copy goes (1; 0 if there was none)."""
        return self.lib.gmlake_pool_drop_checkpoint(checkpoint)

    def set_budget(self, value, fraction, device):
        """The memory budget (value bytes, or value x the device's memory): its bytes. Raises GmlakeError."""
        if not self.budgets:
            raise GmlakeError(f"gmlake: {self.path} has no memory budget (built before gmlake_set_budget)")
        r = self.lib.gmlake_set_budget(float(value), 1 if fraction else 0, device)
        if r < 0:
            raise GmlakeError(self.error())
        return int(r)


_native = None
_torch_allocator = None


def _count(value, name, env, hint=""):
    """A whole-number setting >= 0: the argument (a number, or text as a k=v list gives it), else
    $env, else None. A bad one is a GmlakeError naming where it came from."""
    where = name
    if value is None:
        text = os.environ.get(env, "").strip()
        if not text:
            return None
        value, where = text, env
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise GmlakeError(f"gmlake: {where}: expected a non-negative integer{hint}, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GmlakeError(f"gmlake: {where}: expected a non-negative integer{hint}, got {value!r}")
    return value


def _record_max_entries(value):
    """The history's bound: the argument, else $GMLAKE_RECORD_MAX_ENTRIES, else None (the engine's default)."""
    return _count(value, "record_max_entries", "GMLAKE_RECORD_MAX_ENTRIES", " (0 = no bound)")


def _front_cache_entries(value):
    """The front cache's size: the argument, else $GMLAKE_FRONT_CACHE_ENTRIES, else 0 (off)."""
    n = _count(value, "front_cache_entries", "GMLAKE_FRONT_CACHE_ENTRIES", " (0 = off)")
    return 0 if n is None else n


def _fraction(value, where):
    """A share of the device's memory, 0 to 1 (a number, or text)."""
    try:
        f = float(value.strip()) if isinstance(value, str) else value
    except ValueError:
        f = None
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
        raise GmlakeError(f"gmlake: {where}: expected a fraction of the device's memory from 0 to 1, got {value!r}")
    return float(f)


def _budget(capacity_bytes, memory_fraction, driver):
    """The memory budget's part of start()'s config: capacityBytes and/or memoryFraction, each
    the argument, else $GMLAKE_CAPACITY_BYTES / $GMLAKE_MEMORY_FRACTION. On cuda the two are
    the same budget: both is an error. (host, sim: capacityBytes is the device's size, and a
    fraction is of it.)"""
    out = {}
    where = {}
    if capacity_bytes is not None or os.environ.get("GMLAKE_CAPACITY_BYTES", "").strip():
        out["capacityBytes"] = _count(capacity_bytes, "capacity_bytes", "GMLAKE_CAPACITY_BYTES", " (bytes)")
        where["capacityBytes"] = "capacity_bytes" if capacity_bytes is not None else "GMLAKE_CAPACITY_BYTES"
    if memory_fraction is not None or os.environ.get("GMLAKE_MEMORY_FRACTION", "").strip():
        src = "memory_fraction" if memory_fraction is not None else "GMLAKE_MEMORY_FRACTION"
        out["memoryFraction"] = _fraction(memory_fraction if memory_fraction is not None else os.environ[src], src)
        where["memoryFraction"] = src
    if len(out) == 2 and driver == "cuda":
        raise GmlakeError(f"gmlake: {where['capacityBytes']} and {where['memoryFraction']} are the same memory budget: give one")
    return out


def usable_cpus():
    """The CPUs this process may run on: its affinity mask, bounded by the CPU quotas of its
    cgroup and the cgroups above it (a container's limit, which the mask does not show)."""
    n = len(os.sched_getaffinity(0))
    quotas = []
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":  # cgroup v2: cpu.max is "max <period>" or "<quota> <period>"
            root = "/sys/fs/cgroup"
        elif "cpu" in parts[1].split(","):  # cgroup v1
            root = None
            for r in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
                if os.path.isdir(r):
                    root = r
                    break
            if root is None:
                continue
        else:
            continue
        path = parts[2].strip("/")
        while True:
            d = os.path.join(root, path) if path else root
            q = _cgroup_quota(d)
            if q is not None:
                quotas.append(q)
            if not path:
                break
            path = os.path.dirname(path)
    return max(1, min([n] + [int(q) for q in quotas]))


def _cgroup_quota(d):
    """The CPUs a cgroup folder's quota allows, or None (no quota, or no such folder)."""
    try:
        with open(os.path.join(d, "cpu.max")) as f:
            q, p = f.read().split()[:2]
            return None if q == "max" else int(q) / int(p)
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(d, "cpu.cfs_quota_us")) as f, open(os.path.join(d, "cpu.cfs_period_us")) as g:
            q, p = int(f.read()), int(g.read())
            return q / p if q > 0 and p > 0 else None
    except (OSError, ValueError):
        return None


def resolve_threading(threading=None):
    """locker or thread: the argument, else $GMLAKE_THREADING, else auto. auto: one JS thread
    (it spins a core while the job allocates, and cut the host time inside training on the
    H200: README "Threading") where the process may use at least 4 CPUs, else a Locker per
    call (two spinning threads on rationed CPUs stall each other)."""
    threading = threading or os.environ.get("GMLAKE_THREADING") or "auto"
    if threading == "auto":
        return "thread" if usable_cpus() >= _AUTO_THREAD_CPUS else "locker"
    if threading not in _THREADING:
        raise GmlakeError(f"gmlake: threading must be one of auto, {', '.join(_THREADING)}, not {threading!r}")
    return threading


def start(policy=None, *, driver=None, threading=None, policy_module=None, record=None, record_max_entries=None,
          device=0, capacity_bytes=None, memory_fraction=None, check_invariants=False, front_cache_entries=None, **knobs):
    """Starts the engine in this process without touching PyTorch (enable() uses it; so do
    tests that stand in for PyTorch). Returns the native handle. Raises GmlakeError."""
    global _native
    threading = resolve_threading(threading)
    config = {
        "policy": policy or os.environ.get("GMLAKE_POLICY", "vms"),
        "driver": driver or os.environ.get("GMLAKE_DRIVER", "cuda"),
        "knobs": knobs,
        "device": device,
        # the history snapshot() writes: opt-in, as PyTorch's _record_memory_history (it costs
        # about half of a call and grows with every allocation)
        "record": bool(record) if record is not None else os.environ.get("GMLAKE_RECORD", "0") not in ("", "0", "false"),
        "checkInvariants": check_invariants,
        "frontCacheEntries": _front_cache_entries(front_cache_entries),
    }
    # GMLAKE_KNOBS goes on as text: the engine's parseKnobText (stitch's) is its one reader
    knob_text = os.environ.get("GMLAKE_KNOBS", "").strip()
    if knob_text:
        config["knobText"] = knob_text
    # the least a CUDA-graph capture's private pool holds free when it begins (docs/design-private-pools.md)
    reserve = _count(None, "pool_reserve_bytes", "GMLAKE_POOL_RESERVE_BYTES", " (bytes)")
    if reserve:
        config["poolReserveBytes"] = reserve
    max_entries = _record_max_entries(record_max_entries)
    if max_entries is not None:
        config["recordMaxEntries"] = max_entries
    module = policy_module or os.environ.get("GMLAKE_POLICY_MODULE")
    if module:
        config["policyModule"] = os.path.abspath(module)
    config.update(_budget(capacity_bytes, memory_fraction, config["driver"]))
    if _native is None:
        _native = _Native(library_path())
    _native.start(config, threading)  # a no-op once started (a forked child: refused)
    settings = {**config, "threading": threading}
    if _native.closed:
        raise GmlakeError("gmlake: start() after close(): the engine cannot start again in this process (Node starts once "
                          "per process); start it in a new process")
    if _native.settings is None:  # Node starts once: the first start's settings stay
        _native.settings = settings
        _native.threading = threading
        _native.device = device
    elif settings != _native.settings:
        first = _native.settings
        differ = ", ".join(f"{k} {json.dumps(settings.get(k))} (running: {json.dumps(first.get(k))})"
                           for k in sorted(first.keys() | settings.keys()) if first.get(k) != settings.get(k))
        raise GmlakeError(f"gmlake: the allocator already started with other settings, and Node starts once per process: {differ}")
    return _native


def _oom_shim_path():
    return os.path.join(os.path.dirname(library_path()), "libgmlake_oom.so")


def _build_against_torch(src_name, out, libs, cuda_headers=False, verbose=False):
    """g++ one source file (of this folder, or a path) into a shared library against this PyTorch."""
    import torch
    from torch.utils import cpp_extension

    src = os.path.join(os.path.dirname(__file__), src_name)  # an absolute src_name stays as it is
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = ["g++", "-O2", "-shared", "-fPIC", "-std=c++17", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    cmd += [f"-I{p}" for p in cpp_extension.include_paths()]
    if cuda_headers:
        cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        cmd.append(f"-I{os.path.join(cuda, 'include')}")
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    cmd += [src, "-o", out, f"-L{libdir}"] + [f"-l{lib}" for lib in libs] + [f"-Wl,-rpath,{libdir}"]
    r = subprocess.run(cmd, capture_output=not verbose, text=True)
    if r.returncode != 0:
        raise GmlakeError(f"gmlake: building {out} failed: {(r.stderr or '').strip()[-2000:]}")
    return out


def build_oom_shim(verbose=False):
    """Builds libgmlake_oom.so against this PyTorch (its headers and libc10), so that out of
    memory raises torch.cuda.OutOfMemoryError. Needs g++; returns the path."""
    return _build_against_torch("oom_shim.cc", _oom_shim_path(), ["c10"], verbose=verbose)


def pair_bench_path():
    return os.path.join(os.path.dirname(library_path()), "libgmlake_pair_bench.so")


def build_pair_bench(verbose=False):
    """Builds libgmlake_pair_bench.so (pair_bench.cc: alloc+free pairs in C++ through whichever
    allocator PyTorch uses). Needs g++ and the CUDA headers; returns the path."""
    return _build_against_torch("pair_bench.cc", pair_bench_path(), ["c10", "c10_cuda"], cuda_headers=True, verbose=verbose)


def enable(policy=None, *, driver=None, threading=None, policy_module=None, record=None, record_max_entries=None,
           oom_shim=True, device=None, capacity_bytes=None, memory_fraction=None, front_cache_entries=None, interface=None,
           **knobs):
    """Makes the engine PyTorch's CUDA allocator (call it before the first CUDA tensor).

    policy: a built-in (caching, expandable, gmlake, vms) or one registered by policy_module;
    knobs: the policy's options (numbers, booleans, strings; text takes the knob's type).
    threading: how PyTorch's threads reach the engine (default $GMLAKE_THREADING, else auto:
    one JS thread where the process may use at least 4 CPUs, else a Locker per call;
    resolve_threading(); that thread also hands queued frees to the engine while it waits and,
    for vms, works out where the next allocation will land: $GMLAKE_DRAIN_US, $GMLAKE_SPECULATE,
    the package README "Threading"; stats()["threading"], stats()["speculate"]). record: keep the engine's history for snapshot() (default $GMLAKE_RECORD, else off:
    it costs about half of each call). record_max_entries: the history keeps the last this
    many events, the oldest dropped, as PyTorch's _record_memory_history(max_entries=...)
    (default $GMLAKE_RECORD_MAX_ENTRIES, else 1,000,000; 0 = no bound).
    Out of memory raises torch.cuda.OutOfMemoryError when libgmlake_oom.so is there
    (build_oom_shim()), else a RuntimeError starting "CUDA out of memory".
    capacity_bytes / memory_fraction: the memory budget, the most device memory the engine holds,
    in bytes or as a share of the device's memory (default $GMLAKE_CAPACITY_BYTES /
    $GMLAKE_MEMORY_FRACTION, else the whole device); torch.cuda.set_per_process_memory_fraction
    (wired here) and set_memory_fraction() / set_capacity_bytes() change it while the job runs.
    An allocation the policy cannot serve within it raises torch.cuda.OutOfMemoryError; the
    job can catch it, free and go on.
    device: the one CUDA device it serves (default $GMLAKE_DEVICE or 0; an allocation on
    another is an error). front_cache_entries: hold the last this many freed blocks in the
    library and hand them straight back to allocations of the same size and stream, without
    entering the engine (default $GMLAKE_FRONT_CACHE_ENTRIES, else 0: off; up to 256; vms
    only; record off): less host time per call for some reserved memory (README "Front
    cache"). interface: how PyTorch reaches the engine (default $GMLAKE_INTERFACE, else pluggable:
    CUDAPluggableAllocator; native: a CUDAAllocator of our own, built against this PyTorch at
    first use, which also answers torch.cuda.memory_stats; docs/design-cuda-allocator.md).
    Nothing here touches torch.cuda before the allocator is swapped:
    PyTorch refuses the swap once its own allocator is initialized."""
    global _torch_allocator
    import torch

    if _torch_allocator is not None:
        return
    if device is None:
        device = int(os.environ.get("GMLAKE_DEVICE", "0"))
    from . import cuda_allocator

    interface = cuda_allocator.resolve_interface(interface)
    native = start(policy, driver=driver, threading=threading, policy_module=policy_module, record=record,
                   record_max_entries=record_max_entries, device=device, capacity_bytes=capacity_bytes,
                   memory_fraction=memory_fraction, front_cache_entries=front_cache_entries, **knobs)
    if interface == "native":  # no pluggable interface: OOM, hooks and statistics come from the class
        cuda_allocator.install(native, device)
        _torch_allocator = native
        return
    if oom_shim and os.path.exists(_oom_shim_path()):
        shim = ctypes.CDLL(_oom_shim_path())
        native.lib.gmlake_set_oom_thrower(ctypes.cast(shim.gmlake_throw_oom, ctypes.c_void_p).value)
        native.oom_shim = shim  # kept alive
    alloc = torch.cuda.memory.CUDAPluggableAllocator(native.path, "gmlake_alloc", "gmlake_free")
    handle = alloc.allocator()
    addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    if hasattr(handle, "set_reset_fn"):
        handle.set_reset_fn(addr(native.lib.gmlake_empty_cache))
    if hasattr(handle, "set_record_stream_fn"):
        handle.set_record_stream_fn(addr(native.lib.gmlake_record_stream))
    # torch.cuda.set_per_process_memory_fraction(f) -> the budget f x the device's memory
    if hasattr(handle, "set_memory_fraction_fn") and native.budgets:
        handle.set_memory_fraction_fn(addr(native.lib.gmlake_set_memory_fraction))
    # PyTorch opens a pool window around every capture it makes (torch >= 2.3): with the
    # window known, allocs and frees ask the driver about capture only inside one (README
    # "CUDA-graph capture"); GMLAKE_CAPTURE_CHECK=always keeps asking on every call.
    if hasattr(handle, "set_begin_allocate_to_pool") and hasattr(handle, "set_end_allocate_to_pool_fn"):
        handle.set_begin_allocate_to_pool(addr(native.lib.gmlake_begin_allocate_to_pool))
        handle.set_end_allocate_to_pool_fn(addr(native.lib.gmlake_end_allocate_to_pool))
        # a graph's reset (its pool's last use gone) gives the pool's memory back to the engine
        if hasattr(handle, "set_release_pool") and native.pools:
            handle.set_release_pool(addr(native.lib.gmlake_release_pool))
        if os.environ.get("GMLAKE_CAPTURE_CHECK", "pool") != "always":
            native.lib.gmlake_set_capture_check(1)
    torch.cuda.memory.change_current_allocator(alloc)
    _torch_allocator = alloc
    from . import memory_api  # torch.cuda.memory_stats() & co answer from the engine (they raise behind the plug)

    memory_api.install(torch, device=device)


def _require():
    if _native is None:
        raise GmlakeError("gmlake: not enabled (call gmlake_torch.enable() first)")
    return _native


def stats():
    """The engine's statistics under torch.cuda.memory_stats()'s names (allocated_bytes.all.current,
    reserved_bytes.all.peak, num_alloc_retries, num_ooms, ...) plus its own (driver calls and time;
    with GMLAKE_TIME_CALLS=1 also call_time_us and num_calls: the time the calling threads spent
    inside alloc and free, and how many calls that was)."""
    native = _require()
    text = native.text(_TEXT_STATS)
    try:
        st = json.loads(text)
    except ValueError:
        raise GmlakeError(text) from None
    t = (ctypes.c_double * 8)()
    timed = native.lib.gmlake_call_times(t)  # 1: with the parts; 2: GMLAKE_TIME_CALLS=total
    if timed:
        # alloc and free as the caller sees them; enter / prepare / js: the parts of the calls
        # that ran JS (taking the isolate, its scopes and the queued frees' hand-over, the JS itself)
        st["call_time_us"] = {"alloc": t[0] / 1000, "free": t[2] / 1000}
        st["num_calls"] = {"alloc": int(t[1]), "free": int(t[3])}
        if timed == 1:
            st["call_time_us"].update(enter=t[4] / 1000, prepare=t[5] / 1000, js=t[6] / 1000)
            st["num_calls"]["js"] = int(t[7])
    st["threading"] = native.threading  # the design in use (auto resolved at start)
    return st


def snapshot(path):
    """Writes the engine's history as a PyTorch memory-viz pickle (gzip if path ends in .gz);
    the engine must have been started with record=True (or GMLAKE_RECORD=1). As the CLI writes
    its outputs: a symbolic link's target is written (the link stays); an existing device or
    FIFO is written in place; a directory or socket is refused; anything else is written to a
    temporary file beside it, fsynced and renamed over it (an existing file is replaced, as
    PyTorch's _dump_snapshot does), and on any failure no temporary file stays."""
    native = _require()
    text = os.fspath(path)
    where = f"gmlake: snapshot {text!r}"
    if text == "" or text.endswith("/"):
        raise GmlakeError(f"{where}: {'an empty file name' if text == '' else 'names a directory, not a file'}")
    gz = ".gz" if text.endswith(".gz") else ""
    file = os.path.realpath(text)  # a link (dangling too) is followed: its target is what gets written
    try:
        st = os.stat(file)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise GmlakeError(f"{where}: {e.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise GmlakeError(f"{where}: is a directory")
    if st is not None and stat.S_ISSOCK(st.st_mode):
        raise GmlakeError(f"{where}: is a socket, not a file")
    if st is not None and not stat.S_ISREG(st.st_mode):
        return _snapshot_in_place(native, file, gz, where)
    folder = os.path.dirname(file)
    if not os.path.isdir(folder):
        raise GmlakeError(f"{where}: the directory {folder} does not exist")
    _remove_stale_temps(folder)
    global _temp_count
    _temp_count += 1
    tmp = os.path.join(folder, f".{os.path.basename(file)}.gmlake-{_HOST_TAG}-{os.getpid()}-{_temp_count}.snapshot{gz}")
    try:
        err = native.text(_TEXT_SNAPSHOT, tmp)  # the engine writes tmp (through a temporary of its own)
        if err:
            raise GmlakeError(err)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, file)
    except OSError as e:
        raise GmlakeError(f"{where}: {e.strerror}") from None
    finally:
        for p in (tmp, f"{tmp}.tmp-{os.getpid()}"):
            try:
                os.unlink(p)
            except OSError:
                pass


def _snapshot_in_place(native, file, gz, where):
    """A device or FIFO: the snapshot is written into it (renaming over it would replace it),
    from a private temporary folder. A FIFO with no reader is refused, not waited on."""
    import shutil
    import tempfile

    try:
        fd = os.open(file, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        why = "a FIFO with no reader" if e.errno == errno.ENXIO else e.strerror
        raise GmlakeError(f"{where}: {why}") from None
    d = tempfile.mkdtemp(prefix="gmlake-snapshot-")
    try:
        os.set_blocking(fd, True)
        tmp = os.path.join(d, "snapshot.pickle" + gz)
        err = native.text(_TEXT_SNAPSHOT, tmp)
        if err:
            raise GmlakeError(err)
        with open(tmp, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view):]
    except OSError as e:
        raise GmlakeError(f"{where}: {e.strerror}") from None
    finally:
        os.close(fd)
        shutil.rmtree(d, ignore_errors=True)


def _host_tag():
    """This host in temporary names (FNV-1a of the host name, 8 hex digits, as @gmlake/output's), so
    that a writer on another host sharing the folder is never taken for a dead one."""
    h = 0x811C9DC5
    for c in socket.gethostname():
        h = ((h ^ ord(c)) * 0x01000193) & 0xFFFFFFFF
    return f"{h:08x}"


_HOST_TAG = _host_tag()
_temp_count = 0
_TEMP_RE = re.compile(r"^\.(.+)\.gmlake-([0-9a-f]{8})-(\d+)-\d+\.snapshot(\.gz)?(\.tmp-\d+)?$")


def _remove_stale_temps(folder):
    """Removes the temporary files of this host's snapshot writers that are gone (killed mid-write)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = _TEMP_RE.match(name)
        if m is None or m.group(2) != _HOST_TAG or int(m.group(3)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(3)), 0)
            continue  # alive (or another user's: PermissionError below)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass


def set_memory_fraction(fraction, device=None):
    """The memory budget as fraction x the device's memory, from the next allocation on, as
    torch.cuda.set_per_process_memory_fraction sets it (memory held past it stays; later
    allocations fail until enough is freed). Returns the budget in bytes."""
    native = _require()
    return native.set_budget(_fraction(fraction, "memory_fraction"), True, native.device if device is None else int(device))


def set_capacity_bytes(nbytes, device=None):
    """The memory budget in bytes, from the next allocation on. Returns it."""
    native = _require()
    if nbytes is None:
        raise GmlakeError("gmlake: capacity_bytes: expected a non-negative integer (bytes), got None")
    return native.set_budget(_count(nbytes, "capacity_bytes", "", " (bytes)"), False, native.device if device is None else int(device))


def empty_cache():
    """Frees what the policy caches (torch.cuda.empty_cache() does the same through the hook)."""
    _require().empty_cache()


def close():
    """Frees every block still held, tears the policy down and reports what the driver still holds
    (for tests and tools that stand in for PyTorch: a PyTorch process just exits)."""
    native = _require()
    text = native.text(_TEXT_CLOSE)
    try:
        out = json.loads(text)
    except ValueError:
        raise GmlakeError(text) from None
    native.closed = True
    return out

