import { ChunkPool } from "@gmlake/chunk-pool";
import type { EventHandle, VmmDriver } from "@gmlake/vmm";
import { DEFAULT_ALLOCATOR_SETTINGS, EventKind, EventLog, type AllocatorSettings } from "@gmlake/trace";
import type { Block } from "./block.js";
import { AllocatorContext } from "./context.js";
import { OutOfMemoryError, StitchError } from "./errors.js";
import { IntegrityChecker } from "./integrity.js";
import { InvariantChecker } from "./invariants.js";
import { getPolicy, isBuiltinPolicy, resolveOptions, type Policy, type PolicyInstance, type PolicyOptions } from "./policy.js";
import { PolicyGuard } from "../outside-policies/policy-guard.js";
import { AllocatorStats } from "./stats.js";

export interface AllocatorOptions {
  /** The policy's knobs (overlaid on its defaults). */
  options?: PolicyOptions;
  /** PyTorch allocator settings (a trace's recorded ones); default: PyTorch's defaults. */
  settings?: AllocatorSettings;
  /** Where allocator events are recorded; default a fresh EventLog; null = none. */
  recorder?: EventLog | null;
  /** Record alloc / free_requested / free_completed too (default true). */
  recordAllocations?: boolean;
  device?: number;
  /** Check invariants: true = at every malloc/free (cheap checks) and a full check every 4096 ops; a number = full check period. */
  checkInvariants?: boolean | number;
  /** Stamp and check allocations: true = ends and seams; "full" = every byte. Needs a driver with memory (host, cuda). */
  integrity?: boolean | "full";
  /** Chunk sizes the chunk pool allows (default: any multiple of the granularity). */
  chunkSizes?: number[];
  /**
   * Check every block, free and segment call of the policy against the engine's books and
   * catch its errors (PolicyGuard): default on for a policy that is not a built-in, off for
   * the built-ins, whose decisions the builtin baseline proves (and which stay at full speed).
   */
  guard?: boolean;
  /**
   * Free memory on a private pool's stream key (a negative key) holds nothing a captured
   * graph replays into, so a policy may move it to other keys (PolicyContext.lendPoolMemory):
   * true for the live allocator, whose pools keep their memory allocated in the engine and
   * free only what no graph uses (a reserve never touched, a pool gone). Default false, for
   * replays of PyTorch's traces, where a pool's free blocks are the pool's own.
   */
  lendPoolMemory?: boolean;
}

/** What close() found still allocated (and freed): the caller's leak, reported, not thrown. */
export interface CloseReport {
  /** Blocks still allocated (pending frees included) when close() ran. */
  readonly liveBlocks: number;
  /** Their requested bytes. */
  readonly liveRequestedBytes: number;
}

/** A free waiting for the other streams its block was used on (recordStream). */
interface DeferredFree {
  readonly block: Block;
  readonly events: EventHandle[];
  /** The stream each event was recorded on. */
  readonly streams: readonly number[];
}

/**
 * The allocator engine: one policy instance on one driver, plus the books every policy
 * shares: statistics, deferred frees, the recorder, invariant and integrity checks, and
 * stream safety. malloc -> policy.malloc; free is two-phase as in PyTorch (free_requested,
 * then free_completed once the streams that used the block are done).
 *
 * Live use (a PyTorch allocator on the cuda driver with real streams): malloc(size,
 * stream), recordStream(block, stream), free(block), emptyCache(), stats, close(). The
 * engine keeps streams safe: a block freed on stream A is reused on A at once (stream
 * order); handed to another stream B only by a policy that declares crossStreamReuse,
 * after B waits on an event recorded on A; a block used on other streams (recordStream, or
 * served to B that way: it goes back to A's pool) is freed once events recorded there at its
 * free have completed (polled at each call); no
 * memory is unmapped or freed before the kernels that used it are done (one device
 * synchronization per engine call that unmaps or frees). Out of memory: the policy's own
 * release-and-retry, then the deferred frees are waited for and the malloc retried once.
 */
export class Allocator {
  readonly policy: Policy;
  readonly instance: PolicyInstance;
  readonly ctx: AllocatorContext;
  readonly stats: AllocatorStats;
  readonly recorder: EventLog | null;
  readonly invariants: InvariantChecker | null;
  readonly integrity: IntegrityChecker | null;
  /** The checks an outside policy runs under (null: a built-in, trusted). */
  readonly guard: PolicyGuard | null;
  private readonly recordAllocations: boolean;
  private nextId = 1;
  /** Blocks from malloc until free_completed: what close() frees, and what free accepts. */
  /**
   * Live blocks, each knowing its slot (Block.liveSlot): add, remove (the last one takes
   * the slot) and membership are O(1) with no hashing, where a Set<Block> cost a lookup
   * per free and rehashed (garbage) as the count rose and fell every step.
   */
  private readonly live: Block[] = [];
  private closed = false;
  /** The policy may serve a block of one stream to another (Policy.streams.crossStreamReuse). */
  readonly crossStreamReuse: boolean;
  /** Other streams each live block was used on (recordStream). */
  private readonly usedOn = new Map<Block, number[]>();
  private readonly deferred: DeferredFree[] = [];

  constructor(policy: Policy | string, driver: VmmDriver, opts: AllocatorOptions = {}) {
    this.policy = typeof policy === "string" ? getPolicy(policy) : policy;
    const options = resolveOptions(this.policy, opts.options);
    this.stats = new AllocatorStats();
    this.recorder = opts.recorder === undefined ? new EventLog(4096) : opts.recorder;
    // with no recorder, no record call per malloc and free at all
    this.recordAllocations = (opts.recordAllocations ?? true) && this.recorder !== null;
    const chunks = new ChunkPool(driver, opts.chunkSizes ? { chunkSizes: opts.chunkSizes } : {});
    this.ctx = new AllocatorContext(driver, chunks, opts.settings ?? DEFAULT_ALLOCATOR_SETTINGS, this.stats, this.recorder, opts.device ?? 0);
    const guard = (opts.guard ?? !isBuiltinPolicy(this.policy)) ? new PolicyGuard(this.policy, this.ctx) : null;
    this.guard = guard;
    const x = this.policy.streams?.crossStreamReuse;
    this.crossStreamReuse = typeof x === "function" ? Boolean(guard === null ? x(options) : guard.call("streams.crossStreamReuse", () => x(options))) : Boolean(x);
    this.ctx.crossStreamReuse = this.crossStreamReuse;
    this.ctx.integrity = Boolean(opts.integrity);
    this.ctx.lendPoolMemory = opts.lendPoolMemory === true;
    this.instance = guard === null ? this.policy.create(this.ctx.policyView, options) : guard.create(options);
    const ci = opts.checkInvariants ?? false;
    this.invariants = ci === false ? null : new InvariantChecker(this, ci === true ? 4096 : ci);
    this.integrity = opts.integrity ? new IntegrityChecker(driver, opts.integrity === "full") : null;
  }

  /**
   * tryMalloc while only new memory may be mapped (a CUDA-graph capture): the policy sees
   * PolicyContext.mapOnly for this call and moves or releases no memory.
   */
  tryMallocMapOnly(size: number, stream = 0): Block | null {
    this.ctx.mapOnly = true;
    try {
      return this.tryMalloc(size, stream);
    } finally {
      this.ctx.mapOnly = false;
    }
  }

  /** Allocate `size` bytes on `stream`; null when out of memory (an `oom` event is recorded). */
  tryMalloc(size: number, stream = 0): Block | null {
    this.checkMallocArgs(size, stream);
    const ctx = this.ctx;
    ctx.beginCall();
    if (this.deferred.length > 0) this.completeDeferred(false);
    ctx.retriedNow = false;
    let b = this.policyMalloc(size, stream);
    if (b === null && this.deferred.length > 0) {
      // what PyTorch's release_cached_blocks does first: wait for the frees pending on events
      this.completeDeferred(true);
      b = this.policyMalloc(size, stream);
    }
    const st = this.stats;
    if (ctx.retriedNow) st.numAllocRetries++;
    if (b === null) {
      st.numOoms++;
      this.ctx.record(EventKind.oom, 0, size, stream);
      return null;
    }
    return this.served(b, size, stream);
  }

  /** The policy's malloc; an outside policy's block checked before anything else sees it. */
  private policyMalloc(size: number, stream: number): Block | null {
    const g = this.guard;
    if (g === null) return this.instance.malloc(size, stream);
    return g.malloc(this.instance, size, stream);
  }

  /** The policy serves mallocs from memory it holds alone (PolicyInstance.mallocCached). */
  get servesCached(): boolean {
    return typeof this.instance.mallocCached === "function";
  }

  /**
   * Allocate `size` bytes on `stream` from memory the policy already holds, with no driver
   * call that creates, maps or frees memory; null when the policy cannot (or does not
   * implement mallocCached), with nothing recorded or counted: the caller gives back what
   * it holds and calls tryMalloc. A front cache of freed blocks (@gmlake/torch-alloc's)
   * asks this first, so that the policy grows only after it has seen every free block.
   */
  tryMallocCached(size: number, stream = 0): Block | null {
    this.checkMallocArgs(size, stream);
    const m = this.instance.mallocCached;
    if (m === undefined) return null;
    this.ctx.beginCall();
    if (this.deferred.length > 0) this.completeDeferred(false);
    const g = this.guard;
    const b = g === null ? m.call(this.instance, size, stream) : g.accept(g.call("mallocCached", () => m.call(this.instance, size, stream)), size, stream, "mallocCached");
    return b === null ? null : this.served(b, size, stream);
  }

  /**
   * Allocate `size` bytes on `stream` from memory the policy holds now, with no byte more
   * reserved (PolicyInstance.mallocHeld, else mallocCached); null when it cannot, with nothing
   * recorded or counted as an out-of-memory.
   */
  tryMallocHeld(size: number, stream = 0): Block | null {
    this.checkMallocArgs(size, stream);
    const inst = this.instance;
    const name = typeof inst.mallocHeld === "function" ? "mallocHeld" : "mallocCached";
    const m = inst[name];
    if (m === undefined) return null;
    this.ctx.beginCall();
    if (this.deferred.length > 0) this.completeDeferred(false);
    const g = this.guard;
    const b = g === null ? m.call(inst, size, stream) : g.accept(g.call(name, () => m.call(inst, size, stream)), size, stream, name);
    return b === null ? null : this.served(b, size, stream);
  }

  /** The policy can say where a malloc would land (PolicyInstance.peekCached). */
  get peeks(): boolean {
    return typeof this.instance.peekCached === "function";
  }

  /**
   * The address tryMalloc(size, stream) would return now, when the policy would serve it from
   * free memory of this stream (PolicyInstance.peekCached); null otherwise, and always while
   * frees wait on events (tryMalloc first completes those whose events are done). Changes
   * nothing.
   */
  peekCached(size: number, stream = 0): number | null {
    const m = this.instance.peekCached;
    if (m === undefined || this.closed || this.deferred.length > 0 || !(size >= 0) || !Number.isSafeInteger(size) || !Number.isSafeInteger(stream)) return null;
    const g = this.guard;
    return g === null ? m.call(this.instance, size, stream) : g.peeked(g.call("peekCached", () => m.call(this.instance, size, stream)));
  }

  private checkMallocArgs(size: number, stream: number): void {
    if (this.closed) throw new StitchError("CLOSED", `malloc(${size}) after close(): this allocator holds no memory any more`);
    if (!(size >= 0) || !Number.isSafeInteger(size)) {
      throw new StitchError("BAD_ARGUMENT", `Expected a non-negative integer size but received ${size}`);
    }
    // a raw cudaStream_t (negative: a private pool's key): NaN or a fraction would break every per-stream pool key
    if (!Number.isSafeInteger(stream)) {
      throw new StitchError("BAD_ARGUMENT", `Expected a stream (an integer) but received ${stream}`);
    }
  }

  /** The policy's block for malloc(size, stream): cross-stream wait, books, record, checks. */
  private served(b: Block, size: number, stream: number): Block {
    const st = this.stats;
    if (b.stream !== stream) this.crossStream(b, stream);
    b.allocated = true;
    b.pendingFree = false;
    b.requested = size;
    b.id = this.nextId++;
    b.liveSlot = this.live.length;
    this.live.push(b);
    st.allocations++;
    st.allocatedBytes += b.size;
    if (st.allocatedBytes > st.peakAllocatedBytes) st.peakAllocatedBytes = st.allocatedBytes;
    st.activeBytes += b.size;
    if (st.activeBytes > st.peakActiveBytes) st.peakActiveBytes = st.activeBytes;
    st.requestedBytes += size;
    if (st.requestedBytes > st.peakRequestedBytes) st.peakRequestedBytes = st.requestedBytes;
    if (this.recordAllocations) this.ctx.record(EventKind.alloc, b.addr, size, stream);
    if (this.invariants !== null) {
      if (this.guard === null) this.invariants.onMalloc(b);
      else this.guard.invariant(() => this.invariants!.onMalloc(b));
    }
    if (this.integrity !== null) this.integrity.stamp(b);
    return b;
  }

  /** A block of stream `b.stream` served on `stream`: `stream` first waits for the work queued on the block's stream. */
  private crossStream(b: Block, stream: number): void {
    if (!this.crossStreamReuse) {
      const what = `served a block of stream ${b.stream} to a malloc on stream ${stream} without declaring streams.crossStreamReuse`;
      if (this.guard !== null) {
        this.guard.release(b); // not handed out
        throw this.guard.fault("stream", what);
      }
      throw new StitchError("INVARIANT", `policy ${this.policy.name} ${what}`);
    }
    this.ctx.waitForStream(b.stream, stream);
    // The block goes back to its own stream's pool at free, where the policy reuses it on
    // b.stream without a wait: so it is freed as if record_stream(b, stream) had been
    // called, once the work queued on `stream` until the free is done.
    this.addUse(b, stream);
  }

  private addUse(b: Block, stream: number): void {
    const list = this.usedOn.get(b);
    if (list === undefined) this.usedOn.set(b, [stream]);
    else if (!list.includes(stream)) list.push(stream);
  }

  /**
   * record_stream: the live block is used on `stream` too (besides its own). Its free() is
   * then deferred until the work queued on those streams at the free is done.
   */
  recordStream(b: Block, stream: number): void {
    this.checkFree(b, "recordStream");
    if (!Number.isSafeInteger(stream)) throw new StitchError("BAD_ARGUMENT", `Expected a stream (an integer) but received ${stream}`);
    if (stream === b.stream) return;
    this.addUse(b, stream);
  }

  /** Frees pending on events: free_completed for those whose events are done (for all of them when `wait`). */
  private completeDeferred(wait: boolean): void {
    const d = this.ctx.driver;
    let keep = 0;
    // A stream whose event is not done yet: the later events on it are not either (stream
    // order, and the list is in recording order), so one query per stream and poll.
    const busy: number[] = [];
    for (let i = 0; i < this.deferred.length; i++) {
      const p = this.deferred[i]!;
      let done = true;
      for (let j = 0; j < p.events.length; j++) {
        const e = p.events[j]!;
        if (wait) d.eventSynchronize(e);
        else if (busy.length > 0 && busy.includes(p.streams[j]!)) {
          done = false;
          break;
        } else if (!d.eventQuery(e)) {
          busy.push(p.streams[j]!);
          done = false;
          break;
        }
      }
      if (!done) {
        this.deferred[keep++] = p;
        continue;
      }
      for (const e of p.events) this.ctx.giveEvent(e);
      this.completeFree(p.block);
    }
    this.deferred.length = keep;
  }

  /** Frees still waiting for other streams (recordStream). */
  get deferredFrees(): number {
    return this.deferred.length;
  }

  /** Allocate or throw OutOfMemoryError. */
  malloc(size: number, stream = 0): Block {
    const b = this.tryMalloc(size, stream);
    if (b === null) {
      throw new OutOfMemoryError(size, stream, `reserved ${this.stats.reservedBytes} B, allocated ${this.stats.allocatedBytes} B`);
    }
    return b;
  }

  private isLive(b: Block): boolean {
    if (b === null || typeof b !== "object") return false;
    const i = b.liveSlot;
    return typeof i === "number" && i >= 0 && this.live[i] === b;
  }

  private unlist(b: Block): void {
    const live = this.live;
    const last = live.pop()!;
    if (last !== b) {
      live[b.liveSlot] = last;
      last.liveSlot = b.liveSlot;
    }
    b.liveSlot = -1;
  }

  /** Refuses a free of anything but a live block of this allocator, before anything changes. */
  private checkFree(b: Block, phase: string): void {
    if (this.closed) throw new StitchError("CLOSED", `${phase} after close(): this allocator holds no memory any more`);
    const g = this.guard;
    if (g !== null) {
      g.checkLive(b);
      if (!this.isLive(b) && g.has(b)) throw g.fault("mutated", `changed the engine's fields of the live block at 0x${b.addr.toString(16)} (liveSlot)`);
    }
    if (!this.isLive(b)) {
      const where = b instanceof Object && typeof b.addr === "number" ? ` at 0x${b.addr.toString(16)}` : "";
      throw new StitchError("BAD_ARGUMENT", `block${where} is not a live block of this allocator (double free, or another allocator's?)`);
    }
  }

  /** free_requested: the program dropped the block; it stays active until freeCompleted. */
  freeRequested(b: Block): void {
    this.checkFree(b, "free_requested");
    if (b.pendingFree) {
      throw new StitchError("BAD_ARGUMENT", `block at 0x${b.addr.toString(16)} is not live (double free?)`);
    }
    b.pendingFree = true;
    if (this.guard !== null) this.guard.freeRequested(b);
    this.stats.allocatedBytes -= b.size;
    if (this.integrity !== null) this.integrity.check(b);
    if (this.recordAllocations) this.ctx.record(EventKind.freeRequested, b.addr, b.requested, b.stream);
  }

  /** free_completed: the memory goes back to the policy. */
  freeCompleted(b: Block): void {
    this.ctx.beginCall();
    this.completeFree(b);
  }

  private completeFree(b: Block): void {
    this.checkFree(b, "free_completed");
    if (!b.pendingFree) {
      throw new StitchError("BAD_ARGUMENT", `block at 0x${b.addr.toString(16)} has no free_requested before free_completed`);
    }
    this.finishFree(b);
  }

  /** free_completed of a live block with its free requested (checked by the caller). */
  private finishFree(b: Block): void {
    this.unlist(b);
    // two-phase frees (a replay's free_requested / free_completed) time themselves: uses recorded for free() are dropped
    if (this.usedOn.size > 0) this.usedOn.delete(b);
    const st = this.stats;
    st.activeBytes -= b.size;
    st.requestedBytes -= b.requested;
    st.allocations--;
    if (this.recordAllocations) this.ctx.record(EventKind.freeCompleted, b.addr, b.requested, b.stream);
    if (this.invariants !== null) {
      if (this.guard === null) this.invariants.onFree(b);
      else this.guard.invariant(() => this.invariants!.onFree(b));
    }
    b.pendingFree = false;
    b.allocated = false;
    const g = this.guard;
    if (g === null) this.instance.free(b);
    else g.free(this.instance, b);
  }

  /**
   * The program's free: both phases at once, or, for a block used on other streams
   * (recordStream, or served to another stream than its own by cross-stream reuse),
   * free_requested now and free_completed once an event recorded on each of those streams
   * at the free has completed (at once when it has already).
   */
  free(b: Block): void {
    this.freeRequested(b); // checks everything freeCompleted would: a refused free changes nothing
    // no lookup (an object key's hash) while no block is used on another stream: most runs
    const streams = this.usedOn.size === 0 ? undefined : this.usedOn.get(b);
    if (streams === undefined) {
      // free_completed at once: freeRequested checked the block, so not twice (every free takes this path)
      this.ctx.beginCall();
      this.finishFree(b);
      return;
    }
    this.usedOn.delete(b);
    const d = this.ctx.driver;
    const events = streams.map((s) => {
      const e = this.ctx.takeEvent();
      d.eventRecord(e, s);
      return e;
    });
    // Done already (always on a driver with no device queue, host and sim): no deferral,
    // and a replay makes the same decisions as before the block was used on other streams.
    if (events.every((e) => d.eventQuery(e))) {
      for (const e of events) this.ctx.giveEvent(e);
      this.freeCompleted(b);
      return;
    }
    this.deferred.push({ block: b, events, streams });
    this.stats.numDeferredFrees++;
  }

  /** torch.cuda.empty_cache(). */
  emptyCache(): void {
    if (this.closed) throw new StitchError("CLOSED", "emptyCache after close()");
    this.ctx.beginCall();
    if (this.deferred.length > 0) this.completeDeferred(true);
    this.ctx.record(EventKind.emptyCache, 0, 0, 0);
    const g = this.guard;
    if (g === null) this.instance.emptyCache();
    else g.call("emptyCache", () => this.instance.emptyCache());
  }

  /** The policy's counters (PolicyInstance.counters; an outside policy's checked to be finite numbers). */
  counters(): Record<string, number> {
    if (this.guard !== null) return this.guard.counters(this.instance);
    return this.instance.counters?.() ?? {};
  }

  /** Run the full invariant check now (throws StitchError INVARIANT on violation). */
  check(): void {
    const c = this.invariants ?? new InvariantChecker(this, 0);
    if (this.guard === null) c.full();
    else this.guard.invariant(() => c.full());
  }

  /** Blocks allocated now (from malloc until free_completed). */
  get liveBlocks(): number {
    return this.live.length;
  }

  /**
   * Release everything: blocks still allocated are freed (and reported: the count and
   * their bytes, not an error), cached memory released, and the policy's teardown must
   * leave no handle, mapping or segment behind (checked: a policy bug throws INVARIANT).
   * After close, malloc and free are refused (StitchError CLOSED); close again does
   * nothing. `_liveBlocks` is not needed any more (the allocator tracks its blocks) and
   * is ignored.
   */
  close(_liveBlocks?: Iterable<Block>): CloseReport {
    if (this.closed) return { liveBlocks: 0, liveRequestedBytes: 0 };
    this.ctx.beginCall();
    if (this.deferred.length > 0) this.completeDeferred(true);
    let liveRequestedBytes = 0;
    const left = [...this.live].sort((x, y) => x.id - y.id); // in allocation order
    for (const b of left) {
      liveRequestedBytes += b.requested;
      if (!b.pendingFree) this.freeRequested(b);
      this.completeFree(b);
    }
    this.closed = true;
    this.usedOn.clear();
    const g = this.guard;
    try {
      // may still use marks (vms: old mappings waiting for theirs)
      if (g === null) this.instance.teardown();
      else g.call("teardown", () => this.instance.teardown());
    } finally {
      this.ctx.destroyStreamEvents();
    }
    const c = this.ctx;
    if (c.chunks.liveChunks !== 0 || c.chunks.mappingCount !== 0 || c.plainSegments.size !== 0 || c.reservations.size !== 0) {
      const what = `teardown left ${c.chunks.liveChunks} handles, ${c.chunks.mappingCount} mappings, ${c.plainSegments.size} segments, ${c.reservations.size} reservations`;
      if (g !== null) throw g.fault("teardown", what);
      throw new StitchError("INVARIANT", `policy ${this.policy.name} ${what}`);
    }
    return { liveBlocks: left.length, liveRequestedBytes };
  }
}

