import { DefaultStreamDriver, DRIVER_CALLS, withCapacity, type DriverCall, type DriverStats, type VmmDriver } from "@gmlake/vmm";
import { EventKind, EventLog, type AllocatorSettings } from "@gmlake/trace";
import type { Block } from "../core/block.js";
import { Allocator } from "../core/engine.js";
import { StitchError } from "../core/errors.js";
import { planTrace } from "./pairing.js";
import { checkTrace } from "./trace-check.js";
import { poolStreamKey } from "./private-pools.js";
import { getPolicy, type Policy, type PolicyOptions } from "../core/policy.js";

export interface ReplayOptions {
  /** A registered policy name or a policy object. */
  policy: string | Policy;
  driver: VmmDriver;
  /** The policy's knobs. */
  options?: PolicyOptions;
  /** Device capacity in bytes (wraps the driver with withCapacity). */
  capacity?: number;
  /** Allocator settings (default: PyTorch's defaults; pass the trace's recorded ones). */
  settings?: AllocatorSettings;
  checkInvariants?: boolean | number;
  integrity?: boolean | "full";
  /** Where allocator events go (default a fresh EventLog; null = none). */
  recorder?: EventLog | null;
  /** Record the replayed alloc/free events too (default true). */
  recordAllocations?: boolean;
  /** On the first out-of-memory: stop (default) or continue (the failed allocation and its frees are skipped). */
  onOom?: "stop" | "continue";
  /** Free everything and tear the allocator down at the end (default true): no handle or mapping is left. */
  teardown?: boolean;
  /** Only events of this device (default: all, one allocator per device). */
  device?: number;
  /** Chunk sizes for the chunk pool. */
  chunkSizes?: number[];
  /** Per-event private pool ordinals (privatePoolTags(log, snapshot.segments)); 0 = default pools. */
  pools?: Uint32Array | null;
  /** Replay only events [0, until) (default: all): the state at an event, e.g. a policy's peak. */
  until?: number;
  /** Called once the events are replayed, before teardown: the allocators and the blocks live then. */
  probe?: (state: ReplayProbe) => void;
  /** Keep, per recorder row, the index of the trace event that caused it (ReplayResult.sourceEvents). */
  sources?: boolean;
}

/** What a probe sees: one allocator per device (undefined for devices without events) and every live block. */
export interface ReplayProbe {
  engines: readonly (Allocator | undefined)[];
  liveBlocks: readonly Block[];
  /** Events replayed: `until`, or the index of the out-of-memory that stopped the replay. */
  events: number;
}

export interface OomReport {
  eventIndex: number;
  device: number;
  stream: number;
  requestBytes: number;
  allocatedBytes: number;
  reservedBytes: number;
  message: string;
}

export interface ReplayResult {
  policy: string;
  driver: string;
  events: number;
  /**
   * Peak of the requested bytes of live blocks (alloc .. free_completed): a property of the
   * trace (the same for every policy; computeStats(log).peakRequestedBytes on a full replay).
   * With several devices, here and below: the sum of the per-device peaks.
   */
  peakRequestedBytes: number;
  /** Peak allocated bytes as the policy counts its blocks (PyTorch's max_memory_allocated: rounding and unsplit remainders included). */
  peakAllocatedBytes: number;
  /** Peak of allocated + blocks whose free is requested but not completed (PyTorch's active bytes). */
  peakActiveBytes: number;
  /** Peak reserved: physical handles + plain segments (PyTorch's max_memory_reserved). */
  peakReservedBytes: number;
  /**
   * The trace event after which reserved bytes were at their peak with the most requested
   * bytes live: the tightest moment of the peak, where fragmentation costs what it costs
   * (-1 when nothing was reserved).
   */
  peakReservedEventIndex: number;
  /** peakRequestedBytes / peakReservedBytes: the same numerator for every policy (1 when nothing was reserved). */
  utilization: number;
  /** First out-of-memory of the replay (a recorded oom that fails again is not one). */
  oom: OomReport | null;
  ooms: number;
  /** Recorded oom entries replayed: failed again as recorded, or served (the model had more room). */
  recordedOoms: { reproduced: number; served: number };
  numAllocRetries: number;
  /**
   * Stream safety the engine kept (the calls are in driverCalls too: bookkeeping on sim and
   * host): device synchronizations before an unmap or free, blocks served to another
   * stream after it waited on an event of the block's stream, stream marks (events a
   * policy records to learn when memory it moves is idle) and the unmaps a done mark let
   * go without a sync.
   */
  streamSafety: { syncs: number; crossStreamReuses: number; streamMarks: number; unfencedUnmaps: number };
  emptyCacheCalls: number;
  unmatchedFrees: number;
  driverCalls: Record<DriverCall, number>;
  driverTimeUs: number;
  driverCallsSecondHalf: Record<DriverCall, number>;
  driverTimeUsSecondHalf: number;
  wallMs: number;
  eventsPerSecond: number;
  integrityErrors: number;
  integrityChecked: number;
  /** Policy counters (stitches, GC ...), summed over devices. */
  counters: Record<string, number>;
  /** The recorder: allocator and segment events, for exports and plots. */
  log: EventLog | null;
  /** With `sources`: per row of `log`, the trace event that caused it (-1: teardown or none). */
  sourceEvents: Int32Array | null;
  perDevice: { device: number; peakRequestedBytes: number; peakAllocatedBytes: number; peakReservedBytes: number }[];
}

function callDiff(a: DriverStats, b: DriverStats): Record<DriverCall, number> {
  const out = {} as Record<DriverCall, number>;
  for (const c of DRIVER_CALLS) out[c] = a.calls[c] - b.calls[c];
  return out;
}

/**
 * Replay a trace's alloc / free_requested / free_completed events into an allocator of
 * any policy on any driver (memory goes back at free_completed, as in PyTorch). A
 * recorded `oom` entry is a request that failed: it is replayed as an allocation attempt.
 * Recorded segment frees/unmaps that no malloc explains are empty_cache calls.
 */
export function replay(log: EventLog, o: ReplayOptions): ReplayResult {
  if (!log || !(log.kind instanceof Uint8Array) || typeof log.length !== "number") {
    throw new StitchError("BAD_ARGUMENT", "Expected an EventLog to replay (e.g. readSnapshot(path).events)");
  }
  if (!o || !o.driver) throw new StitchError("BAD_ARGUMENT", "replay needs { policy, driver }");
  if (o.capacity !== undefined && !(Number.isSafeInteger(o.capacity) && o.capacity >= 0)) {
    throw new StitchError("BAD_ARGUMENT", `Expected a non-negative integer capacity in bytes but received ${o.capacity}`);
  }
  const policy = typeof o.policy === "string" ? getPolicy(o.policy) : o.policy; // unknown names fail here, not at the first alloc
  const limited = o.capacity !== undefined ? withCapacity(o.driver, o.capacity) : o.driver;
  // A trace's stream values are handles of the process that recorded it: the cuda driver
  // would dereference them (cuEventRecord on one segfaulted on the H200), so its stream
  // calls go to the default stream. The policy still sees the trace's streams.
  const driver = limited.name === "cuda" ? new DefaultStreamDriver(limited) : limited;
  const plan = planTrace(log);
  checkTrace(log, plan); // hostile or corrupt streams: one BAD_TRACE error naming the event
  if (o.until !== undefined && !(Number.isSafeInteger(o.until) && o.until >= 0)) {
    throw new StitchError("BAD_ARGUMENT", `Expected a non-negative integer event index for until but received ${o.until}`);
  }
  const n = o.until === undefined ? log.length : Math.min(o.until, log.length);
  const onOomStop = (o.onOom ?? "stop") === "stop";
  // One recorder for every device: the trace's events plus a quarter for the policy's own
  // (stitching policies record a map/create per chunk: gmlake 17% more on llama1b_fsdp),
  // so that it rarely grows, which copies every column.
  const recorder = o.recorder === undefined ? new EventLog(n + (n >> 2) + 4096) : o.recorder;
  const makeEngine = (device: number) =>
    new Allocator(policy, driver, {
      options: o.options,
      settings: o.settings,
      recorder,
      recordAllocations: o.recordAllocations,
      device,
      checkInvariants: o.checkInvariants,
      integrity: o.integrity,
      chunkSizes: o.chunkSizes,
    });
  const st = new ReplayLoop(log, plan.ref, plan.emptyCache, o.pools ?? null, o.device, onOomStop, makeEngine, o.sources && recorder ? recorder : null);
  const engines = st.engines;
  const mid = n >> 1;
  const s0 = driver.stats();
  let sMid = s0;

  const t0 = performance.now();
  // two halves so that the driver calls after the midpoint can be told apart
  let i = st.run(0, mid);
  if (i === mid) {
    sMid = driver.stats();
    i = st.run(mid, n);
  }
  const { oom, ooms, reproduced, served, emptyCalls } = st;
  const wallMs = performance.now() - t0;
  const s1 = driver.stats();
  if (i < mid) sMid = s1; // stopped before the midpoint: nothing after it

  let peakAllocated = 0;
  let peakReserved = 0;
  let peakActive = 0;
  let peakRequested = 0;
  let retries = 0;
  let syncs = 0;
  let crossStreamReuses = 0;
  let streamMarks = 0;
  let unfencedUnmaps = 0;
  let integrityErrors = 0;
  let integrityChecked = 0;
  const counters: Record<string, number> = {};
  const perDevice: ReplayResult["perDevice"] = [];
  for (let d = 0; d < engines.length; d++) {
    const e = engines[d];
    if (!e) continue;
    const st = e.stats;
    perDevice.push({ device: d, peakRequestedBytes: st.peakRequestedBytes, peakAllocatedBytes: st.peakAllocatedBytes, peakReservedBytes: st.peakReservedBytes });
    // devices are separate memories: sums of per-device peaks, as computeStats reports them
    peakReserved += st.peakReservedBytes;
    peakAllocated += st.peakAllocatedBytes;
    peakActive += st.peakActiveBytes;
    peakRequested += st.peakRequestedBytes;
    retries += st.numAllocRetries;
    syncs += st.numSyncs;
    crossStreamReuses += st.numCrossStreamReuses;
    streamMarks += st.numStreamMarks;
    unfencedUnmaps += st.numUnfencedUnmaps;
    for (const [k, v] of Object.entries(e.counters())) counters[k] = (counters[k] ?? 0) + v;
  }
  if (o.checkInvariants) for (const e of engines) e?.check();
  const sourceEvents = st.sourceRows();
  if (o.probe) {
    const liveBlocks: Block[] = [];
    for (let r = 0; r < n; r++) {
      const b = st.blocks[r];
      if (b !== null && b !== undefined && b.allocated) liveBlocks.push(b);
    }
    o.probe({ engines, liveBlocks, events: i });
  }
  if (o.teardown ?? true) {
    for (const e of engines) e?.close(); // each frees the blocks it still has live
  }
  for (const e of engines) {
    if (!e || !e.integrity) continue;
    integrityErrors += e.integrity.errors;
    integrityChecked += e.integrity.checked;
  }
  const events = i;
  void engines;
  return {
    policy: policy.name,
    driver: o.driver.name,
    events,
    peakRequestedBytes: peakRequested,
    peakAllocatedBytes: peakAllocated,
    peakActiveBytes: peakActive,
    peakReservedBytes: peakReserved,
    peakReservedEventIndex: st.peakIndex,
    utilization: peakReserved > 0 ? peakRequested / peakReserved : 1,
    oom,
    ooms,
    recordedOoms: { reproduced, served },
    numAllocRetries: retries,
    streamSafety: { syncs, crossStreamReuses, streamMarks, unfencedUnmaps },
    emptyCacheCalls: emptyCalls,
    unmatchedFrees: plan.unmatchedFrees,
    driverCalls: callDiff(s1, s0),
    driverTimeUs: s1.totalTimeUs - s0.totalTimeUs,
    driverCallsSecondHalf: callDiff(s1, sMid),
    driverTimeUsSecondHalf: s1.totalTimeUs - sMid.totalTimeUs,
    wallMs,
    eventsPerSecond: wallMs > 0 ? events / (wallMs / 1000) : 0,
    integrityErrors,
    integrityChecked,
    counters,
    log: recorder,
    sourceEvents,
    perDevice,
  };
}

/**
 * The hot loop, apart from replay() so that V8 optimizes it once and keeps it (a loop
 * inside a long function gets deoptimized by the cold code after it); rare events go
 * to methods of their own.
 */
class ReplayLoop {
  readonly engines: (Allocator | undefined)[] = [];
  readonly blocks: (Block | null)[];
  oom: OomReport | null = null;
  ooms = 0;
  reproduced = 0;
  served = 0;
  emptyCalls = 0;
  /** Event index where reserved was at its peak with the most requested bytes live (the tightest moment). */
  peakIndex = -1;
  private peakSeen = 0;
  private peakRequested = -1;
  private src: Int32Array | null = null;
  private tagged = 0;
  private readonly kind: Uint8Array;
  private readonly size: Float64Array;
  private readonly sid: Uint32Array;
  private readonly dev: Uint8Array;
  private readonly times: Float64Array;
  private readonly streams: number[];

  constructor(
    log: EventLog,
    private readonly ref: Int32Array,
    private readonly empty: Uint8Array,
    private readonly pools: Uint32Array | null,
    private readonly only: number | undefined,
    private readonly stopOnOom: boolean,
    private readonly makeEngine: (device: number) => Allocator,
    private readonly sources: EventLog | null = null,
  ) {
    if (sources !== null) {
      this.src = new Int32Array(Math.max(1024, log.length * 2));
      this.tagged = sources.length;
      this.src.fill(-1, 0, this.tagged);
    }
    this.blocks = new Array<Block | null>(log.length).fill(null);
    this.kind = log.kind;
    this.size = log.size;
    this.sid = log.stream;
    this.dev = log.device;
    this.times = log.timeUs;
    this.streams = log.streams;
  }

  /** Replays events [from, to); returns the index it stopped at (to, or an OOM's index). */
  run(from: number, to: number): number {
    const { kind, size, sid, dev, times, streams, ref, blocks, pools, only } = this;
    for (let i = from; i < to; i++) {
      const k = kind[i]!;
      if (k > EventKind.freeCompleted) {
        if (k === EventKind.oom || k === EventKind.emptyCache || k === EventKind.segmentFree || k === EventKind.segmentUnmap) this.rare(i, k);
        if (this.src !== null) this.tag(i);
        continue;
      }
      const d = dev[i]!;
      if (only !== undefined && d !== only) continue;
      const e = this.engines[d] ?? this.engineFor(d);
      if (k === EventKind.alloc) {
        e.ctx.nowUs = times[i]!;
        const p = pools === null ? 0 : pools[i]!;
        const b = e.tryMalloc(size[i]!, p === 0 ? streams[sid[i]!]! : poolStreamKey(p, sid[i]!));
        if (b !== null) {
          blocks[i] = b;
          if (e.stats.reservedBytes >= this.peakSeen) this.newPeak(i, e);
        } else if (this.failed(i, e)) {
          if (this.src !== null) this.tag(i);
          return i;
        }
      } else {
        const r = ref[i]!;
        if (r < 0) continue;
        const b = blocks[r];
        if (b === null || b === undefined) continue;
        e.ctx.nowUs = times[i]!;
        if (k === EventKind.freeRequested) e.freeRequested(b);
        else {
          if (!b.pendingFree) e.freeRequested(b); // a trace may lack the request
          e.freeCompleted(b);
          blocks[r] = null;
        }
      }
      if (this.src !== null) this.tag(i);
    }
    return to;
  }

  /** Reserved at (or above) its peak so far: keep the moment with the most requested bytes live. */
  private newPeak(i: number, e: Allocator): void {
    const st = e.stats;
    if (st.reservedBytes === this.peakSeen && st.requestedBytes <= this.peakRequested) return;
    this.peakSeen = st.reservedBytes;
    this.peakRequested = st.requestedBytes;
    this.peakIndex = i;
  }

  /** Rows recorded since the last call came from event i. */
  private tag(i: number): void {
    const n = this.sources!.length;
    if (n === this.tagged) return;
    let src = this.src!;
    if (n > src.length) {
      const bigger = new Int32Array(Math.max(n, src.length * 2));
      bigger.set(src);
      src = this.src = bigger;
    }
    src.fill(i, this.tagged, n);
    this.tagged = n;
  }

  /** Per recorder row, its source event; rows after the replay (teardown) get -1. */
  sourceRows(): Int32Array | null {
    if (this.src === null) return null;
    return this.src.subarray(0, this.tagged);
  }

  private engineFor(d: number): Allocator {
    const e = this.makeEngine(d);
    this.engines[d] = e;
    return e;
  }

  /** An allocation failed: report the first; returns whether to stop. */
  private failed(i: number, e: Allocator): boolean {
    this.ooms++;
    if (this.oom === null) {
      const stream = this.streams[this.sid[i]!]!;
      const req = this.size[i]!;
      this.oom = {
        eventIndex: i,
        device: this.dev[i]!,
        stream,
        requestBytes: req,
        allocatedBytes: e.stats.allocatedBytes,
        reservedBytes: e.stats.reservedBytes,
        message: `out of memory at event ${i}: ${req} B requested with ${e.stats.allocatedBytes} B allocated, ${e.stats.reservedBytes} B reserved`,
      };
    }
    return this.stopOnOom;
  }

  /** oom entries and empty_cache points. */
  private rare(i: number, k: number): void {
    const d = this.dev[i]!;
    if (this.only !== undefined && d !== this.only) return;
    if (k === EventKind.oom) {
      const e = this.engines[d] ?? this.engineFor(d);
      e.ctx.nowUs = this.times[i]!;
      // The program's request failed here: try it; it should fail the same way.
      const b = e.tryMalloc(this.size[i]!, this.streams[this.sid[i]!]!);
      if (b === null) this.reproduced++;
      else {
        this.served++;
        if (e.stats.reservedBytes >= this.peakSeen) this.newPeak(i, e);
        e.free(b);
      }
    } else if (this.empty[i] === 1) {
      const e = this.engines[d] ?? this.engineFor(d);
      e.ctx.nowUs = this.times[i]!;
      e.emptyCache();
      this.emptyCalls++;
    }
  }
}
