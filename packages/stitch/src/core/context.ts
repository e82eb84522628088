import type { Chunk, ChunkPool } from "@gmlake/chunk-pool";
import { capacityOf, DRIVER_CALLS, type EventHandle, type VmmDriver } from "@gmlake/vmm";
import { EventKind, type AllocatorSettings, type EventLog } from "@gmlake/trace";
import { isDriverOom, StitchError } from "./errors.js";
import type { DeviceFacts, MapAccess, PhysicalChunk, PolicyContext } from "./policy-context.js";
import type { AllocatorStats } from "./stats.js";

const CALL_INDEX: Record<string, number> = Object.fromEntries(DRIVER_CALLS.map((c, i) => [c, i]));

/**
 * The engine's side of a policy's calls: the driver, the chunk pool, the statistics and the
 * recorder, behind calls that keep them consistent, so that `reserved` and the event log
 * cannot drift from what the driver holds (the invariant checker compares them). Policies
 * never see this object: they get `policyView` (a PolicyContext), which holds it in a
 * private field.
 */
export class AllocatorContext {
  readonly driver: VmmDriver;
  readonly chunks: ChunkPool;
  readonly settings: AllocatorSettings;
  readonly stats: AllocatorStats;
  readonly device: number;
  /** Where allocator events go; null = not recorded. */
  readonly recorder: EventLog | null;
  /** Live memAlloc'd segments: address -> size. */
  readonly plainSegments = new Map<number, number>();
  /** Bytes of live memAlloc'd segments. */
  plainBytes = 0;
  /** Live virtual reservations: address -> size. */
  readonly reservations = new Map<number, number>();
  /** Time stamp written into recorded events (the replayer sets it to the trace's clock). */
  nowUs = 0;
  /** Set by retried() during a malloc; the engine counts one retry per malloc. */
  retriedNow = false;
  /** The policy declared streams.crossStreamReuse (set by the engine before create). */
  crossStreamReuse = false;
  /** The engine checks integrity (set by the engine before create). */
  integrity = false;
  /** Only new memory may be mapped in this engine call (Allocator.tryMallocMapOnly). */
  mapOnly = false;
  /** A private pool's free memory may serve other keys (AllocatorOptions.lendPoolMemory; set by the engine before create). */
  lendPoolMemory = false;
  /** One event per stream, re-recorded at each wait on it. */
  private readonly streamEvents = new Map<number, EventHandle>();
  /** The device was synchronized during this engine call (nothing new is queued while the engine runs). */
  private fenced = false;
  /** Stream marks not yet seen complete: mark -> its event. Marks below nextMark and not here are done. */
  private readonly pendingMarks = new Map<number, EventHandle>();
  /** The mark made on each stream during this engine call (nothing is queued while the engine runs: one is enough). */
  private readonly callMarks = new Map<number, number>();
  /** Pending marks already seen not done once (counted once each in numLateMarks). */
  private readonly lateMarks = new Set<number>();
  private nextMark = 1;
  /**
   * Events done with (a completed mark, a deferred free's), kept for the next one: a
   * cuEventCreate took 18 us on the H200 (live run 6), a record on a kept event about 9.
   */
  private readonly spareEvents: EventHandle[] = [];
  readonly deviceFacts: DeviceFacts;
  /** What the policy gets. */
  readonly policyView: PolicyContext;
  private readonly streamIds = new Map<number, number>();
  private lastStream = NaN;
  private lastStreamId = 0;

  constructor(driver: VmmDriver, chunks: ChunkPool, settings: AllocatorSettings, stats: AllocatorStats, recorder: EventLog | null, device = 0) {
    this.driver = driver;
    this.chunks = chunks;
    this.settings = settings;
    this.stats = stats;
    this.recorder = recorder;
    this.device = device;
    const d = driver.device;
    this.deviceFacts = Object.freeze({
      ordinal: d.ordinal,
      name: d.name,
      totalBytes: d.totalBytes,
      granularity: chunks.granularity,
      recommendedGranularity: d.granularity.recommended,
    });
    this.policyView = new PolicyView(this);
  }

  /** Record an event (stream is the raw cudaStream_t value). */
  record(kind: EventKind, addr: number, size: number, stream: number, aux = 0): void {
    const r = this.recorder;
    if (r === null) return;
    let s: number | undefined;
    if (stream === this.lastStream) s = this.lastStreamId;
    else {
      s = this.streamIds.get(stream);
      if (s === undefined) {
        s = r.streamId(stream);
        this.streamIds.set(stream, s);
      }
      this.lastStream = stream;
      this.lastStreamId = s;
    }
    r.push(kind, addr, size, s, this.device, this.nowUs, aux);
  }

  /** cudaMalloc a segment: its address, or -1 when the driver is out of memory. Records segment_alloc. */
  segmentAlloc(size: number, stream: number): number {
    // a request near 2^53 rounds past what a byte count can be: no device holds it
    if (!Number.isSafeInteger(size)) return -1;
    let addr: number;
    try {
      addr = this.driver.memAlloc(size);
    } catch (e) {
      if (isDriverOom(e)) return -1;
      throw e;
    }
    this.plainSegments.set(addr, size);
    this.plainBytes += size;
    const st = this.stats;
    st.reservedBytes += size;
    st.bumpReserved();
    st.segments++;
    st.numSegmentAllocs++;
    this.record(EventKind.segmentAlloc, addr, size, stream);
    return addr;
  }

  /**
   * Work queued on stream `to` from now on waits for the work queued on `from` so far: an
   * event recorded on `from`, waited on by `to` (cuEventRecord + cuStreamWaitEvent; one
   * reusable event per stream). Counted as a cross-stream reuse.
   */
  waitForStream(from: number, to: number): void {
    if (from === to) return;
    const d = this.driver;
    let e = this.streamEvents.get(from);
    if (e === undefined) {
      e = d.eventCreate();
      this.streamEvents.set(from, e);
    }
    // recorded now, it covers every kernel queued on `from` before the memory was freed there
    d.eventRecord(e, from);
    d.streamWaitEvent(to, e);
    this.stats.numCrossStreamReuses++;
  }

  destroyStreamEvents(): void {
    for (const e of this.streamEvents.values()) this.driver.eventDestroy(e);
    this.streamEvents.clear();
    for (const e of this.pendingMarks.values()) this.driver.eventDestroy(e);
    for (const e of this.spareEvents) this.driver.eventDestroy(e);
    this.spareEvents.length = 0;
    this.pendingMarks.clear();
    this.lateMarks.clear();
    this.callMarks.clear();
  }

  /** A new engine call begins (malloc, free, empty_cache, close): kernels may have been queued since the last. */
  beginCall(): void {
    this.fenced = false;
    if (this.callMarks.size > 0) this.callMarks.clear();
  }

  /** An event to record: a kept one, else a new one. */
  takeEvent(): EventHandle {
    return this.spareEvents.pop() ?? this.driver.eventCreate();
  }

  /** An event whose recorded work is done (queried or waited for): kept for the next takeEvent (a few at most). */
  giveEvent(e: EventHandle): void {
    if (this.spareEvents.length < 64) this.spareEvents.push(e);
    else this.driver.eventDestroy(e);
  }

  /**
   * A mark on `stream`: done once the work queued there so far is (an event recorded now;
   * one per stream per engine call, as nothing is queued while the engine runs). After a
   * device synchronization in this call every mark is done without an event.
   */
  markStream(stream: number): number {
    if (this.fenced) return 0; // mark 0: done (the device was drained in this call)
    const made = this.callMarks.get(stream);
    if (made !== undefined) return made;
    const m = this.nextMark++;
    const e = this.takeEvent();
    this.driver.eventRecord(e, stream);
    this.pendingMarks.set(m, e);
    this.callMarks.set(stream, m);
    this.stats.numStreamMarks++;
    return m;
  }

  /** Whether the work a mark covers is done (one eventQuery until it is; then no call). */
  markDone(mark: number): boolean {
    if (!Number.isSafeInteger(mark) || mark < 0 || mark >= this.nextMark) throw new StitchError("BAD_ARGUMENT", `Expected a mark from markStream but received ${mark}`);
    const e = this.pendingMarks.get(mark);
    if (e === undefined) return true;
    if (!this.driver.eventQuery(e)) {
      if (!this.lateMarks.has(mark)) {
        this.lateMarks.add(mark);
        this.stats.numLateMarks++;
      }
      return false;
    }
    this.giveEvent(e);
    this.pendingMarks.delete(mark);
    this.lateMarks.delete(mark);
    return true;
  }

  /**
   * Kernels that used memory may still run when its free reaches the allocator, and
   * cuMemUnmap / cuMemFree do not wait for them: before the first unmap or free of an
   * engine call the device is synchronized (cuCtxSynchronize; counted, and bookkeeping on
   * sim and host), as PyTorch synchronizes before it unmaps.
   */
  fence(): void {
    if (this.fenced) return;
    this.fenced = true;
    this.driver.ctxSynchronize();
    this.stats.numSyncs++;
  }

  /** cudaFree a segment made by segmentAlloc. Records segment_free. */
  segmentFree(addr: number, size: number, stream: number): void {
    this.fence();
    this.driver.memFree(addr);
    this.plainSegments.delete(addr);
    this.plainBytes -= size;
    this.stats.reservedBytes -= size;
    this.stats.segments--;
    this.stats.numSegmentFrees++;
    this.record(EventKind.segmentFree, addr, size, stream);
  }

  /**
   * cuMemCreate a chunk: null when the driver is out of memory. Records physicalCreate.
   * `tentative`: part of an all-or-nothing batch (PyTorch counts a page as reserved only
   * once the whole range is mapped): the peak is not raised; call commitReserved() after.
   */
  createChunk(size: number, tentative = false): Chunk | null {
    let c: Chunk;
    try {
      c = this.chunks.create(size);
    } catch (e) {
      if (isDriverOom(e)) return null;
      throw e;
    }
    this.stats.reservedBytes += size;
    if (!tentative) this.stats.bumpReserved();
    this.record(EventKind.physicalCreate, 0, size, 0, c.id);
    return c;
  }

  /** Raise the reserved peak to the current reserved bytes (after a tentative batch succeeded). */
  commitReserved(): void {
    this.stats.bumpReserved();
  }

  /** cuMemRelease a chunk (unmapped everywhere). Records physicalRelease. */
  releaseChunk(c: Chunk): void {
    this.chunks.release(c);
    this.stats.reservedBytes -= c.size;
    this.record(EventKind.physicalRelease, 0, c.size, 0, c.id);
  }

  /** cuMemAddressReserve. Records reserve. */
  reserve(size: number, alignment = 0): number {
    const a = this.driver.memAddressReserve(size, alignment);
    this.reservations.set(a, size);
    this.record(EventKind.reserve, a, size, 0);
    return a;
  }

  /** cuMemAddressFree. Records reserveFree. */
  reserveFree(addr: number, size: number): void {
    this.driver.memAddressFree(addr, size);
    this.reservations.delete(addr);
    this.record(EventKind.reserveFree, addr, size, 0);
  }

  /**
   * Map chunks side by side at addr and set access: one cuMemSetAccess over the range
   * (`access` "range"), or one per chunk right after its map ("each", as GMLake's original
   * does). Records map (aux = chunks). All or nothing: when a map or a set-access fails,
   * the mappings this call made are undone before the error is rethrown (a half-mapped
   * range would break every later use of it).
   */
  mapChunks(addr: number, chunks: readonly Chunk[], stream = 0, access: MapAccess = "range"): number {
    const pool = this.chunks;
    const each = access === "each";
    let at = addr;
    let mapped = 0;
    try {
      for (let i = 0; i < chunks.length; i++) {
        const c = chunks[i]!;
        pool.map(c, at);
        mapped++;
        at += c.size;
        if (each) this.driver.memSetAccess(at - c.size, c.size);
      }
      if (!each && at > addr) this.driver.memSetAccess(addr, at - addr);
    } catch (e) {
      while (mapped > 0) {
        const c = chunks[--mapped]!;
        at -= c.size;
        pool.unmap(c, at);
      }
      throw e;
    }
    const bytes = at - addr;
    this.record(EventKind.map, addr, bytes, stream, chunks.length);
    return bytes;
  }

  /**
   * Unmap chunks mapped by mapChunks. Records unmap (aux = chunks). Without `after` the
   * device is synchronized first (once per engine call). `after`: a mark of `stream` made
   * after the range's last use there (markStream): when it is done the kernels that used
   * the range are, and nothing waits; when not, the host waits for that mark only
   * (cuEventSynchronize: that stream up to the mark, not the device).
   */
  unmapChunks(addr: number, chunks: readonly Chunk[], stream = 0, after?: number): number {
    if (after === undefined) this.fence();
    else {
      if (!this.markDone(after)) this.waitMark(after);
      this.stats.numUnfencedUnmaps++;
    }
    const bytes = this.chunks.unmapRun(addr, chunks);
    this.record(EventKind.unmap, addr, bytes, stream, chunks.length);
    return bytes;
  }

  /** The host waits until a pending mark is done. */
  private waitMark(mark: number): void {
    const e = this.pendingMarks.get(mark)!;
    this.driver.eventSynchronize(e);
    this.giveEvent(e);
    this.pendingMarks.delete(mark);
    this.lateMarks.delete(mark);
    this.stats.numMarkWaits++;
  }

  /** cuMemGetInfo's free bytes (recorded as a driverCall event). */
  freeDeviceBytes(): number {
    this.record(EventKind.driverCall, 0, 0, 0, CALL_INDEX.memGetInfo ?? -1);
    return this.driver.memGetInfo().freeBytes;
  }

  /** A mapped segment began (expandable segments, pBlock segments, mapped ranges). */
  segmentMapped(addr: number, size: number, stream: number): void {
    this.stats.segments++;
    this.record(EventKind.segmentMap, addr, size, stream);
  }

  segmentUnmapped(addr: number, size: number, stream: number): void {
    this.stats.segments--;
    this.record(EventKind.segmentUnmap, addr, size, stream);
  }
}

/**
 * The PolicyContext a policy gets: calls into the engine's context, which it keeps in a
 * private field (a policy in plain JavaScript cannot reach the driver or the books through
 * it either).
 */
class PolicyView implements PolicyContext {
  readonly #c: AllocatorContext;
  readonly device: DeviceFacts;
  readonly settings: Readonly<AllocatorSettings>;

  constructor(c: AllocatorContext) {
    this.#c = c;
    this.device = c.deviceFacts;
    this.settings = c.settings;
  }

  get reservedBytes(): number {
    return this.#c.stats.reservedBytes;
  }
  get plainSegmentBytes(): number {
    return this.#c.plainBytes;
  }
  get capacityBytes(): number {
    return capacityOf(this.#c.driver);
  }
  get deviceBytes(): number {
    return this.#c.driver.device.totalBytes;
  }
  get mapOnly(): boolean {
    return this.#c.mapOnly;
  }
  get integrity(): boolean {
    return this.#c.integrity;
  }
  get lendPoolMemory(): boolean {
    return this.#c.lendPoolMemory;
  }
  segmentAlloc(size: number, stream: number): number {
    return this.#c.segmentAlloc(size, stream);
  }
  segmentFree(addr: number, size: number, stream: number): void {
    this.#c.segmentFree(addr, size, stream);
  }
  createChunk(size: number, tentative = false): PhysicalChunk | null {
    return this.#c.createChunk(size, tentative);
  }
  commitReserved(): void {
    this.#c.commitReserved();
  }
  releaseChunk(chunk: PhysicalChunk): void {
    this.#c.releaseChunk(chunk as Chunk);
  }
  reserve(size: number, alignment = 0): number {
    return this.#c.reserve(size, alignment);
  }
  reserveFree(addr: number, size: number): void {
    this.#c.reserveFree(addr, size);
  }
  mapChunks(addr: number, chunks: readonly PhysicalChunk[], stream = 0, access: MapAccess = "range"): number {
    return this.#c.mapChunks(addr, chunks as readonly Chunk[], stream, access);
  }
  unmapChunks(addr: number, chunks: readonly PhysicalChunk[], stream = 0, after?: number): number {
    return this.#c.unmapChunks(addr, chunks as readonly Chunk[], stream, after);
  }
  markStream(stream: number): number {
    if (!Number.isSafeInteger(stream)) throw new StitchError("BAD_ARGUMENT", `Expected a stream (an integer) but received ${stream}`);
    return this.#c.markStream(stream);
  }
  markDone(mark: number): boolean {
    return this.#c.markDone(mark);
  }
  chunkMappedAt(addr: number): PhysicalChunk | null {
    return this.#c.chunks.chunkMappedAt(addr) ?? null;
  }
  freeDeviceBytes(): number {
    return this.#c.freeDeviceBytes();
  }
  retried(): void {
    this.#c.retriedNow = true;
  }
  waitForStream(from: number, to: number): void {
    if (!this.#c.crossStreamReuse) {
      throw new StitchError("BAD_ARGUMENT", "waitForStream: the policy does not declare streams.crossStreamReuse (the engine keeps streams apart for it)");
    }
    if (!Number.isSafeInteger(from) || !Number.isSafeInteger(to)) throw new StitchError("BAD_ARGUMENT", `Expected two streams (integers) but received ${from}, ${to}`);
    this.#c.waitForStream(from, to);
  }
  segmentMapped(addr: number, size: number, stream: number): void {
    this.#c.segmentMapped(addr, size, stream);
  }
  segmentUnmapped(addr: number, size: number, stream: number): void {
    this.#c.segmentUnmapped(addr, size, stream);
  }
  record(kind: number, addr: number, size: number, stream: number, aux = 0): void {
    // the engine's own events come from the calls above; a policy adds only its decisions
    if (kind !== EventKind.stitch && kind !== EventKind.gc) {
      throw new StitchError("BAD_ARGUMENT", `a policy records only stitch and gc events (the engine records the rest), not kind ${kind}`);
    }
    this.#c.record(kind as EventKind, addr, size, stream, aux);
  }
}
