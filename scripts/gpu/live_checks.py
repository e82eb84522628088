"""Checks of the live allocator inside PyTorch on a GPU, one per process (the allocator
is chosen once per process). Prints one "RESULT {json}" line; exit 0 = the check passed.

usage: python3 live_checks.py CHECK [--policy P]
  smoke    a small transformer trains --steps (20) steps through ours (two streams, record_stream,
           empty_cache, backward on autograd's thread); the losses finite (their equality
           with PyTorch's own allocator is live_workloads.py's to show); stats() under
           torch.cuda.memory_stats's names, snapshot() written
  oom      under a 2 GiB cap, a 4 GiB tensor raises torch.cuda.OutOfMemoryError (or the
           RuntimeError "CUDA out of memory" without the shim) and training goes on
  capture  an allocation during CUDA-graph capture is refused with a clear error (ours, or
           PyTorch's before it reaches ours), and the allocator is still usable after
  micro    per-call cost: alloc+free pairs through torch.cuda.caching_allocator_alloc /
           caching_allocator_delete (a window of 64 live blocks, sizes 512 B .. 64 MiB),
           each pair timed; then the same pairs from C++ (libgmlake_pair_bench.so, through
           c10's raw_alloc/raw_delete: no Python in the loop); --policy pytorch for PyTorch's own
"""
import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("check", choices=["smoke", "oom", "capture", "micro"])
ap.add_argument("--policy", default="vms", help="ours: a policy; pytorch / pytorch-expandable: PyTorch's own (micro)")
ap.add_argument("--pairs", type=int, default=200_000)
ap.add_argument("--steps", type=int, default=20, help="smoke: training steps")
args = ap.parse_args()

if args.policy == "pytorch-expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
ours = None
if not args.policy.startswith("pytorch"):
    sys.path.insert(0, os.environ.get("GMLAKE_TORCH_PY", os.path.join(os.path.dirname(__file__), "../../packages/torch-alloc/python")))
    import gmlake_torch as ours  # noqa: E402

import torch  # noqa: E402

out = {"check": args.check, "policy": args.policy, "torch": torch.__version__}


def done(ok, **kw):
    out.update(ok=ok, **kw)
    print("RESULT " + json.dumps(out), flush=True)
    sys.exit(0 if ok else 1)


def tiny_model():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True)
    return torch.nn.TransformerEncoder(layer, num_layers=4).cuda()


if args.check == "smoke":
    t0 = time.perf_counter()
    ours.enable(args.policy, record=True)  # its snapshot() needs the history
    out["enable_s"] = round(time.perf_counter() - t0, 3)
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    side = torch.cuda.Stream()
    losses = []
    torch.manual_seed(1)
    x = torch.randn(16, 128, 256, device="cuda")
    for step in range(args.steps):
        # a tensor made on the side stream, used on the main one: record_stream
        with torch.cuda.stream(side):
            noise = torch.randn(16, 128, 256, device="cuda") * 0.01
        torch.cuda.current_stream().wait_stream(side)
        noise.record_stream(torch.cuda.current_stream())
        y = model(x + noise)
        loss = (y.float() ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del noise
        losses.append(loss.item())
        if step == args.steps // 2:
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    st = ours.stats()
    snap = os.path.join(os.environ.get("GMLAKE_SNAPSHOT_DIR") or os.environ.get("OUT") or ".", f"live-{args.policy}.pickle")
    ours.snapshot(snap)
    names = ["allocated_bytes.all.current", "reserved_bytes.all.peak", "active_bytes.all.peak", "num_alloc_retries", "num_ooms"]
    finite = all(l == l and abs(l) < 1e9 for l in losses)
    done(finite and all(n in st for n in names) and os.path.getsize(snap) > 0 and st["calls"]["recordStreams"] > 0,
         losses=losses, stats={k: st[k] for k in names + ["num_sync_all_streams", "num_device_alloc", "driver_total_calls",
                                                          "driver_total_time_us"]},
         deferred_frees=st["num_deferred_frees"], snapshot=os.path.basename(snap), snapshot_bytes=os.path.getsize(snap))

if args.check == "oom":
    ours.enable(args.policy, capacity_bytes=2 << 30)
    shim = os.path.exists(os.path.join(os.path.dirname(ours.library_path()), "libgmlake_oom.so"))
    a = torch.ones(256 << 20, dtype=torch.uint8, device="cuda")  # 256 MiB
    kind = None
    try:
        torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        kind, msg = "torch.cuda.OutOfMemoryError", str(e)
    except RuntimeError as e:
        kind, msg = "RuntimeError", str(e)
    b = torch.ones(512 << 20, dtype=torch.uint8, device="cuda")  # still works after
    ok = kind is not None and "CUDA out of memory" in msg and int(b.sum().item()) == 512 << 20 and int(a.sum().item()) == 256 << 20
    if shim:
        ok = ok and kind == "torch.cuda.OutOfMemoryError"
    done(ok, raised=kind, shim=shim, message=msg[:400] if kind else None, num_ooms=ours.stats()["num_ooms"])

if args.check == "capture":
    ours.enable(args.policy)
    x = torch.ones(1024, device="cuda")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    err = None
    try:
        with torch.cuda.stream(s):
            with torch.cuda.graph(g):
                y = x * 2 + 1  # allocates during capture
    except RuntimeError as e:
        err = str(e)
    torch.cuda.synchronize()
    z = torch.ones(4096, device="cuda") * 3  # usable after
    # Refused either by ours (no driver call during capture) or by PyTorch before it asks us.
    ok = err is not None and float(z.sum().item()) == 3 * 4096
    done(ok, refused_by="gmlake" if err and "gmlake" in err else "pytorch", error=err[:400] if err else None)

if args.check == "micro":
    if ours is not None:
        ours.enable(args.policy, record=False)
    import random

    rng = random.Random(1234)
    sizes = [512 << rng.randrange(18) for _ in range(4096)]  # 512 B .. 64 MiB
    window = [torch.cuda.caching_allocator_alloc(sizes[i]) for i in range(64)]
    ns = time.perf_counter_ns
    alloc, delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete

    def run(n, record):
        ts = []
        for i in range(n):
            k = i & 63
            sz = sizes[i & 4095]
            t0 = ns()
            p = alloc(sz)
            delete(window[k])
            t1 = ns()
            window[k] = p
            if record:
                ts.append(t1 - t0)
        return ts

    run(args.pairs // 10, False)  # warm-up: the caches fill
    ts = sorted(run(args.pairs, True))
    loop = []
    for i in range(args.pairs // 4):  # the timing loop itself (Python, perf_counter_ns)
        t0 = ns()
        t1 = ns()
        loop.append(t1 - t0)
    loop.sort()
    for p in window:
        delete(p)
    torch.cuda.synchronize()
    med = ts[len(ts) // 2] / 1000
    p99 = ts[len(ts) * 99 // 100] / 1000
    # The same pairs from C++ (pair_bench.cc, built against this PyTorch): no Python binding in the loop.
    native = None
    bench = os.path.join(os.path.dirname(os.environ.get("GMLAKE_TORCH_ALLOC_LIB") or os.path.join(
        os.path.dirname(__file__), "../../packages/torch-alloc/build/lib/x")), "libgmlake_pair_bench.so")
    if os.path.exists(bench):
        import ctypes

        lib = ctypes.CDLL(bench)
        m, p, a = ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
        if lib.gmlake_bench_pairs(args.pairs, ctypes.byref(m), ctypes.byref(p), ctypes.byref(a)) == 0:
            native = {"median_us": round(m.value, 3), "p99_us": round(p.value, 3), "mean_us": round(a.value, 3)}
    torch.cuda.synchronize()
    done(True, pairs=len(ts), median_us=round(med, 3), p99_us=round(p99, 3), mean_us=round(sum(ts) / len(ts) / 1000, 3),
         timer_median_us=round(loop[len(loop) // 2] / 1000, 3), native=native,
         engine=(ours.stats()["driver_total_calls"] if ours is not None else None))
