import type { AllocatorSettings } from "@gmlake/trace";

/**
 * A physical allocation (one cuMemCreate handle) as a policy sees it: which it is, how big,
 * and where it is mapped. Never the handle itself: only the context acts on it.
 */
export interface PhysicalChunk {
  /** Unique per allocator and dense from 0: usable as an array index. */
  readonly id: number;
  readonly size: number;
  /** False once released. */
  readonly live: boolean;
  /** Virtual start addresses where the whole chunk is mapped (more than one = stitched). */
  readonly mappings: readonly number[];
}

/** How mapChunks sets access: one cuMemSetAccess over the whole range, or one per chunk. */
export type MapAccess = "range" | "each";

/** What a policy may know about its device (read-only). */
export interface DeviceFacts {
  readonly ordinal: number;
  readonly name: string;
  readonly totalBytes: number;
  /** The minimum allocation granularity: every chunk size and mapped range is a multiple of it. */
  readonly granularity: number;
  readonly recommendedGranularity: number;
}

/**
 * Everything a policy can do, and all it can see: the engine's side of the boundary. The
 * engine keeps the books (reserved bytes, segments, retries, the event log) from these
 * calls, so a policy cannot make them drift from what the driver holds. No driver, no
 * chunk pool, no writable statistics: a policy decides, the context acts.
 *
 * Out of memory: acquire calls (`segmentAlloc`, `createChunk`) return -1 / null; range and
 * map calls throw the driver's error, which `isDriverOom(e)` recognizes.
 */
export interface PolicyContext {
  readonly device: DeviceFacts;
  /** The PyTorch allocator settings of the run (a trace's recorded ones, or PyTorch's defaults). */
  readonly settings: Readonly<AllocatorSettings>;
  /** Reserved bytes now: live physical chunks + plain segments (read-only). */
  readonly reservedBytes: number;
  /**
   * The most physical bytes this allocator may hold: a memory budget (withCapacity; live,
   * the process's memory fraction) or the device's memory. No driver call; other
   * processes' use is not in it (freeDeviceBytes() is the call that sees it).
   */
  readonly capacityBytes: number;
  /** The device's memory (the driver's device): capacityBytes below it is a budget. No driver call. */
  readonly deviceBytes: number;
  /**
   * Only new memory may be mapped now: a CUDA graph is being captured (live, a private pool
   * growing), when a synchronization or an unmap would break the capture. A policy then moves
   * and releases no handle (vms takes no donor); the driver refuses what would.
   */
  readonly mapOnly: boolean;
  /**
   * Free memory on a private pool's key (a negative stream key) holds nothing a captured
   * graph replays into, so it may move to other keys (AllocatorOptions.lendPoolMemory: the
   * live allocator). Its kernels ran on streams the key does not name: an unmap there waits
   * for the device (no stream mark). False: a pool's free memory stays the pool's.
   */
  readonly lendPoolMemory: boolean;
  /** Bytes of live plain (cudaMalloc) segments (read-only). */
  readonly plainSegmentBytes: number;
  /**
   * The engine stamps and checks allocations (AllocatorOptions.integrity): only then does
   * it read Block.seams, so a policy may skip working them out otherwise (vms does: a search
   * of its handles per malloc, cold in a training process).
   */
  readonly integrity: boolean;

  // ---- physical memory
  /** cudaMalloc a plain segment: its address, or -1 when out of memory. Records segment_alloc. */
  segmentAlloc(size: number, stream: number): number;
  /** cudaFree a segment from segmentAlloc. Records segment_free. */
  segmentFree(addr: number, size: number, stream: number): void;
  /**
   * cuMemCreate one chunk: null when out of memory. `tentative`: part of an all-or-nothing
   * batch; the reserved peak counts it only at commitReserved() (PyTorch counts a page only
   * once its range is mapped).
   */
  createChunk(size: number, tentative?: boolean): PhysicalChunk | null;
  /** Raise the reserved peak to the reserved bytes now (after a tentative batch is in use). */
  commitReserved(): void;
  /** cuMemRelease a chunk that is mapped nowhere. */
  releaseChunk(chunk: PhysicalChunk): void;

  // ---- virtual ranges
  /** cuMemAddressReserve: the range's address (throws the driver's error). */
  reserve(size: number, alignment?: number): number;
  /** cuMemAddressFree a range from reserve(). */
  reserveFree(addr: number, size: number): void;
  /**
   * Map chunks side by side at addr and make them accessible: all or nothing. `access`:
   * one set-access over the range ("range", the default) or one per chunk after its map
   * ("each"; what GMLake's original does, one call per 2 MiB chunk). A chunk may be mapped
   * at several addresses at once (stitching). Returns bytes.
   */
  mapChunks(addr: number, chunks: readonly PhysicalChunk[], stream?: number, access?: MapAccess): number;
  /**
   * Unmap chunks mapped side by side at addr by mapChunks. Returns bytes. Kernels may still
   * use the range (its free reached the allocator before they ran): the engine synchronizes
   * the device first (once per engine call), unless `after` names a mark of the range's
   * stream made after its last use there (markStream): done, nothing waits; not done, the
   * host waits for that mark only (cuEventSynchronize).
   */
  unmapChunks(addr: number, chunks: readonly PhysicalChunk[], stream?: number, after?: number): number;
  /** The chunk whose mapping starts at addr, or null. */
  chunkMappedAt(addr: number): PhysicalChunk | null;
  /** cuMemGetInfo's free bytes of the device (a counted driver call). */
  freeDeviceBytes(): number;

  // ---- streams
  /**
   * Work on stream `to` from now on waits for the work queued on `from` so far (an event
   * recorded on `from`, waited on by `to`). For a policy that declares
   * streams.crossStreamReuse and puts memory freed on one stream into a block of another
   * in a way the engine cannot see (a block the engine sees change streams gets this
   * wait anyway). Before unmapping or freeing memory the engine synchronizes the device
   * itself: no call needed for that.
   */
  waitForStream(from: number, to: number): void;
  /**
   * A mark on `stream`: it is done once the work queued there so far is (an event recorded
   * now, one per stream per engine call; after a device synchronization in the same call,
   * done at once with no call). For a policy that moves memory a kernel may still use:
   * unmap it with `unmapChunks(..., mark)` once `markDone(mark)`, with no device sync.
   */
  markStream(stream: number): number;
  /** Whether a mark's work is done (one eventQuery while it is not; none after). */
  markDone(mark: number): boolean;

  // ---- reports: the engine counts and records them
  /** This malloc went through release-and-retry (PyTorch's num_alloc_retries: counted once per malloc). */
  retried(): void;
  /** A mapped segment began at [addr, addr + size): counts segment.all.current, records segment_map. */
  segmentMapped(addr: number, size: number, stream: number): void;
  /** A mapped segment ended: counts it, records segment_unmap. */
  segmentUnmapped(addr: number, size: number, stream: number): void;
  /** A policy decision worth plotting: EventKind.stitch (aux = chunks) or EventKind.gc (aux = ranges freed). */
  record(kind: number, addr: number, size: number, stream: number, aux?: number): void;
}
