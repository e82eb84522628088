import { Block, mergeFreeKeepLeft, splitBack } from "../core/block.js";
import type { PhysicalChunk as Chunk } from "../core/policy-context.js";
import { StitchError } from "../core/errors.js";
import type { Policy, PolicyInstance } from "../core/policy.js";
import { kMinBlockSize, kSmallBuffer, kSmallSize, roundSize } from "../core/rounding.js";
import { PYTORCH_KNOBS } from "../core/pytorch-knobs.js";
import { Arena, SmallSegment } from "./vms-arena.js";
import { VmsState, type VmsOptions } from "./vms-state.js";

export type { VmsOptions };

/**
 * vms: virtual memory stitching that moves physical memory instead of aliasing it.
 *
 * Large blocks (> 1 MiB) live in one big virtual arena per stream. A request is served
 * from the best-fitting free mapped block (no driver call, as a caching allocator). Only
 * when none fits, the policy picks the place in the arena whose free run needs the fewest
 * newly mapped bytes (free mapped blocks next to unmapped space, not only at the tail as
 * expandable segments do), and fills the unmapped part with free physical handles taken
 * from holes elsewhere (unmap there, map here: no copy since they hold no live data),
 * creating new handles, sized to the gap, only for what is still missing. Small requests
 * (<= 1 MiB) are packed into 2 MiB small segments, as PyTorch's small pool, but each
 * segment is an ordinary block of the arena, so it comes from free memory already mapped.
 */
export class VmsAllocator extends VmsState implements PolicyInstance {
  malloc(size: number, stream: number): Block | null {
    const rounded = roundSize(size, this.rp2);
    if (rounded <= kSmallSize) return this.mallocSmall(rounded, stream, false);
    return this.mallocLarge(rounded, stream, false);
  }

  /** malloc without the slow path: a fit in the pools (cross-stream too), never a grow or a driver call on memory. */
  mallocCached(size: number, stream: number): Block | null {
    const rounded = roundSize(size, this.rp2);
    if (rounded <= kSmallSize) return this.mallocSmall(rounded, stream, true);
    return this.mallocLarge(rounded, stream, true);
  }

  /**
   * malloc with no byte more reserved (PolicyInstance.mallocHeld): a fit, else a grow whose
   * window is filled by free handles moved from elsewhere only (no new handle, none released).
   * Small requests and a capture (no handle may move then): mallocCached.
   */
  mallocHeld(size: number, stream: number): Block | null {
    const rounded = roundSize(size, this.rp2);
    if (rounded <= kSmallSize || this.ctx.mapOnly) return this.mallocCached(size, stream);
    const b = this.mallocLarge(rounded, stream, true);
    if (b !== null) return b;
    this.heldOnly = true;
    try {
      // the open end of the arena too, where a donor larger than the gap still fits
      return this.grow(rounded, stream, false) ?? this.grow(rounded, stream, true);
    } finally {
      this.heldOnly = false;
    }
  }

  /**
   * Where malloc would serve from this stream's pools without a grow or another stream's block
   * (PolicyInstance.peekCached): a small request with no small block left takes a new small
   * segment from the front of the large pool's fit (mallocSmall, mallocLarge), so that answer
   * is known too. Without it a small segment freed whole (it goes back to the arena) left the
   * live foresight nothing to answer: every alloc+free of a small size entered the engine.
   */
  peekCached(size: number, stream: number): number | null {
    const rounded = roundSize(size, this.rp2);
    if (rounded <= kSmallSize) {
      const s = this.smallPool.seek(stream, rounded);
      if (s !== null && s.stream === stream) return s.addr;
      const host = this.pool.seek(stream, this.o.smallSegmentBytes);
      return host !== null && host.stream === stream ? host.addr : null;
    }
    const b = this.pool.seek(stream, rounded);
    return b !== null && b.stream === stream ? b.addr : null;
  }

  /** Small requests: best fit in the small pool, else a new small segment carved from the arena (a cache hit there when it can). */
  private mallocSmall(rounded: number, stream: number, cachedOnly: boolean): Block | null {
    const sp = this.smallPool;
    let b = sp.seek(stream, rounded);
    if (b !== null && b.stream === stream) {
      // the rest takes the best fit's place in the pool (no delete and insert)
      if (b.size - rounded >= kMinBlockSize) sp.replaceAtCursor(splitBack(b, b.addr + rounded));
      else sp.takeAtCursor();
    } else {
      // never another stream's block: the small blocks carved from it are this stream's, so
      // the engine would not make this stream wait for that one's work (nor, at the segment's
      // return, that one for this one's)
      const host = this.mallocLarge(this.o.smallSegmentBytes, stream, cachedOnly, false);
      if (host === null) return null;
      host.allocated = true;
      this.n.smallSegments++;
      this.n.smallSegmentsMade++;
      b = new Block(host.addr, host.size, stream, sp);
      b.segment = new SmallSegment(host);
      if (b.size - rounded >= kMinBlockSize) sp.insert(splitBack(b, b.addr + rounded));
    }
    const host = (b.segment as SmallSegment).host;
    b.seams = host.seams === null ? null : (host.segment as Arena).seams(b.addr, b.addr + b.size);
    return b;
  }

  /** Merge a freed small block; a segment left wholly free goes back to the arena. */
  private freeSmall(b: Block): void {
    b = mergeFreeKeepLeft(b, this.leaveSmallPool);
    if (b.prev === null && b.next === null) {
      const host = (b.segment as SmallSegment).host;
      host.allocated = false;
      host.seams = null;
      this.mergeFree(host);
      this.n.smallSegments--;
      return;
    }
    this.smallPool.insert(b);
  }

  private mallocLarge(rounded: number, stream: number, cachedOnly: boolean, crossStream = this.o.crossStream): Block | null {
    const b = this.pool.seek(stream, rounded);
    if (b !== null && b.stream === stream) {
      // the rest takes the best fit's place in the pool (no delete and insert)
      if (b.size > rounded) this.pool.replaceAtCursor(this.split(b, b.addr + rounded));
      else this.pool.takeAtCursor();
      this.markSeams(b);
      return b;
    }
    if (crossStream) {
      // A block freed by another stream: safe once this stream waits for that stream's free (see docs/vms.md).
      const x = this.otherStreamFit(stream, rounded);
      if (x !== null) {
        this.pool.delete(x);
        this.n.crossStreamHits++;
        return this.carve(x, x.addr, rounded);
      }
    }
    if (cachedOnly) return null;
    let r = this.grow(rounded, stream, false);
    if (r === null) {
      // Out of memory: use every free handle, at the open end of the arena where any handle fits.
      this.ctx.retried();
      this.n.tailRetries++;
      r = this.grow(rounded, stream, true);
    }
    return r;
  }

  /** Best fit among the other streams' free mapped blocks. */
  private otherStreamFit(stream: number, size: number): Block | null {
    // Private pools (negative keys, CUDA graphs / MemPool) keep their memory to themselves.
    if (stream < 0) return null;
    let best: Block | null = null;
    for (const s of this.arenas.keys()) {
      if (s === stream || s < 0) continue;
      const x = this.pool.seek(s, size);
      if (x !== null && x.stream === s && (best === null || x.size < best.size)) best = x;
    }
    return best;
  }

  free(b: Block): void {
    if (b.segment instanceof SmallSegment) {
      b.seams = null;
      this.freeSmall(b);
      return;
    }
    b.seams = null;
    this.mergeFree(b);
  }

  // ---- releasing ----

  emptyCache(): void {
    this.releaseFreeHandles();
  }

  teardown(): void {
    this.releaseFreeHandles();
    for (const [stream, a] of this.arenas) {
      const h = a.head!;
      if (h.allocated || h.mapped || h.next !== null) throw new StitchError("INVARIANT", `vms: arena of stream ${stream} still holds blocks at teardown`);
      this.ctx.reserveFree(a.base, a.size);
    }
    this.arenas.clear();
    this.pool.clear();
    this.smallPool.clear();
  }

  check(): string | null {
    const m = this.pool.checkOrder();
    if (m) return m;
    for (const b of this.pool.toArray()) {
      if (b.allocated || !b.mapped) return `pooled block 0x${b.addr.toString(16)} is allocated or unmapped`;
    }
    const twice = new Map<Chunk, number>(); // moved handles still mapped at their old place too
    for (const x of this.retiring) twice.set(x.chunk, (twice.get(x.chunk) ?? 0) + 1);
    for (const a of this.arenas.values()) {
      let at = a.base;
      let mapped = 0;
      let prev: Block | null = null;
      for (let b = a.head; b !== null; b = b.next) {
        if (b.addr !== at) return `arena 0x${a.base.toString(16)}: gap or overlap at 0x${at.toString(16)}`;
        if (b.prev !== prev) return `broken prev link at 0x${b.addr.toString(16)}`;
        if (b.segment !== a) return `block 0x${b.addr.toString(16)} names another arena`;
        if (b.allocated && !b.mapped) return `live block 0x${b.addr.toString(16)} is unmapped`;
        if (!b.allocated && prev !== null && !prev.allocated && prev.mapped === b.mapped) return `unmerged free blocks at 0x${b.addr.toString(16)}`;
        if (!b.allocated && b.mapped && !this.pool.has(b)) return `free mapped block 0x${b.addr.toString(16)} not in the pool`;
        if (b.mapped) mapped += b.size;
        else {
          const i = a.lowerBound(b.addr);
          if (i < a.hAddr.length && a.hAddr[i]! < b.addr + b.size) return `handle mapped inside unmapped block 0x${b.addr.toString(16)}`;
          if (i > 0 && a.hAddr[i - 1]! + a.hChunk[i - 1]!.size > b.addr) return `handle overlaps unmapped block 0x${b.addr.toString(16)}`;
        }
        at = b.addr + b.size;
        prev = b;
      }
      if (at !== a.end) return `arena 0x${a.base.toString(16)} chain ends at 0x${at.toString(16)}`;
      let nUnmapped = 0;
      for (let b = a.head; b !== null; b = b.next) {
        if (b.mapped) continue;
        nUnmapped++;
        if (!a.unmapped.has(b)) return `unmapped block 0x${b.addr.toString(16)} missing from the arena's set`;
      }
      if (nUnmapped !== a.unmapped.size) return `arena's unmapped set has ${a.unmapped.size} blocks, the chain ${nUnmapped}`;
      let handles = 0;
      for (const x of this.retiring) {
        if (x.arena === a && this.ctx.chunkMappedAt(x.addr) !== x.chunk) return `chunk pool disagrees at retiring mapping 0x${x.addr.toString(16)}`;
      }
      for (let i = 0; i < a.hAddr.length; i++) {
        const c = a.hChunk[i]!;
        if (i + 1 < a.hAddr.length && a.hAddr[i]! + c.size > a.hAddr[i + 1]!) return `handles overlap at 0x${a.hAddr[i]!.toString(16)}`;
        if (this.ctx.chunkMappedAt(a.hAddr[i]!) !== c) return `chunk pool disagrees at 0x${a.hAddr[i]!.toString(16)}`;
        if (c.mappings.length !== 1 + (twice.get(c) ?? 0)) return `handle ${c.id} mapped ${c.mappings.length} times`;
        handles += c.size;
      }
      if (handles !== mapped) return `arena 0x${a.base.toString(16)}: ${handles} B of handles, ${mapped} B in mapped blocks`;
    }
    const sm = this.smallPool.checkOrder();
    if (sm) return sm;
    for (const b of this.smallPool.toArray()) {
      if (b.allocated) return `pooled small block 0x${b.addr.toString(16)} is allocated`;
      const seg = b.segment as SmallSegment;
      if (!seg.host.allocated || b.addr < seg.host.addr || b.addr + b.size > seg.host.addr + seg.host.size) return `small block 0x${b.addr.toString(16)} outside its segment`;
      if ((b.prev !== null && !b.prev.allocated) || (b.next !== null && !b.next.allocated)) return `small block 0x${b.addr.toString(16)} has an unmerged free neighbour`;
      if (b.prev === null && b.next === null) return `small segment 0x${seg.host.addr.toString(16)} wholly free but kept`;
    }
    return null;
  }

  counters(): Record<string, number> {
    return { ...this.n };
  }
}

export const vmsPolicy: Policy<VmsOptions> = {
  name: "vms",
  description:
    "Virtual memory stitching by moving free physical handles: one arena per stream, best fit without driver calls, on a miss the window needing fewest new bytes is filled with handles moved out of holes, new handles sized to the gap",
  knobs: {
    roundupPower2Divisions: PYTORCH_KNOBS.roundupPower2Divisions,
    smallSegmentBytes: { type: "bytes", min: kSmallSize + kMinBlockSize, max: 2 ** 40, multipleOf: kMinBlockSize, default: kSmallBuffer, description: "size of a small-pool segment (requests <= 1 MiB are packed into these)" },
    maxHandleBytes: { type: "bytes", min: 1, max: 2 ** 40, default: 64 * 2 ** 20, description: "largest physical handle made at once; a multiple of the device granularity" },
    handlesPerRequest: { type: "number", min: 1, max: 2 ** 20, default: 1, description: "new handles are at most request / handlesPerRequest (and maxHandleBytes)" },
    maxHandlesPerGap: { type: "integer", min: 0, max: 2 ** 20, default: 0, description: "at most this many new handles per gap (larger than maxHandleBytes when the gap needs it); 0 = no limit" },
    minTailHandleBytes: { type: "bytes", min: 1, max: 2 ** 40, default: kSmallBuffer, description: "smallest handle made at the arena's open end (one handle up to maxHandleBytes; the room beyond the request serves the next requests); a multiple of the device granularity. 128MiB: warm-up driver time <= 1% of every shared trace on an H200 but a one-step recording (default: up to 1.5%), for up to 0.22 GiB more peak reserved on some traces (docs/vms.md, Driver time against memory)" },
    moveFreePages: { type: "boolean", default: true, description: "move free handles to where a request needs memory before making new ones" },
    crossStream: { type: "boolean", default: true, description: "let a block freed on one stream serve another stream (that stream first waits on an event of the first)" },
    donorOrder: { type: "choice", choices: ["hole", "size"], default: "hole", description: "which free handles move first: those of the smallest free blocks (hole) or the largest (size)" },
    arenaBytes: { type: "bytes", min: 1, max: 2 ** 47, default: null, nullMeans: "2 x device memory", description: "virtual bytes reserved per stream arena" },
    capacityHandleDivisor: { type: "number", min: 0, max: 2 ** 20, default: 2048, description: "new handles are at most capacity / this (the device or its budget), at least the granularity: what one handle can trap stays small where memory is tight; 0 = off" },
    budgetHandleDivisor: { type: "number", min: 0, max: 2 ** 20, default: 16384, description: "under a budget below the device's memory (a memory fraction, a capacity), new handles are at most budget / this, at least the granularity: the job is meant to run near its budget; 0 = off" },
    headroomHandleDivisor: { type: "number", min: 0, max: 2 ** 20, default: 256, description: "new handles are at most (capacity - reserved) / this, at least the granularity: handles shrink as memory fills; 0 = off" },
  },
  // a block freed on one stream may serve another (the engine makes that stream wait first)
  streams: { crossStreamReuse: (o) => o.crossStream },
  create: (ctx, o) => new VmsAllocator(ctx, o),
};
