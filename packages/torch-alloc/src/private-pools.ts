/**
 * Private memory pools (CUDA graphs, torch.cuda.MemPool) with PyTorch's rules
 * (docs/design-private-pools.md): an allocation made while PyTorch allocates to pool P (a
 * capture, use_mem_pool) comes from P; memory freed in P is reused only in P; P's memory goes
 * back to the engine when the last use of P is released and its last block is freed.
 *
 * A pool's memory is engine blocks taken on the pool's own stream key (poolStreamKey: the
 * policy sizes them and vms stitches them; what the pool frees there, vms may lend to others
 * after a device sync: AllocatorOptions.lendPoolMemory) and held, allocated in the
 * engine's books, for the pool's life; the pool carves its blocks out of them. So an
 * empty_cache or an out-of-memory release never unmaps an address a captured graph replays
 * into. At the window's begin (PyTorch calls it before cudaStreamBeginCapture) the pool takes
 * what the capture is expected to need; during a capture it grows as PyTorch's pools do, by
 * an engine call that may map memory but neither synchronizes nor unmaps (the engine's
 * take(capturing): stitch's CaptureGuard under it); a free during a capture makes no engine call.
 * A checkpoint (cudagraph trees) copies a pool's carve state; its restore puts it back on the
 * same engine blocks (pool-ranges.ts).
 */
import { poolStreamKey, type Block } from "@gmlake/stitch";

import { STATUS_ERROR } from "./ops.js";
import { addRange, restoreCheckpoint, takeCheckpoint, type PoolBlock, type PoolCheckpoint, type Segment } from "./pool-ranges.js";

/** What the pools need of the engine (the LiveAllocator). */
export interface PoolEngine {
  /**
   * An engine block of at least `size` bytes on `key`, or null when out of memory. May call the
   * driver; `capturing`: a CUDA graph is being captured, so no synchronization and no unmap (a
   * call that would need one throws a PoolError STATUS_CAPTURE). `held`: from memory the
   * engine holds now, no byte more reserved (Allocator.tryMallocHeld), else null.
   */
  take(size: number, key: number, capturing: boolean, held?: boolean): Block | null;
  /** A block from take() back to the engine. */
  give(b: Block): void;
}

/** A refused pool call: `status` is the bridge's (-1 out of memory, -4 capture). */
export class PoolError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export const STATUS_CAPTURE = -4;
const ALIGN = 512;
const MiB = 2 ** 20;
/** The smallest block a pool takes from the engine outside capture (PyTorch's small-pool segment). */
const MIN_SEGMENT = 2 * MiB;
/** A reserve is taken in pieces of at least this (and of the largest allocation expected), so that what a capture leaves untouched goes back whole. */
const RESERVE_PIECE = 64 * MiB;

class Pool {
  readonly segments: Segment[] = [];
  readonly live = new Map<number, PoolBlock>();
  /** Graphs and MemPools using it (PyTorch's use_count). */
  useCount = 1;
  /** Open allocate-to-pool windows (one at a time, as PyTorch). */
  window = false;
  /** An allocation of the open window was made during a capture. */
  capturing = false;
  inUse = 0;
  private windowBase = 0;
  private windowPeak = 0;
  /** The most a window of this pool has needed beyond what was in use at its begin. */
  need = 0;
  /** Bytes of recorded blocks freed: never reused (their other streams are not waited for) until the pool goes. */
  held = 0;

  constructor(
    readonly key: string,
    readonly ordinal: number,
    readonly streamKey: number,
  ) {}

  get reserved(): number {
    let n = 0;
    for (const s of this.segments) n += s.block.size;
    return n;
  }

  get freeBytes(): number {
    return this.reserved - this.inUse - this.held;
  }

  open(): void {
    this.window = true;
    this.capturing = false;
    this.windowBase = this.windowPeak = this.inUse;
  }

  close(): void {
    this.window = false;
    this.capturing = false;
    this.need = Math.max(this.need, this.windowPeak - this.windowBase);
  }

  /** Best fit among the free ranges: [segment, index] or null. */
  private fit(size: number): [Segment, number] | null {
    let best: [Segment, number] | null = null;
    let bestSize = Infinity;
    for (const s of this.segments) {
      for (let i = 0; i < s.free.length; i++) {
        const r = s.free[i]!;
        if (r.size >= size && r.size < bestSize) {
          best = [s, i];
          bestSize = r.size;
        }
      }
    }
    return best;
  }

  carve(size: number, requested = size, stream = 0): number | null {
    const f = this.fit(size);
    if (f === null) return null;
    const [seg, i] = f;
    const r = seg.free[i]!;
    const addr = r.addr;
    if (r.size === size) seg.free.splice(i, 1);
    else seg.free[i] = { addr: addr + size, size: r.size - size };
    seg.touched = true;
    this.live.set(addr, { seg, size, requested, stream, recorded: false });
    this.inUse += size;
    if (this.inUse > this.windowPeak) this.windowPeak = this.inUse;
    return addr;
  }

  addSegment(block: Block): void {
    this.segments.push({ block, free: [{ addr: block.addr, size: block.size }], held: [], touched: false });
  }

  /** A block of this pool freed: its range is free again, merged with its neighbours. */
  release(addr: number, pb: PoolBlock): void {
    this.live.delete(addr);
    this.inUse -= pb.size;
    if (pb.recorded) {
      this.held += pb.size;
      addRange(pb.seg.held, addr, pb.size);
      return;
    }
    addRange(pb.seg.free, addr, pb.size);
  }

  /**
   * setCheckpointPoolState: every live block freed (those on segments the checkpoint does not
   * know as any free), then the checkpoint's carve state back (pool-ranges.ts). Returns the
   * addresses freed.
   */
  restore(c: PoolCheckpoint): number[] {
    const freed = [...this.live.keys()];
    const known = new Set(c.segments.map((s) => s.seg));
    for (const [addr, pb] of [...this.live]) if (!known.has(pb.seg)) this.release(addr, pb);
    [this.inUse, this.held] = restoreCheckpoint(c, this.segments, this.live);
    if (this.inUse > this.windowPeak) this.windowPeak = this.inUse;
    return freed;
  }
}

const idKey = (a: number, b: number): string => `${a},${b}`;
const fmtMiB = (b: number): string => `${(b / MiB).toFixed(2)} MiB`;

export class PrivatePools {
  private readonly byKey = new Map<string, Pool>();
  private readonly byOrdinal = new Map<number, Pool>();
  private nextOrdinal = 1;
  /**
   * Ordinals of pools gone: a new pool takes one, and so the stream key whose memory (an arena
   * under vms) the engine keeps for it, instead of a new key per graph ever captured.
   */
  private readonly freeOrdinals: number[] = [];
  /** The id (a, b) of the first pool that had each ordinal: a snapshot names the ordinal's stream key by it. */
  private readonly firstIds = new Map<number, readonly [number, number]>();
  /** Pools whose open window allocated during a capture (frees of other blocks wait for it: no engine call during capture). */
  capturing = 0;
  readonly counts = { begins: 0, ends: 0, releases: 0, poolAllocs: 0, poolFrees: 0, segmentsTaken: 0, bytesReturned: 0, captureGrows: 0, checkpoints: 0, restores: 0 };
  /** Checkpoints taken (getCheckpointState) and not dropped yet, by id: the pool's and a copy of its carve state. */
  private readonly checkpoints = new Map<number, { readonly pool: Pool; readonly state: PoolCheckpoint }>();
  private nextCheckpoint = 1;

  constructor(
    private readonly engine: PoolEngine,
    /** The least a capture window keeps free in its pool at begin (GMLAKE_POOL_RESERVE_BYTES). */
    private readonly reserveBytes = 0,
  ) {}

  get size(): number {
    return this.byKey.size;
  }

  /**
   * beginAllocateToPool (window: true) or createOrIncrefPool (MemPool, window: false):
   * creates pool (a, b) with one use, or adds a use. A window takes memory ahead, outside
   * capture: at least `expect` bytes free in the pool (the caller's estimate of what the
   * capture needs), the most a window of it needed before, and reserveBytes. Returns its ordinal.
   */
  begin(a: number, b: number, window: boolean, expect = 0, largest = 0): number {
    const key = idKey(a, b);
    let p = this.byKey.get(key);
    if (p !== undefined && window && p.window) throw new Error(`beginAllocateToPool: already allocating to pool (${a}, ${b})`);
    if (p === undefined) {
      const ordinal = this.freeOrdinals.length > 0 ? this.freeOrdinals.pop()! : this.nextOrdinal++;
      p = new Pool(key, ordinal, poolStreamKey(ordinal, 0));
      if (!this.firstIds.has(ordinal)) this.firstIds.set(ordinal, [a, b]);
      this.byKey.set(key, p);
      this.byOrdinal.set(p.ordinal, p);
    } else {
      p.useCount++;
    }
    if (!window) return p.ordinal;
    this.counts.begins++;
    p.open();
    // In pieces no smaller than the largest allocation expected: the pieces a capture never
    // touches go back at its end. What is expected comes only from memory the engine holds now
    // (a guess must never raise the peak: a capture can still grow by mapping, as PyTorch's
    // pools grow by cudaMalloc); GMLAKE_POOL_RESERVE_BYTES, asked for, is taken as new memory too.
    const piece = Math.ceil(Math.max(RESERVE_PIECE, largest) / MIN_SEGMENT) * MIN_SEGMENT;
    for (const [target, held] of [[Math.max(expect, p.need, this.reserveBytes), true], [this.reserveBytes, false]] as const) {
      let want = target - p.freeBytes;
      while (want > 0) {
        const n = Math.min(piece, Math.ceil(want / MIN_SEGMENT) * MIN_SEGMENT);
        if (!this.grow(p, n, true, false, held)) break;
        want -= p.segments[p.segments.length - 1]!.block.size;
      }
    }
    return p.ordinal;
  }

  /** A block taken from the engine for p; `halving`: on out of memory, try half (down to MIN_SEGMENT); `held`: PoolEngine.take's. */
  private grow(p: Pool, bytes: number, halving: boolean, capturing = false, held = false): boolean {
    for (let n = bytes; n >= Math.min(bytes, MIN_SEGMENT); n = Math.floor(n / 2 / MIN_SEGMENT) * MIN_SEGMENT) {
      const blk = this.engine.take(n, p.streamKey, capturing, held);
      if (blk !== null) {
        p.addSegment(blk);
        this.counts.segmentsTaken++;
        return true;
      }
      if (!halving || n <= MIN_SEGMENT) break;
    }
    return false;
  }

  /**
   * An allocation in pool `ordinal`'s open window: the pool takes a block from the engine when
   * it has no room (during a capture one that maps memory only). Throws a PoolError
   * (STATUS_CAPTURE: growing would have needed a synchronization or an unmap; -1 out of memory).
   */
  alloc(ordinal: number, size: number, capturing: boolean, stream = 0): number {
    const p = this.byOrdinal.get(ordinal);
    if (p === undefined) throw new Error(`an allocation to pool #${ordinal}, which does not exist`);
    const n = Math.max(ALIGN, Math.ceil(size / ALIGN) * ALIGN);
    if (capturing && !p.capturing) {
      p.capturing = true;
      this.capturing++;
    }
    this.counts.poolAllocs++;
    let addr = p.carve(n, size, stream);
    if (addr !== null) return addr;
    if (capturing) this.counts.captureGrows++;
    if (!this.grow(p, n > MiB ? n : MIN_SEGMENT, false, capturing)) {
      const during = capturing ? " during CUDA-graph capture (the pool grows then by mapping memory, never by giving any back)" : "";
      throw new PoolError(-1, `CUDA out of memory. Tried to allocate ${fmtMiB(n)} in private pool (${p.key})${during} (the engine has no room for it).`);
    }
    addr = p.carve(n, size, stream)!;
    return addr;
  }

  /** The pool block at addr, if any. */
  private find(addr: number): [Pool, PoolBlock] | null {
    for (const p of this.byKey.values()) {
      const pb = p.live.get(addr);
      if (pb !== undefined) return [p, pb];
    }
    return null;
  }

  /** A free: true when addr is a pool's block (then reusable in that pool only). */
  free(addr: number): boolean {
    if (this.byKey.size === 0) return false;
    const f = this.find(addr);
    if (f === null) return false;
    const [p, pb] = f;
    this.counts.poolFrees++;
    p.release(addr, pb);
    if (p.useCount === 0 && p.live.size === 0) this.dispose(p);
    return true;
  }

  /** record_stream on a pool block: true when addr is one (its range is not reused until the pool goes). */
  recordStream(addr: number): boolean {
    const f = this.byKey.size === 0 ? null : this.find(addr);
    if (f === null) return false;
    f[1].recorded = true;
    return true;
  }

  /** endAllocateToPool: the window closes; a reserve it never touched goes back to the engine. */
  end(ordinal: number): void {
    const p = this.byOrdinal.get(ordinal);
    if (p === undefined || !p.window) return;
    this.counts.ends++;
    this.closeWindow(p);
    for (let i = p.segments.length - 1; i >= 0; i--) {
      const s = p.segments[i]!;
      if (!s.touched) {
        p.segments.splice(i, 1);
        // the size before the give: the engine's free merges the block with its free neighbours
        this.counts.bytesReturned += s.block.size;
        this.engine.give(s.block);
      }
    }
  }

  private closeWindow(p: Pool): void {
    if (p.capturing) this.capturing--;
    p.close();
  }

  /**
   * releasePool: one use fewer. At none (a window still open, as after a capture that failed
   * half-way, is closed) the pool's memory goes back to the engine once its last block is
   * freed. Returns the bytes given back now.
   */
  releasePool(a: number, b: number): number {
    const p = this.byKey.get(idKey(a, b));
    if (p === undefined || p.useCount === 0) return 0;
    this.counts.releases++;
    p.useCount--;
    if (p.useCount > 0) return 0;
    if (p.window) this.closeWindow(p);
    return p.live.size === 0 ? this.dispose(p) : 0;
  }

  /**
   * For a snapshot of the engine's history: the pool id a stream key of these pools stands
   * for (the first pool of its ordinal; later ones reused its key), else undefined.
   */
  poolOfKey(raw: number): { stream: number; poolId: readonly [number, number] } | undefined {
    if (!(raw < 0)) return undefined;
    const id = this.firstIds.get(Math.floor((-raw - 1) / 2 ** 32));
    // a pool's engine blocks serve every stream its window allocates on: no one stream is theirs
    return id === undefined ? undefined : { stream: 0, poolId: id };
  }

  /** Whether a live block of pool (a, b) starts at addr; addr 0: how many live blocks it has (checkPoolLiveAllocations). */
  live(a: number, b: number, addr: number): number {
    const p = this.byKey.get(idKey(a, b));
    if (p === undefined) return 0;
    return addr === 0 ? p.live.size : p.live.has(addr) ? 1 : 0;
  }

  useCount(a: number, b: number): number {
    return this.byKey.get(idKey(a, b))?.useCount ?? 0;
  }

  /** getCheckpointState: a copy of pool (a, b)'s carve state (segments, free and held ranges, live blocks); its id (> 0). */
  checkpoint(a: number, b: number): number {
    const p = this.byKey.get(idKey(a, b));
    if (p === undefined || p.useCount === 0) {
      throw new PoolError(STATUS_ERROR, `getCheckpointState: no pool (${a}, ${b})${p === undefined ? "" : " in use (its last use was released)"}`);
    }
    const id = this.nextCheckpoint++;
    this.checkpoints.set(id, { pool: p, state: takeCheckpoint(p.segments, p.live, p.inUse, p.held) });
    this.counts.checkpoints++;
    return id;
  }

  /**
   * setCheckpointPoolState: pool blocks become exactly checkpoint `id`'s, at the same addresses:
   * every block live now is freed (`freed`), the checkpoint's live blocks are live again
   * (`allocated`: address, the size asked for, stream). Its segments must all still be the
   * pool's (a pool released and made again under the same id is another); no engine block is
   * taken or given. Throws a PoolError, changing nothing, when refused.
   */
  restore(id: number): { freed: number[]; allocated: [number, number, number][] } {
    const c = this.checkpoints.get(id);
    if (c === undefined) throw new PoolError(STATUS_ERROR, `setCheckpointPoolState: no checkpoint #${id} (dropped, or never taken)`);
    const p = c.pool;
    const name = `pool (${p.key.replace(",", ", ")})`;
    if (this.byKey.get(p.key) !== p || p.useCount === 0) {
      throw new PoolError(STATUS_ERROR, `setCheckpointPoolState: ${name} of checkpoint #${id} is gone (its last use was released since)`);
    }
    const lost = c.state.segments.find((s) => !p.segments.includes(s.seg));
    if (lost !== undefined) {
      const b = lost.seg.block;
      throw new PoolError(STATUS_ERROR, `setCheckpointPoolState: the segment 0x${b.addr.toString(16)} (${fmtMiB(b.size)}) of checkpoint #${id} is no longer ${name}'s`);
    }
    this.counts.restores++;
    const freed = p.restore(c.state);
    return { freed, allocated: c.state.live.map(([addr, pb]) => [addr, pb.requested, pb.stream]) };
  }

  /** The checkpoint's copy goes (its AllocatorState was destroyed): whether there was one. */
  dropCheckpoint(id: number): boolean {
    return this.checkpoints.delete(id);
  }

  private dispose(p: Pool): number {
    let n = 0;
    for (const s of p.segments) {
      n += s.block.size; // before the give, which may merge the block into its neighbours
      this.engine.give(s.block);
    }
    p.segments.length = 0;
    this.byKey.delete(p.key);
    this.byOrdinal.delete(p.ordinal);
    this.freeOrdinals.push(p.ordinal);
    this.counts.bytesReturned += n;
    return n;
  }

  /** Every pool's memory back to the engine (close: the program is done with its blocks). */
  closeAll(): number {
    let n = 0;
    for (const p of [...this.byKey.values()]) {
      n += p.live.size;
      p.live.clear();
      this.dispose(p);
    }
    this.checkpoints.clear();
    this.capturing = 0;
    return n;
  }

  /** Bytes the pools hold from the engine outside their live blocks (allocated in the engine's books, free to PyTorch). */
  slackBytes(): number {
    let n = 0;
    for (const p of this.byKey.values()) n += p.reserved - p.inUse;
    return n;
  }

  stats(): Record<string, unknown> {
    let reserved = 0;
    let inUse = 0;
    for (const p of this.byKey.values()) {
      reserved += p.reserved;
      inUse += p.inUse;
    }
    return {
      private_pools: this.byKey.size,
      private_pool_reserved_bytes: reserved,
      private_pool_in_use_bytes: inUse,
      // checkpoints kept (cudagraph trees hold one per recorded graph until the tree goes)
      private_pool_checkpoints: this.checkpoints.size,
      private_pool_calls: { ...this.counts },
    };
  }
}
