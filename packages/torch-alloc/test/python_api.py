#!/usr/bin/env python3
"""The Python side a user meets, without PyTorch or a GPU: a stand-in torch package (written
to a temp folder) does what PyTorch does with the library and raises where PyTorch raises
behind the pluggable interface; the engine runs on the host driver.

  memory-api     torch.cuda.memory_stats() & co replaced: PyTorch's keys from the engine's
                 stats (every key, untracked ones 0), the resets, another device, the summary,
                 a snapshot without history refused in one line, uninstall
  enable-api     enable() on the stand-in: the functions answer the engine's figures after
                 allocations through PyTorch's function pointers; _snapshot() from its history
  auto           GMLAKE_POLICY + the .pth line: nothing until CUDA's first initialisation, then
                 the engine (with _record_memory_history's request); the torch.cuda aliases
  auto-explicit  GMLAKE_POLICY and an enable() in the script: the script's settings, once
  auto-off       no GMLAKE_POLICY, or GMLAKE_AUTOENABLE=0: gmlake_torch is not even imported
  auto-no-torch  no torch: one line at exit, nothing else
  auto-cuda-first, auto-bad-policy
                 CUDA initialised before the hook, or a start that fails: one line, PyTorch's
                 allocator stays (the stand-in's lazy init still runs)
  device         the device the hook picks (GMLAKE_DEVICE, LOCAL_RANK, CUDA_VISIBLE_DEVICES)
  cli            python -m gmlake_torch: --help 0; no command, an unknown one, a bad --knobs: usage
                 and 2; run passes the script its arguments; check allocates on the host driver

GMLAKE_TEST_INSTALLED=1: the installed gmlake_torch instead of ../python (scripts/wheel/test.sh,
in a venv: its site-packages' own .pth line runs at every start).

usage: python3 test/python_api.py [CASE...]
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
INSTALLED = os.environ.get("GMLAKE_TEST_INSTALLED") == "1"
PY = None if INSTALLED else os.path.abspath(os.path.join(HERE, "..", "python"))
if PY:
    sys.path.insert(0, PY)
MiB = 1 << 20

# A torch package as far as the allocator sees it: lazy CUDA initialisation, the pluggable
# allocator (ctypes, as PyTorch resolves the entry points), the memory functions raising once
# a pluggable allocator is in place (zeros before: PyTorch's own), torchrun running one worker.
STAND_IN = {
    "torch/__init__.py": "__version__ = '0.0+stand-in'\nfrom . import cuda\n",
    "torch/distributed/__init__.py": "",
    "torch/distributed/run.py": textwrap.dedent('''\
        import os, subprocess, sys
        if __name__ == "__main__":
            args = sys.argv[1:]
            if args[:1] == ["--nproc-per-node"]:
                args = args[2:]
            env = dict(os.environ, LOCAL_RANK="0", RANK="0", WORLD_SIZE="1", TORCHELASTIC_RUN_ID="stand-in")
            sys.exit(subprocess.call([sys.executable, *args], env=env))
        '''),
    "torch/cuda/__init__.py": textwrap.dedent('''\
        import sys
        from . import memory
        from .memory import memory_stats, memory_allocated, max_memory_allocated, memory_reserved, max_memory_reserved, \\
            reset_peak_memory_stats, memory_summary
        _initialized = False
        init_calls = []
        def is_initialized():
            return _initialized
        def _lazy_init():
            global _initialized
            if not _initialized:
                memory._allocator_initialized[0] = True
                init_calls.append(1)
            _initialized = True
        def current_device():
            _lazy_init()
            return 0
        def first_tensor():
            """What C++ does before the first CUDA tensor (torch/csrc/utils/device_lazy_init.cpp)."""
            getattr(sys.modules["torch.cuda"], "_lazy_init")()
        '''),
    "torch/cuda/memory.py": textwrap.dedent('''\
        import ctypes
        _allocator_initialized = [False]
        swapped = []
        hooks = {}
        def _plug(name, answer=0):
            if swapped:
                raise RuntimeError(f"CUDAPluggableAllocator does not yet support {name}. "
                                   "If you need it, please file an issue describing your use case.")
            return answer
        def memory_stats(device=None): return _plug("getDeviceStats", {})
        def memory_allocated(device=None): return _plug("getDeviceStats")
        def max_memory_allocated(device=None): return _plug("getDeviceStats")
        def memory_reserved(device=None): return _plug("getDeviceStats")
        def max_memory_reserved(device=None): return _plug("getDeviceStats")
        def reset_peak_memory_stats(device=None): return _plug("resetPeakStats", None)
        def memory_summary(device=None, abbreviated=False): return _plug("getDeviceStats", "PyTorch CUDA memory summary (stand-in)")
        def _snapshot(device=None): return _plug("snapshot", {})
        def _dump_snapshot(filename="dump_snapshot.pickle"): return _plug("snapshot", None)
        history_calls = []
        def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=2**63 - 1, device=None):
            history_calls.append((enabled, max_entries))
        def _fn(lib, name, restype, *argtypes):
            return ctypes.CFUNCTYPE(restype, *argtypes)(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
        class _Handle:
            set_record_stream_fn = lambda self, addr: None
            def set_reset_fn(self, addr):
                hooks["reset"] = ctypes.CFUNCTYPE(None)(addr)
        class CUDAPluggableAllocator:
            def __init__(self, path, alloc_name, free_name):
                lib, vp, sz = ctypes.CDLL(path), ctypes.c_void_p, ctypes.c_size_t
                hooks.update(alloc=_fn(lib, alloc_name, vp, sz, ctypes.c_int, vp), free=_fn(lib, free_name, None, vp, sz, ctypes.c_int, vp))
                self.allocator = lambda: _Handle()
        def change_current_allocator(alloc):
            if _allocator_initialized[0]:
                raise RuntimeError("Can't swap an already initialized allocator")
            swapped.append(alloc)
        '''),
}


def stand_in(root):
    for rel, text in STAND_IN.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return root


def child(code, env=None, torch=True, site=True, args=()):
    """Runs `code` in a fresh python: gmlake_torch's folder as a site dir (its .pth line runs,
    as in an installed wheel) unless site=False, the stand-in torch on sys.path if torch; with
    torch=False no site-packages at all (python -S, then only gmlake_torch's folder as a site
    dir), so a real torch of this machine stays out of it too."""
    with tempfile.TemporaryDirectory() as d:
        paths = [stand_in(d)] if torch else []
        e = {k: v for k, v in os.environ.items() if not k.startswith("GMLAKE_") and k not in ("LOCAL_RANK", "PYTHONPATH")}
        e.update({"GMLAKE_DRIVER": "host", "GMLAKE_THREADING": "locker", "PYTHONPATH": os.pathsep.join(paths + ([PY] if PY else []))})
        e.update(env or {})
        # installed: the site-packages' .pth line has run already, as in any program
        prelude = f"import site; site.addsitedir({PY!r})\n" if site and PY else ""
        flags = []
        if not torch:
            import gmlake_torch

            flags = ["-S"]
            prelude = f"import site; site.addsitedir({os.path.dirname(os.path.dirname(gmlake_torch.__file__))!r})\n"
        return subprocess.run([sys.executable, *flags, "-c", prelude + textwrap.dedent(code), *args], env=e, capture_output=True,
                              text=True, timeout=300, cwd=d)


def joined(*parts):
    return "".join(textwrap.dedent(p) for p in parts)


def expect(r, rc=0):
    if r.returncode != rc:
        return f"exit {r.returncode} (expected {rc}): {r.stdout.strip()[-800:]} {r.stderr.strip()[-1500:]}"
    return None


def memory_api():
    """The replacements on fake engine figures (no engine): every mapping checked against the input."""
    import types

    from gmlake_torch import memory_api as m

    st = {"allocated_bytes.all.current": 10 * MiB, "allocated_bytes.all.peak": 30 * MiB, "reserved_bytes.all.current": 40 * MiB,
          "reserved_bytes.all.peak": 50 * MiB, "active_bytes.all.current": 11 * MiB, "active_bytes.all.peak": 31 * MiB,
          "requested_bytes.all.current": 9 * MiB, "requested_bytes.all.peak": 29 * MiB, "segment.all.current": 3,
          "num_alloc_retries": 2, "num_ooms": 1, "num_sync_all_streams": 4, "num_device_alloc": 7, "num_device_free": 5,
          "live_blocks": 6, "pending_frees": 2, "calls": {"allocs": 21, "frees": 14, "ooms": 1}, "num_front_cache_hits": 3,
          "num_queue_takebacks": 4, "policy": "vms"}
    flat = m.torch_stats(st)
    if set(flat) != set(m.ALL_KEYS) or len(m.ALL_KEYS) != 122:
        return f"not PyTorch's 122 keys: {len(flat)}"
    for k in m._SAME:
        if flat[k] != st[k]:
            return f"{k}: {flat[k]} != the engine's {st[k]}"
    # made: the engine's allocs less its failures, the front cache's hits and the take-backs (GMLAKE_TAKEBACK)
    if (flat["allocation.all.allocated"], flat["allocation.all.current"], flat["allocation.all.freed"]) != (27, 6, 21):
        return f"allocation counts: {flat['allocation.all.allocated']}, {flat['allocation.all.current']}, {flat['allocation.all.freed']}"
    if flat["active.all.current"] != 8 or flat["max_split_size"] != -1 or any(flat[k] for k in m.UNTRACKED):
        return "active, max_split_size or an untracked key"
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(memory_stats="pytorch's"), memory_stats="pytorch's alias",
                                       is_initialized=lambda: True, current_device=lambda: 0)
    snaps = []

    def no_history(path):
        snaps.append(path)
        raise RuntimeError("gmlake: snapshot: the allocator was started with record=false")

    api = m.install(torch, stats=lambda: st, snapshot=no_history, device=0)
    if torch.cuda.memory_stats is torch.cuda.memory.memory_stats is None or torch.cuda.memory.memory_stats != api.memory_stats:
        return "install did not replace torch.cuda.memory.memory_stats"
    if torch.cuda.memory_stats != api.memory_stats or hasattr(torch.cuda, "_snapshot"):
        return "install: the torch.cuda alias not replaced, or a private name added to torch.cuda"
    if (torch.cuda.memory.memory_allocated(), torch.cuda.memory.max_memory_allocated("cuda:0"),
            torch.cuda.memory.memory_reserved(0), torch.cuda.memory.max_memory_reserved(None)) != (10 * MiB, 30 * MiB, 40 * MiB, 50 * MiB):
        return "memory_allocated & co are not the engine's figures"
    if torch.cuda.memory.memory_allocated(1) != 0 or torch.cuda.memory.memory_stats(1)["max_split_size"] != -1:
        return "another device is not all zeros"
    if list(torch.cuda.memory.memory_stats()) != sorted(m.ALL_KEYS):
        return "memory_stats() is not sorted by key as PyTorch's"
    nested = torch.cuda.memory.memory_stats_as_nested_dict()
    if nested["allocated_bytes"]["all"]["peak"] != 30 * MiB or nested["num_ooms"] != 1:
        return "the nested dict"
    # the peak after a reset on an engine that cannot reset its own: the highest current seen
    # until the engine's all-time peak moves
    torch.cuda.memory.reset_peak_memory_stats()
    if torch.cuda.memory.max_memory_allocated() != 10 * MiB:
        return f"peak after a reset: {torch.cuda.memory.max_memory_allocated()}"
    st["allocated_bytes.all.current"] = 20 * MiB
    torch.cuda.memory.memory_allocated()
    st["allocated_bytes.all.current"] = 5 * MiB
    if torch.cuda.memory.max_memory_allocated() != 20 * MiB:
        return "the peak since the reset is not the highest figure seen"
    st["allocated_bytes.all.peak"] = 35 * MiB  # a new all-time peak: exact again
    if torch.cuda.memory.max_memory_allocated() != 35 * MiB:
        return "a new all-time peak after the reset is not the peak"
    torch.cuda.memory.reset_accumulated_memory_stats()
    st["num_alloc_retries"] = 5
    if torch.cuda.memory.memory_stats()["num_alloc_retries"] != 3:
        return "reset_accumulated_memory_stats: the counter is not counted from the reset"
    text = torch.cuda.memory.memory_summary()
    for want in ("gmlake vms allocator memory summary, device ID 0", "Allocated memory", "from large pool", "n/a", "35 MiB"):
        if want not in text:
            return f"memory_summary lacks {want!r}:\n{text}"
    if "from large pool" in torch.cuda.memory.memory_summary(abbreviated=True):
        return "abbreviated summary has pool rows"
    widths = {len(line) for line in text.splitlines()}
    if widths != {77}:
        return f"summary lines of widths {sorted(widths)}:\n{text}"
    try:
        torch.cuda.memory._snapshot()
        return "a snapshot without history did not raise"
    except RuntimeError as e:
        if "GMLAKE_RECORD=1" not in str(e) or "\n" in str(e):
            return f"the refusal does not say what to do in one line: {e}"
    try:
        torch.cuda.memory.memory_allocated("cpu")
        return "a cpu device was accepted"
    except ValueError:
        pass
    m.uninstall()
    if torch.cuda.memory.memory_stats != "pytorch's" or torch.cuda.memory_stats != "pytorch's alias" or hasattr(torch.cuda.memory, "_snapshot"):
        return "uninstall did not put PyTorch's back"
    print(json.dumps({"case": "memory-api", "keys": len(flat), "untracked": len(m.UNTRACKED)}))
    return None


# Allocations through the function pointers PyTorch got; the functions' answers against stats().
CHECK_FIGURES = '''
import json, torch, gmlake_torch
from torch.cuda import memory
h = memory.hooks
ps = [h["alloc"](n << 20, 0, 0) for n in (1, 3, 7)]
h["free"](ps.pop(), 7 << 20, 0, 0)
st = gmlake_torch.stats()
got = (torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(), memory.memory_reserved(), memory.max_memory_reserved())
want = tuple(st[k] for k in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current", "reserved_bytes.all.peak"))
assert got == want and want[0] == 4 << 20 and want[1] == 11 << 20, (got, want)
assert torch.cuda.memory_stats()["allocation.all.current"] == 2
assert "gmlake vms allocator" in torch.cuda.memory_summary()
torch.cuda.reset_peak_memory_stats()  # the engine's peaks back to current: exact
assert torch.cuda.max_memory_allocated() == 4 << 20 == gmlake_torch.stats()["allocated_bytes.all.peak"]
p = h["alloc"](2 << 20, 0, 0)
assert torch.cuda.max_memory_allocated() == 6 << 20
h["free"](p, 2 << 20, 0, 0)
'''


def enable_api():
    code = joined('''
        import torch, gmlake_torch, pickle
        gmlake_torch.enable("vms", record=True)
    ''', CHECK_FIGURES, '''
        snap = torch.cuda.memory._snapshot()
        assert snap["segments"] and snap["device_traces"][0], sorted(snap)
        memory._dump_snapshot("d.pickle")
        assert pickle.load(open("d.pickle", "rb"))["segments"]
        print(json.dumps({"case": "enable-api", "segments": len(snap["segments"]), "events": len(snap["device_traces"][0])}))
    ''')
    r = child(code, site=False)
    print(r.stdout.strip())
    return expect(r)


def auto():
    code = joined('''
        import sys, json
        assert "gmlake_torch.autoenable" in sys.modules, "the .pth line did not import the hook"
        import torch, gmlake_torch
        from torch.cuda import memory
        assert gmlake_torch._native is None and not memory.swapped, "the engine started before CUDA's initialisation"
        torch.cuda.memory._record_memory_history(max_entries=500)
        assert not memory.history_calls, "the request reached PyTorch's allocator"
        torch.cuda.first_tensor()
        assert len(memory.swapped) == 1 and torch.cuda.init_calls == [1], (memory.swapped, torch.cuda.init_calls)
    ''', CHECK_FIGURES, '''
        snap = torch.cuda.memory._snapshot()
        assert snap["device_traces"][0], "the history asked for before the start is not kept"
        torch.cuda.first_tensor()
        assert len(memory.swapped) == 1
        print(json.dumps({"case": "auto", "events": len(snap["device_traces"][0])}))
    ''')
    r = child(code, env={"GMLAKE_POLICY": "vms"})
    print(r.stdout.strip())
    return expect(r) or (f"stderr not empty: {r.stderr}" if r.stderr.strip() else None)


def auto_explicit():
    """GMLAKE_POLICY set and the script calls enable() itself: its settings win, the hook does nothing more."""
    code = '''
        import torch, gmlake_torch
        gmlake_torch.enable("gmlake")
        torch.cuda.first_tensor()
        assert len(torch.cuda.memory.swapped) == 1 and gmlake_torch.stats()["policy"] == "gmlake"
        assert torch.cuda.memory._record_memory_history.__self__.__class__.__name__ == "MemoryApi", "PyTorch's came back"
    '''
    r = child(code, env={"GMLAKE_POLICY": "vms"})
    return expect(r) or (f"stderr: {r.stderr}" if r.stderr.strip() else None)


def auto_off():
    code = '''
        import sys, torch
        torch.cuda.first_tensor()
        assert "gmlake_torch" not in sys.modules, "gmlake_torch imported"
        assert not torch.cuda.memory.swapped
    '''
    for env in ({}, {"GMLAKE_POLICY": "vms", "GMLAKE_AUTOENABLE": "0"}, {"GMLAKE_POLICY": ""}):
        r = child(code, env=env)
        err = expect(r) or (f"stderr: {r.stderr}" if r.stderr.strip() else None)
        if err:
            return f"{env}: {err}"
    return None


def auto_no_torch():
    r = child("print('hello')", env={"GMLAKE_POLICY": "vms"}, torch=False)
    lines = r.stderr.strip().splitlines()
    if expect(r) or r.stdout.strip() != "hello" or len(lines) != 1 or "no torch module: nothing was enabled" not in lines[0]:
        return f"without torch: exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}"
    print(lines[0])
    return None


def auto_refused(code, env, want):
    r = child(code, env={"GMLAKE_POLICY": "vms", **env})
    lines = r.stderr.strip().splitlines()
    if expect(r) or len(lines) != 1 or want not in lines[0] or "PyTorch's allocator stays" not in lines[0]:
        return f"exit {r.returncode}, stderr {r.stderr!r} (wanted one line with {want!r})"
    print(lines[0])
    return None


def auto_cuda_first():
    # CUDA initialised by a path the hook does not see (the module's own flag), then the first tensor
    code = '''
        import torch
        torch.cuda._initialized = True; torch.cuda.memory._allocator_initialized[0] = True
        torch.cuda.first_tensor()
        assert not torch.cuda.memory.swapped
        assert torch.cuda.memory_allocated.__module__ == "torch.cuda.memory", "PyTorch's functions were replaced"
    '''
    return auto_refused(code, {}, "CUDA was initialised before GMLAKE_POLICY's hook could act")


def auto_bad_policy():
    code = '''
        import torch
        torch.cuda.memory._record_memory_history(max_entries=7)
        torch.cuda.first_tensor()
        assert torch.cuda.init_calls == [1] and not torch.cuda.memory.swapped
        assert torch.cuda.memory.history_calls == [("all", 7)], torch.cuda.memory.history_calls
    '''
    return auto_refused(code, {"GMLAKE_POLICY": "nope"}, "GMLAKE_POLICY=nope not enabled: ")


def auto_nccl_register():
    """NCCL's tensor-registration hook asked for: ours declines in one line (PyTorch's stays, and registers); "0" asks nothing."""
    code = '''
        import torch
        torch.cuda.first_tensor()
        assert torch.cuda.init_calls == [1] and not torch.cuda.memory.swapped
    '''
    err = auto_refused(code, {"TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "1"}, "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK is set: ours does not register")
    code = '''
        import torch
        torch.cuda.first_tensor()
        assert len(torch.cuda.memory.swapped) == 1
    '''
    r = child(code, env={"GMLAKE_POLICY": "vms", "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "0"})
    return err or expect(r) or (f"stderr: {r.stderr}" if r.stderr.strip() else None)


def device():
    from gmlake_torch.autoenable import device_from_env

    cases = [({}, 0), ({"LOCAL_RANK": "3"}, 3), ({"LOCAL_RANK": "3", "CUDA_VISIBLE_DEVICES": "5"}, 0),
             ({"LOCAL_RANK": "3", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 3), ({"GMLAKE_DEVICE": "1", "LOCAL_RANK": "3"}, 1)]
    for env, want in cases:
        if device_from_env(env) != want:
            return f"{env}: device {device_from_env(env)}, expected {want}"
    try:
        device_from_env({"GMLAKE_DEVICE": "gpu1"})
        return "a bad GMLAKE_DEVICE was taken"
    except ValueError as e:
        if "GMLAKE_DEVICE" not in str(e):
            return str(e)
    return None


def cli():
    def gm(*args, env=None):
        return child("import runpy; runpy.run_module('gmlake_torch', run_name='__main__')", site=False, env=env, args=args)

    r = gm("--help")
    if expect(r) or "run" not in r.stdout or "check" not in r.stdout:
        return f"--help: {expect(r)} {r.stdout}"
    for args, want in (((), "the following arguments are required: COMMAND"), (("bogus",), "invalid choice: 'bogus'"),
                       (("run",), "give a SCRIPT or -m MODULE"), (("run", "--knobs", "a", "x.py"), "expected name=value, got 'a'"),
                       (("check", "--driver", "gpu"), "invalid choice: 'gpu'")):
        r = gm(*args)
        if r.returncode != 2 or "usage: python -m gmlake_torch" not in r.stderr or want not in r.stderr:
            return f"{args}: exit {r.returncode}, stderr {r.stderr!r}"
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "train.py")
        with open(script, "w") as f:
            f.write("import sys, torch, gmlake_torch\nprint('ARGV', sys.argv[1:], gmlake_torch.stats()['policy'], len(torch.cuda.memory.swapped))\n")
        r = gm("run", "--policy", "gmlake", "--knobs", "", script, "--lr", "3", "--help")
        if expect(r) or "ARGV ['--lr', '3', '--help'] gmlake 1" not in r.stdout:
            return f"run: {expect(r)} {r.stdout!r}"
    r = gm("check")
    if expect(r):
        return f"check: {expect(r)}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if not out["ok"] or out["allocs"] != 200 or out["frees"] != 200 or out["driver"] != "host":
        return f"check: {out}"
    print(json.dumps({"case": "cli", "check": out["peak_reserved"]}))
    return None


CASES = {"memory-api": memory_api, "enable-api": enable_api, "auto": auto, "auto-explicit": auto_explicit, "auto-off": auto_off, "auto-no-torch": auto_no_torch,
         "auto-cuda-first": auto_cuda_first, "auto-bad-policy": auto_bad_policy,
         "auto-nccl-register": auto_nccl_register, "device": device, "cli": cli}


def main(argv):
    unknown = [n for n in argv if n not in CASES]
    if unknown:
        print(f"python_api: unknown case {', '.join(unknown)}; one of: {', '.join(CASES)}", file=sys.stderr)
        return 2
    errors = {}
    for name in argv or CASES:
        errors[name] = CASES[name]()
        print(f"{name}: " + ("ok" if errors[name] is None else f"FAILED: {errors[name]}"))
    failed = [n for n, e in errors.items() if e is not None]
    print(f"{len(errors) - len(failed)}/{len(errors)} cases passed" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
