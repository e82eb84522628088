"""GMLAKE_POLICY=<policy>: the engine becomes PyTorch's allocator in any Python program, with
no change to it, under any launcher that starts Python (torchrun, accelerate launch,
python -m ...: each worker is a Python process that inherits the variable).

The wheel installs gmlake_torch_autoenable.pth, one line that site.py runs at every start:
it imports this module only when GMLAKE_POLICY is set (and GMLAKE_AUTOENABLE is not 0), so
without the variable nothing of ours is loaded. install() then waits for `import torch`
(a meta-path hook; no torch import of its own) and wraps torch.cuda._lazy_init, the one
place where PyTorch initialises CUDA (Python and C++ both call it): the engine starts there,
just before the first CUDA use, with enable()'s settings from the environment (GMLAKE_*), on
GMLAKE_DEVICE, else LOCAL_RANK under a launcher that sets it (unless CUDA_VISIBLE_DEVICES
names a single device), else 0. A process that never uses CUDA (a DataLoader worker, the
launcher itself) never starts the engine.
A torch.cuda.memory._record_memory_history() call before then starts the engine with its
history (record=True, max_entries as asked), so _snapshot() works as with PyTorch's own.

Turn it off: unset GMLAKE_POLICY, or GMLAKE_AUTOENABLE=0 (enable() and
`python -m gmlake_torch run` still read GMLAKE_POLICY), or `python -S`.
No torch in this Python: nothing happens; at exit one line says GMLAKE_POLICY had no torch.
CUDA initialised before the hook could act, or the engine fails to start: one line on stderr
says why, and PyTorch's own allocator stays.
"""
import atexit
import importlib.abc
import importlib.util
import os
import sys
import threading

NCCL_REGISTER_HOOK = "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"
_lock = threading.Lock()
_state = {"installed": False, "done": False, "record": None}
_originals = {}


def _warn(msg):
    print(f"gmlake: {msg}", file=sys.stderr, flush=True)


def device_from_env(env=None):
    """GMLAKE_DEVICE, else LOCAL_RANK (torchrun, accelerate) unless CUDA_VISIBLE_DEVICES names one device, else 0."""
    env = os.environ if env is None else env
    for name in ("GMLAKE_DEVICE", "LOCAL_RANK"):
        text = env.get(name, "").strip()
        if not text:
            continue
        if name == "LOCAL_RANK" and len([d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]) == 1:
            return 0
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{name} must be a device index, not {text!r}") from None
    return 0


class _TorchFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: on `import torch` it lets the usual finders find it and runs
    _after_torch once torch's own __init__ has run."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _after_torch(module)

        spec.loader.exec_module = exec_module
        return spec


def install():
    """Run by the .pth line when GMLAKE_POLICY is set; never raises (a broken hook must not
    stop every Python program): it says what went wrong in one line."""
    try:
        if _state["installed"] or os.environ.get("GMLAKE_AUTOENABLE", "1") == "0":
            return
        _state["installed"] = True
        if "torch" in sys.modules:
            _after_torch(sys.modules["torch"])
        else:
            sys.meta_path.insert(0, _TorchFinder())
            atexit.register(_say_if_no_torch)
    except Exception as e:  # noqa: BLE001 (see the docstring)
        _warn(f"GMLAKE_POLICY's hook failed: {e}")


def _say_if_no_torch():
    if "torch" in sys.modules:
        return
    try:
        absent = importlib.util.find_spec("torch") is None
    except (ImportError, ValueError):
        absent = True
    if absent:
        _warn(f"GMLAKE_POLICY={os.environ.get('GMLAKE_POLICY', '')} is set but this Python has no torch module: nothing was enabled")


def _after_torch(torch):
    """torch is imported: wrap its CUDA initialisation (everywhere it is bound) and its
    _record_memory_history; say so if CUDA is initialised already."""
    try:
        cuda = torch.cuda
        if cuda.is_initialized():
            _warn("CUDA was initialised before GMLAKE_POLICY's hook could act: PyTorch's allocator stays")
            _state["done"] = True
            return
        lazy = cuda._lazy_init
        _originals["_lazy_init"] = lazy

        def _lazy_init():
            if not _state["done"]:
                _start(torch)
            return lazy()

        # torch.cuda's own functions and C++ (device_lazy_init) look it up there at each call;
        # modules that imported it by name hold the original: theirs is swapped too
        for name, mod in list(sys.modules.items()):
            try:
                if name.startswith("torch") and getattr(mod, "_lazy_init", None) is lazy:
                    mod._lazy_init = _lazy_init
            except Exception:  # noqa: BLE001 (a lazy module that cannot answer holds no _lazy_init of ours)
                pass
        cuda._lazy_init = _lazy_init
        record = getattr(cuda.memory, "_record_memory_history", None)
        if record is not None:
            _originals["_record_memory_history"] = record

            def _record_memory_history(enabled="all", *args, **kwargs):
                if _state["done"]:  # started: memory_api's (or PyTorch's) answers
                    return cuda.memory._record_memory_history(enabled, *args, **kwargs)
                _state["record"] = (enabled, args, kwargs)  # the engine starts with it

            _originals["pre_start_record"] = _record_memory_history
            cuda.memory._record_memory_history = _record_memory_history
    except Exception as e:  # noqa: BLE001 (a torch we do not understand: PyTorch's allocator stays)
        _warn(f"GMLAKE_POLICY's hook could not attach to this torch ({e}): PyTorch's allocator stays")


def _record_settings():
    """enable()'s record and record_max_entries from a _record_memory_history call made before the start."""
    if _state["record"] is None:
        return {}
    enabled, _, kwargs = _state["record"]
    if not enabled:
        return {}
    out = {"record": True}
    n = kwargs.get("max_entries", kwargs.get("trace_alloc_max_entries"))
    if isinstance(n, int) and not isinstance(n, bool):
        out["record_max_entries"] = 0 if n >= sys.maxsize else n  # PyTorch's default: no bound
    return out


def _start(torch):
    """Once, at the first CUDA initialisation: the engine becomes the allocator, or one line says why not."""
    with _lock:
        if _state["done"]:
            return
        _state["done"] = True
        cuda = torch.cuda
        # PyTorch's back, unless an explicit enable() replaced ours already (memory_api's stays)
        if "_record_memory_history" in _originals and cuda.memory._record_memory_history is _originals["pre_start_record"]:
            cuda.memory._record_memory_history = _originals["_record_memory_history"]
        import gmlake_torch

        try:
            if cuda.is_initialized():
                raise RuntimeError("CUDA was initialised before GMLAKE_POLICY's hook could act")
            if os.environ.get(NCCL_REGISTER_HOOK, "").strip().lower() in ("1", "true", "yes", "y", "on"):
                # PyTorch would register each segment with NCCL and refuse at the process group
                raise RuntimeError(f"{NCCL_REGISTER_HOOK} is set: ours does not register its memory with NCCL "
                                   "(vms moves a range's physical pages; PyTorch turns it off under expandable_segments too); unset it to run on ours")
            gmlake_torch.enable(device=device_from_env(), **_record_settings())
        except Exception as e:  # noqa: BLE001 (the job goes on with PyTorch's allocator, and says so)
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
            if why.startswith("gmlake: "):
                why = why[len("gmlake: "):]
            _warn(f"GMLAKE_POLICY={os.environ.get('GMLAKE_POLICY', '')} not enabled: {why}; PyTorch's allocator stays")
            if _state["record"] is not None:  # what the script asked for, from PyTorch's allocator now
                enabled, args, kwargs = _state["record"]
                cuda.memory._record_memory_history(enabled, *args, **kwargs)
