#!/usr/bin/env python3
"""The allocator library driven as PyTorch drives it, without PyTorch or a GPU.

python3 + ctypes load libgmlake_torch_alloc.so (as CUDAPluggableAllocator does) and start
it on the host driver (memfd + mmap: the addresses it returns are real memory of this
process). Each case runs in a subprocess of its own (Node starts once per process, and a
crash is then a failed case, not a lost run):

  stress:<policy>:<threading>  3 threads on 2 streams, random alloc/free at a high rate,
                               record_stream and empty_cache among them; every block is
                               pattern-filled at alloc and verified at free, no two live
                               blocks overlap; at close nothing is left (handles, mappings,
                               reservations, events); the host's signal handlers unchanged
  enable                       enable() against a stand-in for torch: the entry points and
                               hooks reached through function pointers, as PyTorch does
  throw                        gmlake_alloc (PyTorch's entry point) throws on out of memory
                               (std::runtime_error, or the registered thrower's type) and
                               on a wrong device, never returns null (test/throw_check.cc)
  foresight                    GMLAKE_SPECULATE's predictor on its own: patterns foreseen, the
                               context's reach, table collisions, the peek throttle
                               (test/foresight_test.cc, no Node)
  oom                          out of memory is a status with PyTorch's message, and the
                               allocator goes on working
  bad-free                     a free of an address not live (queued for the next call) is
                               said on stderr, and the allocator goes on working
  bad-module, no-libnode, bad-policy, bad-knob, node-flags-not-flags, node-flags-unknown
                               a failing start is a clear error, twice, never a crash
  knobs-env-bad, knobs-env-bad-value
                               a bad GMLAKE_KNOBS (text, value) is refused at start in one line
  knobs-env-keyword-wins       GMLAKE_KNOBS reaches the engine as text; a keyword wins over it
  node-flags                   GMLAKE_NODE_FLAGS reaches our Node's V8 (--trace-gc prints)
  call-times, call-times:thread
                               GMLAKE_TIME_CALLS=1: every call counted and timed, the
                               embedding's parts inside the whole (Locker; one JS thread)
  call-times:total             GMLAKE_TIME_CALLS=total: the whole calls only, no parts
  stress:vms-front-cache:<threading>
                               the stress above with the front cache on (64 blocks) and the
                               sizes of a training step (a few dozen, again and again): hits
                               counted, every block still checked, nothing held at close
  front-cache-hostile          with the front cache on, a second free of a held block is
                               dropped and said, a free of an address never handed out or with
                               another size is the engine's (said, never handed out again)
  front-cache-fuzz              a random mix of good and bad calls with it on (second frees, frees
                               of addresses never handed out, other sizes, record_stream,
                               empty_cache, stats): no block handed out twice or from nowhere,
                               every pattern intact, nothing live or leaked at the end
  front-cache-bad-policy, front-cache-record, front-cache-too-big, front-cache-env
                               the front cache refused at start with a clear error
                               (every stress with one JS thread checks that it handed queued
                               frees to the engine while it waited: GMLAKE_DRAIN_US)
  threading-auto               the default design: a Locker per call on one CPU, one JS thread
                               with enough CPUs (stats() says which); a bad name refused
  stress:vms-no-drain:thread   the stress with GMLAKE_DRAIN_US=off (frees wait for the next call)
  drain-tuner                  GMLAKE_DRAIN_US=auto's choice on its own: held for requests that
                               come during a turn, probed, back at once (test/drain_tuner_test.cc)
  free-queue                   the free queue's take-back on its own (test/free_queue_test.cc, no Node)
  takeback:<threading>         GMLAKE_TAKEBACK=1 through the C ABI: a hot loop of alloc+free pairs of
                               one size takes the queued free back (every one after the first with a
                               Locker per call), never one of another size or stream or record_stream'd;
                               the engine's books stay exact (live blocks, requested and allocated bytes,
                               memory_stats' allocation counts) through empty_cache and stats
  takeback-pool-window         a free while a pool window PyTorch opened (the hook) is open is never
                               taken back; after the window it is again (test/takeback_check.cc)
  stress:vms-takeback:<threading>, takeback-fuzz, takeback-fuzz:thread, bad-free:takeback,
  pools:vms:takeback, pool-capture-frees:takeback
                               those cases with GMLAKE_TAKEBACK=1 (every stress checks the take-back
                               off unless asked, and the engine's allocs plus the take-backs equal
                               the allocations made)
  takeback-env, takeback-front-cache, takeback-record
                               GMLAKE_TAKEBACK refused at start with the reason
  stress:vms-ahead:thread, stress:caching-ahead:thread
                               allocations in bursts of 4 (1 and 2 threads), GMLAKE_AHEAD=4: answers
                               made ahead taken, the rest undone, every block checked (none made
                               ahead in any other case: GMLAKE_AHEAD's default is 1)
  stress:vms-speculate:thread  the stress with GMLAKE_SPECULATE=6 and sizes that repeat in order:
                               allocations take answers worked out ahead, every block checked
                               (every stress checks stats()'s speculate: 6 with one JS thread
                               and vms without the front cache, else 0)
  speculate-locker, speculate-env, speculate-bad-policy, speculate-front-cache
                               GMLAKE_SPECULATE refused at start with the reason
  speculate-fuzz               front-cache-fuzz's mix of good and bad calls on one JS thread
                               with answers worked out ahead (the default): no block handed
                               out twice or from nowhere, every pattern intact, some taken
  speculate-outside-policy, speculate-outside-policy-asked
                               an outside policy that peeks: off by default, on when asked
  drain-same-decisions         one caller's seeded mix hands out the same addresses with the
                               drain off, learned (auto, the default), at 0, 2 and 20 us and
                               with GMLAKE_SPECULATE=0, 1, 6 and unset (the default, 6): drains
                               and answers ahead move work, not decisions
  drain-locker, drain-env, spin-env
                               GMLAKE_DRAIN_US without the JS thread, or a bad number in it
                               or in GMLAKE_SPIN_US: a clear error at start
  budget:<policy>[:thread]     the memory budget set while the engine runs (bytes, then a
                               fraction of the device): out of memory under it with PyTorch's
                               message naming it, served again after a free, a lowered budget
                               below what is held refuses growth only, bad values refused
                               (enable's stand-in also calls set_memory_fraction_fn as
                               torch.cuda.set_per_process_memory_fraction does)
  budget-env, budget-env-both, budget-env-bad
                               GMLAKE_MEMORY_FRACTION sets the budget at start; with
                               GMLAKE_CAPACITY_BYTES too, or not a fraction: a clear error
  snapshot-paths               snapshot() never replaces a directory, a device, a FIFO or a
                               symbolic link (a device or FIFO is written in place, a link's
                               target is written), leaves no temporary file beside a refused or
                               failed target, and replaces a regular file atomically
  fork-child:<threading>       a child of os.fork() after start: every call fails with a clear
                               error (no SIGSEGV, no hang), frees are dropped, its normal exit is
                               a clean exit 0; the parent goes on allocating
  restart                      a second start() with other settings, and start() after close(),
                               are refused naming why; the same settings again are a no-op

  pools:<policy>, pools:vms:thread
                               private pools (CUDA graphs, MemPool) under each built-in policy:
                               a pool's memory is its own (not the default pools' freed blocks,
                               and what it frees serves only it), kept through empty_cache,
                               shared by two "graphs" (a use each), given back to the engine
                               at the last release once its last block is freed
  pool-capture-frees           frees during a capture: a pool block is reused in the capture,
                               another block waits until no capture is underway; no driver call
  pool-capture-fails           a capture that fails half-way (released without its end, or
                               ended and released with its blocks live): memory back once freed
  pool-capture-grows           an allocation during capture with nothing taken ahead: the pool
                               grows (mapping only); past the budget a one-line out-of-memory,
                               served again after; served after a warm-up in the pool, from the
                               rise of a warm-up outside it, or with GMLAKE_POOL_RESERVE_BYTES
                               (pool-reserve-env; a bad value: pool-reserve-env-bad, a clear
                               error at start)
  pool-checkpoint              cudagraph trees' checkpoints: after frees and a warm-up's
                               allocations a restore frees every block live and gives the
                               checkpoint's back at their addresses (no driver call), a recording
                               after it is served around them; refused once the pool's memory went back

usage: python3 test/harness.py [CASE...]       (no CASE: all of them)
"""
import bisect
import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# GMLAKE_TEST_INSTALLED=1: the installed gmlake_torch (the wheel's, scripts/wheel/test.sh), not ../python
if os.environ.get("GMLAKE_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
import gmlake_torch  # noqa: E402

MiB = 1 << 20
STREAMS = (0, 0x5000)  # the legacy default stream and one more, as raw CUstream values
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGSEGV, signal.SIGUSR1, signal.SIGPIPE, signal.SIGCHLD)


class SigAction(ctypes.Structure):
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


def signal_handlers():
    libc = ctypes.CDLL(None, use_errno=True)
    out = {}
    for s in SIGNALS:
        act = SigAction()
        if libc.sigaction(int(s), None, ctypes.byref(act)) != 0:
            raise OSError(ctypes.get_errno(), "sigaction")
        out[s.name] = (act.handler or 0, act.flags)
    return out


def pattern(block_id, n):
    unit = block_id.to_bytes(8, "little")
    return (unit * (n // 8 + 1))[:n]


SPAN = 4096  # bytes checked at each end and in the middle of a large block
FULL = 256 * 1024  # blocks up to this size are filled and checked whole


def regions(size):
    if size <= FULL:
        return [(0, size)]
    mid = (size // 2) & ~7
    return [(0, SPAN), (mid, SPAN), (size - SPAN, SPAN)]


def fill(addr, size, block_id):
    for off, n in regions(size):
        ctypes.memmove(addr + off, pattern(block_id, n), n)


def verify(addr, size, block_id):
    for off, n in regions(size):
        if ctypes.string_at(addr + off, n) != pattern(block_id, n):
            return off
    return -1


# A training step's sizes: a few dozen, again and again (the front cache's hits need them).
STEP_SIZES = tuple(r.choice((512, 4096, 65536, MiB, 3 * MiB, 12 * MiB)) * r.randint(1, 9) for r in [random.Random(7)] for _ in range(40))


def random_size(rng, sizes="random", i=0):
    if sizes == "step":
        return rng.choice(STEP_SIZES)
    if sizes == "layers":  # a step's sizes in the same order again and again, as layers repeat (GMLAKE_SPECULATE foresees them)
        return STEP_SIZES[i % len(STEP_SIZES)]
    r = rng.random()
    if r < 0.6:
        return rng.randint(1, 64 * 1024)
    if r < 0.9:
        return rng.randint(64 * 1024, 4 * MiB)
    if r < 0.99:
        return rng.randint(4 * MiB, 24 * MiB)
    return rng.randint(24 * MiB, 64 * MiB)


class Live:
    """Every live block of every thread: overlaps are found at alloc."""

    def __init__(self):
        self.lock = threading.Lock()
        self.starts = []
        self.ends = {}

    def add(self, addr, size):
        with self.lock:
            i = bisect.bisect_left(self.starts, addr)
            if i > 0 and self.ends[self.starts[i - 1]] > addr:
                return f"0x{addr:x}+{size} overlaps the live block at 0x{self.starts[i - 1]:x}"
            if i < len(self.starts) and self.starts[i] < addr + size:
                return f"0x{addr:x}+{size} overlaps the live block at 0x{self.starts[i]:x}"
            self.starts.insert(i, addr)
            self.ends[addr] = addr + size
            return None

    def remove(self, addr):
        with self.lock:
            i = bisect.bisect_left(self.starts, addr)
            del self.starts[i]
            del self.ends[addr]


# the built-in policies with peekCached (every one)
PEEKING_BUILTINS = ("vms", "caching", "expandable", "gmlake")


def expected_speculate(threading_design, builtin_peeks, front_cache_entries=0):
    """stats()["speculate"] as the library should set it: GMLAKE_SPECULATE where asked (one JS
    thread only), else 6 with one JS thread for a built-in policy that peeks and no front
    cache, else 0."""
    asked = os.environ.get("GMLAKE_SPECULATE")
    if threading_design != "thread":
        return 0
    if asked is not None:
        return int(asked)
    return 6 if builtin_peeks and not front_cache_entries else 0


def stress(policy, threading_design, **kw):
    """_stress, failed too by any line the library says on stderr (a queued free that failed)."""
    err, said = with_stderr(lambda: _stress(policy, threading_design, **kw))
    if err:
        return err
    lines = [x for x in said.splitlines() if x.startswith("gmlake")]
    return f"the library said on stderr ({len(lines)} lines): {lines[0]}" if lines else None


def _stress(policy, threading_design, ops_per_thread=3000, threads=3, knobs=None, front_cache_entries=0, sizes="random", capacity_bytes=None, bursts=False):
    """capacity_bytes: a device so small that allocations run out of memory; the thread that
    got one frees a block of its own and goes on (the allocator must serve again), and the
    case fails unless out-of-memory happened and was followed by served allocations.
    bursts: 4 allocations back to back, then 4 frees, as a compiled step makes them (GMLAKE_AHEAD's
    answers made ahead); the case fails unless some were made ahead and taken."""
    before = signal_handlers()
    t0 = time.perf_counter()
    native = gmlake_torch.start(policy, driver="host", threading=threading_design, check_invariants=512,
                                front_cache_entries=front_cache_entries, capacity_bytes=capacity_bytes, **(knobs or {}))
    start_ms = (time.perf_counter() - t0) * 1000
    after = signal_handlers()
    if after != before:
        return f"Node changed signal handlers: before {before}, after {after}"
    live = Live()
    errors = []
    counts = {"allocs": 0, "frees": 0, "record_streams": 0, "recorded_frees": 0, "empty_caches": 0, "bytes_checked": 0, "ooms": 0, "served_after_oom": 0}
    counts_lock = threading.Lock()
    next_id = [1]

    def worker(tid):
        rng = random.Random(1000 + tid)
        stream = STREAMS[tid % 2]
        other = STREAMS[(tid + 1) % 2]
        mine = []  # (addr, size, id)
        recorded = set()  # addresses of mine given to record_stream
        local = {"allocs": 0, "frees": 0, "record_streams": 0, "recorded_frees": 0, "empty_caches": 0, "bytes_checked": 0, "ooms": 0, "served_after_oom": 0}
        after_oom = False
        try:
            for op in range(ops_per_thread):
                served = False
                if (((op >> 2) & 1) == 0 if bursts else rng.random() < 0.52) or not mine:
                    size = random_size(rng, sizes, local["allocs"])
                    st, addr = native.try_alloc(size, stream)
                    if st == -1 and capacity_bytes is not None:
                        # out of memory: the job frees one of its blocks (checked) and goes on
                        local["ooms"] += 1
                        after_oom = True
                        if not mine:
                            continue
                    elif st != 0:
                        errors.append(f"thread {tid}: alloc({size}) failed ({st}): {native.error()}")
                        return
                    else:
                        served = True
                        local["served_after_oom"] += after_oom
                        after_oom = False
                if served:
                    bad = live.add(addr, size)
                    if bad:
                        errors.append(f"thread {tid}: {bad}")
                        return
                    with counts_lock:
                        bid = next_id[0]
                        next_id[0] += 1
                    fill(addr, size, bid)
                    mine.append((addr, size, bid))
                    local["allocs"] += 1
                    if rng.random() < 0.05:
                        native.record_stream(addr, other)  # used on the other stream too
                        local["record_streams"] += 1
                        recorded.add(addr)
                else:
                    addr, size, bid = mine.pop(rng.randrange(len(mine)))
                    off = verify(addr, size, bid)
                    if off >= 0:
                        errors.append(f"thread {tid}: block {bid} at 0x{addr:x}+{size} corrupted at offset {off}")
                        return
                    local["bytes_checked"] += sum(n for _, n in regions(size))
                    live.remove(addr)
                    if addr in recorded:
                        recorded.discard(addr)
                        local["recorded_frees"] += 1
                    native.free(addr, size, stream)
                    local["frees"] += 1
                    if tid == 0 and rng.random() < 0.01:
                        native.empty_cache()
                        local["empty_caches"] += 1
            for addr, size, bid in mine:
                off = verify(addr, size, bid)
                if off >= 0:
                    errors.append(f"thread {tid}: block {bid} corrupted at offset {off} (at the end)")
                    return
                live.remove(addr)
                if addr in recorded:
                    recorded.discard(addr)
                    local["recorded_frees"] += 1
                native.free(addr, size, stream)
                local["frees"] += 1
        except Exception as e:  # noqa: BLE001 (reported as the case's failure)
            errors.append(f"thread {tid}: {type(e).__name__}: {e}")
        finally:
            with counts_lock:
                for k, v in local.items():
                    counts[k] += v

    t1 = time.perf_counter()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t1
    if errors:
        return "; ".join(errors[:5])
    stats = gmlake_torch.stats()
    if "call_time_us" in stats:
        return "stats() says call_time_us without GMLAKE_TIME_CALLS"
    hits = stats["num_front_cache_hits"]
    if front_cache_entries and not (hits > counts["allocs"] // 10 and stats["calls"]["allocs"] + hits == counts["allocs"]):
        return f"front cache: {hits} hits and {stats['calls']['allocs']} engine allocs for {counts['allocs']} allocs"
    # a block used on the other stream is never held: its free waits for that stream's events in the engine
    if front_cache_entries and stats["num_front_cache_passes"] != counts["recorded_frees"]:
        return f"front cache: {stats['num_front_cache_passes']} frees passed to the engine, {counts['recorded_frees']} of record_stream'd blocks"
    if not front_cache_entries and hits != 0:
        return f"{hits} front-cache hits with the cache off"
    # GMLAKE_TAKEBACK=1: some allocations took a queued free back; every allocation is the engine's or one of those
    takeback = os.environ.get("GMLAKE_TAKEBACK") == "1"
    takebacks = stats["num_queue_takebacks"]
    if stats["queue_takeback"] != takeback or (takeback and takebacks == 0) or (not takeback and takebacks != 0):
        return f"GMLAKE_TAKEBACK={os.environ.get('GMLAKE_TAKEBACK')}: stats() says queue_takeback={stats['queue_takeback']}, {takebacks} taken back"
    if not front_cache_entries and capacity_bytes is None and stats["calls"]["allocs"] + takebacks != counts["allocs"]:
        return f"{stats['calls']['allocs']} engine allocs and {takebacks} taken back for {counts['allocs']} allocs"
    # one JS thread hands queued frees over while it waits (unless GMLAKE_DRAIN_US=off); a Locker per call never
    drains = threading_design == "thread" and os.environ.get("GMLAKE_DRAIN_US") != "off"
    if drains and not (stats["num_free_drains"] > 0 and stats["num_drained_frees"] > 0):
        return f"one JS thread: {stats['num_free_drains']} drains of {stats['num_drained_frees']} frees"
    # GMLAKE_SPECULATE: on by default (6) with one JS thread, a built-in policy that peeks and no
    # front cache; asked for, some allocations took an answer worked out ahead; none when off
    spec_env = os.environ.get("GMLAKE_SPECULATE")
    expect = expected_speculate(threading_design, policy in PEEKING_BUILTINS, front_cache_entries)
    if stats["speculate"] != expect:
        return f"stats() says speculate={stats['speculate']}, expected {expect} ({threading_design}, {policy}, GMLAKE_SPECULATE={spec_env})"
    if not stats["num_speculation_hits"] <= stats["num_speculations"]:
        return f"{stats['num_speculation_hits']} hits of {stats['num_speculations']} answers worked out"
    if expect and spec_env is not None and stats["num_speculation_hits"] == 0:
        return f"GMLAKE_SPECULATE={spec_env}: no allocation took an answer worked out ahead ({stats['num_speculations']} made)"
    if not expect and stats["num_speculations"] != 0:
        return f"{stats['num_speculations']} answers worked out with speculation off"
    # every allocation that reached the library took an answer, was taken back, or missed for one reason
    m = stats["num_speculation_misses"]
    misses = m["none"] + m["other"] + m["behind"]  # none_after_free is a part of none
    if not 0 <= m["none_after_free"] <= m["none"]:
        return f"misses {m}: more of none after a free than none"
    if m["none_late"] + m["none_unforeseen"] + m["none_declined"] + m["none_throttled"] + m["none_after_answer"] != m["none"]:
        return f"misses {m}: none's parts by what the JS thread found do not add up to none"
    if expect and capacity_bytes is None and stats["num_speculation_hits"] + misses + takebacks != counts["allocs"]:
        return f"{stats['num_speculation_hits']} answers taken, {misses} misses ({stats['num_speculation_misses']}), {takebacks} taken back for {counts['allocs']} allocs"
    if not expect and misses != 0:
        return f"{misses} misses counted with speculation off"
    # GMLAKE_AHEAD: allocations made ahead are taken or undone, never more undone than made
    made, undone = stats["num_made_ahead"], stats["num_undone_ahead"]
    if not 0 <= undone <= made or ((not expect or os.environ.get("GMLAKE_AHEAD", "1") == "1") and made != 0):
        return f"{made} made ahead, {undone} undone (speculate {expect})"
    if bursts and expect and (made == 0 or undone == made):
        return f"in bursts: {made} made ahead, {undone} of them undone (none taken)"
    if not drains and stats["num_free_drains"] != 0:
        return f"{stats['num_free_drains']} drains with {threading_design} and GMLAKE_DRAIN_US={os.environ.get('GMLAKE_DRAIN_US')}"
    if stats["live_blocks"] != 0 or stats["allocated_bytes.all.current"] != 0:
        return f"blocks still live after every free: {stats['live_blocks']} ({stats['allocated_bytes.all.current']} bytes)"
    if capacity_bytes is not None and not (counts["ooms"] > 0 and counts["served_after_oom"] > 0 and stats["num_ooms"] == counts["ooms"]):
        return f"under {capacity_bytes} bytes: {counts['ooms']} out-of-memory ({stats['num_ooms']} counted by the engine), {counts['served_after_oom']} served after one"
    closed = gmlake_torch.close()
    leaks = closed.get("leaks")
    if leaks != {"reservations": 0, "mappings": 0, "liveBytes": 0, "events": 0}:
        return f"leaked at close: {closed}"
    ops = counts["allocs"] + counts["frees"]
    label = (f"stress:{policy}:{threading_design}" + (f" {knobs}" if knobs else "") + (f" front_cache_entries={front_cache_entries}" if front_cache_entries else "") + (f" capacity={capacity_bytes}" if capacity_bytes else "")
             + ("" if drains or threading_design != "thread" else " GMLAKE_DRAIN_US=off") + (" GMLAKE_TAKEBACK=1" if takeback else ""))
    print(json.dumps({"case": label, "start_ms": round(start_ms, 1), "threads": threads,
                      **counts, "front_cache_hits": hits, "ops_per_s": round(ops / wall), "peak_reserved": stats["reserved_bytes.all.peak"],
                      "syncs": stats["num_sync_all_streams"], "deferred_frees": stats["num_deferred_frees"],
                      "cross_stream_reuses": stats["num_cross_stream_reuses"], "drained_frees": stats["num_drained_frees"],
                      "speculation_hits": stats["num_speculation_hits"], "made_ahead": made, "undone_ahead": undone, **({"takebacks": takebacks} if takeback else {})}))
    return None


def decisions(ops=20000, seed=5):
    """One caller: a training step's sizes in order, again and again (the stream changing each
    round), freed at random: a hash of every address handed out, in order, and the JS thread's
    drains and foreseen answers (run by drain_same_decisions)."""
    native = gmlake_torch.start("vms", driver="sim")  # the sim's addresses do not move between processes (the host's mmap does)
    rng = random.Random(seed)
    live, h, n = [], 0x811C9DC5, 0
    for i in range(ops):
        if rng.random() < 0.52 or not live:
            size, stream = STEP_SIZES[n % len(STEP_SIZES)], STREAMS[(n // len(STEP_SIZES)) % 2]
            n += 1
            st, addr = native.try_alloc(size, stream)
            if st != 0:
                return f"alloc({size}) failed ({st}): {native.error()}"
            live.append((addr, size, stream))
            h = ((h ^ addr) * 16777619) % (1 << 64)
        else:
            addr, size, stream = live.pop(rng.randrange(len(live)))
            native.free(addr, size, stream)
        if i % 97 == 0:
            time.sleep(0.0002)  # a kernel launch's gap: the JS thread's wait, where it drains
    for addr, size, stream in live:
        native.free(addr, size, stream)
    s = gmlake_torch.stats()
    print(json.dumps({"hash": h, "peak_reserved": s["reserved_bytes.all.peak"], "drains": s["num_free_drains"],
                      "drained_frees": s["num_drained_frees"], "speculation_hits": s["num_speculation_hits"],
                      "drain_wait_us": s["drain_wait_us"]}))
    return None


def drain_same_decisions():
    """GMLAKE_DRAIN_US and GMLAKE_SPECULATE move work, not the engine's decisions: the same
    calls hand out the same addresses with the drain off, at once, after 2 us and after 20 us
    and learned (auto) (these without answers worked out ahead), and with answers worked out
    ahead looking back on 1 and on 6 allocations and by default (6), the drain by default
    (2 us) and learned (its peek hands the frees over)."""
    # name: (GMLAKE_DRAIN_US, GMLAKE_SPECULATE), None for unset
    variants = {"off": ("off", "0"), "default": (None, None), "auto": ("auto", None), "0": ("0", "0"),
                "2": ("2", "0"), "20": ("20", "0"), "auto speculate 0": ("auto", "0"),
                "speculate 1": (None, "1"), "speculate 6": (None, "6")}
    runs = {}
    for name, (drain, speculate) in variants.items():
        env = {k: v for k, v in os.environ.items() if k not in ("GMLAKE_DRAIN_US", "GMLAKE_FRONT_CACHE_ENTRIES", "GMLAKE_SPECULATE")}
        env["GMLAKE_THREADING"] = "thread"
        if drain is not None:
            env["GMLAKE_DRAIN_US"] = drain
        if speculate is not None:
            env["GMLAKE_SPECULATE"] = speculate
        r = subprocess.run([sys.executable, __file__, "--decisions"], env=env, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            return f"{name}: exit {r.returncode}: {(r.stdout + r.stderr).strip()[-500:]}"
        runs[name] = json.loads(r.stdout.strip().splitlines()[-1])
    off = runs["off"]
    for name, (_, speculate) in variants.items():
        foresees = speculate != "0"
        if (runs[name]["speculation_hits"] != 0) != foresees:
            return f"{name}: {'no' if foresees else 'some'} allocations took foreseen answers ({runs[name]})"
        x = runs[name]
        if (x["hash"], x["peak_reserved"]) != (off["hash"], off["peak_reserved"]):
            return f"{name} decided differently: {x} against {off} with the drain off"
        if name != "off" and x["drains"] == 0:
            return f"{name}: the JS thread never handed frees over ({x})"
    if off["drains"] != 0:
        return f"{off['drains']} drains with GMLAKE_DRAIN_US=off"
    # stats() say how long frees wait: fixed as set (2 us by default), learned one of the two waits
    # (drain_tuner.h) and 2 us learned with no answers worked out (an early drain gains nothing), none when off
    waits = {name: runs[name]["drain_wait_us"] for name in variants}
    fixed = {"off": -1, "default": 2, "0": 0, "2": 2, "20": 20, "auto speculate 0": 2, "speculate 1": 2, "speculate 6": 2}
    if any(waits[n] != w for n, w in fixed.items()) or waits["auto"] not in (0.25, 2):
        return f"drain_wait_us by GMLAKE_DRAIN_US: {waits}"
    print(json.dumps({"case": "drain-same-decisions", "peak_reserved": off["peak_reserved"],
                      "drained_frees": {n: runs[n]["drained_frees"] for n in ("default", "auto", "20")},
                      "drain_wait_us": waits,
                      "speculation_hits": {n: runs[n]["speculation_hits"] for n in ("default", "auto", "speculate 1", "speculate 6")}}))
    return None


def oom_then_served(native, limit, says, stream=0):
    """40 MiB, then 48 MiB more under a 64 MiB limit: out of memory (-1, null, PyTorch's message
    saying `says`); after the 40 MiB are freed the 48 fit. (error or None, the message, the 48's address)."""
    st, a = native.try_alloc(40 * MiB)
    if st != 0:
        return f"a 40 MiB alloc failed under {limit}: {native.error()}", "", 0
    st, b = native.try_alloc(48 * MiB, stream)
    msg = native.error()
    if st != -1 or b != 0:
        return f"48 MiB more under {limit}: expected out of memory (-1, null), got ({st}, {b:#x})", msg, 0
    if not msg.startswith("CUDA out of memory. Tried to allocate 48.00 MiB") or says not in msg:
        return f"not PyTorch's out-of-memory message saying {says!r}: {msg!r}", msg, 0
    native.free(a, 40 * MiB)
    st, b = native.try_alloc(48 * MiB, stream)  # the job freed: served again
    if st != 0:
        return f"after the free, 48 MiB should fit {limit}: {native.error()}", msg, 0
    return None, msg, b


def oom():
    native = gmlake_torch.start("caching", driver="host", capacity_bytes=64 * MiB)
    err, msg, b = oom_then_served(native, "a 64 MiB device", "gmlake caching allocator")
    if err:
        return err
    native.free(b, 48 * MiB)
    s = gmlake_torch.stats()
    if s["num_ooms"] != 1:
        return f"num_ooms = {s['num_ooms']}, expected 1"
    leaks = gmlake_torch.close()["leaks"]
    if leaks["liveBytes"] != 0:
        return f"leaked {leaks}"
    print(json.dumps({"case": "oom", "message": msg}))
    return None


def budget(policy):
    """The memory budget changed at run time: what fits under it is served, what does not is
    out of memory (a status, PyTorch's message naming the budget), and after a free the
    allocator serves again; lowering it below what is held refuses only growth."""
    device = 256 * MiB  # the host driver's device
    native = gmlake_torch.start(policy, driver="host", capacity_bytes=device)
    got = lambda: (gmlake_torch.stats()["capacity_bytes"], gmlake_torch.stats()["device_bytes"])  # noqa: E731
    if got() != (device, device):
        return f"with no budget it should be the device's {device}: {got()}"
    if gmlake_torch.set_capacity_bytes(64 * MiB) != 64 * MiB or got() != (64 * MiB, device):
        return f"set_capacity_bytes(64 MiB) did not take: {got()}"
    err, msg, b = oom_then_served(native, "a 64 MiB budget", "memory budget is 64.00 MiB of the device's 256.00 MiB", STREAMS[1])
    if err:
        return err
    if gmlake_torch.set_memory_fraction(0.5) != 128 * MiB or got()[0] != 128 * MiB:
        return f"set_memory_fraction(0.5) of 256 MiB: {got()}"
    st, c = native.try_alloc(64 * MiB)
    if st != 0:
        return f"48 + 64 MiB under a 128 MiB budget failed: {native.error()}"
    st, d = native.try_alloc(32 * MiB)
    if st != -1:
        return f"48 + 64 + 32 MiB under 128 MiB: expected out of memory, got {st}"
    gmlake_torch.set_capacity_bytes(16 * MiB)  # below what is held: it stays, growth is refused
    st, d = native.try_alloc(20 * MiB)
    if st != -1:
        return f"20 MiB more with 112 MiB held under a 16 MiB budget: expected out of memory, got {st}"
    for bad, call, word in ((1.5, gmlake_torch.set_memory_fraction, "from 0 to 1"), (-1, gmlake_torch.set_capacity_bytes, "non-negative"),
                            (2.0, lambda v: native.set_budget(v, True, 0), "a memory fraction is a number from 0 to 1, not 2"),
                            (0.5, lambda v: gmlake_torch.set_memory_fraction(v, device=3), "a memory budget for device 3")):
        try:
            call(bad)
            return f"a budget of {bad} was taken"
        except gmlake_torch.GmlakeError as e:
            if word not in str(e):
                return f"a budget of {bad}: the error does not say {word!r}: {e}"
    if got()[0] != 16 * MiB:
        return f"a refused budget changed it: {got()}"
    native.free(b, 48 * MiB)
    native.free(c, 64 * MiB)
    gmlake_torch.set_memory_fraction(1.0)
    st, e = native.try_alloc(200 * MiB)  # the whole device again: what the policy holds plus growth
    if st != 0:
        return f"200 MiB of a 256 MiB device with nothing live failed: {native.error()}"
    native.free(e, 200 * MiB)
    s = gmlake_torch.stats()
    if s["num_ooms"] != 3 or s["num_budget_refusals"] < 3:
        return f"num_ooms = {s['num_ooms']} (expected 3), num_budget_refusals = {s['num_budget_refusals']}"
    leaks = gmlake_torch.close()["leaks"]
    if leaks["liveBytes"] != 0:
        return f"leaked {leaks}"
    print(json.dumps({"case": f"budget:{policy}", "message": msg, "budget_refusals": s["num_budget_refusals"]}))
    return None


def budget_env():
    """GMLAKE_MEMORY_FRACTION: the budget at start, a share of the device (the host driver's)."""
    gmlake_torch.start("vms", driver="host", capacity_bytes=256 * MiB)
    s = gmlake_torch.stats()
    if (s["capacity_bytes"], s["device_bytes"]) != (64 * MiB, 256 * MiB):
        return f"GMLAKE_MEMORY_FRACTION=0.25 of 256 MiB: capacity {s['capacity_bytes']}, device {s['device_bytes']}"
    print(json.dumps({"case": "budget-env", "capacity_bytes": s["capacity_bytes"]}))
    return None


def timed_calls(n, free_every):
    """n allocs of 1-7 MiB on the host driver, the oldest freed after every free_every-th, then
    stats(): (native, live, num_calls, call_time_us, an error unless both count every call and took time)."""
    native = gmlake_torch.start("vms", driver="host")
    live = []
    for i in range(n):
        st, a = native.try_alloc((i % 7 + 1) * MiB)
        if st != 0:
            return native, live, None, None, f"alloc failed: {native.error()}"
        live.append((a, (i % 7 + 1) * MiB))
        if i % free_every == free_every - 1:
            native.free(*live.pop(0))
    s = gmlake_torch.stats()
    calls, us = s.get("num_calls"), s.get("call_time_us")
    frees = n // free_every
    if not calls or (calls["alloc"], calls["free"]) != (n, frees):
        return native, live, calls, us, f"num_calls = {calls}, expected {n} allocs and {frees} frees"
    if not (us and us["alloc"] > 0 and us["free"] > 0):
        return native, live, calls, us, f"call_time_us = {us}, expected both > 0"
    return native, live, calls, us, None


def call_times():
    """GMLAKE_TIME_CALLS=1: stats() counts every alloc and free and sums their time."""
    native, live, calls, us, err = timed_calls(300, 3)
    if err:
        return err
    # every alloc enters JS (the frees are queued for the next one) but those that took an answer
    # worked out ahead (one JS thread); the parts are inside the whole
    parts = us["enter"] + us["prepare"] + us["js"]
    hits = gmlake_torch.stats()["num_speculation_hits"]
    if calls["js"] < 300 - hits or not (0 < parts <= us["alloc"] + us["free"]) or min(us["enter"], us["prepare"], us["js"]) <= 0:
        return f"the embedding's parts: {us}, {calls}: expected >= 300 - {hits} calls into JS, each part > 0, their sum within alloc + free"
    for a, n in live:
        native.free(a, n)
    if gmlake_torch.stats()["num_calls"]["free"] != 300:
        return "the frees after the first stats() were not counted"
    gmlake_torch.close()
    print(json.dumps({"case": "call-times", "us_per_alloc": round(us["alloc"] / 300, 2), "us_per_free": round(us["free"] / 100, 2),
                      "us_per_js_call": {k: round(us[k] / calls["js"], 2) for k in ("enter", "prepare", "js")}}))
    return None


def call_times_total():
    """GMLAKE_TIME_CALLS=total: the whole calls timed and counted, the embedding's parts not."""
    native, live, calls, us, err = timed_calls(200, 4)
    if err:
        return err
    if set(us) != {"alloc", "free"} or set(calls) != {"alloc", "free"}:
        return f"GMLAKE_TIME_CALLS=total timed the parts too: {us}, {calls}"
    for a, n in live:
        native.free(a, n)
    gmlake_torch.close()
    return None


def with_stderr(fn):
    """fn()'s result and what the process wrote to fd 2 meanwhile (the library's own lines)."""
    with tempfile.TemporaryFile() as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            result = fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        return result, err.read().decode(errors="replace")


def bad_free():
    """A free of an address that is not live (PyTorch's free cannot fail): said on stderr,
    also when it was queued for the next call, and the allocator goes on working."""
    native = gmlake_torch.start("vms", driver="host")
    st, a = native.try_alloc(MiB)
    if st != 0:
        return f"alloc failed: {native.error()}"

    def frees():
        native.free(a, MiB)
        native.free(a, MiB)  # again: not live any more
        return native.try_alloc(MiB)  # the call that takes the queued frees

    (st, b), said = with_stderr(frees)
    if st != 0:
        return f"alloc after the bad free failed: {native.error()}"
    if f"free(0x{a:x}, {MiB}) failed" not in said or "did not hand out" not in said:
        return f"the bad free was not reported on stderr: {said!r}"
    native.free(b, MiB)
    if gmlake_torch.stats()["live_blocks"] != 0:
        return "a block is still live"
    leaks = gmlake_torch.close()["leaks"]
    if leaks != {"reservations": 0, "mappings": 0, "liveBytes": 0, "events": 0}:
        return f"leaked {leaks}"
    print(json.dumps({"case": "bad-free", "stderr": said.strip()}))
    return None


def front_cache_hostile():
    """With the front cache on: a second free of a block it holds is dropped (handing it out
    twice would give two tensors one block) and said; a free of an address the engine never
    handed out, or with a size other than its alloc's, goes to the engine, which says so, and
    such an address is never handed out again."""
    native = gmlake_torch.start("vms", driver="host", front_cache_entries=8)
    st, a = native.try_alloc(MiB)
    st2, b = native.try_alloc(MiB)
    if st or st2:
        return f"alloc failed: {native.error()}"
    bogus = b + 64 * MiB

    def frees():
        native.free(a, MiB)
        native.free(a, MiB)  # again, while the cache holds it
        native.free(bogus, MiB)  # never handed out
        native.free(b, 2 * MiB)  # another size than its alloc's: the engine's, not held
        return [native.try_alloc(MiB) for _ in range(3)]

    got, said = with_stderr(frees)
    if any(s for s, _ in got):
        return f"alloc after the bad frees failed: {native.error()}"
    addrs = [p for _, p in got]
    if addrs[0] != a:
        return f"the held block 0x{a:x} was not handed back to the next 1 MiB alloc (got 0x{addrs[0]:x})"
    if len(set(addrs)) != 3 or bogus in addrs:
        return f"handed out {[hex(p) for p in addrs]}: a block twice, or the address never handed out (0x{bogus:x})"
    if "freed already (the front cache holds it); ignored" not in said:
        return f"the second free was not said: {said!r}"
    if f"free(0x{bogus:x}, {MiB}) failed" not in said:
        return f"the free of an address never handed out was not said: {said!r}"
    for p in addrs:
        native.free(p, MiB)
    s = gmlake_torch.stats()
    if s["num_front_cache_hits"] != 1 or s["num_front_cache_passes"] != 2 or s["live_blocks"] != 0 or s["front_cache_entries"] != 8:
        return (f"hits {s['num_front_cache_hits']} (expected 1), frees passed on {s['num_front_cache_passes']} (expected 2: the "
                f"address never handed out, the other size), live blocks {s['live_blocks']} (expected 0), entries {s['front_cache_entries']}")
    leaks = gmlake_torch.close()["leaks"]
    if leaks != {"reservations": 0, "mappings": 0, "liveBytes": 0, "events": 0}:
        return f"leaked {leaks}"
    print(json.dumps({"case": "front-cache-hostile", "stderr": said.strip().splitlines()}))
    return None


def hostile_mix(ops=20000, seed=11, speculate=False, takeback=False):
    """The front cache (or, speculate, answers worked out ahead) under a random mix of good and bad calls: allocs of a step's sizes on two
    streams, frees, record_stream, empty_cache and stats, and among them second frees of freed
    blocks, frees of addresses never handed out and frees with another size. No address is ever
    handed out while live or if it was never ours, every block keeps its pattern, and at the
    end nothing is live or leaked. speculate: the same mix with no front cache on one JS
    thread, whose answers worked out ahead are on by default (most allocations take a step's
    sizes in order, with a kernel launch's gap now and then, so that some take one). takeback
    (GMLAKE_TAKEBACK=1, no front cache): the hits are the queued frees taken back."""
    if takeback and not speculate:
        native = gmlake_torch.start("vms", driver="host", threading="locker", check_invariants=256)
    elif speculate:
        native = gmlake_torch.start("vms", driver="host", threading="thread", check_invariants=256)
    else:
        native = gmlake_torch.start("vms", driver="host", front_cache_entries=16, check_invariants=256)
    rng = random.Random(seed)
    n_in_order = 0
    live = Live()
    mine = {}  # addr -> (size, stream, id)
    freed = []  # addresses freed and not handed out again since
    bogus = set()
    shapes = []  # (size, stream) of the last frees
    counts = {"allocs": 0, "frees": 0, "double_frees": 0, "bogus_frees": 0, "wrong_size_frees": 0, "record_streams": 0}

    def mix():
        nonlocal n_in_order
        for i in range(ops):
            r = rng.random()
            if speculate and i % 5 == 0:
                time.sleep(0.0002)  # a kernel launch's gap: the JS thread drains and works ahead
            if r < 0.45 and sum(v[0] for v in mine.values()) > 1024 * MiB:
                r = 0.5  # bounded: a free instead (allocs outnumber frees; the host device is half the free RAM)
            if r < 0.45 or not mine:
                if speculate and rng.random() < 0.9:  # a step's sizes in order (what the foresight learns)
                    size, stream = STEP_SIZES[n_in_order % len(STEP_SIZES)], STREAMS[(n_in_order // len(STEP_SIZES)) % 2]
                    n_in_order += 1
                # a training step asks again for what it just freed (the cache's hits), and for new sizes
                elif shapes and rng.random() < 0.6:
                    size, stream = rng.choice(shapes)
                else:
                    size, stream = rng.choice(STEP_SIZES), rng.choice(STREAMS)
                st, addr = native.try_alloc(size, stream)
                if st != 0:
                    return f"op {i}: alloc({size}) failed ({st}): {native.error()}"
                if addr in bogus:
                    return f"op {i}: handed out 0x{addr:x}, which was never ours (a bogus free's address)"
                bad = live.add(addr, size)
                if bad:
                    return f"op {i}: {bad}"
                mine[addr] = (size, stream, i + 1)
                if addr in freed:
                    freed.remove(addr)
                fill(addr, size, i + 1)
                counts["allocs"] += 1
            elif r < 0.80:
                addr = rng.choice(list(mine))
                size, stream, bid = mine.pop(addr)
                off = verify(addr, size, bid)
                if off >= 0:
                    return f"op {i}: block {bid} at 0x{addr:x}+{size} corrupted at offset {off}"
                live.remove(addr)
                wrong = rng.random() < 0.08
                native.free(addr, size + 4096 if wrong else size, stream)  # another size: the engine's
                counts["wrong_size_frees" if wrong else "frees"] += 1
                freed.append(addr)
                del freed[:-32]
                shapes.append((size, stream))
                del shapes[:-8]
            elif r < 0.86 and freed:
                addr = rng.choice(freed)  # freed and not live: a second free
                native.free(addr, MiB, rng.choice(STREAMS))
                counts["double_frees"] += 1
            elif r < 0.91:
                addr = (1 << 46) + rng.randrange(1 << 20) * 4096  # nowhere near the engine's memory
                bogus.add(addr)
                native.free(addr, rng.choice(STEP_SIZES), rng.choice(STREAMS))
                counts["bogus_frees"] += 1
            elif r < 0.96:
                native.record_stream(rng.choice(list(mine)), rng.choice(STREAMS))
                counts["record_streams"] += 1
            elif r < 0.98:
                native.empty_cache()
            else:
                gmlake_torch.stats()
        for addr, (size, stream, bid) in list(mine.items()):
            if verify(addr, size, bid) >= 0:
                return f"block {bid} corrupted (at the end)"
            live.remove(addr)
            native.free(addr, size, stream)
        return None

    err, said = with_stderr(mix)
    if err:
        return err
    s = gmlake_torch.stats()
    if s["live_blocks"] != 0 or s["allocated_bytes.all.current"] != 0:
        return f"after every free: {s['live_blocks']} blocks live ({s['allocated_bytes.all.current']} bytes)"
    hits = s["num_queue_takebacks"] if takeback else s["num_speculation_hits"] if speculate else s["num_front_cache_hits"]
    if speculate and s["speculate"] != expected_speculate("thread", True):
        return f"one JS thread and vms: stats() speculate {s['speculate']}, expected {expected_speculate('thread', True)}"
    if takeback and speculate and s["num_speculation_hits"] == 0:
        return "no answer worked out ahead taken beside the take-back"
    # (with answers worked out ahead most sizes come in a step's order, rarely the size just freed)
    if hits < counts["allocs"] // (100 if speculate and takeback else 20 if speculate or takeback else 10):
        what = "take-back" if takeback else "answers worked out ahead" if speculate else "cache"
        return f"only {hits} hits in {counts['allocs']} allocs: the mix did not reach the {what}"
    leaks = gmlake_torch.close()["leaks"]
    if leaks != {"reservations": 0, "mappings": 0, "liveBytes": 0, "events": 0}:
        return f"leaked {leaks}"
    name = ("takeback-fuzz" + (":thread" if speculate else "")) if takeback else "speculate-fuzz" if speculate else "front-cache-fuzz"
    print(json.dumps({"case": name, **counts, "hits": hits,
                      "frees_passed_on": s["num_front_cache_passes"], "stderr_lines": len(said.splitlines())}))
    return None


def threading_auto():
    """GMLAKE_THREADING=auto (the default): a Locker per call on one CPU, one JS thread where
    the process may use enough CPUs; stats() says which; a bad name is refused."""
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    if gmlake_torch.usable_cpus() != 1 or gmlake_torch.resolve_threading() != "locker":
        return f"one CPU: {gmlake_torch.usable_cpus()} usable, auto chose {gmlake_torch.resolve_threading()}"
    try:
        gmlake_torch.resolve_threading("fibres")
        return "threading='fibres' accepted"
    except gmlake_torch.GmlakeError as e:
        if "threading must be one of auto, locker, thread, not 'fibres'" not in str(e):
            return f"the error does not name the choices: {e}"
    with tempfile.TemporaryDirectory() as d:  # a container's quota: cgroup v2's cpu.max, v1's cfs files
        v2, v1 = os.path.join(d, "v2"), os.path.join(d, "v1")
        os.makedirs(v2)
        os.makedirs(v1)
        got = []
        for text in ("200000 100000", "max 100000"):
            with open(os.path.join(v2, "cpu.max"), "w") as f:
                f.write(text + "\n")
            got.append(gmlake_torch._cgroup_quota(v2))
        for name, value in (("cpu.cfs_quota_us", "350000"), ("cpu.cfs_period_us", "100000")):
            with open(os.path.join(v1, name), "w") as f:
                f.write(value + "\n")
        got.append(gmlake_torch._cgroup_quota(v1))
        got.append(gmlake_torch._cgroup_quota(os.path.join(d, "none")))
        if got != [2.0, None, 3.5, None]:
            return f"cgroup quotas read as {got}, expected [2.0, None, 3.5, None]"
    gmlake_torch._AUTO_THREAD_CPUS = 1  # as if this machine had the CPUs: auto takes the JS thread
    gmlake_torch.start("vms", driver="host")
    st, addr = gmlake_torch._native.try_alloc(MiB, 0)
    gmlake_torch._native.free(addr, MiB, 0)
    s = gmlake_torch.stats()
    if st != 0 or s["threading"] != "thread":
        return f"auto with enough CPUs: alloc status {st}, stats() threading {s['threading']}"
    if s["speculate"] != expected_speculate("thread", True):
        return f"auto with enough CPUs and vms: stats() speculate {s['speculate']}, expected {expected_speculate('thread', True)}"
    print(json.dumps({"case": "threading-auto", "one_cpu": "locker", "enough_cpus": s["threading"]}))
    return None


def expect_start_error(pattern, **kw):
    for attempt in (1, 2):  # a failed start fails again the same way, it never crashes
        try:
            gmlake_torch.start(**kw)
        except gmlake_torch.GmlakeError as e:
            if pattern not in str(e):
                return f"attempt {attempt}: the error does not say {pattern!r}: {e}"
            msg = str(e)
            continue
        return f"attempt {attempt}: started, expected an error saying {pattern!r}"
    print(json.dumps({"case": "start-error", "message": msg}))
    return None


def node_flags():
    """GMLAKE_NODE_FLAGS reaches our Node's V8 (NODE_OPTIONS does not: the job's own): under
    --trace-gc and a young generation of 1 MiB the stress prints V8's scavenges."""
    with tempfile.TemporaryFile() as out:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(out.fileno(), 1)
        try:
            err = stress("vms", "locker")
        finally:
            sys.stdout.flush()
            ctypes.CDLL(None).fflush(None)  # V8 prints through C's stdio, buffered when not a terminal
            os.dup2(saved, 1)
            os.close(saved)
        out.seek(0)
        said = out.read().decode(errors="replace")
    if err:
        return err
    n = said.count("Scavenge")
    if n < 2:
        return f"V8 did not get GMLAKE_NODE_FLAGS (--trace-gc printed {n} scavenges): {said[-300:]!r}"
    print(json.dumps({"case": "node-flags", "scavenges": n}))
    return None


def speculate_outside():
    """An outside policy that peeks (vms under another name, from a policy module) on one JS
    thread: answers worked out ahead only when GMLAKE_SPECULATE asks for them, since a peek
    its malloc contradicts stops the process."""
    expect = expected_speculate("thread", False)
    stitch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "stitch", "dist", "index.js")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "my-vms.mjs")
        with open(path, "w") as f:
            f.write(f"import {{ getPolicy }} from {json.dumps('file://' + os.path.realpath(stitch))};\n"
                    "export default { ...getPolicy('vms'), name: 'my-vms', description: 'vms under another name' };\n")
        native = gmlake_torch.start("my-vms", driver="host", threading="thread", policy_module=path)
        for _ in range(50):
            st, a = native.try_alloc(3 * MiB, 0)
            if st != 0:
                return f"alloc failed: {native.error()}"
            native.free(a, 3 * MiB, 0)
        s = gmlake_torch.stats()
        if s["speculate"] != expect:
            return f"an outside policy that peeks: stats() speculate {s['speculate']}, expected {expect} (GMLAKE_SPECULATE={os.environ.get('GMLAKE_SPECULATE')})"
        gmlake_torch.close()
    print(json.dumps({"case": "speculate-outside-policy", "speculate": s["speculate"], "hits": s["num_speculation_hits"]}))
    return None


def speculate_blind_policy():
    """GMLAKE_SPECULATE asked for an outside policy without peekCached (vms with it taken away):
    refused at start, one line."""
    stitch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "stitch", "dist", "index.js")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "blind-vms.mjs")
        with open(path, "w") as f:
            f.write(f"import {{ getPolicy }} from {json.dumps('file://' + os.path.realpath(stitch))};\n"
                    "const vms = getPolicy('vms');\n"
                    "export default { ...vms, name: 'blind-vms', description: 'vms that cannot say where a malloc lands',\n"
                    "  create(ctx, o) { const i = vms.create(ctx, o); i.peekCached = undefined; return i; } };\n")
        return expect_start_error("GMLAKE_SPECULATE needs a policy that can say where an allocation would land", policy="blind-vms",
                                  driver="host", threading="thread", policy_module=path)


def bad_module():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "broken-policy.mjs")
        with open(path, "w") as f:
            f.write("export default {;\n")
        return expect_start_error("cannot load the policy module", policy="x", driver="host", policy_module=path)


def enable_with_stub_torch():
    """enable() against a stand-in for torch that does what PyTorch does with the library:
    CUDAPluggableAllocator resolves the entry points by name, the hooks get their addresses,
    and allocations call them through those function pointers."""
    import types

    calls = {}

    class PluggableHandle:
        def set_reset_fn(self, addr):
            calls["reset"] = ctypes.CFUNCTYPE(None)(addr)

        def set_record_stream_fn(self, addr):
            calls["record_stream"] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(addr)

        # PyTorch's signatures: (int device, MempoolId_t = pair<u64, u64> in two registers,
        # std::function filter by invisible reference: a pointer)
        def set_begin_allocate_to_pool(self, addr):
            calls["begin_pool"] = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_void_p)(addr)

        def set_end_allocate_to_pool_fn(self, addr):
            calls["end_pool"] = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong)(addr)

        def set_release_pool(self, addr):  # (int device, MempoolId_t)
            calls["release_pool"] = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong)(addr)

        def set_memory_fraction_fn(self, addr):  # (double fraction, int device)
            calls["memory_fraction"] = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int)(addr)

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc_name, free_name):
            lib = ctypes.CDLL(path)
            calls["alloc"] = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)(
                ctypes.cast(getattr(lib, alloc_name), ctypes.c_void_p).value)
            calls["free"] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)(
                ctypes.cast(getattr(lib, free_name), ctypes.c_void_p).value)
            self._h = PluggableHandle()

        def allocator(self):
            return self._h

    swapped = []
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(
        CUDAPluggableAllocator=CUDAPluggableAllocator, change_current_allocator=swapped.append))
    sys.modules["torch"] = torch
    os.environ["GMLAKE_DRIVER"] = "host"
    os.environ["GMLAKE_KNOBS"] = "maxHandleBytes=33554432"
    os.environ["GMLAKE_RECORD_MAX_ENTRIES"] = "64"
    gmlake_torch.enable("vms", record=True)
    if len(swapped) != 1 or not {"alloc", "free", "reset", "record_stream", "begin_pool", "end_pool", "release_pool", "memory_fraction"} <= calls.keys():
        return f"enable() did not wire the allocator: swapped {len(swapped)}, hooks {sorted(calls)}"
    # the hooks switched the capture check to pool windows (the previous mode is returned)
    if gmlake_torch._native.lib.gmlake_set_capture_check(1) != 1 or gmlake_torch._native.lib.gmlake_set_capture_check(7) != -1:
        return "enable() did not switch the capture check to pool windows"
    empty_function = ctypes.create_string_buffer(32)  # an empty std::function: never called
    calls["begin_pool"](0, 1, 2, ctypes.addressof(empty_function))
    calls["end_pool"](0, 1, 2)
    calls["end_pool"](0, 1, 2)  # one end too many: stays closed
    if gmlake_torch._native.pool_use_count((1, 2)) != 1:
        return f"the pool window made pool (1, 2) with {gmlake_torch._native.pool_use_count((1, 2))} uses, expected 1"
    calls["release_pool"](0, 1, 2)  # the graph's reset
    if gmlake_torch._native.pool_use_count((1, 2)) != 0:
        return "release_pool did not reach the engine"
    p = calls["alloc"](3 * MiB, 0, 0)
    ctypes.memset(p, 0x5A, 3 * MiB)
    calls["record_stream"](p, 0x77)
    calls["free"](p, 3 * MiB, 0, 0)
    calls["reset"]()
    calls["memory_fraction"](0.25, 0)  # torch.cuda.set_per_process_memory_fraction(0.25)
    s = gmlake_torch.stats()
    if s["capacity_bytes"] != s["device_bytes"] // 4:
        return f"set_memory_fraction_fn(0.25) set the budget to {s['capacity_bytes']} of {s['device_bytes']}"
    if s["calls"]["recordStreams"] != 1 or s["calls"]["emptyCaches"] != 1 or s["policy"] != "vms":
        return f"hooks did not reach the engine: {s['calls']}"
    for i in range(800):  # the history past its bound (GMLAKE_RECORD_MAX_ENTRIES=64)
        calls["free"](calls["alloc"](4096 << (i % 8), 0, 0), 0, 0, 0)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "live.pickle.gz")
        gmlake_torch.snapshot(path)
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return "the .gz snapshot is not gzip"
    h = gmlake_torch.stats()
    if h["history_entries"] != 64 or h["history_dropped"] < 1000:
        return f"the history is not bounded to GMLAKE_RECORD_MAX_ENTRIES=64: {h['history_entries']} kept, {h['history_dropped']} dropped"
    leaks = gmlake_torch.close()["leaks"]
    if leaks != {"reservations": 0, "mappings": 0, "liveBytes": 0, "events": 0}:
        return f"leaked {leaks}"
    print(json.dumps({"case": "enable", "stats_keys": len(s)}))
    return None


POOL_KEYS = ("private_pools", "private_pool_reserved_bytes", "private_pool_in_use_bytes")


def pool_state():
    s = gmlake_torch.stats()
    return {k: s[k] for k in POOL_KEYS}


def checked_alloc(native, size, fill_id, ordinal=None, capturing=False, stream=0):
    st, a = native.try_alloc(size, stream) if ordinal is None else native.pool_alloc(size, ordinal, capturing, stream)
    if st != 0:
        raise AssertionError(f"alloc({size}{'' if ordinal is None else f', pool #{ordinal}'}) failed ({st}): {native.error()}")
    fill(a, size, fill_id)
    return a


def expect_intact(a, size, fill_id, what):
    off = verify(a, size, fill_id)
    if off >= 0:
        raise AssertionError(f"{what} at 0x{a:x} corrupted at offset {off}")


def close_clean():
    leaks = gmlake_torch.close()["leaks"]
    if leaks != {"reservations": 0, "mappings": 0, "liveBytes": 0, "events": 0}:
        raise AssertionError(f"leaked at close: {leaks}")


def as_case(fn):
    """A case written with asserts: its failure's message, or None."""
    def run(*args):
        try:
            return fn(*args)
        except AssertionError as e:
            return str(e)
    return run


@as_case
def pools(policy):
    native = gmlake_torch.start(policy, driver="host", check_invariants=64)
    base_reserved = gmlake_torch.stats()["reserved_bytes.all.current"]
    d = checked_alloc(native, 8 * MiB, 1)
    native.free(d, 8 * MiB)  # cached in the default pool
    g1 = native.pool_begin((7, 0))  # graph 1's capture (torch.cuda.graph: a pool of its own)
    x = checked_alloc(native, 8 * MiB, 2, g1)  # its output, kept
    t = checked_alloc(native, 8 * MiB, 3, g1)  # a temporary
    assert d not in (x, t), f"the pool was served the default pool's freed block 0x{d:x}"
    native.free(t, 8 * MiB)
    native.pool_end(g1)
    d2 = checked_alloc(native, 8 * MiB, 4)
    assert d2 not in (x, t), f"the default pool was served the pool's memory (0x{d2:x})"
    native.empty_cache()  # the pool's free memory stays: a graph replays into it
    st = pool_state()
    assert st["private_pools"] == 1 and st["private_pool_in_use_bytes"] == 8 * MiB, st
    # allocated: the live blocks (d2, and x in the pool), not the pool's free memory
    assert gmlake_torch.stats()["allocated_bytes.all.current"] == 16 * MiB, gmlake_torch.stats()["allocated_bytes.all.current"]
    fill(t, 8 * MiB, 5)  # still mapped (a crash here fails the case)
    expect_intact(x, 8 * MiB, 2, "graph 1's output")
    # cudagraph trees' check: the pool's live blocks are exactly graph 1's output
    live = lambda p: native.lib.gmlake_pool_live(7, 0, p)  # noqa: E731
    assert (live(None), live(x), live(t), live(d2)) == (1, 1, 0, 0), (live(None), live(x), live(t), live(d2))
    g2 = native.pool_begin((7, 0))  # graph 2 shares the pool (pool=graph1.pool())
    assert native.pool_use_count((7, 0)) == 2, native.pool_use_count((7, 0))
    t2 = checked_alloc(native, 8 * MiB, 6, g2, capturing=True)
    assert t2 == t, f"the shared pool did not reuse its freed memory: 0x{t2:x}, freed 0x{t:x}"
    native.free(t2, 8 * MiB)
    native.pool_end(g2)
    assert native.pool_release((7, 0)) == 0 and native.pool_use_count((7, 0)) == 1, "graph 1's reset"
    assert native.pool_release((7, 0)) == 0, "graph 2's reset gave memory back with graph 1's output live"
    assert pool_state()["private_pools"] == 1
    expect_intact(x, 8 * MiB, 2, "graph 1's output")
    native.free(x, 8 * MiB)  # the last block: the memory goes back
    st = pool_state()
    assert st == {"private_pools": 0, "private_pool_reserved_bytes": 0, "private_pool_in_use_bytes": 0}, st
    assert native.pool_use_count((7, 0)) == 0
    native.free(d2, 8 * MiB)
    native.empty_cache()
    s = gmlake_torch.stats()
    assert s["reserved_bytes.all.current"] == base_reserved and s["allocated_bytes.all.current"] == 0, \
        f"after the release and empty_cache: reserved {s['reserved_bytes.all.current']} (was {base_reserved}), allocated {s['allocated_bytes.all.current']}"
    returned = s["private_pool_calls"]["bytesReturned"]
    close_clean()
    print(json.dumps({"case": f"pools:{policy}", "pool_bytes_returned": returned, "calls": s["private_pool_calls"]}))


@as_case
def pool_capture_frees():
    native = gmlake_torch.start("vms", driver="host", capacity_bytes=256 * MiB)
    warm = checked_alloc(native, 24 * MiB, 1)  # warm-up: the rise a capture begun now is expected to need
    native.free(warm, 24 * MiB)
    outside = checked_alloc(native, 4 * MiB, 2)  # a tensor of the default pool, freed during the capture
    g = native.pool_begin((1, 5))
    calls = gmlake_torch.stats()["driver_total_calls"]
    a = checked_alloc(native, 6 * MiB, 3, g, capturing=True)
    native.free(a, 6 * MiB)
    native.free(outside, 4 * MiB)
    b = checked_alloc(native, 6 * MiB, 4, g, capturing=True)
    assert b == a, f"a block freed during the capture was not reused in it: 0x{b:x}, freed 0x{a:x}"
    c = checked_alloc(native, 4 * MiB, 5, g, capturing=True)
    assert c != outside, "the default pool's block freed during the capture served the capture"
    s = gmlake_torch.stats()
    assert s["capture_deferred_frees"] == 1, f"the default block's free should wait for the capture's end: {s['capture_deferred_frees']}"
    assert s["driver_total_calls"] == calls, f"{s['driver_total_calls'] - calls} driver calls during the capture"
    native.pool_end(g)
    assert gmlake_torch.stats()["capture_deferred_frees"] == 0, "the held free was not made after the capture"
    for p, n, i in ((b, 6 * MiB, 4), (c, 4 * MiB, 5)):
        expect_intact(p, n, i, "a captured block")
        native.free(p, n)
    assert native.pool_release((1, 5)) > 0, "the released pool gave nothing back"
    close_clean()
    print(json.dumps({"case": "pool-capture-frees", "driver_calls_during_capture": 0}))


@as_case
def pool_capture_fails():
    native = gmlake_torch.start("vms", driver="host", capacity_bytes=256 * MiB, check_invariants=64)
    warm = checked_alloc(native, 16 * MiB, 1)
    native.free(warm, 16 * MiB)
    # 1: the capture raises half-way; the graph is reset without capture_end (releasePool only)
    g = native.pool_begin((3, 0))
    a = checked_alloc(native, 5 * MiB, 2, g, capturing=True)
    assert native.pool_release((3, 0)) == 0, "memory given back with a block live"
    native.free(a, 5 * MiB)  # the tensor dies with the exception's frame
    assert pool_state()["private_pools"] == 0, pool_state()
    # the same id again (a new capture) opens a new window: the old one was closed
    g = native.pool_begin((3, 0))
    b = checked_alloc(native, 5 * MiB, 3, g, capturing=True)
    # 2: ended without completing (cudaStreamEndCapture failed after endAllocateToPool), then reset
    native.pool_end(g)
    native.pool_release((3, 0))
    expect_intact(b, 5 * MiB, 3, "a block of the failed capture")
    native.free(b, 5 * MiB)
    st = pool_state()
    assert st["private_pools"] == 0 and st["private_pool_reserved_bytes"] == 0, st
    def refused_second_window(pool, why):
        try:
            native.pool_begin(pool)
        except gmlake_torch.GmlakeError as e:
            assert f"already allocating to pool ({pool[0]}, {pool[1]})" in str(e), str(e)
            return
        raise AssertionError(why)

    # a window already open on a pool is refused, as PyTorch's allocator refuses it
    g = native.pool_begin((4, 0))
    refused_second_window((4, 0), "a second window on an open pool was accepted")
    native.pool_end(g)
    native.pool_release((4, 0))
    native.pool_release((4, 0))  # one release too many: nothing happens
    # graph A's reset while graph B captures into the same pool: B's window stays open
    native.pool_end(native.pool_begin((12, 0)))
    gb = native.pool_begin((12, 0))
    native.pool_release((12, 0))
    refused_second_window((12, 0), "graph A's release closed graph B's window")
    native.pool_end(gb)
    native.pool_release((12, 0))
    assert pool_state()["private_pools"] == 0, pool_state()
    close_clean()
    print(json.dumps({"case": "pool-capture-fails"}))


@as_case
def pool_capture_grows():
    native = gmlake_torch.start("vms", driver="host", capacity_bytes=256 * MiB)
    reserve = int(os.environ.get("GMLAKE_POOL_RESERVE_BYTES", "0"))
    g = native.pool_begin((9, 0))  # nothing warmed up: the pool takes nothing ahead
    st, a = native.pool_alloc(16 * MiB, g, True)
    if reserve:
        assert st == 0, f"GMLAKE_POOL_RESERVE_BYTES={reserve}: the capture was refused: {native.error()}"
        native.free(a, 16 * MiB)
        native.pool_end(g)
        native.pool_release((9, 0))
        close_clean()
        print(json.dumps({"case": "pool-reserve-env", "reserve": reserve}))
        return None
    # nothing taken ahead: the pool grows during the capture, by mapping memory only
    assert st == 0 and a != 0, f"the capture's allocation was refused: ({st}) {native.error()}"
    native.free(a, 16 * MiB)
    # more than the budget: out of memory (PyTorch's OutOfMemoryError), said in one line, and served again after
    st, a = native.pool_alloc(512 * MiB, g, True)
    msg = native.error()
    assert st == -1 and a == 0, f"expected out of memory (-1) and no address, got ({st}, 0x{a:x})"
    for says in ("CUDA out of memory", "during CUDA-graph capture", "never by giving any back"):
        assert says in msg, f"the error does not say {says!r}: {msg}"
    assert "\n" not in msg
    a = checked_alloc(native, 16 * MiB, 3, g, capturing=True)
    native.free(a, 16 * MiB)
    native.pool_end(g)
    # warm-up in the pool (use_mem_pool, or cudagraph trees' warm-up): no capture, the pool grows
    g = native.pool_begin((9, 0))
    w = checked_alloc(native, 16 * MiB, 1, g)
    native.free(w, 16 * MiB)
    native.pool_end(g)
    g = native.pool_begin((9, 0))
    a = checked_alloc(native, 16 * MiB, 2, g, capturing=True)
    native.free(a, 16 * MiB)
    native.pool_end(g)
    for _ in range(3):
        native.pool_release((9, 0))
    # a fresh pool after a warm-up outside it (torch.cuda.graph's usual pattern): the rise is taken ahead
    warm = [checked_alloc(native, 8 * MiB, 10 + i) for i in range(3)]
    for p in warm:
        native.free(p, 8 * MiB)
    g = native.pool_begin((10, 0))
    got = [checked_alloc(native, 8 * MiB, 20 + i, g, capturing=True) for i in range(3)]
    for p in got:
        native.free(p, 8 * MiB)
    native.pool_end(g)
    native.pool_release((10, 0))
    s = gmlake_torch.stats()
    assert s["private_pool_calls"]["captureGrows"] >= 2, s["private_pool_calls"]
    close_clean()
    print(json.dumps({"case": "pool-capture-grows", "message": msg}))


@as_case
def pool_checkpoint():
    """cudagraph trees' pool checkpoints through the C ABI, as our CUDAAllocator makes them."""
    native = gmlake_torch.start("vms", driver="host", capacity_bytes=256 * MiB, check_invariants=64)
    S, pool = 0x5000, (20, 0)
    live = lambda p: native.lib.gmlake_pool_live(pool[0], pool[1], p)  # noqa: E731
    # a recording: x, y, z live at its end (its outputs and what its path keeps), then its checkpoint
    g = native.pool_begin(pool)
    x = checked_alloc(native, 4 * MiB, 1, g, capturing=True, stream=S)
    y = checked_alloc(native, 2 * MiB - 1000, 2, g, capturing=True, stream=S)
    z = checked_alloc(native, 4 * MiB, 3, g, capturing=True, stream=S)
    native.pool_end(g)
    ckpt = native.pool_checkpoint(pool)
    # replays leave the books as they were; then y dies and a warm-up in the pool (no capture)
    # takes u (in y's place: freed and allocated by the restore both, as PyTorch's may be), w, v
    native.free(y, 2 * MiB - 1000, S)
    g = native.pool_begin(pool)
    u = checked_alloc(native, MiB, 4, g, stream=S)
    w = checked_alloc(native, 3 * MiB, 4, g, stream=S)
    v = checked_alloc(native, 8 * MiB, 5, g)
    assert u == y, "best fit: u in y's place"
    native.pool_end(g)
    native.pool_release(pool)
    before = gmlake_torch.stats()
    calls, taken = before["driver_total_calls"], before["private_pool_calls"]["segmentsTaken"]
    freed, allocated = native.pool_restore(ckpt)
    assert sorted(freed) == sorted([x, z, u, w, v]), ([hex(a) for a in freed], hex(x), hex(z), hex(w), hex(v))
    assert allocated == [(x, 4 * MiB, S), (y, 2 * MiB - 1000, S), (z, 4 * MiB, S)], allocated
    assert gmlake_torch.stats()["driver_total_calls"] == calls, "the restore called the driver"
    assert (live(None), live(x), live(y), live(z), live(w), live(v)) == (3, 1, 1, 1, 0, 0), "live blocks after the restore"
    expect_intact(x, 4 * MiB, 1, "a block live through the restore")  # what a replay wrote stays
    # a recording after the restore: served from the pool's free memory (w's and v's), never over x, y or z
    g = native.pool_begin(pool)
    fresh = [checked_alloc(native, n, 10 + i, g, capturing=True, stream=S) for i, n in enumerate((MiB, 2 * MiB, 8 * MiB))]
    native.pool_end(g)
    spans = sorted([(x, 4 * MiB), (y, 2 * MiB - 1000), (z, 4 * MiB)] + list(zip(fresh, (MiB, 2 * MiB, 8 * MiB))))
    for (a, n), (b, _) in zip(spans, spans[1:]):
        assert a + n <= b, f"0x{a:x}+{n} overlaps 0x{b:x}"
    assert gmlake_torch.stats()["private_pool_calls"]["segmentsTaken"] == taken, "the pool grew: the restore lost free memory"
    for a, n, i in ((x, 4 * MiB, 1), (z, 4 * MiB, 3)):
        expect_intact(a, n, i, "a restored block")
    # a free of a block the restore freed is no block's (said on stderr), a restored one frees as any
    _, said = with_stderr(lambda: (native.free(w, 3 * MiB, S), gmlake_torch.stats()))
    assert "did not hand out" in said, said
    for a, n in [(x, 4 * MiB), (y, 2 * MiB - 1000), (z, 4 * MiB)] + list(zip(fresh, (MiB, 2 * MiB, 8 * MiB))):
        native.free(a, n, S)
    assert live(None) == 0
    native.pool_release(pool)  # the recording's graph
    # the last use released, nothing live: the pool's memory goes back, and a restore is refused
    native.pool_release(pool)
    assert pool_state()["private_pools"] == 0, pool_state()
    try:
        native.pool_restore(ckpt)
        raise AssertionError("a restore after the pool's memory went back was accepted")
    except gmlake_torch.GmlakeError as e:
        assert f"pool (20, 0) of checkpoint #{ckpt} is gone" in str(e), str(e)
    assert (native.pool_drop_checkpoint(ckpt), native.pool_drop_checkpoint(ckpt)) == (1, 0)
    s = gmlake_torch.stats()
    assert s["private_pool_calls"]["checkpoints"] == 1 and s["private_pool_calls"]["restores"] == 1 and s["private_pool_checkpoints"] == 0, s
    close_clean()
    print(json.dumps({"case": "pool-checkpoint", "freed": len(freed), "allocated": len(allocated)}))


def takeback(threading_design, pairs=3000):
    """GMLAKE_TAKEBACK=1 through the C ABI (gmlake_try_alloc, gmlake_free): an alloc right after
    the free of a block of its size and stream takes that free back without the engine; the
    engine's books stay exact."""
    from gmlake_torch.memory_api import torch_stats

    native = gmlake_torch.start("vms", driver="host", threading=threading_design, check_invariants=256)
    keep = {checked_alloc(native, n, 100 + i): n for i, n in enumerate((512, 3 * MiB, 12 * MiB + 4096))}  # live throughout
    before = gmlake_torch.stats()
    assert before["queue_takeback"] is True and before["num_queue_takebacks"] == 0, before["queue_takeback"]
    made = len(keep)
    seen = set()
    for i in range(pairs):  # torch.empty(n) then del, again and again
        a = checked_alloc(native, MiB, i + 1)
        seen.add(a)
        expect_intact(a, MiB, i + 1, "a block taken back")
        native.free(a, MiB)
        made += 1
    s = gmlake_torch.stats()
    n = s["num_queue_takebacks"]
    # with a Locker per call nothing runs between a free and the next alloc; one JS thread may hand a free over first (GMLAKE_DRAIN_US)
    expected = pairs - 1 if threading_design == "locker" else None
    assert (n == expected) if expected is not None else 0 < n < pairs, f"{n} of {pairs} pairs taken back ({threading_design})"
    assert s["queue_takeback_bytes"] == n * MiB and s["calls"]["allocs"] + n == made, (s["queue_takeback_bytes"], s["calls"], made)
    if threading_design == "locker":
        assert len(seen) == 1, f"the hot loop got {len(seen)} addresses: not the block just freed"
    # never another size, stream or a block used on another stream
    b = checked_alloc(native, 2 * MiB, 7)
    native.free(b, 2 * MiB)
    other = [checked_alloc(native, 2 * MiB + 512, 8)]  # another size
    native.free(other.pop(), 2 * MiB + 512)
    c = checked_alloc(native, 4 * MiB, 9, stream=STREAMS[0])
    native.free(c, 4 * MiB, STREAMS[0])
    other.append(checked_alloc(native, 4 * MiB, 10, stream=STREAMS[1]))  # another stream
    r = checked_alloc(native, 6 * MiB, 11)
    native.record_stream(r, STREAMS[1])
    native.free(r, 6 * MiB)
    other.append(checked_alloc(native, 6 * MiB, 12))  # used on another stream: its free waits on events
    made += 6
    s2 = gmlake_torch.stats()
    assert s2["num_queue_takebacks"] == n, f"taken back across size, stream or record_stream: {s2['num_queue_takebacks'] - n}"
    native.free(other[0], 4 * MiB, STREAMS[1])
    native.free(other[1], 6 * MiB)
    # the books: the blocks kept, exactly, through empty_cache and stats (the queue handed over first)
    native.empty_cache()
    s3 = gmlake_torch.stats()
    want = sum(keep.values())
    assert s3["live_blocks"] == len(keep) and s3["requested_bytes.all.current"] == want, (s3["live_blocks"], s3["requested_bytes.all.current"], want)
    assert s3["allocated_bytes.all.current"] == before["allocated_bytes.all.current"], (s3["allocated_bytes.all.current"], before["allocated_bytes.all.current"])
    # the hot loop's peak: one 1 MiB block over the blocks kept, as without the take-back
    assert s["allocated_bytes.all.peak"] == before["allocated_bytes.all.current"] + MiB, (s["allocated_bytes.all.peak"], before["allocated_bytes.all.current"])
    t = torch_stats(s3)  # memory_stats(): every allocation counted, the take-backs too
    assert (t["allocation.all.allocated"], t["allocation.all.freed"], t["allocation.all.current"]) == (made, made - len(keep), len(keep)), \
        (t["allocation.all.allocated"], t["allocation.all.freed"], made)
    for a, size in keep.items():
        expect_intact(a, size, 100 + list(keep).index(a), "a block kept")
        native.free(a, size)
    close_clean()
    print(json.dumps({"case": f"takeback:{threading_design}", "pairs": pairs, "taken_back": n, "engine_allocs": s3["calls"]["allocs"]}))


def check_program(name, *args):
    """A C++ check of build/bin: exit 0, or what it said failed."""
    exe = os.path.join(HERE, "..", "build", "bin", name)
    if not os.path.exists(exe):
        return f"{exe} missing (build first)"
    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)
    print(r.stdout.strip())
    return None if r.returncode == 0 else f"{name} exited {r.returncode}: {r.stdout.strip()} {r.stderr.strip()}"


def throw_check():
    return check_program("throw_check", gmlake_torch.library_path())


def bench_calls():
    """libgmlake_bench_calls.so beside the library (bench/bench_calls.cc): the bench-only calls
    into the engine the library's gmlake_start loaded (gmlake_ping, gmlake_bench_js_pairs)."""
    lib = ctypes.CDLL(os.path.join(os.path.dirname(gmlake_torch.library_path()), "libgmlake_bench_calls.so"))
    lib.gmlake_ping.argtypes = [ctypes.c_double]
    lib.gmlake_ping.restype = ctypes.c_double
    return lib


def snapshot_paths():
    """snapshot(path) as the CLI writes outputs: a directory, a dangling parent or a socket is
    refused before anything is written; a device or FIFO is written in place (a full device is
    an error), a symbolic link's target is written and the link stays; a regular file is
    replaced through a temporary file beside it, and no temporary file is ever left."""
    import stat
    import pickle

    native = gmlake_torch.start("vms", driver="host", record=True)
    for n in (MiB, 3 * MiB, 4096):
        st, a = native.try_alloc(n)
        if st != 0:
            return f"alloc failed: {native.error()}"
        native.free(a, n)

    def refused(path, says):
        try:
            gmlake_torch.snapshot(path)
        except gmlake_torch.GmlakeError as e:
            return None if says in str(e) else f"snapshot({path!r}) refused, but not saying {says!r}: {e}"
        return f"snapshot({path!r}) succeeded, expected an error saying {says!r}"

    def is_pickle(data):
        try:
            return "segments" in pickle.loads(data)
        except Exception:  # noqa: BLE001 - any undecodable snapshot is a failure
            return False

    with tempfile.TemporaryDirectory() as top:
        d = os.path.join(top, "out")
        os.mkdir(d)
        # a directory, as snapshot("/tmp"): refused, and nothing beside it (no out.tmp-PID)
        for path in (d, d + "/"):
            err = refused(path, "directory")
            if err:
                return err
        link_dir = os.path.join(d, "to-dir")
        os.symlink(top, link_dir)
        err = refused(link_dir, "is a directory") or refused(os.path.join(d, "none", "x.pickle"), "does not exist")
        if err:
            return err
        # a FIFO: written in place for its reader, and still a FIFO
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo)
        err = refused(fifo, "no reader")
        if err:
            return err
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
        reader.start()
        probe = None
        for _ in range(500):  # until the reader has it open: a FIFO with no reader is refused
            try:
                probe = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError:
                time.sleep(0.01)
        # the probe's write end stays open until the snapshot is written: closed sooner, the
        # reader would see the end of the FIFO (no writer left) and go before the snapshot came
        try:
            gmlake_torch.snapshot(fifo)
        finally:
            if probe is not None:
                os.close(probe)
            reader.join(30)
        if not stat.S_ISFIFO(os.lstat(fifo).st_mode) or not got or not is_pickle(got[0]):
            return f"a FIFO: {stat.filemode(os.lstat(fifo).st_mode)}, the reader got {len(got[0]) if got else 0} bytes, not a snapshot"
        # a symbolic link to a file: the file is written, the link stays
        target = os.path.join(top, "target.pickle")
        with open(target, "wb") as f:
            f.write(b"old")
        link = os.path.join(d, "link.pickle")
        os.symlink(target, link)
        gmlake_torch.snapshot(link)
        with open(target, "rb") as f:
            data = f.read()
        if not os.path.islink(link) or not is_pickle(data):
            return f"a link: still a link {os.path.islink(link)}, its target a snapshot {is_pickle(data)}"
        # a regular file: replaced; a dead writer's temporary files beside it removed, a live one's kept
        dead = subprocess.Popen(["true"])
        dead.wait()
        stale = [f".live.pickle.gmlake-{gmlake_torch._HOST_TAG}-{dead.pid}-1.snapshot", f".live.pickle.gmlake-{gmlake_torch._HOST_TAG}-{dead.pid}-2.snapshot.gz.tmp-{dead.pid}"]
        alive = f".live.pickle.gmlake-{gmlake_torch._HOST_TAG}-{os.getppid()}-1.snapshot"
        for n in stale + [alive]:
            open(os.path.join(d, n), "wb").close()
        plain = os.path.join(d, "live.pickle")
        with open(plain, "wb") as f:
            f.write(b"old")
        gmlake_torch.snapshot(plain)
        with open(plain, "rb") as f:
            if not is_pickle(f.read()):
                return "an existing regular file was not replaced by the snapshot"
        if any(os.path.exists(os.path.join(d, n)) for n in stale) or not os.path.exists(os.path.join(d, alive)):
            return f"stale temporary files: {sorted(n for n in os.listdir(d) if n.startswith('.'))}"
        os.unlink(os.path.join(d, alive))
        # devices (root makes its own nodes here: never the machine's /dev/null or /dev/full)
        if os.geteuid() == 0:
            null, full = os.path.join(d, "null"), os.path.join(d, "full")
            os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
            gmlake_torch.snapshot(null)
            err = refused(full, "No space left on device")
            if err:
                return err
            for p in (null, full):
                if not stat.S_ISCHR(os.lstat(p).st_mode):
                    return f"the device {os.path.basename(p)} was replaced: {stat.filemode(os.lstat(p).st_mode)}"
        # a socket: refused
        import socket

        sock_path = os.path.join(d, "sock")
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(sock_path)
        err = refused(sock_path, "socket")
        sock.close()
        if err:
            return err
        # a folder with no room for the temporary file: an error, and nothing left
        ro = os.path.join(d, "ro")
        os.mkdir(ro, 0o500)
        if os.geteuid() != 0:
            err = refused(os.path.join(ro, "x.pickle"), "Permission denied")
            if err:
                return err
        left = sorted(n for n in os.listdir(d) if n not in ("to-dir", "fifo", "link.pickle", "live.pickle", "null", "full", "sock", "ro"))
        left += sorted(n for n in os.listdir(top) if n not in ("out", "target.pickle"))
        if left:
            return f"temporary files left behind: {left}"
    gmlake_torch.close()
    print(json.dumps({"case": "snapshot-paths", "root": os.geteuid() == 0}))
    return None


FORKED = "this process was forked after the allocator started"


def fork_child(threading_design):
    """os.fork() after start: the child has the engine's memory but none of its threads (the
    JS thread, libuv's and V8's). Every call there fails with an error that says so (a Locker
    crashed, a post to the missing JS thread hung), a free is dropped, and the child's normal
    exit is exit 0 (libuv's destructor joined the parent's threads: SIGSEGV). The parent goes on."""
    native = gmlake_torch.start("vms", driver="host", threading=threading_design, record=True)
    st, a = native.try_alloc(MiB)
    if st != 0:
        return f"alloc failed: {native.error()}"
    fill(a, MiB, 1)
    bench = bench_calls()  # loaded before the fork, as a benchmark would be
    if bench.gmlake_ping(1.0) != 1.0:
        return f"ping in the parent: {bench.gmlake_ping(1.0)}, expected 1.0"

    def child(calls):
        """Runs calls() in a forked child; (its exit status or signal, what it said)."""
        r, w = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                said = calls()
            except BaseException as e:  # noqa: BLE001 - the child reports whatever happened
                said = {"raised": f"{type(e).__name__}: {e}"}
            os.write(w, json.dumps(said).encode())
            os.close(w)
            sys.exit(0)  # a normal exit: atexit handlers, static destructors
        os.close(w)
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(r)
                return "hung (killed after 60 s)", None
            time.sleep(0.05)
        with os.fdopen(r, "rb") as f:
            out = f.read()
        how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        return how, (json.loads(out) if out else None)

    how, _ = child(lambda: {})
    if how != "exit 0":
        return f"a child that only exits: {how}"

    def refuse_all():
        out = {}
        st, b = native.try_alloc(MiB)
        out["alloc"] = [st, b, native.error()]
        native.free(a, MiB)  # the parent's block: dropped here
        native.empty_cache()
        for name, call in (("stats", gmlake_torch.stats), ("snapshot", lambda: gmlake_torch.snapshot(os.path.join(spare, "child.pickle"))),
                           ("start", lambda: gmlake_torch.start("vms", driver="host", threading=threading_design, record=True)),
                           ("budget", lambda: gmlake_torch.set_capacity_bytes(64 * MiB)), ("close", gmlake_torch.close)):
            try:
                call()
                out[name] = "ok"
            except gmlake_torch.GmlakeError as e:
                out[name] = str(e)
        out["ping"] = bench.gmlake_ping(1.0)
        return out

    spare = tempfile.mkdtemp()  # not a with block: the child's exit would leave it and remove the folder
    how, said = child(refuse_all)
    wrote = os.listdir(spare)
    if wrote:
        return f"snapshot() in the child wrote {wrote}"
    os.rmdir(spare)
    if how != "exit 0":
        return f"a child that calls the allocator: {how} ({said})"
    st, b, msg = said["alloc"]
    if st != -2 or b != 0 or FORKED not in msg:
        return f"an alloc in the child: ({st}, {b:#x}) {msg!r}, expected an error saying {FORKED!r}"
    for name in ("stats", "start", "budget", "close"):
        if FORKED not in said[name]:
            return f"{name}() in the child: {said[name]!r}, expected an error saying {FORKED!r}"
    if said["snapshot"] == "ok" or said["ping"] >= 0:
        return f"snapshot() or ping in the child worked: {said['snapshot']!r}, {said['ping']}"
    # the parent: its block intact (the child's free was dropped), and it goes on
    if verify(a, MiB, 1) != -1:
        return "the parent's block changed"
    native.free(a, MiB)
    st, b = native.try_alloc(2 * MiB)
    if st != 0:
        return f"the parent cannot allocate after the fork: {native.error()}"
    native.free(b, 2 * MiB)
    s = gmlake_torch.stats()
    if s["live_blocks"] != 0 or s["calls"]["frees"] < 2:
        return f"the parent's books after the fork: {s['live_blocks']} live, {s['calls']['frees']} frees"
    leaks = gmlake_torch.close()["leaks"]
    if leaks != {"reservations": 0, "mappings": 0, "liveBytes": 0, "events": 0}:
        return f"leaked {leaks}"
    print(json.dumps({"case": f"fork-child:{threading_design}", "child_alloc": msg}))
    return None


def restart():
    """start() once per process: again with the same settings is the same engine; with other
    settings (another policy, knobs, threading) it is refused naming them and the first runs
    on; after close() it is refused (Node starts once per process), never an engine that
    fails every allocation."""
    first = gmlake_torch.start("vms", driver="host", threading="locker")
    if gmlake_torch.start("vms", driver="host", threading="locker") is not first:
        return "the same settings again did not return the running engine"
    for kw, says in ((dict(policy="caching"), "policy"), (dict(policy="vms", maxHandleBytes=33554432), "knobs"),
                     (dict(policy="vms", threading="thread"), "threading"), (dict(policy="vms", record=True), "record")):
        kw.setdefault("threading", "locker")
        try:
            gmlake_torch.start(driver="host", **kw)
        except gmlake_torch.GmlakeError as e:
            if "already started" not in str(e) or says not in str(e):
                return f"start({kw}) refused without saying 'already started' and {says!r}: {e}"
            continue
        return f"a second start({kw}) with other settings returned OK (policy now {gmlake_torch.stats()['policy']})"
    if gmlake_torch.stats()["policy"] != "vms":
        return f"the first engine is not the one running: {gmlake_torch.stats()['policy']}"
    st, a = first.try_alloc(MiB)
    if st != 0:
        return f"alloc after the refused starts: {first.error()}"
    first.free(a, MiB)
    gmlake_torch.close()
    try:
        gmlake_torch.start("vms", driver="host", threading="locker")
    except gmlake_torch.GmlakeError as e:
        if "after close()" not in str(e):
            return f"start() after close() refused without saying 'after close()': {e}"
        print(json.dumps({"case": "restart", "after_close": str(e)}))
        return None
    return f"start() after close() returned OK; an alloc then: {first.try_alloc(MiB)[0]} {first.error()!r}"


CASES = {
    "enable": enable_with_stub_torch,
    "throw": throw_check,
    "foresight": lambda: check_program("foresight_test"),
    "free-queue": lambda: check_program("free_queue_test"),
    "drain-tuner": lambda: check_program("drain_tuner_test"),
    "takeback:locker": lambda: takeback("locker"),
    "takeback:thread": lambda: takeback("thread"),
    "takeback-pool-window": lambda: check_program("takeback_check", gmlake_torch.library_path()),
    "takeback-fuzz": lambda: hostile_mix(takeback=True),
    "takeback-fuzz:thread": lambda: hostile_mix(speculate=True, takeback=True),
    "bad-free:takeback": bad_free,
    "takeback-env": lambda: expect_start_error("GMLAKE_TAKEBACK takes 0 (off) or 1", policy="vms", driver="host"),
    "takeback-front-cache": lambda: expect_start_error("GMLAKE_TAKEBACK and the front cache (frontCacheEntries) do not go together",
                                                       policy="vms", driver="host", front_cache_entries=16),
    "takeback-record": lambda: expect_start_error("GMLAKE_TAKEBACK needs record off", policy="vms", driver="host", record=True),
    "oom": oom,
    "bad-free": bad_free,
    "call-times": call_times,
    "call-times:thread": call_times,
    "call-times:total": call_times_total,
    "bad-module": bad_module,
    "no-libnode": lambda: expect_start_error("libnode.so.108 not found", policy="caching", driver="host"),
    "bad-policy": lambda: expect_start_error("nope", policy="nope", driver="host"),
    "bad-knob": lambda: expect_start_error("has no knob colour", policy="vms", driver="host", colour="red"),
    "node-flags-not-flags": lambda: expect_start_error("GMLAKE_NODE_FLAGS takes flags only (each beginning with --), not 'prof'", policy="vms", driver="host"),
    "node-flags-unknown": lambda: expect_start_error("bad option: --no-such-flag", policy="vms", driver="host"),
    "node-flags": node_flags,
    "front-cache-hostile": front_cache_hostile,
    "front-cache-fuzz": hostile_mix,
    "speculate-fuzz": lambda: hostile_mix(speculate=True),
    "front-cache-bad-policy": lambda: expect_start_error("frontCacheEntries needs a policy with mallocCached; caching has none (vms has)",
                                                        policy="caching", driver="host", front_cache_entries=16),
    "front-cache-record": lambda: expect_start_error("frontCacheEntries needs record off", policy="vms", driver="host", record=True,
                                                    front_cache_entries=16),
    "front-cache-env": lambda: expect_start_error("GMLAKE_FRONT_CACHE_ENTRIES: expected a non-negative integer (0 = off), got 'lots'", policy="vms",
                                                 driver="host"),
    "front-cache-too-big": lambda: expect_start_error("frontCacheEntries takes a whole number from 0 to 256, not 300", policy="vms",
                                                     driver="host", front_cache_entries=300),
    "drain-same-decisions": drain_same_decisions,
    "threading-auto": threading_auto,
    "speculate-locker": lambda: expect_start_error("GMLAKE_SPECULATE needs GMLAKE_THREADING=thread", policy="vms", driver="host",
                                                   threading="locker"),
    "speculate-env": lambda: expect_start_error("GMLAKE_SPECULATE takes how many allocations the foresight looks back on, 0 (off) to 8, not 'all'",
                                                policy="vms", driver="host", threading="thread"),
    "speculate-bad-policy": speculate_blind_policy,
    "speculate-front-cache": lambda: expect_start_error("GMLAKE_SPECULATE and the front cache (frontCacheEntries) do not go together",
                                                        policy="vms", driver="host", threading="thread", front_cache_entries=16),
    "speculate-outside-policy": speculate_outside,
    "speculate-outside-policy-asked": speculate_outside,
    "budget:vms": lambda: budget("vms"),
    "budget:caching": lambda: budget("caching"),
    "budget:vms:thread": lambda: budget("vms"),
    "budget-env": budget_env,
    "budget-env-both": lambda: expect_start_error("GMLAKE_CAPACITY_BYTES and GMLAKE_MEMORY_FRACTION are the same memory budget: give one",
                                                  policy="vms", driver="cuda"),
    "budget-env-bad": lambda: expect_start_error("GMLAKE_MEMORY_FRACTION: expected a fraction of the device's memory from 0 to 1, got 'half'",
                                                 policy="vms", driver="host"),
    "drain-locker": lambda: expect_start_error("GMLAKE_DRAIN_US needs GMLAKE_THREADING=thread", policy="vms", driver="host"),
    "drain-env": lambda: expect_start_error("GMLAKE_DRAIN_US takes microseconds (a number >= 0), not 'soon' (or auto, or off)", policy="vms",
                                            driver="host", threading="thread"),
    "spin-env": lambda: expect_start_error("GMLAKE_SPIN_US takes microseconds (a number >= 0), not '-5'", policy="vms",
                                           driver="host", threading="thread"),
    "snapshot-paths": snapshot_paths,
    "fork-child:locker": lambda: fork_child("locker"),
    "fork-child:thread": lambda: fork_child("thread"),
    "restart": restart,
}
for _p in ("caching", "expandable", "gmlake", "vms"):
    CASES[f"pools:{_p}"] = (lambda p: (lambda: pools(p)))(_p)
CASES["pools:vms:thread"] = lambda: pools("vms")  # the pool calls through the one JS thread's mailbox
CASES["pool-capture-frees"] = pool_capture_frees
CASES["pool-capture-fails"] = pool_capture_fails
CASES["pool-capture-grows"] = pool_capture_grows
CASES["pool-reserve-env"] = pool_capture_grows
CASES["pool-checkpoint"] = pool_checkpoint
CASES["pool-reserve-env-bad"] = lambda: expect_start_error("GMLAKE_POOL_RESERVE_BYTES: expected a non-negative integer (bytes), got 'lots'",
                                                       policy="vms", driver="host")
for _p, _t in (("caching", "locker"), ("expandable", "thread"), ("gmlake", "locker"), ("vms", "thread"), ("vms", "locker")):
    CASES[f"stress:{_p}:{_t}"] = (lambda p, t: (lambda: stress(p, t)))(_p, _t)
CASES["stress:vms-one-stream-reuse:locker"] = lambda: stress("vms", "locker", knobs={"crossStream": "false"})
# a device so small that the two threads' blocks run out of memory again and again: every block
# still checked, every out-of-memory followed by served allocations (vms's pressure path)
for _t in ("locker", "thread"):
    CASES[f"stress:vms-tight:{_t}"] = (lambda t: (lambda: stress("vms", t, threads=2, capacity_bytes=96 * MiB)))(_t)
CASES["stress:expandable-tight:locker"] = lambda: stress("expandable", "locker", threads=2, capacity_bytes=96 * MiB)
for _t in ("locker", "thread"):
    CASES[f"stress:vms-front-cache:{_t}"] = (lambda t: (lambda: stress("vms", t, front_cache_entries=64, sizes="step")))(_t)
# one JS thread that leaves queued frees for the next call (GMLAKE_DRAIN_US=off), as before the drains
CASES["stress:vms-no-drain:thread"] = lambda: stress("vms", "thread")
# GMLAKE_SPECULATE=6: allocations that take the answer the JS thread worked out ahead, every block still checked
CASES["stress:vms-speculate:thread"] = lambda: stress("vms", "thread", sizes="layers")
# GMLAKE_AHEAD=4: allocations in bursts take answers worked out after the ones made ahead
CASES["stress:vms-ahead:thread"] = lambda: stress("vms", "thread", sizes="layers", bursts=True, threads=1)
CASES["stress:caching-ahead:thread"] = lambda: stress("caching", "thread", sizes="layers", bursts=True, threads=2)
# GMLAKE_TAKEBACK=1: a training step's sizes, so that allocations find queued frees of their size and stream
for _t in ("locker", "thread"):
    CASES[f"stress:vms-takeback:{_t}"] = (lambda t: (lambda: stress("vms", t, sizes="step")))(_t)
CASES["pools:vms:takeback"] = lambda: pools("vms")
CASES["pool-capture-frees:takeback"] = pool_capture_frees
ENV = {"no-libnode": {"GMLAKE_LIBNODE_DIR": "/nonexistent/libnode"}, "call-times": {"GMLAKE_TIME_CALLS": "1"},
       # one JS thread: "enter" is the hand-off (the post to the JS thread's pick-up)
       "call-times:thread": {"GMLAKE_TIME_CALLS": "1", "GMLAKE_THREADING": "thread"},
       "call-times:total": {"GMLAKE_TIME_CALLS": "total"},
       "front-cache-env": {"GMLAKE_FRONT_CACHE_ENTRIES": "lots"},
       "stress:vms-no-drain:thread": {"GMLAKE_DRAIN_US": "off"},
       "stress:vms-speculate:thread": {"GMLAKE_SPECULATE": "6"},
       "stress:vms-ahead:thread": {"GMLAKE_AHEAD": "4"}, "stress:caching-ahead:thread": {"GMLAKE_AHEAD": "4"},
       **{k: {"GMLAKE_TAKEBACK": "1"} for k in ("takeback:locker", "takeback:thread", "takeback-pool-window", "takeback-fuzz",
                                                "bad-free:takeback", "takeback-front-cache", "takeback-record",
                                                "stress:vms-takeback:locker", "stress:vms-takeback:thread", "pools:vms:takeback",
                                                "pool-capture-frees:takeback")},
       "takeback-env": {"GMLAKE_TAKEBACK": "yes"},
       # frees wait for the next call (no drain): queued when the next alloc comes, as with a Locker per call
       "takeback-fuzz:thread": {"GMLAKE_TAKEBACK": "1", "GMLAKE_DRAIN_US": "off"},
       "speculate-locker": {"GMLAKE_SPECULATE": "6"},
       "speculate-env": {"GMLAKE_SPECULATE": "all"},
       "speculate-bad-policy": {"GMLAKE_SPECULATE": "6"},
       "speculate-front-cache": {"GMLAKE_SPECULATE": "6"},
       "speculate-outside-policy-asked": {"GMLAKE_SPECULATE": "6"},
       "drain-locker": {"GMLAKE_DRAIN_US": "0"},
       "budget-env": {"GMLAKE_MEMORY_FRACTION": "0.25"},
       "pool-reserve-env": {"GMLAKE_POOL_RESERVE_BYTES": str(32 * MiB)},
       "pool-reserve-env-bad": {"GMLAKE_POOL_RESERVE_BYTES": "lots"},
       "pools:vms:thread": {"GMLAKE_THREADING": "thread"},
       "budget:vms:thread": {"GMLAKE_THREADING": "thread"},
       "budget-env-both": {"GMLAKE_MEMORY_FRACTION": "0.25", "GMLAKE_CAPACITY_BYTES": str(64 * MiB)},
       "budget-env-bad": {"GMLAKE_MEMORY_FRACTION": "half"},
       "drain-env": {"GMLAKE_DRAIN_US": "soon"},
       "spin-env": {"GMLAKE_SPIN_US": "-5"},
       "node-flags-not-flags": {"GMLAKE_NODE_FLAGS": "--max-semi-space-size=1 prof"},
       "node-flags-unknown": {"GMLAKE_NODE_FLAGS": "--no-such-flag"},
       "node-flags": {"GMLAKE_NODE_FLAGS": " --trace-gc\t--max-semi-space-size=1 --min-semi-space-size=1 "}}


def knobs_env_keyword_wins():
    """GMLAKE_KNOBS reaches the engine as text (stitch's parseKnobText reads it); a keyword wins over it."""
    native = gmlake_torch.start("vms", driver="host", threading="locker", maxHandleBytes=32 * MiB)
    st, addr = native.try_alloc(MiB)
    if st != 0:
        return f"an allocation failed ({st}): {native.error()}"
    native.free(addr, MiB)
    return None


# GMLAKE_KNOBS: a bad text or value is refused at start, in one line naming where it came from
CASES["knobs-env-bad"] = lambda: expect_start_error("GMLAKE_KNOBS: expected name=value, got 'colour'", policy="vms", driver="host")
CASES["knobs-env-bad-value"] = lambda: expect_start_error("vms.maxHandleBytes accepts a byte count", policy="vms", driver="host")
CASES["knobs-env-keyword-wins"] = knobs_env_keyword_wins
ENV.update({"knobs-env-bad": {"GMLAKE_KNOBS": "crossStream=false,colour"}, "knobs-env-bad-value": {"GMLAKE_KNOBS": "crossStream=false, maxHandleBytes=banana"},
            "knobs-env-keyword-wins": {"GMLAKE_KNOBS": "maxHandleBytes=banana,crossStream=false"}})


def run_one(name):
    fn = CASES.get(name)
    if fn is None:
        print(f"harness: unknown case {name}; one of: {', '.join(CASES)}", file=sys.stderr)
        return 2
    err = fn()
    if err:
        print(f"FAIL {name}: {err}", file=sys.stderr)
        return 1
    return 0


def main(argv):
    if len(argv) == 2 and argv[0] == "--one":
        return run_one(argv[1])
    if argv == ["--decisions"]:  # drain-same-decisions' child
        err = decisions()
        if err:
            print(f"FAIL decisions: {err}", file=sys.stderr)
        return 1 if err else 0
    names = argv or list(CASES)
    bad = [n for n in names if n not in CASES]
    if bad:
        print(f"harness: unknown case {', '.join(bad)}; one of: {', '.join(CASES)}", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        env = {k: v for k, v in os.environ.items()
               if k not in ("GMLAKE_TIME_CALLS", "GMLAKE_NODE_FLAGS", "GMLAKE_THREADING", "GMLAKE_FRONT_CACHE_ENTRIES",
                            "GMLAKE_DRAIN_US", "GMLAKE_SPIN_US", "GMLAKE_SPECULATE", "GMLAKE_MEMORY_FRACTION", "GMLAKE_CAPACITY_BYTES",
                            "GMLAKE_POOL_RESERVE_BYTES", "GMLAKE_TAKEBACK", "GMLAKE_AHEAD")}
        env.update(ENV.get(name, {}))
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, "--one", name], env=env, capture_output=True, text=True, timeout=600)
        status = "ok" if r.returncode == 0 else f"FAILED (exit {r.returncode})"
        print(f"{name}: {status} in {time.perf_counter() - t0:.1f} s")
        for line in (r.stdout + r.stderr).strip().splitlines():
            print(f"  {line}")
        if r.returncode != 0:
            failed.append(name)
    print(f"{len(names) - len(failed)}/{len(names)} cases passed" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
