/**
 * The one interface every driver implements: `cuda` (the CUDA virtual-memory API through
 * the native addon), `host` (the same operations on Linux host memory: memfd + mmap, in
 * the addon) and `sim` (no memory behind it, a per-call cost model).
 *
 * Calls are one-to-one with the CUDA driver calls they stand for. Addresses and sizes are
 * plain numbers (device addresses are < 2^48, exact in a double). A failing call throws
 * a {@link VmmError} whose `code` is the CUDA error name.
 */

/** A physical allocation (cuMemCreate / a memfd / a simulated handle). Opaque outside the driver. */
export interface PhysicalHandle {
  /** Unique per driver instance, for bookkeeping and messages. */
  readonly id: number;
  /** Bytes, a multiple of the granularity. */
  readonly size: number;
}

/**
 * A CUDA event (cuEventCreate with CU_EVENT_DISABLE_TIMING; a bookkeeping record on host
 * and sim). Opaque outside the driver; using one after eventDestroy is
 * CUDA_ERROR_INVALID_HANDLE on every driver.
 */
export interface EventHandle {
  /** Unique per driver instance, for bookkeeping and messages. */
  readonly id: number;
}

export type DriverName = "cuda" | "host" | "sim";

export interface Granularity {
  /** CU_MEM_ALLOC_GRANULARITY_MINIMUM */
  readonly minimum: number;
  /** CU_MEM_ALLOC_GRANULARITY_RECOMMENDED */
  readonly recommended: number;
}

export interface DeviceInfo {
  readonly ordinal: number;
  readonly name: string;
  readonly totalBytes: number;
  /** CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
  readonly vmmSupported: boolean;
  readonly granularity: Granularity;
}

export interface MemInfo {
  readonly freeBytes: number;
  readonly totalBytes: number;
}

/** Every call a driver counts, named after the CUDA call without its `cu` prefix. */
export const DRIVER_CALLS = [
  "memCreate",
  "memRelease",
  "memAddressReserve",
  "memAddressFree",
  "memMap",
  "memUnmap",
  "memSetAccess",
  "memGetInfo",
  "memAlloc",
  "memFree",
  // Streams and events, appended so the indices above stay put (traces store them).
  "eventCreate",
  "eventRecord",
  "eventQuery",
  "eventSynchronize",
  "eventDestroy",
  "streamWaitEvent",
  "streamSynchronize",
  "ctxSynchronize",
] as const;
export type DriverCall = (typeof DRIVER_CALLS)[number];

export interface DriverStats {
  /** Calls made, by call. */
  readonly calls: Record<DriverCall, number>;
  /** Time spent in each call, microseconds: measured (cuda, host) or modelled (sim). */
  readonly timeUs: Record<DriverCall, number>;
  readonly totalCalls: number;
  readonly totalTimeUs: number;
}

export interface VmmDriver {
  readonly name: DriverName;
  readonly device: DeviceInfo;

  /** cuMemCreate: `size` must be a multiple of the minimum granularity and > 0. */
  memCreate(size: number): PhysicalHandle;
  /** cuMemRelease. The memory goes back once no mapping refers to it (as in CUDA). */
  memRelease(handle: PhysicalHandle): void;
  /** cuMemAddressReserve: a virtual range of `size` bytes (granularity-aligned). */
  memAddressReserve(size: number, alignment?: number): number;
  /** cuMemAddressFree of a whole reservation; nothing may still be mapped in it. */
  memAddressFree(address: number, size: number): void;
  /** cuMemMap: map `size` bytes of `handle` from `offset` at `address` (inside a reservation, not mapped). */
  memMap(address: number, size: number, offset: number, handle: PhysicalHandle): void;
  /** cuMemUnmap: every byte of the range must be mapped. */
  memUnmap(address: number, size: number): void;
  /** cuMemSetAccess: read-write access for this device over mapped bytes. */
  memSetAccess(address: number, size: number): void;
  /** cuMemGetInfo */
  memGetInfo(): MemInfo;
  /** cuMemAlloc: a plain device allocation (what PyTorch's default allocator uses). */
  memAlloc(size: number): number;
  /** cuMemFree */
  memFree(address: number): void;

  /*
   * Streams and events. A stream is a raw CUstream value as a number (0 = the legacy
   * default stream); host and sim have no queues, so their events complete at once.
   */
  /** cuEventCreate(CU_EVENT_DISABLE_TIMING). */
  eventCreate(): EventHandle;
  /** cuEventRecord: the event completes when the work queued on `stream` so far has. */
  eventRecord(event: EventHandle, stream: number): void;
  /** cuEventQuery: true when complete (CUDA_SUCCESS), false when CUDA_ERROR_NOT_READY. */
  eventQuery(event: EventHandle): boolean;
  /** cuEventSynchronize: blocks the calling thread until the event completes. */
  eventSynchronize(event: EventHandle): void;
  /** cuEventDestroy. */
  eventDestroy(event: EventHandle): void;
  /** cuStreamWaitEvent: work queued on `stream` after this waits for `event`. */
  streamWaitEvent(stream: number, event: EventHandle): void;
  /** cuStreamSynchronize: blocks until the work queued on `stream` is done. */
  streamSynchronize(stream: number): void;
  /** cuCtxSynchronize: blocks until all work in the context is done. */
  ctxSynchronize(): void;

  /** Data access, so tests and the integrity checker can prove where bytes land. */
  memset(address: number, value: number, size: number): void;
  write(address: number, data: Uint8Array): void;
  read(address: number, size: number): Uint8Array;

  /** Counts and times since creation or the last reset. */
  stats(): DriverStats;
  resetStats(): void;
  /** Releases what the driver itself holds (contexts); the caller releases its own handles first. */
  close(): void;
}
