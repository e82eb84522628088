"""Checks of the live allocator inside PyTorch on a GPU, one per process (the allocator
is chosen once per process). Prints one "RESULT {json}" line; exit 0 = the check passed.

usage: python3 live_checks.py CHECK [--policy P] [--knobs k=v,...] [--seconds S]
  smoke    a small transformer trains --steps (20) steps through ours (two streams, record_stream,
           empty_cache, backward on autograd's thread); the losses finite (their equality
           with PyTorch's own allocator is live_workloads.py's to show); stats() under
           torch.cuda.memory_stats's names, snapshot() written
  oom      under a 2 GiB cap, a 4 GiB tensor raises torch.cuda.OutOfMemoryError (or the
           RuntimeError "CUDA out of memory" without the shim) and training goes on
  capture  a graph captured (warm-up first) and replayed from its private pool with the right
           values; an allocation more than its pool took ahead (1 GiB) grows the pool during
           the capture and the replay writes there; the allocator is still usable after
  micro    per-call cost: alloc+free pairs through torch.cuda.caching_allocator_alloc /
           caching_allocator_delete (a window of 64 live blocks, sizes 512 B .. 64 MiB),
           each pair timed; then the same pairs from C++ (libgmlake_pair_bench.so, through
           c10's raw_alloc/raw_delete: no Python in the loop); --policy pytorch for PyTorch's own;
           --same-size: every Python pair of 1 MiB (each alloc then follows the free of a block of
           its size: GMLAKE_TAKEBACK's best case; the C++ pairs keep their sizes)
  integrity a pattern-checked stress run for --seconds (20): two Python threads, each on its own
           CUDA stream, each with a window of live tensors replaced in random order (sizes
           512 B .. 256 MiB log-uniform; now and then several large frees then one larger
           alloc, which vms serves by stitching); each tensor is int32-filled with its own id
           on its stream, some are read on the other stream too (wait_stream + record_stream),
           and before its free its content is compared with its id ON THE GPU into a per-stream
           mismatch counter (no sync per tensor); at random the streams are made to lag
           (torch.cuda._sleep), so that a reuse before the last use finished shows as a
           mismatch. At the end: the counters 0, nothing left allocated, no pending frees.
           With --capacity-bytes, under that budget: an out-of-memory is caught, the thread
           frees a quarter of its window and asks for half, and after the run one more
           allocation of half the budget must be served (the allocator serves again).
           --policy pytorch / pytorch-expandable: the same through PyTorch's own (the control)
  layout   does the memory's layout slow kernels? Copies, in-place adds and bf16 matmuls on
           tensors as the allocator lays them out (ours with e.g. --knobs maxHandleBytes=2097152:
           a 1 GiB tensor made of 512 handles of 2 MiB side by side, as a stitched range is),
           timed with CUDA events (median of --reps); GB/s and TFLOP/s, beside PyTorch's own
--knobs: the policy's knobs (ours), as gmlake_torch's GMLAKE_KNOBS text: "crossStream=false,..."
"""
import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("check", choices=["smoke", "oom", "capture", "micro", "integrity", "layout"])
ap.add_argument("--policy", default="vms", help="ours: a policy; pytorch / pytorch-expandable: PyTorch's own (micro)")
ap.add_argument("--pairs", type=int, default=200_000)
ap.add_argument("--steps", type=int, default=20, help="smoke: training steps")
ap.add_argument("--seconds", type=float, default=20.0, help="integrity: how long the stress runs")
ap.add_argument("--knobs", default="", help="ours: the policy's knobs, k=v,k=v")
ap.add_argument("--seed", type=int, default=1234)
ap.add_argument("--capacity-bytes", type=int, default=0,
                help="integrity: a memory budget (ours: enable(capacity_bytes=...); PyTorch's: set_per_process_memory_fraction); "
                     "an allocation it cannot serve is caught, the thread frees some of its tensors and goes on")
ap.add_argument("--reps", type=int, default=20, help="layout: timed repetitions per kernel")
ap.add_argument("--same-size", action="store_true", help="micro: every Python pair of 1 MiB")
args = ap.parse_args()
try:
    knobs = dict(kv.split("=", 1) for kv in args.knobs.split(",") if kv.strip())
except ValueError:
    print(f"live_checks: --knobs: expected k=v,k=v, got {args.knobs!r}", file=sys.stderr)
    sys.exit(2)

if args.policy in ("pytorch-expandable", "plug:pytorch-expandable"):
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
ours = None
plug = None  # plug:pytorch[-expandable]: PyTorch's own behind the pluggable interface (pytorch_plug.py)
if args.policy.startswith("plug:"):
    import pytorch_plug  # noqa: E402
elif not args.policy.startswith("pytorch"):
    sys.path.insert(0, os.environ.get("GMLAKE_TORCH_PY", os.path.join(os.path.dirname(__file__), "../../packages/torch-alloc/python")))
    import gmlake_torch as ours  # noqa: E402

import torch  # noqa: E402

if args.policy.startswith("plug:"):
    plug = pytorch_plug.enable(os.environ.get("GMLAKE_PLUG_LIB", "libpytorch_plug.so"))

out = {"check": args.check, "policy": args.policy, "torch": torch.__version__}
if knobs:
    out["knobs"] = knobs


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
    # its snapshot() needs the history, which the front cache's hits would skip: no snapshot with it
    record = "front_cache_entries" not in knobs
    ours.enable(args.policy, record=record, **knobs)
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
    if record:
        ours.snapshot(snap)
    else:
        open(snap, "wb").write(b"front cache on: no history\n")
    names = ["allocated_bytes.all.current", "reserved_bytes.all.peak", "active_bytes.all.peak", "num_alloc_retries", "num_ooms"]
    finite = all(l == l and abs(l) < 1e9 for l in losses)
    done(finite and all(n in st for n in names) and os.path.getsize(snap) > 0 and st["calls"]["recordStreams"] > 0,
         losses=losses, stats={k: st[k] for k in names + ["num_sync_all_streams", "num_device_alloc", "driver_total_calls",
                                                          "driver_total_time_us"]},
         deferred_frees=st["num_deferred_frees"], snapshot=os.path.basename(snap), snapshot_bytes=os.path.getsize(snap))

if args.check == "oom":
    ours.enable(args.policy, capacity_bytes=2 << 30, **knobs)
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
    # min/max keep uint8 (a sum would widen to int64 and ask for 4 GiB under the 2 GiB cap)
    ones = all(int(t.min().item()) == 1 and int(t.max().item()) == 1 for t in (a, b))
    ok = kind is not None and "CUDA out of memory" in msg and ones
    if shim:
        ok = ok and kind == "torch.cuda.OutOfMemoryError"
    done(ok, raised=kind, shim=shim, message=msg[:400] if kind else None, num_ooms=ours.stats()["num_ooms"])

if args.check == "capture":
    ours.enable(args.policy, **knobs)
    x = torch.ones(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 2 + 1  # warm-up, as PyTorch asks before a capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2 + 1  # allocates during capture: from the graph's private pool
    x.fill_(2)
    g.replay()
    replayed = float(y.sum().item()) == 5 * 1024
    # more than the pool took ahead: it grows during the capture (mapping only), and the replay writes there
    err, grown = None, False
    g2 = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g2):
            big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
            big.fill_(3)
        big.zero_()
        g2.replay()
        grown = int(big[-1].item()) == 3
    except RuntimeError as e:
        err = str(e)
    torch.cuda.synchronize()
    z = torch.ones(4096, device="cuda") * 3  # usable after
    ok = replayed and grown and float(z.sum().item()) == 3 * 4096
    pools = {k: ours.stats().get(k) for k in ("private_pools", "private_pool_reserved_bytes", "private_pool_calls")}
    done(ok, replayed=replayed, grown_in_capture=grown, error=err[:400] if err else None, pools=pools)


if args.check == "layout":
    if ours is not None:
        ours.enable(args.policy, **knobs)
    MiB = 1 << 20

    def timed(fn):
        """Median milliseconds of fn over --reps runs after 3 warm-up runs (CUDA events)."""
        for _ in range(3):
            fn()
        ms = []
        for _ in range(args.reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ms.append(a.elapsed_time(b))
        return sorted(ms)[len(ms) // 2]

    rows = {}
    for mib in (256, 1024, 4096):
        n = mib * MiB // 2
        x = torch.ones(n, dtype=torch.bfloat16, device="cuda")
        y = torch.empty_like(x)
        ms = timed(lambda: y.copy_(x))
        rows[f"copy_{mib}MiB_GBps"] = round(2 * mib * MiB / (ms / 1e3) / 1e9, 1)
        ms = timed(lambda: x.add_(1))
        rows[f"add_{mib}MiB_GBps"] = round(2 * mib * MiB / (ms / 1e3) / 1e9, 1)
        del x, y
    for k in (4096, 8192):
        a = torch.randn(k, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(k, k, dtype=torch.bfloat16, device="cuda")
        c = torch.empty(k, k, dtype=torch.bfloat16, device="cuda")
        ms = timed(lambda: torch.matmul(a, b, out=c))
        rows[f"matmul_{k}_TFLOPs"] = round(2 * k ** 3 / (ms / 1e3) / 1e12, 1)
        del a, b, c
    res = dict(rows=rows, reps=args.reps, gpu=torch.cuda.get_device_name())
    if ours is not None:
        st = ours.stats()
        res["engine"] = {k: st.get(k) for k in ("reserved_bytes.all.peak", "segment.all.current", "driver_total_calls", "counters")}
        res["engine"]["driver_calls"] = {k: v for k, v in (st.get("driver_calls") or {}).items() if v}
    done(True, **res)

if args.check == "micro":
    if ours is not None:
        ours.enable(args.policy, record=False)
    import random

    rng = random.Random(1234)
    sizes = [1 << 20] * 4096 if args.same_size else [512 << rng.randrange(18) for _ in range(4096)]  # 512 B .. 64 MiB
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
         engine=(ours.stats()["driver_total_calls"] if ours is not None else None),
         takebacks=(ours.stats().get("num_queue_takebacks") if ours is not None else None))

if args.check == "integrity":
    import random
    import threading

    cap = args.capacity_bytes
    if ours is not None:
        ours.enable(args.policy, **({"capacity_bytes": cap} if cap else {}), **knobs)
    elif cap:
        torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(0).total_memory)
    MiB = 1 << 20
    WINDOW = 48  # live tensors per thread
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    # one mismatch counter per stream, only ever added to on its own stream (so in stream order)
    bad = [torch.zeros((), dtype=torch.int64, device="cuda") for _ in streams]
    # the positive control: the comparison counts a wrong content (the check can fail)
    probe = torch.empty(1000, dtype=torch.int32, device="cuda").fill_(7)
    control = int((probe != 8).sum().item())
    del probe
    torch.cuda.synchronize()

    def allocated():
        if plug is not None:
            return plug.allocated()
        return ours.stats()["allocated_bytes.all.current"] if ours is not None else torch.cuda.memory_allocated()

    allocated0 = allocated()  # the counters only
    sleep = getattr(torch.cuda, "_sleep", None)
    deadline = time.perf_counter() + args.seconds
    per_thread = [dict(allocs=0, bytes=0, cross_uses=0, stitch_rounds=0, lags=0, ooms=0) for _ in streams]
    errors = []

    def stress(me):
        rng = random.Random(args.seed + me)
        mine, other = streams[me], streams[1 - me]
        n = per_thread[me]
        next_tag = [me << 29]
        window = []  # [tensor, tag]
        # the comparisons' own memory, taken before the budget fills: `t != tag` over a 256 MiB
        # tensor would ask for 64 MiB under a full budget (an out-of-memory of the check, not
        # of the allocator); per stream a scratch and a partial count, used only on that stream
        # (a sum of bools as int64 would copy them to int64 first: the int64 scratch is taken too)
        CHUNK = 1 << 20
        with torch.cuda.stream(mine):
            scratch = {s: torch.empty(CHUNK, dtype=torch.bool, device="cuda") for s in (me, 1 - me)}
            wide = {s: torch.empty(CHUNK, dtype=torch.int64, device="cuda") for s in (me, 1 - me)}
            partial = {s: torch.zeros((), dtype=torch.int64, device="cuda") for s in (me, 1 - me)}

        def count_bad(t, tag, s):
            """Adds t's elements that are not `tag` to bad[s], on stream s's queue (the caller's)."""
            flat = t.view(-1)
            for i in range(0, flat.numel(), CHUNK):
                c = flat[i:i + CHUNK]
                ne, w = scratch[s][:c.numel()], wide[s][:c.numel()]
                torch.ne(c, tag, out=ne)
                w.copy_(ne)
                torch.sum(w, dim=0, out=partial[s])
                bad[s].add_(partial[s])

        def empty(nbytes):
            # under a budget an allocation may not be served: free a quarter of the window, ask for half
            while True:
                try:
                    return torch.empty(max(1, nbytes // 4), dtype=torch.int32, device="cuda")
                except RuntimeError as e:  # torch.cuda.OutOfMemoryError, or the plug's RuntimeError saying so
                    if not cap or nbytes <= 512 or "out of memory" not in str(e):
                        raise
                    n["ooms"] += 1
                    for e in rng.sample(window, len(window) // 4):
                        if len(e) == 2:
                            retire(e)
                            e.append(None)  # a placeholder entry: [None] until replaced
                    nbytes //= 2

        def new(nbytes):
            t = empty(nbytes)
            tag = next_tag[0] = next_tag[0] + 1
            t.fill_(tag)
            n["allocs"] += 1
            n["bytes"] += t.numel() * 4
            if rng.random() < 0.15:  # read on the other stream too: it waits for the fill, the allocator for its read
                other.wait_stream(mine)
                with torch.cuda.stream(other):
                    count_bad(t, tag, 1 - me)
                t.record_stream(other)
                n["cross_uses"] += 1
            return [t, tag]

        def retire(entry):
            if len(entry) != 2:  # a placeholder (freed under pressure)
                return
            t, tag = entry
            count_bad(t, tag, me)  # queued on mine, before the free below
            entry.clear()
            del t

        def rand_bytes():
            return int(2 ** rng.uniform(9, 28))  # 512 B .. 256 MiB, log-uniform

        with torch.cuda.stream(mine):
            window.extend(new(rand_bytes()) for _ in range(WINDOW))
            while time.perf_counter() < deadline:
                r = rng.random()
                if r < 0.02:
                    # several large frees (kept apart by smaller live tensors), then one larger alloc:
                    # larger than each free block, so vms stitches the freed handles into one range
                    bigs = []
                    for _ in range(rng.randint(3, 6)):
                        bigs.append(new(rng.randint(32, 128) * MiB))
                        j = rng.randrange(WINDOW)  # a separator from the large pool, made after this big one
                        retire(window[j])
                        window[j] = new(rng.randint(2, 8) * MiB)
                    total = sum(b[0].numel() * 4 for b in bigs)
                    for b in bigs:
                        retire(b)
                    j = rng.randrange(WINDOW)
                    retire(window[j])
                    window[j] = new(int(total * 0.9))
                    n["stitch_rounds"] += 1
                elif r < 0.03 and sleep is not None:
                    sleep(rng.randint(20_000, 2_000_000))  # this stream lags (~10 us .. 1 ms): reuse races widen
                    n["lags"] += 1
                else:
                    j = rng.randrange(WINDOW)
                    retire(window[j])
                    window[j] = new(rand_bytes())
            for e in window:
                retire(e)
            window.clear()

    def body(me):
        try:
            stress(me)
        except Exception as e:  # reported in the result, the check fails
            import traceback

            where = " <- ".join(f"{f.name}:{f.lineno}" for f in reversed(traceback.extract_tb(e.__traceback__)[-3:]))
            errors.append(f"thread {me}: {type(e).__name__} at {where}: {str(e)[:300]}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(streams))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    torch.cuda.synchronize()
    ran_s = time.perf_counter() - t0
    mismatches = sum(int(b.item()) for b in bad)
    # one more call lets the engine retire the deferred frees whose events have completed
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    left_bytes = allocated() - allocated0
    served_after = None
    if cap:  # after every out-of-memory the allocator serves again: half the budget at once
        try:
            half = torch.empty(cap // 2, dtype=torch.uint8, device="cuda")
            half.fill_(1)
            served_after = int(half[-1].item()) == 1
            del half
        except torch.cuda.OutOfMemoryError as e:
            served_after = False
            errors.append(f"after the run: {str(e)[:200]}")
    res = dict(mismatches=mismatches, capacity_bytes=cap or None, ooms=sum(n["ooms"] for n in per_thread),
               served_after=served_after, control_mismatches=control, threads=per_thread, errors=errors,
               allocs=sum(n["allocs"] for n in per_thread), bytes=sum(n["bytes"] for n in per_thread),
               seconds_run=round(ran_s, 2), left_allocated_bytes=left_bytes)
    ok = not errors and mismatches == 0 and control == 1000 and left_bytes == 0 and served_after is not False
    if ours is not None:
        st = ours.stats()
        res["engine"] = {k: st.get(k) for k in ("num_cross_stream_reuses", "num_deferred_frees", "pending_frees", "live_blocks",
                                                 "num_sync_all_streams", "num_alloc_retries", "num_ooms", "reserved_bytes.all.peak",
                                                 "driver_total_calls", "driver_total_time_us", "cross_stream_reuse", "counters")}
        res["engine"]["driver_calls"] = {k: v for k, v in (st.get("driver_calls") or {}).items() if v}
        ok = ok and st.get("pending_frees") == 0
    elif plug is not None:  # torch.cuda.memory_stats raises under any pluggable allocator
        res["torch_stats"] = {"reserved_bytes.all.peak": plug.peaks()[0]}
    else:
        st = torch.cuda.memory_stats()
        res["torch_stats"] = {k: st.get(k) for k in ("num_alloc_retries", "num_ooms", "reserved_bytes.all.peak", "num_device_alloc",
                                                     "num_sync_all_streams")}
    done(ok, **res)
