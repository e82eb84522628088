import { EventKind } from "@gmlake/trace";
import { Block, mergeFreeKeepLeft, splitBack } from "../core/block.js";
import { BlockPool } from "../core/block-pool.js";
import type { PhysicalChunk as Chunk, PolicyContext } from "../core/policy-context.js";
import { isDriverOom, StitchError } from "../core/errors.js";
import { Arena, chooseWindow, donorsFor, type Donor } from "./vms-arena.js";

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
  /** Under a budget below the device's memory, new handles are at most budget / this (at least the granularity); 0 = off. */
  budgetHandleDivisor: number;
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

/** Where the unmapped part of a chosen window gets filled: [start, end), may overshoot to roomEnd. */
interface Gap {
  start: number;
  end: number;
  roomEnd: number;
  donors: Donor[];
}

/**
 * What the vms policy keeps and how it grows: the stream arenas and their block chains
 * (split, merge keeping the left block, carve), the pools, and the slow path that maps
 * the unmapped part of a chosen window with moved and new handles (grow). VmsAllocator
 * (vms.ts) adds malloc, free and the checks.
 */
export abstract class VmsState {
  readonly pool = new BlockPool("vms-large", false);
  readonly smallPool = new BlockPool("vms-small", true);
  protected readonly ctx: PolicyContext;
  protected readonly o: VmsOptions;
  protected readonly rp2: number[] | null;
  protected readonly g: number;
  /** Block.seams are worked out only for the engine's integrity checks (a search of the arena's handles per malloc). */
  protected readonly seams: boolean;
  protected readonly arenas = new Map<number, Arena>();
  protected readonly arenaBytes: number;
  protected readonly n = { grows: 0, moved: 0, movedBytes: 0, created: 0, createdBytes: 0, tailRetries: 0, windowScans: 0, crossStreamHits: 0, smallSegments: 0, smallSegmentsMade: 0, released: 0, releasedBytes: 0 };
  /** Old mappings of moved handles waiting for their stream's mark (in mark order). */
  protected readonly retiring: Retiring[] = [];

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

  // ---- block chain ----

  /** Split `b` at `at`: b keeps [addr, at), the returned block gets [at, end). Pool membership is the caller's. */
  protected split(b: Block, at: number): Block {
    const r = splitBack(b, at);
    if (!r.mapped) (r.segment as Arena).unmapped.add(r);
    return r;
  }

  /** `b` is free and in no pool: merge with free neighbours of the same mapping state (the left block survives), pool it if mapped. */
  protected mergeFree(b: Block): Block {
    b = mergeFreeKeepLeft(b, this.leaveArena);
    if (b.mapped) this.pool.insert(b);
    return b;
  }

  /** A small block merging leaves the small pool (its small segment's blocks are all there). */
  protected readonly leaveSmallPool = (n: Block): void => void this.smallPool.delete(n);

  /** A large block merging: a mapped one leaves the pool (its key changes or it goes); of two unmapped ones the absorbed leaves the arena's set. */
  protected readonly leaveArena = (n: Block, b: Block): void => {
    if (n.mapped) this.pool.delete(n);
    else (n.segment as Arena).unmapped.delete(n === b.prev ? b : n);
  };

  /** Hand out [p, p + size) of free mapped block `b` (not in the pool); the rest goes back to the pool. */
  protected carve(b: Block, p: number, size: number): Block {
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
  protected markSeams(b: Block): void {
    if (this.seams) b.seams = (b.segment as Arena).seams(b.addr, b.addr + b.size);
  }

  protected arenaFor(stream: number): Arena {
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

  protected floorG(x: number): number {
    return Math.floor(x / this.g) * this.g;
  }
  protected ceilG(x: number): number {
    return Math.ceil(x / this.g) * this.g;
  }

  /** The donor's handle-sized block, split out of its free block (which stays pooled around it). */
  protected isolate(d: Donor): Block {
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
  protected unmapDonor(d: Donor, after?: number, late = false): void {
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
  protected releaseDonor(d: Donor): void {
    this.unmapDonor(d, this.markOf(d.arena));
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
   * donor's (stream order covers the same stream). A private pool's arena (a negative key,
   * lendPoolMemory only) names no stream to mark: its donors wait for the device.
   */
  protected takeDonor(d: Donor, stream: number): void {
    const s = d.arena.stream;
    if (s < 0) {
      this.unmapDonor(d);
      return;
    }
    const mark = this.ctx.markStream(s);
    // Into a private pool's arena (a negative key, no stream to make wait): the unmap waits for the mark now.
    const late = stream >= 0 && !this.ctx.markDone(mark);
    this.unmapDonor(d, mark, late);
    if (late && s !== stream) this.ctx.waitForStream(s, stream);
  }

  /** A mark of the arena's stream for an unmap there; undefined (the device is synchronized) for a private pool's key, which names none. */
  private markOf(a: Arena): number | undefined {
    return a.stream < 0 ? undefined : this.ctx.markStream(a.stream);
  }

  /**
   * Unmap on the device the old mappings whose marks are done; with `force` all of them
   * (the engine synchronizes the device once if a mark is not done: release paths), or with
   * `within` those in that arena's [from, to) too (a map is about to land there: the host
   * waits for their marks only).
   */
  protected settleRetiring(force: boolean, within?: Arena, from = 0, to = 0): void {
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
   * Map `chunks` side by side at `start` (inside a free unmapped block reachable from `runStart`) and merge the range into the free mapped blocks.
   * False when the driver failed the map (out of memory): the chunks (donors already unmapped, new ones) are released, the range stays free and unmapped.
   */
  protected mapInto(arena: Arena, runStart: Block, start: number, chunks: Chunk[], moved: number): boolean {
    if (chunks.length === 0) return true;
    let bytes: number;
    let want = 0;
    for (const c of chunks) want += c.size;
    this.settleRetiring(false, arena, start, start + want); // an old mapping still there is unmapped first
    try {
      bytes = this.ctx.mapChunks(start, chunks, arena.stream); // all or nothing
    } catch (e) {
      this.settleRetiring(true); // a moved handle still mapped at its old place cannot be released
      for (const c of chunks) this.ctx.releaseChunk(c);
      if (isDriverOom(e)) return false;
      throw e;
    }
    let at = start;
    for (const c of chunks) {
      arena.addHandle(at, c);
      at += c.size;
    }
    let u: Block = runStart;
    while (u.addr + u.size <= start) u = u.next!;
    if (u.mapped || u.allocated || u.addr + u.size < start + bytes) throw new StitchError("INVARIANT", `vms: no free unmapped room at 0x${start.toString(16)}`);
    let m = u;
    if (start > u.addr) m = this.split(u, start);
    if (m.addr + m.size > start + bytes) this.split(m, start + bytes);
    m.mapped = true;
    arena.unmapped.delete(m);
    this.mergeFree(m);
    this.ctx.segmentMapped(start, bytes, arena.stream);
    if (moved > 0) this.ctx.record(EventKind.stitch, start, bytes, arena.stream, chunks.length);
    return true;
  }

  /** Make new handles for `bytes` (several when above maxHandleBytes); null when the driver is out of memory. */
  protected create(bytes: number, cap: number, out: Chunk[]): boolean {
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
   * goes ((capacity - reserved) / headroomHandleDivisor). A budget below the device's memory
   * (set_per_process_memory_fraction) says the job is meant to run near it: handles are then
   * at most budget / budgetHandleDivisor (the 2 MiB granularity up to a 32 GiB budget, as
   * expandable_segments' pages), so that frees still pending on a lagging GPU's streams trap
   * little when the budget is reached. Infinity while
   * every share is at least maxHandleBytes (memory plentiful: the decisions are those of no capacity).
   */
  protected pressureCap(): number {
    const k = this.o.headroomHandleDivisor;
    const c = this.ctx.capacityBytes;
    let share = k === 0 ? Infinity : (c - this.ctx.reservedBytes) / k;
    if (this.o.capacityHandleDivisor > 0) share = Math.min(share, c / this.o.capacityHandleDivisor);
    if (this.o.budgetHandleDivisor > 0 && c < this.ctx.deviceBytes) share = Math.min(share, c / this.o.budgetHandleDivisor);
    return share >= this.o.maxHandleBytes ? Infinity : Math.max(this.g, this.floorG(share));
  }

  /** This grow may only move free handles into its window (mallocHeld): nothing created, nothing released. */
  protected heldOnly = false;

  protected grow(size: number, stream: number, tail: boolean): Block | null {
    this.n.grows++;
    this.settleRetiring(false);
    let arena: Arena;
    try {
      arena = this.arenaFor(stream);
    } catch (e) {
      if (isDriverOom(e)) return null; // no virtual range for the arena: out of memory
      throw e;
    }
    this.n.windowScans++;
    const found = chooseWindow(arena, size, tail, this.g);
    if (found === null) return null;
    const { start: windowStart, runStart } = found;
    // The unmapped stretches of the window, by address (donors never touch the window).
    const gaps: Gap[] = [];
    const windowEnd = windowStart + size;
    for (let block: Block | null = runStart; block !== null && block.addr < windowEnd; block = block.next) {
      if (block.mapped || block.addr + block.size <= windowStart) continue;
      const gapStart = Math.max(block.addr, this.floorG(windowStart));
      const gapEnd = Math.min(block.addr + block.size, this.ceilG(windowEnd));
      gaps.push({ start: gapStart, end: gapEnd, roomEnd: block.addr + block.size, donors: [] });
    }
    // While only mapping is allowed (a CUDA-graph capture) no handle moves: the window gets new ones.
    const candidates = this.ctx.mapOnly ? [] : donorsFor(this.pool, this.o, arena, windowStart, size, stream, this.ctx.lendPoolMemory);
    // Handles no larger than a share of the request, so that what later requests leave free is more often a whole handle.
    const pressureHandleCap = this.pressureCap();
    const handleCap = Math.min(this.o.maxHandleBytes, pressureHandleCap, Math.max(this.g, this.ceilG(size / this.o.handlesPerRequest)));
    // Choose donors per gap: largest that fit first, then one that overshoots into free room.
    for (const gap of gaps) {
      let left = gap.end - gap.start;
      let filled = 0;
      for (const donor of candidates) {
        if (left === 0) break;
        if (!donor.used && donor.chunk.size <= left) {
          donor.used = true;
          gap.donors.push(donor);
          left -= donor.chunk.size;
          filled += donor.chunk.size;
        }
      }
      if (left > 0) {
        // the smallest handle that covers the rest and still fits the free room (the excess stays mapped and free)
        let pick: Donor | null = null;
        for (const donor of candidates) {
          if (!donor.used && donor.chunk.size >= left && gap.start + filled + donor.chunk.size <= gap.roomEnd && (pick === null || donor.chunk.size < pick.chunk.size)) pick = donor;
        }
        if (pick !== null) {
          pick.used = true;
          gap.donors.push(pick);
        }
      }
    }
    if (this.heldOnly) {
      // before anything moved: the donors cover every gap, or this grow does nothing
      for (const gap of gaps) {
        let got = 0;
        for (const donor of gap.donors) got += donor.chunk.size;
        if (got < gap.end - gap.start) return null;
      }
    }
    // What the gaps still need must fit in the capacity: if it does not, free handles that
    // fit no gap are released (in donor order) to make room, and the new handles are sized
    // to the gaps. Only then can a handle too big for every gap serve this request.
    let need = 0;
    for (const gap of gaps) {
      need += gap.end - gap.start;
      for (const donor of gap.donors) need -= donor.chunk.size;
    }
    const room = this.ctx.capacityBytes - this.ctx.reservedBytes;
    for (let i = 0, freed = 0; need > room + freed && i < candidates.length; i++) {
      const donor = candidates[i]!;
      if (donor.used) continue;
      donor.used = donor.release = true;
      freed += donor.chunk.size;
    }
    const tight = need > room;
    // Unmap every chosen donor first (reserved never overshoots); within a block from the highest address down, so the block object stays valid.
    const chosen = candidates.filter((donor) => donor.used).sort((hi, lo) => lo.addr - hi.addr);
    for (const donor of chosen) {
      if (donor.release) {
        this.releaseDonor(donor);
        continue;
      }
      this.takeDonor(donor, stream);
      this.n.moved++;
      this.n.movedBytes += donor.chunk.size;
    }
    let ok = true;
    for (const gap of gaps) {
      const chunks: Chunk[] = [];
      let filled = 0;
      for (const donor of gap.donors) {
        chunks.push(donor.chunk);
        filled += donor.chunk.size;
      }
      const moved = chunks.length;
      const left = gap.end - gap.start - filled;
      if (left > 0 && ok) {
        // At the open end a larger handle costs the same calls and leaves room for the next requests.
        const open = gap.roomEnd >= arena.end && pressureHandleCap === Infinity && !tight;
        const want = open ? Math.max(left, Math.min(this.o.minTailHandleBytes, gap.roomEnd - gap.start - filled)) : left;
        const maxPerGap = this.o.maxHandlesPerGap;
        let gapHandleCap = maxPerGap > 0 ? Math.max(handleCap, this.ceilG(want / maxPerGap)) : handleCap;
        // The room made beyond the request is one handle (up to maxHandleBytes), not cut to the request's
        // size: the driver time is per handle (a create and a set-access each), see docs/vms.md.
        if (want > left) gapHandleCap = Math.max(gapHandleCap, Math.min(want, this.o.maxHandleBytes));
        if (!this.create(want, gapHandleCap, chunks)) ok = false;
      } else if (left > 0) {
        ok = false;
      }
      if (!this.mapInto(arena, runStart, gap.start, chunks, moved)) ok = false;
    }
    if (!ok) return null;
    let served: Block = runStart;
    while (served.addr + served.size <= windowStart) served = served.next!;
    if (!served.mapped || served.allocated || served.addr + served.size < windowEnd) throw new StitchError("INVARIANT", `vms: window 0x${windowStart.toString(16)}+${size} not mapped after grow`);
    this.pool.delete(served);
    return this.carve(served, windowStart, size);
  }

  /** Unmap and release every handle wholly inside a free block (empty_cache, out-of-memory). */
  protected releaseFreeHandles(): void {
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
}
