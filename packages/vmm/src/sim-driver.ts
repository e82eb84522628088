/**
 * A driver with no memory behind it: the same rules and errors as CUDA (through the
 * AddressSpace bookkeeping), a reproducible address space, a physical capacity (default
 * the H200's 143771 MiB), and a cost model (cost-model.ts) so every run reports a
 * modelled driver time in stats().timeUs. Data written is kept in a sparse per-handle
 * PageStore, so aliasing and stitching can be checked byte for byte; unwritten bytes read as 0.
 *
 * Replays make tens of thousands of handles, so a handle costs one object: the
 * PhysicalRecord itself is the handle (stamped with this driver's serial, no side table),
 * and its PageStore is made only when the handle's memory is first written.
 */
import { AddressSpace, PhysicalRecord } from "./address-space.js";
import { type CostTable, type SizeCurve, curveUs, withCosts } from "./cost-model.js";
import { CudaMallocHeap } from "./cuda-malloc-heap.js";
import type { DeviceInfo, EventHandle, MemInfo, PhysicalHandle } from "./driver.js";
import { EventBook } from "./event-book.js";
import { MeteredDriver } from "./metered-driver.js";
import { PageStore } from "./page-store.js";
import { INVALID_VALUE, OUT_OF_MEMORY, checkBytes, checkStream, vmmError } from "./vmm-error.js";

const MiB = 1024 * 1024;

/** Driver serials: a handle carries its driver's, so another driver's handle is refused. */
let nextSerial = 1;

/**
 * A cost curve with its first point held as two numbers: most calls are for one granule
 * (at or below the first measured size) and are answered inline, without a call into
 * curveUs whose double result would be boxed. Always the same answer as curveUs.
 */
class CostCurve {
  private readonly firstBytes: number;
  private readonly firstUs: number;
  constructor(private readonly curve: SizeCurve) {
    // curveUs: the first point's cost for any size up to it; 0 for an empty curve.
    this.firstBytes = curve.length > 0 ? curve[0]![0] : -Infinity;
    this.firstUs = curve.length > 0 ? curve[0]![1] : 0;
  }
  us(bytes: number): number {
    return bytes <= this.firstBytes ? this.firstUs : curveUs(this.curve, bytes);
  }
}

/** The handle's page store, made on first write (a handle never written reads as zeros). */
function pagesOf(rec: PhysicalRecord): PageStore {
  return (rec.payload ??= new PageStore()) as PageStore;
}

/** The sim's virtual addresses: [2^44, 2^47), like a 47-bit device address space. */
export const SIM_VA_BASE = 2 ** 44;
export const SIM_VA_LIMIT = 2 ** 47;

/** An H200's memory as cuDeviceTotalMem reports it: the sim's default device. */
export const H200_BYTES = 143771 * 1024 * 1024;

export interface SimDriverOptions {
  /** Physical bytes (default 143771 MiB, an H200). */
  readonly capacityBytes?: number;
  /** Allocation granularity (default 2 MiB). */
  readonly granularity?: number;
  /** Per-call costs in microseconds; entries left out take the H200 replay figures (H200_REPLAY_COSTS). */
  readonly costs?: Partial<CostTable>;
  readonly name?: string;
  /** Refuse cuMemUnmap over unmapped bytes (CUDA accepts it; default false). */
  readonly strictUnmap?: boolean;
  /**
   * Where memAlloc places allocations: "cuda" (default) as CUDA's device heap does
   * (cuda-malloc-heap.ts: downward, 32 MiB regions, lowest free range first), so a model
   * of PyTorch's caching allocator sees segments in the order an H200 gives them;
   * "bump": at increasing addresses, like reservations.
   */
  readonly allocPlacement?: "cuda" | "bump";
}

export class SimDriver extends MeteredDriver {
  readonly name = "sim" as const;
  readonly device: DeviceInfo;
  readonly costs: CostTable;
  /** The bookkeeping (reservations, mappings, live bytes): read it, don't change it. */
  readonly space: AddressSpace;
  /** Stamped on every handle this driver makes (PhysicalRecord.owner). */
  private readonly serial = nextSerial++;
  private nextId = 1;
  /** Next never-used virtual address: reservations are placed here while it fits, so runs are reproducible. */
  private vaNext = SIM_VA_BASE;
  /** memAlloc's heap (allocPlacement "cuda"): grows down from SIM_VA_LIMIT, towards vaNext. */
  private readonly heap: CudaMallocHeap | null;
  /** Cost of the call in flight, set by the do* methods (modelled time, see clockElapsedUs). */
  private costUs = 0;
  private readonly strictUnmap: boolean;
  /** Events: nothing runs asynchronously here, so they complete at once (see EventBook). */
  readonly events = new EventBook();
  private readonly createCost: CostCurve;
  private readonly releaseCost: CostCurve;
  private readonly mapCost: CostCurve;
  private readonly unmapCost: CostCurve;
  private readonly accessCost: CostCurve;
  private readonly allocCost: CostCurve;
  private readonly freeCost: CostCurve;

  constructor(options: SimDriverOptions = {}) {
    super();
    this.strictUnmap = options.strictUnmap ?? false;
    this.heap = (options.allocPlacement ?? "cuda") === "cuda" ? new CudaMallocHeap(SIM_VA_LIMIT, SIM_VA_BASE) : null;
    const granularity = options.granularity ?? 2 * MiB;
    const capacity = options.capacityBytes ?? H200_BYTES;
    if (!Number.isSafeInteger(granularity) || granularity <= 0) {
      throw vmmError(INVALID_VALUE, "SimDriver", `granularity=${granularity}`, "granularity must be a positive integer");
    }
    this.costs = withCosts(options.costs);
    this.createCost = new CostCurve(this.costs.memCreate);
    this.releaseCost = new CostCurve(this.costs.memRelease);
    this.mapCost = new CostCurve(this.costs.memMap);
    this.unmapCost = new CostCurve(this.costs.memUnmap);
    this.accessCost = new CostCurve(this.costs.memSetAccess);
    this.allocCost = new CostCurve(this.costs.memAlloc);
    this.freeCost = new CostCurve(this.costs.memFree);
    this.space = new AddressSpace(granularity, capacity);
    this.device = Object.freeze({
      ordinal: 0,
      name: options.name ?? "simulated NVIDIA H200",
      totalBytes: capacity,
      vmmSupported: true,
      granularity: Object.freeze({ minimum: granularity, recommended: granularity }),
    });
  }

  protected override clockStart(): number {
    this.costUs = 0;
    return 0;
  }
  protected override clockElapsedUs(): number {
    return this.costUs;
  }

  /** The handle is its record: accept it only if this driver made it. */
  private record(call: string, handle: PhysicalHandle): PhysicalRecord {
    if (handle instanceof PhysicalRecord && handle.owner === this.serial) return handle;
    throw new TypeError(`${call}: expected a physical handle from this SimDriver's memCreate`);
  }

  protected doMemCreate(size: number): PhysicalHandle {
    checkBytes("cuMemCreate", "size", size);
    if (size === 0) throw vmmError(INVALID_VALUE, "cuMemCreate", "size=0", "size is 0");
    this.space.checkAligned("cuMemCreate", "size", size);
    const high = this.space.peakBytes;
    this.space.charge("cuMemCreate", size);
    const rec = new PhysicalRecord(this.nextId++, size, null, this.serial);
    // past the most this driver ever held: memory new to the process costs more (first touch)
    this.costUs = this.createCost.us(size) + (this.space.liveBytes > high ? this.costs.memCreateFirstTouch : 0);
    return rec;
  }

  protected doMemRelease(handle: PhysicalHandle): void {
    const rec = this.record("cuMemRelease", handle);
    this.space.release("cuMemRelease", rec);
    this.costUs = this.releaseCost.us(rec.size);
  }

  protected doMemAddressReserve(size: number, alignment: number): number {
    checkBytes("cuMemAddressReserve", "size", size);
    checkBytes("cuMemAddressReserve", "alignment", alignment);
    const args = (): string => `size=${size}, alignment=${alignment}`; // formatted only on failure (a rare call)
    if (size === 0) throw vmmError(INVALID_VALUE, "cuMemAddressReserve", args, "size is 0");
    this.space.checkAligned("cuMemAddressReserve", "size", size);
    const align = Math.max(alignment, this.space.granularity);
    if (!Number.isInteger(Math.log2(align))) {
      throw vmmError(INVALID_VALUE, "cuMemAddressReserve", args, "alignment must be a power of two");
    }
    const address = this.placeVa(size, align);
    if (address < 0) {
      throw vmmError(OUT_OF_MEMORY, "cuMemAddressReserve", args, "no free virtual range that large");
    }
    this.space.addReservation(address, size, false);
    this.costUs = this.costs.memAddressReserve;
    return address;
  }

  /** Bump allocation (reproducible, O(1)); first fit over the gaps once the top is reached. */
  private placeVa(size: number, align: number): number {
    const bumped = Math.ceil(this.vaNext / align) * align;
    const limit = this.heap === null ? SIM_VA_LIMIT : this.heap.lowest;
    if (bumped + size <= limit) {
      this.vaNext = bumped + size;
      if (this.heap !== null) this.heap.floor = this.vaNext;
      return bumped;
    }
    const gap = this.space.findGap(size, align, SIM_VA_BASE, limit);
    if (gap >= 0 && gap + size > this.vaNext) {
      this.vaNext = gap + size; // the heap must not grow over it
      if (this.heap !== null) this.heap.floor = this.vaNext;
    }
    return gap;
  }

  protected doMemAddressFree(address: number, size: number): void {
    checkBytes("cuMemAddressFree", "ptr", address);
    checkBytes("cuMemAddressFree", "size", size);
    this.space.freeReservation("cuMemAddressFree", address, size);
    this.costUs = this.costs.memAddressFree;
  }

  protected doMemMap(address: number, size: number, offset: number, handle: PhysicalHandle): void {
    checkBytes("cuMemMap", "ptr", address);
    checkBytes("cuMemMap", "size", size);
    checkBytes("cuMemMap", "offset", offset);
    this.space.map("cuMemMap", address, size, offset, this.record("cuMemMap", handle));
    this.costUs = this.mapCost.us(size);
  }

  // Per-mapping cost callbacks, made once (a closure per call would be garbage per call).
  private readonly chargeUnmapped = (_rec: PhysicalRecord, bytes: number): void => {
    this.costUs += this.unmapCost.us(bytes);
  };
  private readonly chargeAccess = (bytes: number): void => {
    this.costUs += this.accessCost.us(bytes);
  };

  protected doMemUnmap(address: number, size: number): void {
    checkBytes("cuMemUnmap", "ptr", address);
    checkBytes("cuMemUnmap", "size", size);
    this.costUs = 0;
    const n = this.space.unmap("cuMemUnmap", address, size, this.strictUnmap, this.chargeUnmapped);
    // A range with nothing mapped still costs one call.
    if (n === 0) this.costUs = this.unmapCost.us(size);
  }

  protected doMemSetAccess(address: number, size: number): void {
    checkBytes("cuMemSetAccess", "ptr", address);
    checkBytes("cuMemSetAccess", "size", size);
    this.costUs = 0;
    this.space.setAccess("cuMemSetAccess", address, size, this.chargeAccess);
  }

  protected doMemGetInfo(): MemInfo {
    this.costUs = this.costs.memGetInfo;
    return { freeBytes: this.space.capacity - this.space.liveBytes, totalBytes: this.space.capacity };
  }

  /** Plain allocations take whole granules (as cudaMalloc does for large sizes). */
  protected doMemAlloc(size: number): number {
    checkBytes("cuMemAlloc", "size", size);
    if (size === 0) throw vmmError(INVALID_VALUE, "cuMemAlloc", "size=0", "size is 0");
    const g = this.space.granularity;
    const bytes = Math.ceil(size / g) * g;
    const high = this.space.peakBytes;
    this.space.charge("cuMemAlloc", bytes);
    const address = this.heap === null ? this.placeVa(bytes, g) : this.heap.place(bytes);
    if (address < 0) {
      this.space.refund(bytes);
      throw vmmError(OUT_OF_MEMORY, "cuMemAlloc", `size=${size}`, "no free virtual range that large");
    }
    this.space.addAllocation(address, new PhysicalRecord(0, bytes, null));
    this.costUs = this.allocCost.us(bytes) + (this.space.liveBytes > high ? this.costs.memAllocFirstTouch : 0);
    return address;
  }

  protected doMemFree(address: number): void {
    checkBytes("cuMemFree", "ptr", address);
    const rec = this.space.freeAllocation("cuMemFree", address);
    if (this.heap !== null) this.heap.release(address, rec.size);
    this.costUs = this.freeCost.us(rec.size);
  }

  protected doEventCreate(): EventHandle {
    this.costUs = this.costs.eventCreate;
    return this.events.create();
  }
  protected doEventRecord(event: EventHandle, stream: number): void {
    this.costUs = this.costs.eventRecord;
    this.events.record(event, stream);
  }
  protected doEventQuery(event: EventHandle): boolean {
    this.costUs = this.costs.eventQuery;
    this.events.check("cuEventQuery", event);
    return true;
  }
  protected doEventSynchronize(event: EventHandle): void {
    this.costUs = this.costs.eventSynchronize;
    this.events.check("cuEventSynchronize", event);
  }
  protected doEventDestroy(event: EventHandle): void {
    this.costUs = this.costs.eventDestroy;
    this.events.destroy(event);
  }
  protected doStreamWaitEvent(stream: number, event: EventHandle): void {
    this.costUs = this.costs.streamWaitEvent;
    this.events.waitEvent(stream, event);
  }
  protected doStreamSynchronize(stream: number): void {
    this.costUs = this.costs.streamSynchronize;
    checkStream("cuStreamSynchronize", stream);
  }
  protected doCtxSynchronize(): void {
    this.costUs = this.costs.ctxSynchronize;
  }

  memset(address: number, value: number, size: number): void {
    checkBytes("cuMemsetD8", "ptr", address);
    checkBytes("cuMemsetD8", "size", size);
    const v = value & 0xff;
    this.space.access("cuMemsetD8", address, size, (rec, off, len) => {
      // Zeros over a never-written handle change nothing: keep it storeless.
      if (v !== 0 || rec.payload !== null) pagesOf(rec).fill(off, v, len);
    });
  }
  write(address: number, data: Uint8Array): void {
    checkBytes("cuMemcpyHtoD", "ptr", address);
    this.space.access("cuMemcpyHtoD", address, data.byteLength, (rec, off, len, at) => pagesOf(rec).write(off, data, at, len));
  }
  read(address: number, size: number): Uint8Array {
    checkBytes("cuMemcpyDtoH", "ptr", address);
    checkBytes("cuMemcpyDtoH", "size", size);
    const out = new Uint8Array(size);
    // `out` starts as zeros: a handle never written has nothing to copy.
    this.space.access("cuMemcpyDtoH", address, size, (rec, off, len, at) => {
      if (rec.payload !== null) (rec.payload as PageStore).read(off, out, at, len);
    });
    return out;
  }

  close(): void {}

  /** What is still held: reservations, mappings and physical bytes (all 0 after a clean teardown). */
  leaks(): { reservations: number; mappings: number; liveBytes: number } {
    return { reservations: this.space.reservationCount, mappings: this.space.mappingCount, liveBytes: this.space.liveBytes };
  }
}
