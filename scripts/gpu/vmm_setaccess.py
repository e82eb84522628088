#!/usr/bin/env python3
"""Where a grow's driver time goes on the GPU: what makes cuMemCreate and cuMemSetAccess
cost more inside a replay (create 24.7 us, set-access 41.2 us per mapping, vms in fresh
processes) than in the isolated medians of vmm-costs.md (9-15 and 25-34 us).

A grow here is what vms makes at the open end of its arena: cuMemCreate of one handle, cuMemMap
at the next address, cuMemSetAccess over it. Each case runs GROWS of them and reports medians
per call; docs/notebook/2026-12-01-vms-ideas.md, idea 12, holds the questions and the answers:
  va-first / va-again / va-new: the same grows three times, in a new reservation, again at the
    same addresses after unmapping and releasing everything, then in another new reservation
    (separates first touch of virtual ranges from first touch of physical memory);
  reserve 16G / 158G / 280G / 1T: the size of the reservation the grows land in (vms reserves 2 x
    device memory per stream, PyTorch's expandable segments 1.125 x);
  live 1500: the same grows with 1,500 other 2 MiB mappings alive in the context;
  batch 4: four creates and maps, then one set-access over the four (expandable's pattern);
  trash 1M / 32M: that much host memory written between grows, as a replay's or a training
    step's own work between allocations evicts the driver's code and data from the CPU's caches
    (1 MiB: about a core's own L2; 32 MiB: the shared L3 too);
  trash 32M + X: the same, then one cheap driver call X just before the grow (cuMemGetInfo,
    cuMemGetAllocationGranularity, cuCtxSynchronize): does a call that enters the driver warm
    the path the grow takes, for less than it saves? (X's own time is its column);
  worker: the same trashing on the main thread (pinned to one core) while a second thread,
    pinned to another core and doing nothing else, makes the driver calls (the main thread
    waits for each grow): what a driver thread of its own would keep warm;
  each grow's set-access is also split by whether it is the first mapping in its 512 MiB-aligned
    range (a new page-directory entry).
Usage: python3 vmm_setaccess.py [GROWS] [MIB]   (default 200 grows of 16 MiB)
"""
import json
import statistics
import sys


def arg(i, default, what, multiple=1):
    # checked before the driver is loaded: a bad argument is one line and exit 2 on any host
    if len(sys.argv) <= i:
        return default
    v = sys.argv[i]
    if not v.isdigit() or int(v) <= 0 or int(v) % multiple != 0:
        print(f"vmm_setaccess.py: {what} must be a positive integer{f' multiple of {multiple}' if multiple > 1 else ''}, not '{v}'", file=sys.stderr)
        sys.exit(2)
    return int(v)


GROWS = arg(1, 200, "GROWS")
SIZE = arg(2, 16, "MIB", multiple=2) * (1 << 20)  # the driver's granularity is 2 MiB

from cuvmm import C, MiB, create, cu, map_, ok, prop, release, reserve, set_access, timed, unmap  # noqa: E402
GiB = 1 << 30
rows = []


def med(v):
    return round(statistics.median(v), 1) if v else None


TRASH = bytearray(32 * MiB)
ZEROS = bytes(len(TRASH) // 64)


def trash(mib=32):
    # write every 64-byte line: the driver's next call finds its code and data out of the caches
    n = mib * MiB
    TRASH[0:n:64] = ZEROS[: n // 64]


def trash1():
    trash(1)


def on_worker(base, n, size):
    """n grows made by a second thread pinned to another core, the main thread (pinned too)
    trashing its caches before each: the worker says it is ready, waits for the go, grows."""
    import os
    import threading

    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[0]})
    ready, go = threading.Semaphore(0), threading.Semaphore(0)
    out = {}

    def between():
        ready.release()
        go.acquire()

    def work():
        os.sched_setaffinity(0, {cores[len(cores) // 2]})
        out["r"] = grows(base, n, size, between=between)

    t = threading.Thread(target=work)
    t.start()
    for _ in range(n):
        ready.acquire()  # the previous grow's calls are done
        trash()
        go.release()
    t.join()
    os.sched_setaffinity(0, set(cores))
    return out["r"]


def grows(base, n, size, batch=1, between=None):
    """n grows of `size` from base, `batch` handles per set-access; returns what was made and the times."""
    made = []
    t = {"create": [], "map": [], "set-access per mapping": [], "set-access, new 512 MiB range": [], "set-access, inside a range": []}
    seen = set()
    addr = base
    for _ in range(n // batch):
        if between is not None:
            between()
        first = addr
        for _ in range(batch):
            h, us = create(size)
            t["create"].append(us)
            t["map"].append(map_(addr, size, h))
            made.append((addr, h))
            addr += size
        us = set_access(first, batch * size) / batch
        t["set-access per mapping"].append(us)
        region = first // (512 * MiB)
        (t["set-access, inside a range"] if region in seen else t["set-access, new 512 MiB range"]).append(us)
        seen.add(region)
    return made, t


def teardown(made):
    for addr, h in made:
        unmap(addr, SIZE)
        release(h)


def report(case, t):
    row = {"case": case, "grows": GROWS, "mib": SIZE // MiB}
    for k, v in t.items():
        row[k] = med(v)
    rows.append(row)
    print(json.dumps(row), flush=True)


# one untimed grow and release: the context's own first use is not any case's
w = reserve(GiB)
teardown(grows(w, 1, SIZE)[0])

a = reserve(280 * GiB)
made, t = grows(a, GROWS, SIZE)
report("va-first (280G reservation)", t)
teardown(made)
made, t = grows(a, GROWS, SIZE)
report("va-again (same addresses)", t)
teardown(made)
b = reserve(280 * GiB)
made, t = grows(b, GROWS, SIZE)
report("va-new (another 280G reservation)", t)
teardown(made)

for label, size in [("16G", 16 * GiB), ("158G", 158 * GiB), ("1T", 1024 * GiB), ("280G", 280 * GiB)]:
    r = reserve(size)
    made, t = grows(r, GROWS, SIZE)
    report(f"reserve {label}", t)
    teardown(made)
    cu.cuMemAddressFree(r, size)

r = reserve(280 * GiB)
live = []
for i in range(1500):
    h, _ = create(2 * MiB)
    map_(r + 200 * GiB + i * 2 * MiB, 2 * MiB, h)
    set_access(r + 200 * GiB + i * 2 * MiB, 2 * MiB)
    live.append((r + 200 * GiB + i * 2 * MiB, h))
made, t = grows(r, GROWS, SIZE)
report("live 1500 (280G reservation)", t)
teardown(made)
for addr, h in live:
    unmap(addr, 2 * MiB)
    release(h)

made, t = grows(r, GROWS, SIZE, batch=4)
report("batch 4 (280G reservation)", t)
teardown(made)
made, t = grows(r, GROWS, SIZE)
report("batch 1 again (280G reservation)", t)
teardown(made)
made, t = grows(r, GROWS, SIZE, between=trash1)
report("trash 1M between grows", t)
teardown(made)
made, t = grows(r, GROWS, SIZE, between=trash)
report("trash 32M between grows", t)
teardown(made)
free_b, total_b = C.c_size_t(), C.c_size_t()
gran_b = C.c_size_t()
cu.cuMemGetInfo_v2.argtypes = [C.c_void_p, C.c_void_p]
warmers = {
    "cuMemGetInfo": lambda: cu.cuMemGetInfo_v2(C.byref(free_b), C.byref(total_b)),
    "cuMemGetAllocationGranularity": lambda: cu.cuMemGetAllocationGranularity(C.byref(gran_b), C.byref(prop), 0),
    "cuCtxSynchronize": lambda: cu.cuCtxSynchronize(),
}
for wname, wfn in warmers.items():
    spent = []

    def trash_then(wfn=wfn, spent=spent):
        trash()
        rc, us = timed(wfn)
        ok(rc, wname)
        spent.append(us)

    made, t = grows(r, GROWS, SIZE, between=trash_then)
    t["warm-up call"] = spent
    report(f"trash 32M + {wname}", t)
    teardown(made)
made, t = on_worker(r, GROWS, SIZE)
report("trash 32M on the main thread, calls on a worker", t)
teardown(made)
made, t = grows(r, GROWS, SIZE)
report("batch 1, once more (280G reservation)", t)
teardown(made)

keys = []
for row in rows:
    keys += [k for k in row if k not in ("case", "grows", "mib") and k not in keys]
print(f"\n| case ({GROWS} grows of {SIZE // MiB} MiB; median us per call) | " + " | ".join(keys) + " |")
print("| --- |" + " ---: |" * len(keys))
for row in rows:
    print(f"| {row['case']} | " + " | ".join("" if row.get(k) is None else str(row[k]) for k in keys) + " |")
