import { EventKind } from "@gmlake/trace";
import { Block, mergeFreeKeepLeft, splitBack } from "../core/block.js";
import { BlockPool } from "../core/block-pool.js";
import type { PhysicalChunk as Chunk, PolicyContext } from "../core/policy-context.js";
import { isDriverOom, StitchError } from "../core/errors.js";
import type { Policy, PolicyInstance } from "../core/policy.js";
import { kMinBlockSize, kSmallBuffer, kSmallSize, roundSize } from "../core/rounding.js";
import { PYTORCH_KNOBS } from "../core/pytorch-knobs.js";
import { Arena, SmallSegment } from "./vms-arena.js";

export interface VmsOptions extends Record<string, unknown> {
  /** 16 entries indexed by log2(size) - 20; null = from the allocator settings. */
  roundupPower2Divisions: number[] | null;
  /** Size of a small-pool segment (requests <= 1 MiB are packed into these; each is carved from the arena like a large block). */
  smallSegmentBytes: number;
  /** Largest physical handle made at once (bigger needs take several). */
  maxHandleBytes: number;
  /** New handles are at most request / handlesPerRequest (and maxHandleBytes): 1 = one handle per gap when it fits. */
  handlesPerRequest: number;
  /** At most this many new handles per gap (larger than maxHandleBytes when the gap needs it); 0 = no limit. */
  maxHandlesPerGap: number;
  /** Smallest handle made when the gap may overshoot (the arena's open end): one handle (up to maxHandleBytes), the room beyond the request serves the next ones. */
  minTailHandleBytes: number;
  /** Move free handles (wholly inside free blocks) to where a request needs memory before making new ones. */
  moveFreePages: boolean;
  /** Let a handle freed on one stream move to another stream's arena (needs a sync, see docs/vms.md). */
  crossStream: boolean;
  /** Which free handles move first: "size" (largest handle first) or "hole" (handles of the smallest free blocks first, keeping big free blocks whole). */
  donorOrder: string;
  /** Virtual bytes per stream arena; null = 2 x device memory. */
  arenaBytes: number | null;
  /** New handles are at most capacity / this (at least the granularity); 0 = off. See pressureCap. */
  capacityHandleDivisor: number;
  /** New handles are at most (capacity - reserved) / this (at least the granularity); 0 = off. */
  headroomHandleDivisor: number;
}

/** A free handle that may move: wholly inside free mapped block `block`. */
interface Donor {
  arena: Arena;
  block: Block;
  addr: number;
  chunk: Chunk;
  used: boolean;
}

/**
 * A moved handle's old mapping, left on the device until the kernels that used it there
 * are done (a mark of its stream completed) while its handle already serves at the new
 * place. To the policy the range is free and unmapped at once (the same decisions as an
 * unmap at once); a map into it, or the handle's release, first unmaps it.
 */
interface Retiring {
  arena: Arena;
  addr: number;
  chunk: Chunk;
  mark: number;
}

/** Where the unmapped part of a chosen window gets filled: [f0, f1), may overshoot to roomEnd. */
interface Gap {
  f0: number;
  f1: number;
  roomEnd: number;
  donors: Donor[];
}

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
export class VmsAllocator implements PolicyInstance {
  readonly pool = new BlockPool("vms-large", false);
  readonly smallPool = new BlockPool("vms-small", true);
  private readonly ctx: PolicyContext;
  private readonly o: VmsOptions;
  private readonly rp2: number[] | null;
  private readonly g: number;
  /** Block.seams are worked out only for the engine's integrity checks (a search of the arena's handles per malloc). */
  private readonly seams: boolean;
  private readonly arenas = new Map<number, Arena>();
  private readonly arenaBytes: number;
  private readonly n = { grows: 0, moved: 0, movedBytes: 0, created: 0, createdBytes: 0, tailRetries: 0, windowScans: 0, crossStreamHits: 0, smallSegments: 0, smallSegmentsMade: 0, released: 0, releasedBytes: 0 };
  /** Old mappings of moved handles waiting for their stream's mark (in mark order). */
  private readonly retiring: Retiring[] = [];

  constructor(ctx: PolicyContext, o: VmsOptions) {
    this.ctx = ctx;
    this.o = o;
    const rp2 = o.roundupPower2Divisions ?? ctx.settings.roundupPower2Divisions;
    this.rp2 = rp2.some((d) => d > 1) ? rp2 : null;
    this.g = ctx.device.granularity;
    this.seams = ctx.integrity;
    // the schema (vmsPolicy.knobs) checked each value; the granularity is the device's
    for (const [k, v] of [
      ["maxHandleBytes", o.maxHandleBytes],
      ["minTailHandleBytes", o.minTailHandleBytes],
    ] as const) {
      if (v % this.g !== 0) throw new StitchError("BAD_OPTION", `vms.${k} ${v} is not a multiple of the device granularity ${this.g}`);
    }
    const total = ctx.device.totalBytes;
    const want = o.arenaBytes ?? 2 * total;
    this.arenaBytes = Math.ceil(want / this.g) * this.g;
  }

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

  /** What malloc would serve from this stream's pools without a new segment, a grow or another stream's block (PolicyInstance.peekCached). */
  peekCached(size: number, stream: number): number | null {
    const rounded = roundSize(size, this.rp2);
    const b = rounded <= kSmallSize ? this.smallPool.seek(stream, rounded) : this.pool.seek(stream, rounded);
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
      const host = this.mallocLarge(this.o.smallSegmentBytes, stream, cachedOnly);
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

  private mallocLarge(rounded: number, stream: number, cachedOnly: boolean): Block | null {
    const b = this.pool.seek(stream, rounded);
    if (b !== null && b.stream === stream) {
      // the rest takes the best fit's place in the pool (no delete and insert)
      if (b.size > rounded) this.pool.replaceAtCursor(this.split(b, b.addr + rounded));
      else this.pool.takeAtCursor();
      this.markSeams(b);
      return b;
    }
    if (this.o.crossStream) {
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

  // ---- block chain ----

  /** Split `b` at `at`: b keeps [addr, at), the returned block gets [at, end). Pool membership is the caller's. */
  private split(b: Block, at: number): Block {
    const r = splitBack(b, at);
    if (!r.mapped) (r.segment as Arena).unmapped.add(r);
    return r;
  }

  /** `b` is free and in no pool: merge with free neighbours of the same mapping state (the left block survives), pool it if mapped. */
  private mergeFree(b: Block): Block {
    b = mergeFreeKeepLeft(b, this.leaveArena);
    if (b.mapped) this.pool.insert(b);
    return b;
  }

  /** A small block merging leaves the small pool (its small segment's blocks are all there). */
  private readonly leaveSmallPool = (n: Block): void => void this.smallPool.delete(n);

  /** A large block merging: a mapped one leaves the pool (its key changes or it goes); of two unmapped ones the absorbed leaves the arena's set. */
  private readonly leaveArena = (n: Block, b: Block): void => {
    if (n.mapped) this.pool.delete(n);
    else (n.segment as Arena).unmapped.delete(n === b.prev ? b : n);
  };

  /** Hand out [p, p + size) of free mapped block `b` (not in the pool); the rest goes back to the pool. */
  private carve(b: Block, p: number, size: number): Block {
    if (p > b.addr) {
      const r = this.split(b, p);
      this.pool.insert(b);
      b = r;
    }
    if (b.size > size) this.pool.insert(this.split(b, p + size));
    this.markSeams(b);
    return b;
  }

  /** Block.seams of a block handed out, for the engine's integrity checks only (see `seams`). */
  private markSeams(b: Block): void {
    if (this.seams) b.seams = (b.segment as Arena).seams(b.addr, b.addr + b.size);
  }

  private arenaFor(stream: number): Arena {
    let a = this.arenas.get(stream);
    if (a === undefined) {
      // arenaBytes of address space for each of the first 64 streams, half that for the
      // next 64, and so on (2 x 64 x arenaBytes in all however many streams: 35 TiB on an
      // H200, whose 112 TiB held only 408 arenas of 2 x its memory), and halved again
      // while the address space cannot hold it (arenaBytes near its 2^47 maximum).
      let bytes = Math.max(this.g, this.floorG(this.arenaBytes / 2 ** Math.floor(this.arenas.size / 64)));
      let base: number;
      for (;;) {
        try {
          base = this.ctx.reserve(bytes, this.g);
          break;
        } catch (e) {
          if (!isDriverOom(e) || bytes <= this.g) throw e;
          bytes = Math.max(this.g, this.floorG(bytes / 2));
        }
      }
      a = new Arena(base, bytes, stream);
      const b = new Block(base, bytes, stream, this.pool);
      b.mapped = false;
      b.segment = a;
      a.head = b;
      a.unmapped.add(b);
      this.arenas.set(stream, a);
    }
    return a;
  }

  // ---- the slow path ----

  private floorG(x: number): number {
    return Math.floor(x / this.g) * this.g;
  }
  private ceilG(x: number): number {
    return Math.ceil(x / this.g) * this.g;
  }

  /** Bytes to map so that [p, p + s) is all mapped; `b` is the block holding p. */
  private needAt(b: Block, p: number, s: number): number {
    const e = p + s;
    let need = 0;
    for (let x: Block | null = b; x !== null && x.addr < e; x = x.next) {
      if (!x.mapped) need += Math.min(x.addr + x.size, this.ceilG(e)) - Math.max(x.addr, this.floorG(p));
    }
    return need;
  }

  /**
   * The window [p, p + s) inside a run of free blocks that needs the fewest new bytes
   * (ties: lowest address). Candidates start at a block's start or end at a block's end.
   * `tail`: the last run of the arena, from its start (room for any handle).
   */
  private chooseWindow(a: Arena, s: number, tail: boolean): { p: number; r0: Block } | null {
    this.n.windowScans++;
    let best: { p: number; r0: Block } | null = null;
    let bestNeed = Infinity;
    const seen = new Set<Block>();
    for (const u of a.unmapped) {
      let r0 = u;
      while (r0.prev !== null && !r0.prev.allocated) r0 = r0.prev;
      if (seen.has(r0)) continue;
      seen.add(r0);
      let last = u;
      while (last.next !== null && !last.next.allocated) last = last.next;
      const end = last.addr + last.size;
      const nextRun = last.next;
      if (tail) {
        if (nextRun === null && end - r0.addr >= s) return { p: r0.addr, r0 };
        continue;
      }
      if (end - r0.addr < s) continue;
      for (let x: Block | null = r0; x !== nextRun; x = x!.next) {
        const xb = x!;
        if (xb.addr + s <= end) {
          const need = this.needAt(xb, xb.addr, s);
          if (need < bestNeed || (need === bestNeed && xb.addr < best!.p)) {
            bestNeed = need;
            best = { p: xb.addr, r0 };
          }
        }
        const q = xb.addr + xb.size - s;
        if (q >= r0.addr && q !== xb.addr) {
          let h: Block = r0;
          while (h.addr + h.size <= q) h = h.next!;
          const need = this.needAt(h, q, s);
          if (need < bestNeed || (need === bestNeed && q < best!.p)) {
            bestNeed = need;
            best = { p: q, r0 };
          }
        }
      }
    }
    return best;
  }

  /** Free handles that may move, largest first: wholly inside free mapped blocks, outside the window. */
  private donors(win: Arena, p: number, s: number, stream: number): Donor[] {
    const out: Donor[] = [];
    if (!this.o.moveFreePages) return out;
    for (const b of this.pool.toArray()) {
      // A captured graph may replay into a private pool's free addresses: never move those.
      if (b.stream < 0 || (!this.o.crossStream && b.stream !== stream)) continue;
      const a = b.segment as Arena;
      const end = b.addr + b.size;
      for (let i = a.lowerBound(b.addr); i < a.hAddr.length && a.hAddr[i]! < end; i++) {
        const h = a.hAddr[i]!;
        const c = a.hChunk[i]!;
        if (h + c.size > end) break;
        if (a === win && h < p + s && h + c.size > p) continue;
        out.push({ arena: a, block: b, addr: h, chunk: c, used: false });
      }
    }
    if (this.o.donorOrder === "hole") out.sort((x, y) => x.block.size - y.block.size || y.chunk.size - x.chunk.size);
    else out.sort((x, y) => y.chunk.size - x.chunk.size);
    return out;
  }

  /** The donor's handle-sized block, split out of its free block (which stays pooled around it). */
  private isolate(d: Donor): Block {
    const b = d.block;
    const z = d.chunk.size;
    this.pool.delete(b);
    let m = b;
    if (d.addr > b.addr) {
      m = this.split(b, d.addr);
      this.pool.insert(b);
    }
    if (m.addr + m.size > d.addr + z) this.pool.insert(this.split(m, d.addr + z));
    return m;
  }

  /**
   * Unmap a donor; its range becomes a free unmapped block. `after`: a mark of its stream
   * (done: no device sync; undefined: the engine synchronizes first); `late`: the device
   * unmap waits for the mark (settleRetiring), the policy's books change now.
   */
  private unmapDonor(d: Donor, after?: number, late = false): void {
    const m = this.isolate(d);
    m.mapped = false;
    d.arena.unmapped.add(m);
    if (late) this.retiring.push({ arena: d.arena, addr: d.addr, chunk: d.chunk, mark: after! });
    else this.ctx.unmapChunks(d.addr, [d.chunk], d.arena.stream, after);
    d.arena.removeHandle(d.addr);
    this.ctx.segmentUnmapped(d.addr, d.chunk.size, d.arena.stream);
    this.mergeFree(m);
  }

  /**
   * Give a donor's handle back to the driver to make room under pressure: unmapped once a
   * mark of its stream is done (the host waits for that mark only, not the device), then
   * released.
   */
  private releaseDonor(d: Donor): void {
    this.unmapDonor(d, this.ctx.markStream(d.arena.stream));
    this.ctx.releaseChunk(d.chunk);
    this.n.released++;
    this.n.releasedBytes += d.chunk.size;
  }

  /**
   * Take a donor's handle for a grow on `stream`. Kernels queued on the donor's stream
   * before its free may still use the old range, and cuMemUnmap does not wait for them: so
   * a mark on that stream is made now. Done (always on sim and host; live when the GPU has
   * caught up): unmapped at once without a device sync. Not done: the old mapping stays on
   * the device until a later call finds the mark done (Retiring), while the handle is mapped
   * at its new place now (a handle may be mapped twice); a new stream first waits for the
   * donor's (stream order covers the same stream). Donors come from streams' arenas only
   * (never a private pool's), so the mark's stream is a real one.
   */
  private takeDonor(d: Donor, stream: number): void {
    const s = d.arena.stream;
    const mark = this.ctx.markStream(s);
    // Into a private pool's arena (a negative key, no stream to make wait): the unmap waits for the mark now.
    const late = stream >= 0 && !this.ctx.markDone(mark);
    this.unmapDonor(d, mark, late);
    if (late && s !== stream) this.ctx.waitForStream(s, stream);
  }

  /**
   * Unmap on the device the old mappings whose marks are done; with `force` all of them
   * (the engine synchronizes the device once if a mark is not done: release paths), or with
   * `within` those in that arena's [from, to) too (a map is about to land there: the host
   * waits for their marks only).
   */
  private settleRetiring(force: boolean, within?: Arena, from = 0, to = 0): void {
    const r = this.retiring;
    if (r.length === 0) return;
    let keep = 0;
    // Entries come in mark order, and a stream's later marks are not done before its earlier
    // ones (stream order): one query per stream whose mark is not done yet.
    const busy: number[] = [];
    for (let i = 0; i < r.length; i++) {
      const x = r[i]!;
      const must = force || (within === x.arena && x.addr < to && x.addr + x.chunk.size > from);
      if (!must && (busy.includes(x.arena.stream) || !this.ctx.markDone(x.mark))) {
        if (!busy.includes(x.arena.stream)) busy.push(x.arena.stream);
        r[keep++] = x;
        continue;
      }
      // a map lands here: wait for this mark only; a release (force): one device sync for all unless done
      const after = !force || this.ctx.markDone(x.mark) ? x.mark : undefined;
      this.ctx.unmapChunks(x.addr, [x.chunk], x.arena.stream, after);
    }
    r.length = keep;
  }

  /**
   * Map `chunks` side by side at f0 (inside a free unmapped block reachable from r0) and merge the range into the free mapped blocks.
   * False when the driver failed the map (out of memory): the chunks (donors already unmapped, new ones) are released, the range stays free and unmapped.
   */
  private mapInto(a: Arena, r0: Block, f0: number, chunks: Chunk[], moved: number): boolean {
    if (chunks.length === 0) return true;
    let bytes: number;
    let want = 0;
    for (const c of chunks) want += c.size;
    this.settleRetiring(false, a, f0, f0 + want); // an old mapping still there is unmapped first
    try {
      bytes = this.ctx.mapChunks(f0, chunks, a.stream); // all or nothing
    } catch (e) {
      this.settleRetiring(true); // a moved handle still mapped at its old place cannot be released
      for (const c of chunks) this.ctx.releaseChunk(c);
      if (isDriverOom(e)) return false;
      throw e;
    }
    let at = f0;
    for (const c of chunks) {
      a.addHandle(at, c);
      at += c.size;
    }
    let u: Block = r0;
    while (u.addr + u.size <= f0) u = u.next!;
    if (u.mapped || u.allocated || u.addr + u.size < f0 + bytes) throw new StitchError("INVARIANT", `vms: no free unmapped room at 0x${f0.toString(16)}`);
    let m = u;
    if (f0 > u.addr) m = this.split(u, f0);
    if (m.addr + m.size > f0 + bytes) this.split(m, f0 + bytes);
    m.mapped = true;
    a.unmapped.delete(m);
    this.mergeFree(m);
    this.ctx.segmentMapped(f0, bytes, a.stream);
    if (moved > 0) this.ctx.record(EventKind.stitch, f0, bytes, a.stream, chunks.length);
    return true;
  }

  /** Make new handles for `bytes` (several when above maxHandleBytes); null when the driver is out of memory. */
  private create(bytes: number, cap: number, out: Chunk[]): boolean {
    while (bytes > 0) {
      const z = Math.min(bytes, cap);
      const c = this.ctx.createChunk(z);
      if (c === null) return false;
      this.n.created++;
      this.n.createdBytes += z;
      out.push(c);
      bytes -= z;
    }
    return true;
  }

  /**
   * The largest handle a grow may make for the capacity it runs in. A handle that holds a
   * live block next to free memory traps that free memory (a mapping is a whole handle: it
   * can neither move nor be released), and trapped bytes are what keeps a job from fitting
   * once memory is tight. So handles stay a small share of the capacity (capacity /
   * capacityHandleDivisor: 2048 handles fill it, so 64 MiB, the maxHandleBytes default, on
   * an H200's 139.8 GiB and 5 MiB in a 10 GiB budget) and shrink further as the headroom
   * goes ((capacity - reserved) / headroomHandleDivisor). Infinity while both shares are
   * at least maxHandleBytes (memory plentiful: the decisions are those of no capacity).
   */
  private pressureCap(): number {
    const k = this.o.headroomHandleDivisor;
    const c = this.ctx.capacityBytes;
    let share = k === 0 ? Infinity : (c - this.ctx.reservedBytes) / k;
    if (this.o.capacityHandleDivisor > 0) share = Math.min(share, c / this.o.capacityHandleDivisor);
    return share >= this.o.maxHandleBytes ? Infinity : Math.max(this.g, this.floorG(share));
  }

  private grow(s: number, stream: number, tail: boolean): Block | null {
    this.n.grows++;
    this.settleRetiring(false);
    let a: Arena;
    try {
      a = this.arenaFor(stream);
    } catch (e) {
      if (isDriverOom(e)) return null; // no virtual range for the arena: out of memory
      throw e;
    }
    const w = this.chooseWindow(a, s, tail);
    if (w === null) return null;
    const { p, r0 } = w;
    // The unmapped stretches of the window, by address (donors never touch the window).
    const gaps: Gap[] = [];
    const e = p + s;
    for (let x: Block | null = r0; x !== null && x.addr < e; x = x.next) {
      if (x.mapped || x.addr + x.size <= p) continue;
      const f0 = Math.max(x.addr, this.floorG(p));
      const f1 = Math.min(x.addr + x.size, this.ceilG(e));
      gaps.push({ f0, f1, roomEnd: x.addr + x.size, donors: [] });
    }
    const ds = this.donors(a, p, s, stream);
    // Handles no larger than a share of the request, so that what later requests leave free is more often a whole handle.
    const pcap = this.pressureCap();
    const cap = Math.min(this.o.maxHandleBytes, pcap, Math.max(this.g, this.ceilG(s / this.o.handlesPerRequest)));
    // Choose donors per gap: largest that fit first, then one that overshoots into free room.
    for (const gp of gaps) {
      let left = gp.f1 - gp.f0;
      let filled = 0;
      for (const d of ds) {
        if (left === 0) break;
        if (!d.used && d.chunk.size <= left) {
          d.used = true;
          gp.donors.push(d);
          left -= d.chunk.size;
          filled += d.chunk.size;
        }
      }
      if (left > 0) {
        // the smallest handle that covers the rest and still fits the free room (the excess stays mapped and free)
        let pick: Donor | null = null;
        for (const d of ds) {
          if (!d.used && d.chunk.size >= left && gp.f0 + filled + d.chunk.size <= gp.roomEnd && (pick === null || d.chunk.size < pick.chunk.size)) pick = d;
        }
        if (pick !== null) {
          pick.used = true;
          gp.donors.push(pick);
        }
      }
    }
    // What the gaps still need must fit in the capacity: if it does not, free handles that
    // fit no gap are released (in donor order) to make room, and the new handles are sized
    // to the gaps. Only then can a handle too big for every gap serve this request.
    let need = 0;
    for (const gp of gaps) for (const d of gp.donors) need -= d.chunk.size;
    for (const gp of gaps) need += gp.f1 - gp.f0;
    const room = this.ctx.capacityBytes - this.ctx.reservedBytes;
    const spare: Donor[] = [];
    for (let i = 0, freed = 0; need > room + freed && i < ds.length; i++) {
      const d = ds[i]!;
      if (d.used) continue;
      d.used = true;
      spare.push(d);
      freed += d.chunk.size;
    }
    const tight = need > room;
    // Unmap every chosen donor first (reserved never overshoots); within a block from the highest address down, so the block object stays valid.
    const chosen = ds.filter((d) => d.used).sort((x, y) => y.addr - x.addr);
    for (const d of chosen) {
      if (spare.includes(d)) {
        this.releaseDonor(d);
        continue;
      }
      this.takeDonor(d, stream);
      this.n.moved++;
      this.n.movedBytes += d.chunk.size;
    }
    let ok = true;
    for (const gp of gaps) {
      const chunks: Chunk[] = [];
      let filled = 0;
      for (const d of gp.donors) {
        chunks.push(d.chunk);
        filled += d.chunk.size;
      }
      const moved = chunks.length;
      const left = gp.f1 - gp.f0 - filled;
      if (left > 0 && ok) {
        // At the open end a larger handle costs the same calls and leaves room for the next requests.
        const open = gp.roomEnd >= a.end && pcap === Infinity && !tight;
        const want = open ? Math.max(left, Math.min(this.o.minTailHandleBytes, gp.roomEnd - gp.f0 - filled)) : left;
        const k = this.o.maxHandlesPerGap;
        let hcap = k > 0 ? Math.max(cap, this.ceilG(want / k)) : cap;
        // The room made beyond the request is one handle (up to maxHandleBytes), not cut to the request's
        // size: the driver time is per handle (a create and a set-access each), see docs/vms.md.
        if (want > left) hcap = Math.max(hcap, Math.min(want, this.o.maxHandleBytes));
        if (!this.create(want, hcap, chunks)) ok = false;
      } else if (left > 0) {
        ok = false;
      }
      if (!this.mapInto(a, r0, gp.f0, chunks, moved)) ok = false;
    }
    if (!ok) return null;
    let b: Block = r0;
    while (b.addr + b.size <= p) b = b.next!;
    if (!b.mapped || b.allocated || b.addr + b.size < e) throw new StitchError("INVARIANT", `vms: window 0x${p.toString(16)}+${s} not mapped after grow`);
    this.pool.delete(b);
    return this.carve(b, p, s);
  }

  // ---- releasing ----

  /** Unmap and release every handle wholly inside a free block (empty_cache, out-of-memory). */
  private releaseFreeHandles(): void {
    this.settleRetiring(true);
    const all: Donor[] = [];
    for (const b of this.pool.toArray()) {
      const a = b.segment as Arena;
      const end = b.addr + b.size;
      for (let i = a.lowerBound(b.addr); i < a.hAddr.length && a.hAddr[i]! < end; i++) {
        const c = a.hChunk[i]!;
        if (a.hAddr[i]! + c.size > end) break;
        all.push({ arena: a, block: b, addr: a.hAddr[i]!, chunk: c, used: true });
      }
    }
    all.sort((x, y) => y.addr - x.addr);
    for (const d of all) {
      this.unmapDonor(d);
      this.ctx.releaseChunk(d.chunk);
    }
  }

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
    headroomHandleDivisor: { type: "number", min: 0, max: 2 ** 20, default: 256, description: "new handles are at most (capacity - reserved) / this, at least the granularity: handles shrink as memory fills; 0 = off" },
  },
  // a block freed on one stream may serve another (the engine makes that stream wait first)
  streams: { crossStreamReuse: (o) => o.crossStream },
  create: (ctx, o) => new VmsAllocator(ctx, o),
};
