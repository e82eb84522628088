/**
 * A driver with no memory behind it: the same rules and errors as CUDA (through the
 * AddressSpace bookkeeping), a reproducible address space, a physical capacity (default
 * the H200's 143771 MiB), and a cost model (cost-model.ts) so every run reports a
 * modelled driver time in stats().timeUs. Data written is kept in a sparse per-handle
 * PageStore, so aliasing and stitching can be checked byte for byte; unwritten bytes read as 0.
 */
import { AddressSpace, PhysicalRecord } from "./address-space.js";
import { type CostTable, curveUs, withCosts } from "./cost-model.js";
import type { DeviceInfo, MemInfo, PhysicalHandle } from "./driver.js";
import { MeteredDriver } from "./metered-driver.js";
import { PageStore } from "./page-store.js";
import { INVALID_VALUE, OUT_OF_MEMORY, checkBytes, vmmError } from "./vmm-error.js";

const MiB = 1024 * 1024;

/** The sim's virtual addresses: [2^44, 2^47), like a 47-bit device address space. */
export const SIM_VA_BASE = 2 ** 44;
export const SIM_VA_LIMIT = 2 ** 47;

export interface SimDriverOptions {
  /** Physical bytes (default 143771 MiB, an H200). */
  readonly capacityBytes?: number;
  /** Allocation granularity (default 2 MiB). */
  readonly granularity?: number;
  /** Per-call costs in microseconds; entries left out take the H200 defaults (H200_COSTS). */
  readonly costs?: Partial<CostTable>;
  readonly name?: string;
  /** Refuse cuMemUnmap over unmapped bytes (CUDA accepts it; default false). */
  readonly strictUnmap?: boolean;
}

export class SimDriver extends MeteredDriver {
  readonly name = "sim" as const;
  readonly device: DeviceInfo;
  readonly costs: CostTable;
  /** The bookkeeping (reservations, mappings, live bytes): read it, don't change it. */
  readonly space: AddressSpace;
  private readonly handles = new WeakMap<object, PhysicalRecord>();
  private nextId = 1;
  /** Next never-used virtual address: reservations are placed here while it fits, so runs are reproducible. */
  private vaNext = SIM_VA_BASE;
  /** Cost of the call in flight, set by the do* methods (modelled time, see clockElapsedUs). */
  private costUs = 0;
  private readonly strictUnmap: boolean;

  constructor(options: SimDriverOptions = {}) {
    super();
    this.strictUnmap = options.strictUnmap ?? false;
    const granularity = options.granularity ?? 2 * MiB;
    const capacity = options.capacityBytes ?? 143771 * MiB;
    if (!Number.isSafeInteger(granularity) || granularity <= 0) {
      throw vmmError(INVALID_VALUE, "SimDriver", `granularity=${granularity}`, "granularity must be a positive integer");
    }
    this.costs = withCosts(options.costs);
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

  private record(call: string, handle: PhysicalHandle): PhysicalRecord {
    const rec = typeof handle === "object" && handle !== null ? this.handles.get(handle) : undefined;
    if (!rec) throw new TypeError(`${call}: expected a physical handle from this SimDriver's memCreate`);
    return rec;
  }

  protected doMemCreate(size: number): PhysicalHandle {
    checkBytes("cuMemCreate", "size", size);
    if (size === 0) throw vmmError(INVALID_VALUE, "cuMemCreate", "size=0", "size is 0");
    this.space.checkAligned("cuMemCreate", "size", size);
    this.space.charge("cuMemCreate", size);
    const rec = new PhysicalRecord(this.nextId++, size, new PageStore());
    const handle: PhysicalHandle = Object.freeze({ id: rec.id, size });
    this.handles.set(handle, rec);
    this.costUs = curveUs(this.costs.memCreate, size);
    return handle;
  }

  protected doMemRelease(handle: PhysicalHandle): void {
    const rec = this.record("cuMemRelease", handle);
    this.space.release("cuMemRelease", rec);
    this.costUs = curveUs(this.costs.memRelease, rec.size);
  }

  protected doMemAddressReserve(size: number, alignment: number): number {
    checkBytes("cuMemAddressReserve", "size", size);
    checkBytes("cuMemAddressReserve", "alignment", alignment);
    const args = () => `size=${size}, alignment=${alignment}`;
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
    if (bumped + size <= SIM_VA_LIMIT) {
      this.vaNext = bumped + size;
      return bumped;
    }
    return this.space.findGap(size, align, SIM_VA_BASE, SIM_VA_LIMIT);
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
    this.costUs = curveUs(this.costs.memMap, size);
  }

  protected doMemUnmap(address: number, size: number): void {
    checkBytes("cuMemUnmap", "ptr", address);
    checkBytes("cuMemUnmap", "size", size);
    let cost = 0;
    const curve = this.costs.memUnmap;
    const n = this.space.unmap("cuMemUnmap", address, size, this.strictUnmap, (_rec, bytes) => {
      cost += curveUs(curve, bytes);
    });
    // A range with nothing mapped still costs one call.
    this.costUs = n > 0 ? cost : curveUs(curve, size);
  }

  protected doMemSetAccess(address: number, size: number): void {
    checkBytes("cuMemSetAccess", "ptr", address);
    checkBytes("cuMemSetAccess", "size", size);
    let cost = 0;
    const curve = this.costs.memSetAccess;
    this.space.setAccess("cuMemSetAccess", address, size, (bytes) => {
      cost += curveUs(curve, bytes);
    });
    this.costUs = cost;
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
    this.space.charge("cuMemAlloc", bytes);
    const address = this.placeVa(bytes, g);
    if (address < 0) {
      this.space.refund(bytes);
      throw vmmError(OUT_OF_MEMORY, "cuMemAlloc", `size=${size}`, "no free virtual range that large");
    }
    this.space.addAllocation(address, new PhysicalRecord(0, bytes, new PageStore()));
    this.costUs = curveUs(this.costs.memAlloc, bytes);
    return address;
  }

  protected doMemFree(address: number): void {
    checkBytes("cuMemFree", "ptr", address);
    const rec = this.space.freeAllocation("cuMemFree", address);
    this.costUs = curveUs(this.costs.memFree, rec.size);
  }

  memset(address: number, value: number, size: number): void {
    checkBytes("cuMemsetD8", "ptr", address);
    checkBytes("cuMemsetD8", "size", size);
    const v = value & 0xff;
    this.space.access("cuMemsetD8", address, size, (rec, off, len) => (rec.payload as PageStore).fill(off, v, len));
  }
  write(address: number, data: Uint8Array): void {
    checkBytes("cuMemcpyHtoD", "ptr", address);
    this.space.access("cuMemcpyHtoD", address, data.byteLength, (rec, off, len, at) =>
      (rec.payload as PageStore).write(off, data, at, len),
    );
  }
  read(address: number, size: number): Uint8Array {
    checkBytes("cuMemcpyDtoH", "ptr", address);
    checkBytes("cuMemcpyDtoH", "size", size);
    const out = new Uint8Array(size);
    this.space.access("cuMemcpyDtoH", address, size, (rec, off, len, at) => (rec.payload as PageStore).read(off, out, at, len));
    return out;
  }

  close(): void {}

  /** What is still held: reservations, mappings and physical bytes (all 0 after a clean teardown). */
  leaks(): { reservations: number; mappings: number; liveBytes: number } {
    return { reservations: this.space.reservationCount, mappings: this.space.mappingCount, liveBytes: this.space.liveBytes };
  }
}
