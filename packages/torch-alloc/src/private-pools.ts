/**
 * Private memory pools (CUDA graphs, torch.cuda.MemPool) with PyTorch's rules
 * (docs/design-private-pools.md): an allocation made while PyTorch allocates to pool P (a
 * capture, use_mem_pool) comes from P; memory freed in P is reused only in P; P's memory goes
 * back to the engine when the last use of P is released and its last block is freed.
 *
 * A pool's memory is engine blocks taken on the pool's own stream key (poolStreamKey: the
 * policy sizes them, vms stitches them and never lends them) and held, allocated in the
 * engine's books, for the pool's life; the pool carves its blocks out of them. So an
 * empty_cache or an out-of-memory release never unmaps an address a captured graph replays
 * into. At the window's begin (PyTorch calls it before cudaStreamBeginCapture) the pool takes
 * what the capture is expected to need; during a capture it grows as PyTorch's pools do, by
 * an engine call that may map memory but neither synchronizes nor unmaps (the engine's
 * take(capturing): stitch's CaptureGuard under it); a free during a capture makes no engine call.
 */
import { poolStreamKey, type Block } from "@gmlake/stitch";

/** What the pools need of the engine (the LiveAllocator). */
export interface PoolEngine {
  /**
   * An engine block of at least `size` bytes on `key`, or null when out of memory. May call the
   * driver; `capturing`: a CUDA graph is being captured, so no synchronization and no unmap (a
   * call that would need one throws a PoolError STATUS_CAPTURE).
   */
  take(size: number, key: number, capturing: boolean): Block | null;
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

interface Segment {
  readonly block: Block;
  /** Free ranges [addr, addr + size), by address. */
  readonly free: { addr: number; size: number }[];
  /** Anything was ever carved from it (an untouched reserve goes back at the window's end). */
  touched: boolean;
}

interface PoolBlock {
  readonly seg: Segment;
  readonly size: number;
  /** record_stream was called on it: another stream may still use it after its free. */
  recorded: boolean;
}

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

  carve(size: number): number | null {
    const f = this.fit(size);
    if (f === null) return null;
    const [seg, i] = f;
    const r = seg.free[i]!;
    const addr = r.addr;
    if (r.size === size) seg.free.splice(i, 1);
    else seg.free[i] = { addr: addr + size, size: r.size - size };
    seg.touched = true;
    this.live.set(addr, { seg, size, recorded: false });
    this.inUse += size;
    if (this.inUse > this.windowPeak) this.windowPeak = this.inUse;
    return addr;
  }

  addSegment(block: Block): void {
    this.segments.push({ block, free: [{ addr: block.addr, size: block.size }], touched: false });
  }

  /** A block of this pool freed: its range is free again, merged with its neighbours. */
  release(addr: number, pb: PoolBlock): void {
    this.live.delete(addr);
    this.inUse -= pb.size;
    if (pb.recorded) {
      this.held += pb.size;
      return;
    }
    const free = pb.seg.free;
    let i = 0;
    while (i < free.length && free[i]!.addr < addr) i++;
    let r = { addr, size: pb.size };
    const prev = free[i - 1];
    if (prev !== undefined && prev.addr + prev.size === addr) {
      r = { addr: prev.addr, size: prev.size + r.size };
      free.splice(--i, 1);
    }
    const next = free[i];
    if (next !== undefined && r.addr + r.size === next.addr) {
      r = { addr: r.addr, size: r.size + next.size };
      free.splice(i, 1);
    }
    free.splice(i, 0, r);
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
  /** Pools whose open window allocated during a capture (frees of other blocks wait for it: no engine call during capture). */
  capturing = 0;
  readonly counts = { begins: 0, ends: 0, releases: 0, poolAllocs: 0, poolFrees: 0, segmentsTaken: 0, bytesReturned: 0, captureGrows: 0 };

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
      this.byKey.set(key, p);
      this.byOrdinal.set(p.ordinal, p);
    } else {
      p.useCount++;
    }
    if (!window) return p.ordinal;
    this.counts.begins++;
    p.open();
    let want = Math.max(expect, p.need, this.reserveBytes) - p.freeBytes;
    // in pieces no smaller than the largest allocation expected: the pieces a capture never touches go back at its end
    const piece = Math.ceil(Math.max(RESERVE_PIECE, largest) / MIN_SEGMENT) * MIN_SEGMENT;
    while (want > 0) {
      const n = Math.min(piece, Math.ceil(want / MIN_SEGMENT) * MIN_SEGMENT);
      if (!this.grow(p, n, true)) break;
      want -= p.segments[p.segments.length - 1]!.block.size;
    }
    return p.ordinal;
  }

  /** A block taken from the engine for p; `halving`: on out of memory, try half (down to MIN_SEGMENT). */
  private grow(p: Pool, bytes: number, halving: boolean, capturing = false): boolean {
    for (let n = bytes; n >= Math.min(bytes, MIN_SEGMENT); n = Math.floor(n / 2 / MIN_SEGMENT) * MIN_SEGMENT) {
      const blk = this.engine.take(n, p.streamKey, capturing);
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
  alloc(ordinal: number, size: number, capturing: boolean): number {
    const p = this.byOrdinal.get(ordinal);
    if (p === undefined) throw new Error(`an allocation to pool #${ordinal}, which does not exist`);
    const n = Math.max(ALIGN, Math.ceil(size / ALIGN) * ALIGN);
    if (capturing && !p.capturing) {
      p.capturing = true;
      this.capturing++;
    }
    this.counts.poolAllocs++;
    let addr = p.carve(n);
    if (addr !== null) return addr;
    if (capturing) this.counts.captureGrows++;
    if (!this.grow(p, n > MiB ? n : MIN_SEGMENT, false, capturing)) {
      const during = capturing ? " during CUDA-graph capture (the pool grows then by mapping memory, never by giving any back)" : "";
      throw new PoolError(-1, `CUDA out of memory. Tried to allocate ${fmtMiB(n)} in private pool (${p.key})${during} (the engine has no room for it).`);
    }
    addr = p.carve(n)!;
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
        this.engine.give(s.block);
        this.counts.bytesReturned += s.block.size;
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

  /** Whether a live block of pool (a, b) starts at addr; addr 0: how many live blocks it has (checkPoolLiveAllocations). */
  live(a: number, b: number, addr: number): number {
    const p = this.byKey.get(idKey(a, b));
    if (p === undefined) return 0;
    return addr === 0 ? p.live.size : p.live.has(addr) ? 1 : 0;
  }

  useCount(a: number, b: number): number {
    return this.byKey.get(idKey(a, b))?.useCount ?? 0;
  }

  private dispose(p: Pool): number {
    let n = 0;
    for (const s of p.segments) {
      this.engine.give(s.block);
      n += s.block.size;
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
    return { private_pools: this.byKey.size, private_pool_reserved_bytes: reserved, private_pool_in_use_bytes: inUse, private_pool_calls: { ...this.counts } };
  }
}
