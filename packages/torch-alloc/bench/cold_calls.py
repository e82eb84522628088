"""Per-call cost through the library when the caller does other work between calls, as a
training process does (inside PyTorch on the H200 vms's JS ran 3-7 us a pair where the same
work in a hot JS loop takes 0.3-0.7 us; docs/notebook/2026-12-01-live-runs.md, runs 9 to 13). No GPU, no torch:
the library through ctypes on the sim driver, GMLAKE_TIME_CALLS=1, the alloc+free pattern
of live-pair.mjs (a window of 64 live blocks, 512 B to 64 MiB), and between every two calls:
  none    only this loop's own Python and ctypes
  numpy   also 1 MiB of float64 updated with numpy (the data caches evicted)
  python  also 300 turns of a Python loop (the interpreter's code and data)
--ping: the bare round trip (gmlake_ping, libgmlake_bench_calls.so) instead of alloc+free: what entering JS costs.
--total: GMLAKE_TIME_CALLS=total (the whole calls only, two clock reads a call, as the plug
times PyTorch's own allocator) instead of 1 (also the parts: four more reads a JS call).

usage: python3 bench/cold_calls.py [--policy vms] [--work none|numpy|python] [--pairs 20000] [--ping] [--total]
Prints one JSON line: us per alloc+free pair (or per ping) in the library's alloc and free,
and their parts for the calls that entered JS (enter: taking the isolate; prepare: scopes and
the queued frees' hand-over; js: the JS function), and the loop's wall time per pair.
"""
import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--policy", default="vms")
ap.add_argument("--work", default="none", choices=["none", "numpy", "python"])
ap.add_argument("--pairs", type=int, default=20000)
ap.add_argument("--ping", action="store_true")
ap.add_argument("--total", action="store_true")
args = ap.parse_args()
if args.pairs <= 0:
    sys.exit("cold_calls: --pairs takes a positive number")
os.environ["GMLAKE_TIME_CALLS"] = "total" if args.total else "1"
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import gmlake_torch  # noqa: E402

if args.work == "numpy":
    try:
        import numpy as np
    except ImportError:
        sys.exit("cold_calls: --work numpy needs numpy")
    bufs = [np.ones(1 << 17) for _ in range(16)]  # 16 x 1 MiB


def between(i):
    if args.work == "numpy":
        bufs[i & 15].__iadd__(1.0)
    elif args.work == "python":
        s = 0
        for k in range(300):
            s += k * k


try:
    native = gmlake_torch.start(args.policy, driver="sim")
except gmlake_torch.GmlakeError as e:
    sys.exit(str(e))
if args.ping:  # the bench-only calls (bench/bench_calls.cc), beside the library
    import ctypes
    ping = ctypes.CDLL(os.path.join(os.path.dirname(gmlake_torch.library_path()), "libgmlake_bench_calls.so")).gmlake_ping
    ping.argtypes, ping.restype = [ctypes.c_double], ctypes.c_double
rng = random.Random(1234)
sizes = [512 << rng.randrange(18) for _ in range(4096)]
window = []
for i in range(64):
    st, a = native.try_alloc(sizes[i])
    if st != 0:
        sys.exit(f"cold_calls: alloc failed: {native.error()}")
    window.append((a, sizes[i]))


def run(n):
    for i in range(n):
        if args.ping:
            ping(1.0)
            between(i)
            continue
        k, size = i & 63, sizes[i & 4095]
        st, a = native.try_alloc(size)
        if st != 0:
            sys.exit(f"cold_calls: alloc failed: {native.error()}")
        between(i)
        native.free(*window[k])
        between(i)
        window[k] = (a, size)


run(5000)  # warm-up: JIT, the pool's steady state
s0 = gmlake_torch.stats()
t0 = time.perf_counter()
run(args.pairs)
wall = time.perf_counter() - t0
s1 = gmlake_torch.stats()
us = {k: s1["call_time_us"][k] - s0["call_time_us"][k] for k in s1["call_time_us"]}
n = args.pairs
out = {"policy": args.policy, "work": args.work, "op": "ping" if args.ping else "alloc+free", "n": n,
       "time_calls": os.environ["GMLAKE_TIME_CALLS"], "js_calls": s1["num_calls"].get("js", 0) - s0["num_calls"].get("js", 0),
       "us": round((us["alloc"] + us["free"]) / n, 3) if not args.ping else None,
       **{f"{k}_us": round(us[k] / n, 3) for k in ("enter", "prepare", "js") if k in us},
       "wall_us": round(wall / n * 1e6, 2)}
print(json.dumps(out))
