import type { VmmDriver } from "@gmlake/vmm";
import { AddressIndex } from "./address-index.js";
import type { Chunk } from "./chunk.js";
import { ChunkPoolError } from "./errors.js";

export interface ChunkPoolOptions {
  /**
   * Allowed chunk sizes in bytes, each a multiple of the driver's minimum granularity.
   * Default: any multiple of the granularity.
   */
  chunkSizes?: readonly number[];
}

/** Where a virtual address lands: the chunk mapped there and the offset into it. */
export interface Translation {
  chunk: Chunk;
  offset: number;
  /** Start of that mapping. */
  base: number;
}

/**
 * Physical chunks on a VmmDriver: creation (one handle per chunk, granularity-aligned),
 * release, and the bookkeeping of which virtual ranges map which chunk. Mapping calls go
 * through here so that the bookkeeping can never drift from what the driver holds.
 */
export class ChunkPool {
  readonly driver: VmmDriver;
  /** The driver's minimum granularity: every chunk size is a multiple of it. */
  readonly granularity: number;
  private readonly allowed: Set<number> | null;
  private readonly chunks: (Chunk | undefined)[] = [];
  private readonly freeIds: number[] = [];
  /** Mapping start address -> chunk id (a typed-array hash table: no garbage per map). */
  private readonly byAddress: AddressIndex;
  /** The last size checkSize accepted: chunks come in one or two sizes, so most creates skip the check. */
  private okSize = NaN;
  /** Sorted mapping starts, rebuilt lazily for range look-ups (only checkers use them). */
  private sortedStarts: number[] | null = null;
  private _liveChunks = 0;
  private _liveBytes = 0;
  private _mappedBytes = 0;

  constructor(driver: VmmDriver, options: ChunkPoolOptions = {}) {
    this.driver = driver;
    this.granularity = driver.device.granularity.minimum;
    if (!(this.granularity > 0)) {
      throw new ChunkPoolError("BAD_SIZE", `driver ${driver.name} reports granularity ${this.granularity}`);
    }
    this.byAddress = new AddressIndex(this.granularity);
    if (options.chunkSizes) {
      for (const s of options.chunkSizes) this.checkSize(s);
      this.allowed = new Set(options.chunkSizes);
    } else {
      this.allowed = null;
    }
  }

  get liveChunks(): number {
    return this._liveChunks;
  }
  /** Bytes of live (created, not released) chunks: physical memory held. */
  get liveBytes(): number {
    return this._liveBytes;
  }
  /** Bytes of virtual ranges currently mapped (a chunk mapped twice counts twice). */
  get mappedBytes(): number {
    return this._mappedBytes;
  }
  get mappingCount(): number {
    return this.byAddress.size;
  }

  private checkSize(size: number): void {
    if (!Number.isSafeInteger(size) || size <= 0 || size % this.granularity !== 0) {
      throw new ChunkPoolError(
        "BAD_SIZE",
        `Expected a chunk size that is a positive multiple of the granularity ${this.granularity} but received ${size}`,
      );
    }
  }

  /** cuMemCreate one chunk of `size` bytes. Driver errors (out of memory) propagate as VmmError. */
  create(size: number): Chunk {
    if (this.allowed ? !this.allowed.has(size) : size !== this.okSize) {
      if (this.allowed) {
        throw new ChunkPoolError("BAD_SIZE", `chunk size ${size} is not one of ${[...this.allowed].join(", ")}`);
      }
      this.checkSize(size);
      this.okSize = size;
    }
    const handle = this.driver.memCreate(size);
    const id = this.freeIds.length > 0 ? this.freeIds.pop()! : this.chunks.length;
    // An empty `[]` gets a 17-slot store on its first push (~130 bytes per chunk, kept
    // for the chunk's life); a one-slot double array emptied by pop() keeps its one
    // slot, so the usual single mapping fits without growing (V8; elsewhere merely equal).
    const mappings = [0.5];
    mappings.pop();
    const chunk: Chunk = { id, handle, size, mappings, live: true, tag: undefined };
    this.chunks[id] = chunk;
    this._liveChunks++;
    this._liveBytes += size;
    return chunk;
  }

  /** cuMemRelease. The chunk must not be mapped anywhere. */
  release(chunk: Chunk): void {
    this.own(chunk);
    if (chunk.mappings.length > 0) {
      throw new ChunkPoolError("STILL_MAPPED", `chunk ${chunk.id} is still mapped at ${chunk.mappings.length} address(es)`);
    }
    this.driver.memRelease(chunk.handle);
    chunk.live = false;
    this.chunks[chunk.id] = undefined;
    this.freeIds.push(chunk.id);
    this._liveChunks--;
    this._liveBytes -= chunk.size;
  }

  /** cuMemMap the whole chunk at `address` (no access yet; see setAccess / mapRun). */
  map(chunk: Chunk, address: number): void {
    this.own(chunk);
    if (this.byAddress.has(address)) {
      throw new ChunkPoolError("ALREADY_MAPPED", `address 0x${address.toString(16)} already maps a chunk`);
    }
    this.driver.memMap(address, chunk.size, 0, chunk.handle);
    chunk.mappings.push(address);
    this.byAddress.set(address, chunk.id);
    this._mappedBytes += chunk.size;
    this.sortedStarts = null;
  }

  /** cuMemUnmap the chunk's mapping at `address`. */
  unmap(chunk: Chunk, address: number): void {
    const i = chunk.mappings.indexOf(address);
    const id = this.byAddress.get(address);
    if (i < 0 || id < 0 || this.chunks[id] !== chunk) {
      throw new ChunkPoolError("NOT_MAPPED", `chunk ${chunk.id} is not mapped at 0x${address.toString(16)}`);
    }
    this.driver.memUnmap(address, chunk.size);
    const last = chunk.mappings.pop()!;
    if (i < chunk.mappings.length) chunk.mappings[i] = last;
    this.byAddress.delete(address);
    this._mappedBytes -= chunk.size;
    this.sortedStarts = null;
  }

  /**
   * Map `chunks` side by side from `address` (a stitch when they are not adjacent
   * elsewhere), then one cuMemSetAccess over the whole range (its cost is per mapping,
   * not per call, but one call is what CUDA code does). Returns the bytes mapped.
   */
  mapRun(address: number, chunks: readonly Chunk[]): number {
    let at = address;
    for (let i = 0; i < chunks.length; i++) {
      this.map(chunks[i]!, at);
      at += chunks[i]!.size;
    }
    const bytes = at - address;
    if (bytes > 0) this.driver.memSetAccess(address, bytes);
    return bytes;
  }

  /** Unmap a run made by mapRun (each chunk its own cuMemUnmap, as CUDA needs per mapping). */
  unmapRun(address: number, chunks: readonly Chunk[]): number {
    let at = address;
    for (let i = 0; i < chunks.length; i++) {
      this.unmap(chunks[i]!, at);
      at += chunks[i]!.size;
    }
    return at - address;
  }

  /** The chunk mapped at exactly `address`, if any. */
  chunkMappedAt(address: number): Chunk | undefined {
    const id = this.byAddress.get(address);
    return id < 0 ? undefined : this.chunks[id];
  }

  /** Which chunk (and offset) backs virtual `address`, or null when nothing maps it. */
  translate(address: number): Translation | null {
    let starts = this.sortedStarts;
    if (starts === null) {
      starts = this.byAddress.addresses().sort((a, b) => a - b);
      this.sortedStarts = starts;
    }
    let lo = 0;
    let hi = starts.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (starts[mid]! <= address) lo = mid + 1;
      else hi = mid;
    }
    if (lo === 0) return null;
    const base = starts[lo - 1]!;
    const chunk = this.chunks[this.byAddress.get(base)]!;
    const offset = address - base;
    return offset < chunk.size ? { chunk, offset, base } : null;
  }

  /** Live chunks (a snapshot array). */
  list(): Chunk[] {
    const out: Chunk[] = [];
    for (const c of this.chunks) if (c) out.push(c);
    return out;
  }

  /** Teardown: unmap every mapping and release every chunk. Returns the number of chunks released. */
  releaseAll(): number {
    let n = 0;
    for (const c of this.chunks) {
      if (!c) continue;
      while (c.mappings.length > 0) this.unmap(c, c.mappings[c.mappings.length - 1]!);
      this.release(c);
      n++;
    }
    return n;
  }

  private own(chunk: Chunk): void {
    if (!chunk.live) throw new ChunkPoolError("RELEASED", `chunk ${chunk.id} was already released`);
    if (this.chunks[chunk.id] !== chunk) throw new ChunkPoolError("FOREIGN_CHUNK", `chunk ${chunk.id} belongs to another pool`);
  }
}
