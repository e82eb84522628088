"""PyTorch's own allocator behind the pluggable interface, each call timed (pytorch_plug.cc):
live_workloads.py's allocators plug:pytorch and plug:pytorch-expandable.

usage: python3 pytorch_plug.py build OUT.so   (g++ against the PyTorch in use; live-run.sh's setup)
In a job: plug = pytorch_plug.enable(path) before the first CUDA tensor; plug.call_time_us()
and plug.peaks() after.
"""
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def build(out):
    # the same g++ line as gmlake_torch's own shims against this PyTorch (its headers, libc10)
    sys.path.insert(0, os.environ.get("GMLAKE_TORCH_PY", os.path.join(HERE, "../../packages/torch-alloc/python")))
    try:
        import torch  # noqa: F401
    except ImportError as e:
        sys.exit(f"pytorch_plug: needs PyTorch ({e})")
    import gmlake_torch

    try:
        gmlake_torch._build_against_torch(os.path.join(HERE, "pytorch_plug.cc"), out, ["c10", "c10_cuda"], cuda_headers=True)
    except gmlake_torch.GmlakeError as e:
        lines = str(e).strip().splitlines() or ["?"]
        first = next((l for l in lines if "error" in l), lines[-1])  # the first error, not the caret line
        sys.exit("pytorch_plug: build failed: " + first.strip()[:400])
    print(out)


class Plug:
    def __init__(self, lib):
        self.lib = lib

    def _four(self, fn):
        t = (ctypes.c_double * 4)()
        fn(t)
        return t

    def call_time_us(self):
        """(alloc us, free us) summed, and (allocs, frees): the same quantities as ours' stats()."""
        t = self._four(self.lib.plug_call_times)
        return {"alloc": t[0] / 1000, "free": t[2] / 1000}, {"alloc": int(t[1]), "free": int(t[3])}

    def peaks(self):
        """(peak reserved, peak allocated) bytes."""
        t = self._four(self.lib.plug_peaks)
        return int(t[0]), int(t[1])

    def allocated(self):
        """Bytes allocated now (torch.cuda.memory_allocated raises under a pluggable allocator)."""
        return int(self._four(self.lib.plug_peaks)[2])


def enable(path):
    import torch

    if not os.path.exists(path):
        sys.exit(f"pytorch_plug: {path} missing (python3 scripts/gpu/pytorch_plug.py build {path})")
    lib = ctypes.CDLL(os.path.abspath(path))
    lib.plug_call_times.argtypes = lib.plug_peaks.argtypes = [ctypes.POINTER(ctypes.c_double)]
    if lib.plug_save_native() != 0:
        sys.exit("pytorch_plug: PyTorch has no CUDA allocator to wrap")
    alloc = torch.cuda.memory.CUDAPluggableAllocator(os.path.abspath(path), "plug_alloc", "plug_free")
    h = alloc.allocator()
    addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    if hasattr(h, "set_reset_fn"):
        h.set_reset_fn(addr(lib.plug_empty_cache))
    if hasattr(h, "set_record_stream_fn"):
        h.set_record_stream_fn(addr(lib.plug_record_stream))
    torch.cuda.memory.change_current_allocator(alloc)
    plug = Plug(lib)
    plug.torch_allocator = alloc  # kept alive
    return plug


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "build":
        sys.exit("usage: python3 pytorch_plug.py build OUT.so")
    build(sys.argv[2])
