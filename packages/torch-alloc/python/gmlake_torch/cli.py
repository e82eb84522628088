"""python -m gmlake_torch (or gmlake-torch, installed from the wheel): argparse subcommands.

  run [--policy P] [--knobs k=v,...] [--record] (SCRIPT | -m MODULE) [ARGS...]
        the script (or module) as __main__ with the engine as PyTorch's allocator
  check [--driver host|sim|cuda] [--policy P]
        starts the engine, allocates and frees through it, prints one JSON line (no torch needed)
  info  where the library, libnode and the GMLAKE_POLICY hook are; the version
  build-oom-shim, build-pair-bench
        build libgmlake_oom.so / libgmlake_pair_bench.so against this PyTorch (need g++)
"""
import argparse
import json
import os
import runpy
import sys

import gmlake_torch as g

MiB = 1 << 20


def version():
    """The wheel's version, else the npm package's (the source tree)."""
    try:
        from importlib.metadata import version as installed

        return installed("gmlake_torch")
    except Exception:  # noqa: BLE001 (not installed as a distribution: the source tree)
        pass
    try:
        with open(os.path.join(g._PKG, "package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return "unknown"


def _knobs(text):
    out = {}
    for kv in filter(None, (p.strip() for p in text.split(","))):
        k, eq, v = kv.partition("=")
        if not eq or not k.strip():
            raise argparse.ArgumentTypeError(f"expected name=value, got {kv!r}")
        out[k.strip()] = v.strip()
    return out


def parser():
    p = argparse.ArgumentParser(prog="python -m gmlake_torch",
                                description="The stitching engine as PyTorch's CUDA allocator. Without code changes: "
                                            "GMLAKE_POLICY=vms python train.py (or torchrun ...; GMLAKE_AUTOENABLE=0 turns that off).")
    p.add_argument("--version", action="version", version=f"gmlake_torch {version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    r = sub.add_parser("run", help="run a script (or -m module) with the engine as PyTorch's allocator",
                       description="Runs SCRIPT (or -m MODULE) as __main__ after enable(); ARGS go to it.")
    r.set_defaults(parser=r)
    r.add_argument("--policy", help="caching, expandable, gmlake, vms (default $GMLAKE_POLICY, else vms)")
    r.add_argument("--knobs", type=_knobs, default={}, metavar="K=V,...", help="the policy's options")
    r.add_argument("--record", action="store_true", default=None, help="keep the history for _snapshot() (as GMLAKE_RECORD=1)")
    r.add_argument("-m", dest="module", metavar="MODULE", help="run a module, as python -m does (e.g. mypkg.train)")
    r.add_argument("target", nargs="?", metavar="SCRIPT", help="the script")
    r.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's arguments")
    c = sub.add_parser("check", help="start the engine and allocate and free through it (no torch needed)",
                       description="Starts the engine, allocates and frees through it as PyTorch would, prints one JSON line.")
    c.add_argument("--driver", default="host", choices=("host", "sim", "cuda"), help="host (default: memory of this process), sim, cuda")
    c.add_argument("--policy", default="vms", help="the policy (default vms)")
    sub.add_parser("info", help="where the library, libnode and the GMLAKE_POLICY hook are",
                   description="Prints where the parts are, one per line.")
    sub.add_parser("build-oom-shim", help="build libgmlake_oom.so against this PyTorch (OOM -> torch.cuda.OutOfMemoryError)",
                   description="Builds libgmlake_oom.so against this PyTorch; needs g++.")
    sub.add_parser("build-cuda-allocator", help="build the native CUDAAllocator library against this PyTorch (needs g++)",
                   description="Builds the library of enable(interface='native') against this PyTorch; needs g++ and the CUDA headers.")
    sub.add_parser("build-pair-bench", help="build libgmlake_pair_bench.so (the per-call microbenchmark in C++)",
                   description="Builds libgmlake_pair_bench.so; needs g++ and the CUDA headers.")
    return p


def _run(p, a):
    if (a.module is None) == (a.target is None):
        a.parser.error("give a SCRIPT or -m MODULE (one of them)")
    g.enable(a.policy, record=a.record, **a.knobs)
    if a.module is not None:
        sys.argv = [a.module] + ([a.target] if a.target else []) + a.args
        runpy.run_module(a.module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [a.target] + a.args
        runpy.run_path(a.target, run_name="__main__")
    return 0


def _check(a):
    native = g.start(a.policy, driver=a.driver, threading="locker")
    sizes = [512, 4096, 3 * MiB, 20 * MiB + 1, 2 * MiB]
    live = []
    for i in range(200):
        size = sizes[i % len(sizes)]
        st, addr = native.try_alloc(size)
        if st != 0 or not addr:
            raise g.GmlakeError(f"gmlake: check: an allocation of {size} bytes failed ({st}): {native.error()}")
        live.append((addr, size))
        if len(live) > 8:
            native.free(*live.pop(0))
    for addr, size in live:
        native.free(addr, size)
    st = g.stats()
    out = {"ok": True, "version": version(), "policy": st["policy"], "driver": st["driver"],
           "allocs": st["calls"]["allocs"], "frees": st["calls"]["frees"],
           "peak_reserved": st["reserved_bytes.all.peak"], "library": native.path}
    if a.driver != "cuda":
        leaks = g.close()["leaks"]
        out["leaks"] = leaks
        if leaks and any(leaks.values()):
            raise g.GmlakeError(f"gmlake: check: the engine leaked {leaks}")
    print(json.dumps(out))
    return 0


def _info():
    lib = g.library_path()
    pkg = os.path.dirname(os.path.dirname(os.path.dirname(lib)))
    libnode = os.environ.get("GMLAKE_LIBNODE_DIR") or os.path.join(pkg, "build", "libnode", "usr", "lib", "x86_64-linux-gnu")
    site = os.path.dirname(os.path.dirname(os.path.abspath(g.__file__)))
    pth = os.path.join(site, "gmlake_torch_autoenable.pth")
    print(f"version   {version()}")
    print(f"module    {os.path.dirname(os.path.abspath(g.__file__))}")
    print(f"library   {lib} ({'present' if os.path.exists(lib) else 'MISSING'})")
    print(f"libnode   {libnode} ({'present' if os.path.exists(os.path.join(libnode, 'libnode.so.108')) else 'MISSING'})")
    print(f"hook      {pth} ({'installed' if os.path.exists(pth) else 'not installed: GMLAKE_POLICY alone does nothing here'})")
    print(f"GMLAKE_POLICY={os.environ.get('GMLAKE_POLICY', '')} GMLAKE_AUTOENABLE={os.environ.get('GMLAKE_AUTOENABLE', '')}")
    return 0


def main(argv=None):
    p = parser()
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if a.command == "run":
            return _run(p, a)
        if a.command == "check":
            return _check(a)
        if a.command == "info":
            return _info()
        if a.command == "build-oom-shim":
            print(g.build_oom_shim(verbose=True))
        elif a.command == "build-cuda-allocator":
            from . import cuda_allocator

            print(cuda_allocator.build())
        elif a.command == "build-pair-bench":
            print(g.build_pair_bench(verbose=True))
        return 0
    except g.GmlakeError as e:
        print(str(e), file=sys.stderr)
        return 2
