/**
 * The engine as PyTorch's allocator: alloc(size, device, stream) and free(address, size,
 * stream) on raw addresses, one stitch Allocator on one driver, in PyTorch's process.
 *
 * What PyTorch's pluggable-allocator interface leaves to us, done here:
 * - record_stream: a block used on other streams is freed in two phases: free_requested
 *   at free, an event recorded on each of those streams, free_completed once every event
 *   has completed (polled at each call, as PyTorch's process_events does).
 * - kernels still running: the driver is wrapped in a KernelFence, so no memory is
 *   unmapped or freed before the device is synchronized (once per call at most).
 * - out of memory: complete the pending frees, synchronize, empty the policy's caches
 *   and retry once; then fail with PyTorch's wording and the allocator's numbers.
 * - statistics under torch.cuda.memory_stats()'s names, a memory-viz snapshot of the
 *   engine's own history, and a clean close that proves nothing leaked.
 */
import { gzipSync } from "node:zlib";

import { Allocator, getPolicy, type Block, type Policy } from "@gmlake/stitch";
import { exportMemoryViz } from "@gmlake/trace";
import { createDriver, HostDriver, SimDriver, withCapacity, type EventHandle, type VmmDriver } from "@gmlake/vmm";

import { KernelFence } from "./kernel-fence.js";
import { coerceKnobs } from "./knobs.js";

export type LiveDriverName = "cuda" | "host" | "sim";

export interface LiveConfig {
  /** A registered policy (built-in, or registered by `policyModule`). */
  readonly policy: string;
  /** The policy's knobs; text values take the type of the knob's default. */
  readonly knobs?: Record<string, unknown>;
  /** cuda (default: PyTorch's GPU, its primary context), host or sim (tests, no GPU). */
  readonly driver?: LiveDriverName;
  /** Device ordinal (cuda). */
  readonly device?: number;
  /** Physical bytes the engine may hold (host, sim: the device's size; cuda: a limit through withCapacity, to test out-of-memory). */
  readonly capacityBytes?: number;
  /** Keep the engine's event history for snapshot() (default true). */
  readonly record?: boolean;
  /** Invariant checks (see the stitch Allocator): false (default), true, or a period. */
  readonly checkInvariants?: boolean | number;
}

interface PendingFree {
  readonly block: Block;
  readonly events: EventHandle[];
}

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
function fmtBytes(b: number): string {
  return b >= GiB ? `${(b / GiB).toFixed(2)} GiB` : `${(b / MiB).toFixed(2)} MiB`;
}

export class LiveAllocator {
  readonly allocator: Allocator;
  readonly driver: VmmDriver;
  readonly fence: KernelFence;
  readonly policy: Policy;
  /** Live blocks by address. */
  private readonly live = new Map<number, Block>();
  /** Streams other than its own that a live block was used on (record_stream). */
  private readonly recorded = new Map<Block, number[]>();
  private readonly pending: PendingFree[] = [];
  /** Every free waits for an event of its stream (vms with crossStream; see the constructor). */
  readonly eventFrees: boolean;
  /** Those frees, per stream, in stream order: each one's event completes after the one before. */
  private readonly streamQueues = new Map<number, PendingFree[]>();
  private queuedFrees = 0;
  /** Events to record again (cuEventRecord re-arms a completed event). */
  private readonly eventPool: EventHandle[] = [];
  private readonly base: VmmDriver;
  private closed = false;
  /** The message of the last failed call (read through the bridge's text op). */
  lastError = "";
  readonly counts = { allocs: 0, frees: 0, recordStreams: 0, deferredFrees: 0, emptyCaches: 0, oomRetries: 0, ooms: 0 };

  constructor(readonly config: LiveConfig) {
    this.policy = getPolicy(config.policy);
    const knobs = coerceKnobs(this.policy, config.knobs ?? {});
    // vms reuses a block freed on one stream for another; live, that needs the other
    // stream to wait on an event of the free, which the engine does not do yet: off
    // unless asked for, and when asked for, every free waits for an event of its stream
    // before the policy gets the block back (safe on any stream, at the price of later
    // same-stream reuse).
    if (this.policy.name === "vms" && knobs.crossStream === undefined) knobs.crossStream = false;
    this.eventFrees = this.policy.name === "vms" && knobs.crossStream === true;
    const name = config.driver ?? "cuda";
    // No child-process probe before libcuda's first use here: PyTorch has initialized CUDA
    // in this process already, and process.execPath is the Python interpreter, not node.
    if (name === "cuda") process.env.GMLAKE_CUDA_PROBE = "0";
    this.base =
      name === "host"
        ? new HostDriver({ capacityBytes: config.capacityBytes })
        : name === "sim"
          ? new SimDriver({ capacityBytes: config.capacityBytes })
          : createDriver("cuda", { ordinal: config.device ?? 0 });
    const limited = name === "cuda" && config.capacityBytes !== undefined ? withCapacity(this.base, config.capacityBytes) : this.base;
    this.fence = new KernelFence(limited);
    this.driver = this.fence;
    try {
      this.allocator = new Allocator(this.policy, this.driver, {
        options: knobs,
        device: config.device ?? 0,
        recorder: config.record === false ? null : undefined,
        checkInvariants: config.checkInvariants ?? false,
      });
    } catch (e) {
      this.base.close();
      throw e;
    }
  }

  private begin(): void {
    this.fence.open();
    this.allocator.ctx.nowUs = Math.round((performance.timeOrigin + performance.now()) * 1000);
    if (this.pending.length > 0) this.completeFrees(false);
    if (this.queuedFrees > 0) this.completeQueued(false);
  }

  /** free_completed for the queued frees whose stream got past them (all when `wait`). */
  private completeQueued(wait: boolean): void {
    for (const q of this.streamQueues.values()) {
      let n = 0;
      while (n < q.length) {
        const e = q[n]!.events[0]!;
        if (wait) this.driver.eventSynchronize(e);
        else if (!this.driver.eventQuery(e)) break;
        this.eventPool.push(e);
        this.allocator.freeCompleted(q[n]!.block);
        n++;
      }
      if (n > 0) {
        q.splice(0, n);
        this.queuedFrees -= n;
      }
    }
  }

  /** free_completed for every pending free whose events are done (all of them when `wait`). */
  private completeFrees(wait: boolean): void {
    let keep = 0;
    for (let i = 0; i < this.pending.length; i++) {
      const p = this.pending[i]!;
      let done = true;
      for (const e of p.events) {
        if (wait) this.driver.eventSynchronize(e);
        else if (!this.driver.eventQuery(e)) {
          done = false;
          break;
        }
      }
      if (!done) {
        this.pending[keep++] = p;
        continue;
      }
      for (const e of p.events) this.driver.eventDestroy(e);
      this.allocator.freeCompleted(p.block);
    }
    this.pending.length = keep;
  }

  /** PyTorch's alloc: an address, or -1 when out of memory (lastError says so in PyTorch's words). */
  alloc(size: number, stream: number): number {
    this.begin();
    this.counts.allocs++;
    let b = this.allocator.tryMalloc(size, stream);
    if (b === null) {
      // What PyTorch does before it gives up: free what is cached (and what is pending), retry.
      this.counts.oomRetries++;
      this.completeFrees(true);
      this.completeQueued(true);
      this.fence.fence();
      this.allocator.emptyCache();
      b = this.allocator.tryMalloc(size, stream);
      if (b === null) {
        this.counts.ooms++;
        this.lastError = this.oomMessage(size);
        return -1;
      }
    }
    this.live.set(b.addr, b);
    return b.addr;
  }

  private oomMessage(size: number): string {
    const st = this.allocator.stats;
    let device = "";
    try {
      const m = this.driver.memGetInfo();
      device = ` GPU ${this.config.device ?? 0} has a total capacity of ${fmtBytes(m.totalBytes)} of which ${fmtBytes(m.freeBytes)} is free.`;
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
    this.begin();
    const b = this.live.get(address);
    if (b === undefined) throw new Error(`free of 0x${address.toString(16)}, which the allocator did not hand out (or freed already)`);
    this.live.delete(address);
    this.counts.frees++;
    const streams = this.recorded.get(b);
    if (streams === undefined) {
      if (!this.eventFrees) {
        this.allocator.free(b);
        return;
      }
      this.allocator.freeRequested(b);
      const e = this.eventPool.pop() ?? this.driver.eventCreate();
      this.driver.eventRecord(e, b.stream);
      let q = this.streamQueues.get(b.stream);
      if (q === undefined) this.streamQueues.set(b.stream, (q = []));
      q.push({ block: b, events: [e] });
      this.queuedFrees++;
      this.counts.deferredFrees++;
      return;
    }
    // Used on other streams too: reusable once the work queued there so far is done
    // (and on its own stream too, when every free waits for its stream).
    this.recorded.delete(b);
    this.allocator.freeRequested(b);
    const events: EventHandle[] = [];
    for (const s of this.eventFrees ? [b.stream, ...streams] : streams) {
      const e = this.driver.eventCreate();
      events.push(e);
      this.driver.eventRecord(e, s);
    }
    this.pending.push({ block: b, events });
    this.counts.deferredFrees++;
  }

  /** record_stream(address, stream): the live block at `address` is used on `stream` too. */
  recordStream(address: number, stream: number): void {
    const b = this.live.get(address);
    if (b === undefined) throw new Error(`record_stream of 0x${address.toString(16)}, which is not a live allocation`);
    this.counts.recordStreams++;
    if (stream === b.stream) return;
    const list = this.recorded.get(b);
    if (list === undefined) this.recorded.set(b, [stream]);
    else if (!list.includes(stream)) list.push(stream);
  }

  /** torch.cuda.empty_cache(): pending frees completed, the device synchronized, caches released. */
  emptyCache(): void {
    this.begin();
    this.counts.emptyCaches++;
    this.completeFrees(true);
    this.completeQueued(true);
    this.fence.fence();
    this.allocator.emptyCache();
  }

  /** The engine's statistics under torch.cuda.memory_stats()'s names, plus the engine's own. */
  stats(): Record<string, unknown> {
    const d = this.driver.stats();
    return {
      ...this.allocator.stats.toTorch(),
      // requests that failed (the engine also counts the first try of each retried one)
      num_ooms: this.counts.ooms,
      num_device_alloc: d.calls.memCreate + d.calls.memAlloc,
      num_device_free: d.calls.memRelease + d.calls.memFree,
      num_sync_all_streams: this.fence.syncs,
      policy: this.policy.name,
      driver: this.base.name,
      live_blocks: this.live.size,
      pending_frees: this.pending.length + this.queuedFrees,
      event_frees: this.eventFrees,
      calls: { ...this.counts },
      driver_calls: d.calls,
      driver_time_us: d.timeUs,
      driver_total_calls: d.totalCalls,
      driver_total_time_us: d.totalTimeUs,
      counters: this.allocator.instance.counters?.() ?? {},
    };
  }

  /** The engine's history as a PyTorch memory-viz pickle (gzip when `path` ends in .gz). */
  snapshotBytes(path: string): Uint8Array {
    const log = this.allocator.recorder;
    if (log === null) throw new Error("snapshot: the allocator was started with record=false");
    const bytes = exportMemoryViz(log, undefined, { allocatorSettings: this.allocator.ctx.settings }).bytes;
    return path.endsWith(".gz") ? gzipSync(bytes) : bytes;
  }

  /**
   * Frees every block still live (the program is done with them), completes pending frees,
   * tears the policy down (the engine checks that nothing is left) and closes the driver.
   * Returns what the driver still holds (all 0 after a clean run; host and sim only).
   */
  close(): { liveBlocksFreed: number; leaks: Record<string, number> | null } {
    if (this.closed) return { liveBlocksFreed: 0, leaks: null };
    this.begin();
    this.closed = true;
    const n = this.live.size;
    this.completeFrees(true);
    this.completeQueued(true);
    for (const e of this.eventPool.splice(0)) this.driver.eventDestroy(e);
    this.fence.fence();
    this.allocator.close(this.live.values());
    this.live.clear();
    let leaks: Record<string, number> | null = null;
    if (this.base instanceof HostDriver || this.base instanceof SimDriver) {
      leaks = { ...this.base.leaks(), events: this.base.events.liveEvents };
    }
    this.base.close();
    return { liveBlocksFreed: n, leaks };
  }
}
