/**
 * The engine as PyTorch's allocator: alloc(size, device, stream) and free(address, size,
 * stream) on raw addresses, one stitch Allocator on one driver, in PyTorch's process.
 *
 * Stream safety is the engine's (@gmlake/stitch's Allocator): a free goes back to the
 * policy at once (same-stream reuse is safe in stream order), a block served to another
 * stream (vms's cross-stream reuse, on by default) is waited for through an event, a block
 * used on other streams (record_stream) is freed once events recorded there complete, and
 * the device is synchronized once before the first unmap or free of an engine call. What
 * PyTorch's pluggable-allocator interface leaves to us, done here:
 * - addresses: PyTorch hands back raw pointers; the live block of each is kept by address.
 * - out of memory: after the engine's own retry (deferred frees waited for), the policy's
 *   caches are emptied and the request retried once; then it fails with PyTorch's wording
 *   and the allocator's numbers.
 * - statistics under torch.cuda.memory_stats()'s names, a memory-viz snapshot of the
 *   engine's own history, and a clean close that proves nothing leaked.
 */
import { gzipSync } from "node:zlib";

import { Allocator, CAPTURE_REFUSED, CaptureGuard, getPolicy, type Block, type Policy } from "@gmlake/stitch";
import { exportMemoryViz } from "@gmlake/trace";
import { createDriver, HostDriver, SimDriver, VmmError, type VmmDriver } from "@gmlake/vmm";

import { AddressTable } from "./address-table.js";
import { MemoryBudget } from "./budget.js";
import { BoundedHistory } from "./bounded-history.js";
import { coerceKnobs, parseKnobText } from "./knobs.js";
import {
  FRONT_CACHE_MAX_ENTRIES,
  QUEUE_DRAIN_WAIT_US,
  QUEUE_DRAINED_FREES,
  QUEUE_DRAINS,
  QUEUE_FRONT_CACHE_HIT_BYTES,
  QUEUE_FRONT_CACHE_HITS,
  QUEUE_FRONT_CACHE_PASSES,
  QUEUE_SPEC_CONTEXT,
  QUEUE_SPEC_HITS,
  QUEUE_SPEC_MISS_BEHIND,
  QUEUE_SPEC_MISS_NONE_AFTER_ANSWER,
  QUEUE_SPEC_MISS_NONE_AFTER_FREE,
  QUEUE_SPEC_MISS_NONE_DECLINED,
  QUEUE_SPEC_MISS_NONE_LATE,
  QUEUE_SPEC_MISS_NONE_THROTTLED,
  QUEUE_SPEC_MISS_NONE_UNFORESEEN,
  QUEUE_SPEC_MISS_NONE,
  QUEUE_SPEC_MISS_OTHER,
  QUEUE_SPECULATIONS,
  QUEUE_TAKEBACK_BYTES,
  QUEUE_TAKEBACK_ON,
  QUEUE_TAKEBACKS,
} from "./ops.js";
import { PoolError, PrivatePools, STATUS_CAPTURE } from "./private-pools.js";

export type LiveDriverName = "cuda" | "host" | "sim";

export interface LiveConfig {
  /** A registered policy (built-in, or registered by `policyModule`). */
  readonly policy: string;
  /** The policy's knobs; text values take the type of the knob's default. */
  readonly knobs?: Record<string, unknown>;
  /** GMLAKE_KNOBS's text as the Python module got it, unparsed (parseKnobText reads it); `knobs` win over it. */
  readonly knobText?: string;
  /** cuda (default: PyTorch's GPU, its primary context), host or sim (tests, no GPU). */
  readonly driver?: LiveDriverName;
  /** Device ordinal (cuda). */
  readonly device?: number;
  /** Physical bytes the engine may hold (host, sim: the device's size; cuda: the memory budget, changeable at run time: setCapacity). */
  readonly capacityBytes?: number;
  /**
   * The memory budget as a share of the device's memory (torch.cuda.set_per_process_memory_fraction's
   * meaning; changeable at run time: setMemoryFraction). On cuda not with capacityBytes: both are the budget.
   */
  readonly memoryFraction?: number;
  /** Keep the engine's event history for snapshot() (default false: it is half a call's cost and grows with every call). */
  readonly record?: boolean;
  /** The history's bound when recording: the last this many events are kept, the oldest dropped (PyTorch's max_entries; 0 = no bound; default 1,000,000). */
  readonly recordMaxEntries?: number;
  /** Invariant checks (see the stitch Allocator): false (default), true, or a period. */
  readonly checkInvariants?: boolean | number;
  /** An adaptor put over the driver (a DriverAdaptor: fault injection, call logs, events that lag in tests). */
  readonly adaptDriver?: (driver: VmmDriver) => VmmDriver;
  /**
   * The native front cache (README "Front cache"): the last this many freed blocks are held
   * in the library and handed straight back to an allocation of the same size on the same
   * stream, with no call into JS. 0 (default): off. Up to FRONT_CACHE_MAX_ENTRIES; needs a
   * policy with mallocCached (vms) and record off.
   */
  readonly frontCacheEntries?: number;
  /** The least a CUDA-graph capture's private pool holds free when its capture begins (bytes; default 0: what the work since the last pool window needed). */
  readonly poolReserveBytes?: number;
}

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
function fmtBytes(b: number): string {
  return b >= GiB ? `${(b / GiB).toFixed(2)} GiB` : `${(b / MiB).toFixed(2)} MiB`;
}

export class LiveAllocator {
  readonly allocator: Allocator;
  readonly driver: VmmDriver;
  readonly policy: Policy;
  /** Live blocks by address. */
  private readonly live = new AddressTable<Block>();
  private readonly base: VmmDriver;
  private closed = false;
  /** The message of the last failed call (read through the bridge's text op). */
  lastError = "";
  readonly counts = { allocs: 0, frees: 0, recordStreams: 0, emptyCaches: 0, oomRetries: 0, ooms: 0 };

  constructor(readonly config: LiveConfig) {
    this.policy = getPolicy(config.policy);
    const maxEntries = BoundedHistory.resolve(config.recordMaxEntries);
    const knobs = coerceKnobs(this.policy, { ...parseKnobText(config.knobText ?? "", "GMLAKE_KNOBS"), ...config.knobs });
    const name = config.driver ?? "cuda";
    // No environment write to skip vmm's child-process probe: it skips itself where libcuda is
    // loaded already (PyTorch's) or Node is embedded (process.execPath is not node).
    this.base =
      name === "host"
        ? new HostDriver({ capacityBytes: config.capacityBytes })
        : name === "sim"
          ? new SimDriver({ capacityBytes: config.capacityBytes })
          : createDriver("cuda", { ordinal: config.device ?? 0 });
    try {
      if (name === "cuda" && config.capacityBytes !== undefined && config.memoryFraction !== undefined) {
        throw new Error("capacityBytes and memoryFraction are the same memory budget: give one");
      }
      // Always there, at the device's size unless a budget is given, so that one can be set
      // while the job runs (host, sim: capacityBytes made the device that size already).
      this.budget = new MemoryBudget(this.base, name === "cuda" ? config.capacityBytes : undefined);
      if (config.memoryFraction !== undefined) this.budget.setFraction(config.memoryFraction);
    } catch (e) {
      this.base.close();
      throw e;
    }
    this.guard = new CaptureGuard(this.budget);
    this.driver = config.adaptDriver ? config.adaptDriver(this.guard) : this.guard;
    try {
      this.allocator = new Allocator(this.policy, this.driver, {
        options: knobs,
        device: config.device ?? 0,
        recorder: config.record === true ? undefined : null,
        checkInvariants: config.checkInvariants ?? false,
        // the pools (private-pools.ts) free on their keys only memory no graph replays into
        lendPoolMemory: true,
      });
    } catch (e) {
      this.base.close();
      throw e;
    }
    this.recording = this.allocator.recorder !== null;
    const reserve = config.poolReserveBytes ?? 0;
    if (!Number.isSafeInteger(reserve) || reserve < 0) throw new Error(`poolReserveBytes takes a byte count (an integer >= 0), not ${String(reserve)}`);
    // outside capture an out-of-memory may empty the caches and retry, as alloc does; during one
    // the guard lets only mapping calls through (no sync, no unmap: they would break the capture)
    const take = (n: number, key: number, capturing: boolean, held = false): Block | null => {
      if (held && !capturing) return this.allocator.tryMallocHeld(n, key);
      if (capturing) {
        this.guard.capturing = true;
        try {
          return this.allocator.tryMallocMapOnly(n, key);
        } catch (e) {
          if (e instanceof VmmError && e.code === CAPTURE_REFUSED) {
            throw new PoolError(
              STATUS_CAPTURE,
              `gmlake: an allocation of ${n} bytes during CUDA-graph capture would need the ${this.policy.name} policy to ` +
                `${e.call} (${e.message}); warm up in the pool first (capture again with pool=, or run the code under ` +
                `torch.cuda.use_mem_pool) or set GMLAKE_POOL_RESERVE_BYTES to what a capture needs`,
            );
          }
          throw e;
        } finally {
          this.guard.capturing = false;
        }
      }
      const b = this.allocator.tryMalloc(n, key);
      if (b !== null) return b;
      this.allocator.emptyCache();
      return this.allocator.tryMalloc(n, key);
    };
    this.pools = new PrivatePools({ take, give: (b) => this.allocator.free(b) }, reserve);
    this.history = this.allocator.recorder === null ? null : new BoundedHistory(this.allocator.recorder, maxEntries);
    try {
      this.frontCacheEntries = this.checkFrontCache(config.frontCacheEntries ?? 0);
    } catch (e) {
      this.allocator.close();
      this.base.close();
      throw e;
    }
  }

  /** The native front cache's size in blocks (0: off). */
  readonly frontCacheEntries: number;
  /** CUDA-graph and MemPool private pools (private-pools.ts). */
  readonly pools: PrivatePools;
  /** The most allocated bytes since the last pool window began or ended: what a capture begun now is expected to need is its rise over now. */
  private peakSinceMark = 0;
  /** The largest allocation since that mark (a capture's reserve is taken in pieces no smaller). */
  private largestSinceMark = 0;
  /** Frees of engine blocks that arrived while a capture was underway: made once none is (no engine call, so no driver call, during capture). */
  private readonly captureDeferred: Block[] = [];
  /** What a pool's growth during a CUDA-graph capture may call (set around those engine calls only). */
  private readonly guard: CaptureGuard;
  /** The memory budget the policy sees (capacityOf) and the driver calls meet. */
  readonly budget: MemoryBudget;

  /** A new memory budget in bytes, from the next allocation on (what is held past it stays). */
  setCapacity(bytes: number): void {
    this.budget.setBytes(bytes);
  }

  /** The budget as fraction x the device's memory (torch.cuda.set_per_process_memory_fraction); returns its bytes. */
  setMemoryFraction(fraction: number): number {
    return this.budget.setFraction(fraction);
  }
  /** The native free queue's header once attached (its slots: ops.ts QUEUE_*): read by stats(). */
  nativeCounts: Float64Array | null = null;

  private checkFrontCache(n: number): number {
    if (!Number.isInteger(n) || n < 0 || n > FRONT_CACHE_MAX_ENTRIES) {
      throw new Error(`frontCacheEntries takes a whole number from 0 to ${FRONT_CACHE_MAX_ENTRIES}, not ${String(n)}`);
    }
    if (n === 0) return 0;
    // The blocks it holds stay allocated in the engine's books: the policy must be able to say
    // when it would grow (mallocCached), so that it gets them back first.
    if (!this.allocator.servesCached) throw new Error(`frontCacheEntries needs a policy with mallocCached; ${this.policy.name} has none (vms has)`);
    // A snapshot replays every call: the cache's hits never reach the engine.
    if (this.recording) throw new Error("frontCacheEntries needs record off: the front cache's hits never reach the engine's history");
    return n;
  }

  /** The recorded history's bound (null without recording). */
  readonly history: BoundedHistory | null;

  /** The engine keeps its history (record); time stamps go only there: without one, no clock is read (a third of a call's cost). */
  readonly recording: boolean;
  private readonly timeOrigin = performance.timeOrigin;

  private stamp(): void {
    if (this.recording) this.allocator.ctx.nowUs = Math.round((this.timeOrigin + performance.now()) * 1000);
  }

  /** PyTorch's alloc: an address, or -1 when out of memory (lastError says so in PyTorch's words). */
  alloc(size: number, stream: number): number {
    this.stamp();
    this.counts.allocs++;
    let b = this.allocator.tryMalloc(size, stream);
    if (this.history !== null) this.history.afterCall();
    if (b === null) {
      // What PyTorch does before it gives up: free what is cached (the engine waits for the
      // deferred frees and synchronizes before it unmaps), retry.
      this.counts.oomRetries++;
      this.allocator.emptyCache();
      b = this.allocator.tryMalloc(size, stream);
      if (b === null) {
        this.counts.ooms++;
        this.lastError = this.oomMessage(size);
        return -1;
      }
    }
    this.live.set(b.addr, b);
    const allocated = this.allocator.stats.allocatedBytes;
    if (allocated > this.peakSinceMark) this.peakSinceMark = allocated;
    if (size > this.largestSinceMark) this.largestSinceMark = size;
    return b.addr;
  }

  /**
   * Allocations made ahead (GMLAKE_SPECULATE's answers after the first, native/free_queue.h):
   * the JS thread makes a foreseen allocation before it is asked for, so that it can say where
   * the one after it lands; a caller then takes it (takeAhead) or it is undone (undoAhead).
   * Each keeps what the books said before it, for the undo.
   */
  private readonly ahead: { addr: number; books: readonly number[] }[] = [];
  private readonly aheadCounts = { made: 0, undone: 0 };

  /**
   * Made ahead: alloc(size, stream) now, as a caller's would be made, where the policy said it
   * lands (peekCached said `expect`); false, with nothing changed, when it would not land there.
   */
  allocAhead(size: number, stream: number, expect: number): boolean {
    if (this.recording) throw new Error("allocAhead needs record off: an undone allocation would stay in the history");
    if (this.closed || this.pools.capturing > 0) return false;
    const st = this.allocator.stats;
    // what an undo puts back: the peaks and counts an allocation raises (the rest its free lowers again)
    const books = [st.peakAllocatedBytes, st.peakActiveBytes, st.peakRequestedBytes, this.counts.allocs, this.peakSinceMark, this.largestSinceMark];
    const reserved = st.peakReservedBytes;
    const b = this.allocator.tryMalloc(size, stream);
    if (b === null) return false;
    if (b.addr !== expect || st.peakReservedBytes !== reserved) {
      // the peek was wrong: undone at once (the caller that takes its answer finds the engine disagrees)
      this.allocator.free(b);
      [st.peakAllocatedBytes, st.peakActiveBytes, st.peakRequestedBytes] = books as [number, number, number];
      return false;
    }
    this.counts.allocs++;
    this.live.set(b.addr, b);
    const allocated = st.allocatedBytes;
    if (allocated > this.peakSinceMark) this.peakSinceMark = allocated;
    if (size > this.largestSinceMark) this.largestSinceMark = size;
    this.ahead.push({ addr: b.addr, books });
    this.aheadCounts.made++;
    return true;
  }

  /** A caller took the oldest allocation made ahead: true when it is at `address` (it is the caller's now). */
  takeAhead(address: number): boolean {
    if (this.ahead.length === 0 || this.ahead[0]!.addr !== address) return false;
    this.ahead.shift();
    return true;
  }

  /**
   * Every allocation made ahead and not taken, freed newest first, and the books as they were
   * before the first of them: the policy's state is then as if none had been made (checked over
   * real traces: test/ahead.test.ts).
   */
  undoAhead(): void {
    const a = this.ahead;
    if (a.length === 0) return;
    for (let i = a.length - 1; i >= 0; i--) {
      const b = this.live.take(a[i]!.addr)!;
      this.allocator.free(b);
    }
    const p = a[0]!.books;
    const st = this.allocator.stats;
    st.peakAllocatedBytes = p[0]!;
    st.peakActiveBytes = p[1]!;
    st.peakRequestedBytes = p[2]!;
    this.counts.allocs = p[3]!;
    this.peakSinceMark = p[4]!;
    this.largestSinceMark = p[5]!;
    this.aheadCounts.undone += a.length;
    a.length = 0;
  }

  private mark(): void {
    this.peakSinceMark = this.allocator.stats.allocatedBytes;
    this.largestSinceMark = 0;
  }

  /**
   * beginAllocateToPool (window) or createOrIncrefPool (MemPool): the pool's ordinal. A window
   * takes memory ahead for a capture: the rise of allocated bytes since the last pool window
   * (the warm-up PyTorch asks for before a capture), with a quarter more.
   */
  poolBegin(a: number, b: number, window: boolean): number {
    const expect = window ? Math.ceil(Math.max(0, this.peakSinceMark - this.allocator.stats.allocatedBytes) * 1.25) : 0;
    const ordinal = this.pools.begin(a, b, window, expect, this.largestSinceMark);
    this.mark();
    return ordinal;
  }

  /** An allocation to pool `ordinal` (its window open); throws a PoolError when refused. */
  poolAlloc(ordinal: number, size: number, capturing: boolean, stream = 0): number {
    this.counts.allocs++;
    // while a capture is underway an allocation outside it must not synchronize the device,
    // as taking a pool's free memory does (no stream names its kernels)
    if (capturing) this.allocator.ctx.lendPoolMemory = false;
    return this.pools.alloc(ordinal, size, capturing, stream);
  }

  /** endAllocateToPool; the frees held during a capture are made once no capture is underway. */
  poolEnd(ordinal: number): void {
    this.pools.end(ordinal);
    this.afterCapture();
    this.mark();
  }

  /** releasePool: the bytes the pool gave back to the engine now. */
  poolRelease(a: number, b: number): number {
    const n = this.pools.releasePool(a, b);
    this.afterCapture();
    return n;
  }

  private afterCapture(): void {
    if (this.pools.capturing > 0) return;
    this.allocator.ctx.lendPoolMemory = true;
    if (this.captureDeferred.length === 0) return;
    for (const b of this.captureDeferred.splice(0)) this.allocator.free(b);
  }

  /**
   * Where alloc(size, stream) would land now, when the policy serves it from this stream's
   * free memory (Allocator.peekCached); null otherwise. Changes nothing.
   */
  peek(size: number, stream: number): number | null {
    return this.closed ? null : this.allocator.peekCached(size, stream);
  }

  /**
   * An allocation from memory the policy holds (no driver call on memory): its address, or
   * null when the policy would have to grow (the front cache then gives its blocks back).
   */
  allocCached(size: number, stream: number): number | null {
    const b = this.allocator.tryMallocCached(size, stream);
    if (b === null) return null;
    this.counts.allocs++;
    this.live.set(b.addr, b);
    return b.addr;
  }

  private oomMessage(size: number): string {
    const st = this.allocator.stats;
    let device = "";
    try {
      const m = this.driver.memGetInfo();
      device = ` GPU ${this.config.device ?? 0} has a total capacity of ${fmtBytes(m.totalBytes)} of which ${fmtBytes(m.freeBytes)} is free.`;
      if (this.budget.capacityBytes < this.budget.deviceBytes) {
        device += ` The memory budget is ${fmtBytes(this.budget.capacityBytes)} of the device's ${fmtBytes(this.budget.deviceBytes)} (set_per_process_memory_fraction or capacity_bytes).`;
      }
    } catch {
      // the numbers below still say enough
    }
    return (
      `CUDA out of memory. Tried to allocate ${fmtBytes(size)}.${device} Of the allocated memory ${fmtBytes(st.allocatedBytes)} ` +
      `is allocated by the gmlake ${this.policy.name} allocator, and ${fmtBytes(Math.max(0, st.reservedBytes - st.allocatedBytes))} ` +
      `is reserved but unallocated (peak reserved ${fmtBytes(st.peakReservedBytes)}; caches were emptied and the request retried).`
    );
  }

  /** PyTorch's free (`stream` = the block's own). Throws on an address that is not live. */
  free(address: number): void {
    const b = this.live.take(address);
    if (b === undefined) {
      if (this.pools.free(address)) {
        this.counts.frees++;
        return;
      }
      throw new Error(`free of 0x${address.toString(16)}, which the allocator did not hand out (or freed already)`);
    }
    this.stamp();
    this.counts.frees++;
    if (this.pools.capturing > 0) {
      this.captureDeferred.push(b);
      return;
    }
    this.allocator.free(b);
    if (this.history !== null) this.history.afterCall();
  }

  /** The engine's live block at `address` (benches and tests look at its neighbours), or undefined. */
  blockAt(address: number): Block | undefined {
    return this.live.get(address);
  }

  /** record_stream(address, stream): the live block at `address` is used on `stream` too. */
  recordStream(address: number, stream: number): void {
    const b = this.live.get(address);
    if (b === undefined && this.pools.recordStream(address)) {
      this.counts.recordStreams++;
      return;
    }
    if (b === undefined) throw new Error(`record_stream of 0x${address.toString(16)}, which is not a live allocation`);
    this.counts.recordStreams++;
    this.allocator.recordStream(b, stream);
  }

  /** torch.cuda.empty_cache(): deferred frees waited for, caches released (after a device synchronization). */
  emptyCache(): void {
    this.stamp();
    this.counts.emptyCaches++;
    this.allocator.emptyCache();
    if (this.history !== null) this.history.afterCall();
  }

  /** The engine's statistics under torch.cuda.memory_stats()'s names, plus the engine's own. */
  stats(): Record<string, unknown> {
    const d = this.driver.stats();
    const torch = this.allocator.stats.toTorch();
    // what the pools hold outside their live blocks is reserved, not allocated, as PyTorch counts a private pool's cached blocks (the peaks still include it)
    const slack = this.pools.slackBytes();
    for (const k of ["allocated_bytes.all.current", "active_bytes.all.current", "requested_bytes.all.current"]) torch[k] = torch[k]! - slack;
    return {
      ...torch,
      // requests that failed (the engine also counts the first try of each retried one)
      num_ooms: this.counts.ooms,
      num_device_alloc: d.calls.memCreate + d.calls.memAlloc,
      num_device_free: d.calls.memRelease + d.calls.memFree,
      policy: this.policy.name,
      driver: this.base.name,
      // the memory budget in force (torch.cuda.set_per_process_memory_fraction, capacity_bytes; else the device's size) and the driver requests it refused
      capacity_bytes: this.budget.capacityBytes,
      device_bytes: this.budget.deviceBytes,
      num_budget_refusals: this.budget.rejected,
      live_blocks: this.live.size,
      // the recorded history (record=True): events kept, and dropped under recordMaxEntries
      history_entries: this.allocator.recorder?.length ?? 0,
      history_dropped: this.history?.dropped ?? 0,
      pending_frees: this.allocator.deferredFrees,
      num_deferred_frees: this.allocator.stats.numDeferredFrees,
      num_cross_stream_reuses: this.allocator.stats.numCrossStreamReuses,
      cross_stream_reuse: this.allocator.crossStreamReuse,
      // the native front cache: its size, and the allocations it served without the engine
      front_cache_entries: this.frontCacheEntries,
      num_front_cache_hits: this.nativeCounts?.[QUEUE_FRONT_CACHE_HITS] ?? 0,
      front_cache_hit_bytes: this.nativeCounts?.[QUEUE_FRONT_CACHE_HIT_BYTES] ?? 0,
      // frees it gave the engine at once: used on other streams (record_stream), another size or stream than at the alloc, an address not handed out
      num_front_cache_passes: this.nativeCounts?.[QUEUE_FRONT_CACHE_PASSES] ?? 0,
      // the JS thread's own hand-overs of queued frees while it waited for a request (GMLAKE_DRAIN_US), and the frees in them
      num_free_drains: this.nativeCounts?.[QUEUE_DRAINS] ?? 0,
      num_drained_frees: this.nativeCounts?.[QUEUE_DRAINED_FREES] ?? 0,
      // how long queued frees wait for that thread's drain now, us (GMLAKE_DRAIN_US=auto: 0.25 or 2 as learned); -1: no drains
      drain_wait_us: this.nativeCounts?.[QUEUE_DRAIN_WAIT_US] ?? -1,
      // GMLAKE_SPECULATE: answers the JS thread worked out ahead of the allocation it expected, and allocations that took one
      num_speculations: this.nativeCounts?.[QUEUE_SPECULATIONS] ?? 0,
      num_speculation_hits: this.nativeCounts?.[QUEUE_SPEC_HITS] ?? 0,
      // the allocations that took none, by why: none standing (the JS thread had not worked one out since the
      // engine last changed, or foresaw nothing), one for another size or stream, one with frees queued after it
      num_speculation_misses: {
        none: this.nativeCounts?.[QUEUE_SPEC_MISS_NONE] ?? 0,
        other: this.nativeCounts?.[QUEUE_SPEC_MISS_OTHER] ?? 0,
        behind: this.nativeCounts?.[QUEUE_SPEC_MISS_BEHIND] ?? 0,
        // of none: a free came since the allocation before (not back to back: GMLAKE_AHEAD's chains cannot cover them)
        none_after_free: this.nativeCounts?.[QUEUE_SPEC_MISS_NONE_AFTER_FREE] ?? 0,
        // of none, by what the JS thread last found (these five add up to none): not looked yet since the engine
        // changed, nothing foreseen, the policy's peek had none, the throttle passed, not looked yet since the
        // allocation before took the last answer
        none_late: this.nativeCounts?.[QUEUE_SPEC_MISS_NONE_LATE] ?? 0,
        none_unforeseen: this.nativeCounts?.[QUEUE_SPEC_MISS_NONE_UNFORESEEN] ?? 0,
        none_declined: this.nativeCounts?.[QUEUE_SPEC_MISS_NONE_DECLINED] ?? 0,
        none_throttled: this.nativeCounts?.[QUEUE_SPEC_MISS_NONE_THROTTLED] ?? 0,
        none_after_answer: this.nativeCounts?.[QUEUE_SPEC_MISS_NONE_AFTER_ANSWER] ?? 0,
      },
      // GMLAKE_AHEAD: allocations the engine made ahead so that the answer after them could be worked out, and those undone (not taken)
      num_made_ahead: this.aheadCounts.made,
      num_undone_ahead: this.aheadCounts.undone,
      // how many allocations the foresight looks back on (GMLAKE_SPECULATE; 0: off)
      speculate: this.nativeCounts?.[QUEUE_SPEC_CONTEXT] ?? 0,
      // GMLAKE_TAKEBACK: allocations that took a queued free back, alloc+free pairs of equal size the engine never saw (calls leaves them out)
      queue_takeback: this.nativeCounts?.[QUEUE_TAKEBACK_ON] === 1,
      num_queue_takebacks: this.nativeCounts?.[QUEUE_TAKEBACKS] ?? 0,
      queue_takeback_bytes: this.nativeCounts?.[QUEUE_TAKEBACK_BYTES] ?? 0,
      calls: { ...this.counts },
      driver_calls: d.calls,
      driver_time_us: d.timeUs,
      driver_total_calls: d.totalCalls,
      driver_total_time_us: d.totalTimeUs,
      counters: this.allocator.instance.counters?.() ?? {},
      ...this.pools.stats(),
      capture_deferred_frees: this.captureDeferred.length,
    };
  }

  /** torch.cuda.reset_peak_memory_stats(): every peak is its current value again (no policy decides by them). */
  resetPeaks(): void {
    const st = this.allocator.stats;
    st.peakAllocatedBytes = st.allocatedBytes;
    st.peakActiveBytes = st.activeBytes;
    st.peakRequestedBytes = st.requestedBytes;
    st.peakReservedBytes = st.reservedBytes;
  }

  /** The engine's history as a PyTorch memory-viz pickle (gzip when `path` ends in .gz). */
  snapshotBytes(path: string): Uint8Array {
    const log = this.allocator.recorder;
    if (log === null) throw new Error("snapshot: the allocator was started with record=false");
    // the kept window is the trace; the segments are what the whole history says is live
    this.history!.compact();
    // it says what made it (torch-trace recordedBy): inspect labels it by policy, not as PyTorch's
    const s = this.allocator.ctx.settings;
    const allocatorSettings = { ...s, raw: { ...s.raw, gmlake_policy: this.policy.name, gmlake_live: true } };
    // a pool's stream key is no cudaStream_t: its segments carry the pool's id on stream 0
    const streamOf = (raw: number) => this.pools.poolOfKey(raw);
    const bytes = exportMemoryViz(log, this.history!.segments(streamOf), { allocatorSettings, streamOf }).bytes;
    return path.endsWith(".gz") ? gzipSync(bytes) : bytes;
  }

  /**
   * Frees every block still live (the program is done with them) and the deferred frees,
   * tears the policy down (the engine checks that nothing is left) and closes the driver.
   * Returns what the driver still holds (all 0 after a clean run; host and sim only).
   */
  close(): { liveBlocksFreed: number; leaks: Record<string, number> | null } {
    if (this.closed) return { liveBlocksFreed: 0, leaks: null };
    this.stamp();
    this.closed = true;
    const n = this.live.size + this.pools.closeAll();
    for (const b of this.captureDeferred.splice(0)) this.allocator.free(b);
    this.allocator.close();
    this.live.clear();
    let leaks: Record<string, number> | null = null;
    if (this.base instanceof HostDriver || this.base instanceof SimDriver) {
      leaks = { ...this.base.leaks(), events: this.base.events.liveEvents };
    }
    this.base.close();
    return { liveBlocksFreed: n, leaks };
  }
}
