/**
 * The VMM operations on Linux host memory (memfd + mmap, in the native addon), with the
 * AddressSpace bookkeeping in front so every misuse CUDA refuses is refused here too,
 * before any syscall could corrupt the process (a read of an unmapped page would crash).
 */
import { totalmem } from "node:os";

import { AddressSpace, PhysicalRecord } from "./address-space.js";
import type { DeviceInfo, EventHandle, MemInfo, PhysicalHandle } from "./driver.js";
import { EventBook } from "./event-book.js";
import { MeteredDriver } from "./metered-driver.js";
import { loadNative, type NativeAddon, type NativeHandle } from "./native.js";
import { INVALID_VALUE, checkBytes, checkStream, vmmError } from "./vmm-error.js";

export interface HostDriverOptions {
  /** Allocation granularity in bytes (default 2 MiB, the H200's); a multiple of the page size. */
  readonly granularity?: number;
  /** Physical bytes the driver may hold (default: the machine's memory, os.totalmem()). */
  readonly capacityBytes?: number;
  /** Refuse cuMemUnmap over unmapped bytes (CUDA accepts it; default false). */
  readonly strictUnmap?: boolean;
}

export class HostDriver extends MeteredDriver {
  readonly name = "host" as const;
  readonly device: DeviceInfo;
  /** The bookkeeping (reservations, mappings, live bytes): read it, don't change it. */
  readonly space: AddressSpace;
  private readonly native: NativeAddon;
  private readonly records = new WeakMap<object, PhysicalRecord>();
  private nextId = 1;
  private readonly strictUnmap: boolean;
  /** Events: host memory has no queue, so they complete at once (see EventBook). */
  readonly events = new EventBook();

  constructor(options: HostDriverOptions = {}) {
    super();
    this.strictUnmap = options.strictUnmap ?? false;
    this.native = loadNative();
    const page = this.native.hostPageSize();
    const granularity = options.granularity ?? 2 * 1024 * 1024;
    if (!Number.isSafeInteger(granularity) || granularity <= 0 || granularity % page !== 0) {
      throw vmmError(INVALID_VALUE, "HostDriver", `granularity=${granularity}`, `must be a multiple of the page size ${page}`);
    }
    const capacity = options.capacityBytes ?? totalmem();
    this.space = new AddressSpace(granularity, capacity);
    this.device = Object.freeze({
      ordinal: 0,
      name: "host memory (memfd + mmap)",
      totalBytes: capacity,
      vmmSupported: true,
      granularity: Object.freeze({ minimum: granularity, recommended: granularity }),
    });
  }

  private record(call: string, handle: PhysicalHandle): PhysicalRecord {
    const rec = typeof handle === "object" && handle !== null ? this.records.get(handle) : undefined;
    if (!rec) throw new TypeError(`${call}: expected a physical handle from this HostDriver's memCreate`);
    return rec;
  }

  protected doMemCreate(size: number): PhysicalHandle {
    checkBytes("cuMemCreate", "size", size);
    if (size === 0) throw vmmError(INVALID_VALUE, "cuMemCreate", "size=0", "size is 0");
    this.space.checkAligned("cuMemCreate", "size", size);
    this.space.charge("cuMemCreate", size);
    let handle: NativeHandle;
    try {
      handle = this.native.hostMemCreate(size, this.nextId++);
    } catch (e) {
      this.space.refund(size);
      throw e;
    }
    this.records.set(handle, new PhysicalRecord(handle.id, size, handle));
    return handle;
  }

  protected doMemRelease(handle: PhysicalHandle): void {
    const rec = this.record("cuMemRelease", handle);
    this.space.release("cuMemRelease", rec);
    // Closing the fd is safe while mapped: the mappings hold the memfd open.
    this.native.hostMemRelease(rec.payload as NativeHandle);
  }

  protected doMemAddressReserve(size: number, alignment: number): number {
    checkBytes("cuMemAddressReserve", "size", size);
    checkBytes("cuMemAddressReserve", "alignment", alignment);
    const args = () => `size=${size}, alignment=${alignment}`;
    if (size === 0) throw vmmError(INVALID_VALUE, "cuMemAddressReserve", args, "size is 0");
    this.space.checkAligned("cuMemAddressReserve", "size", size);
    const align = alignment === 0 ? this.space.granularity : alignment;
    if (!Number.isInteger(Math.log2(align))) {
      throw vmmError(INVALID_VALUE, "cuMemAddressReserve", args, "alignment must be a power of two");
    }
    const address = this.native.hostMemAddressReserve(size, Math.max(align, this.space.granularity));
    this.space.addReservation(address, size, false);
    return address;
  }

  protected doMemAddressFree(address: number, size: number): void {
    checkBytes("cuMemAddressFree", "ptr", address);
    checkBytes("cuMemAddressFree", "size", size);
    this.space.freeReservation("cuMemAddressFree", address, size);
    this.native.hostMemAddressFree(address, size);
  }

  protected doMemMap(address: number, size: number, offset: number, handle: PhysicalHandle): void {
    checkBytes("cuMemMap", "ptr", address);
    checkBytes("cuMemMap", "size", size);
    checkBytes("cuMemMap", "offset", offset);
    const rec = this.record("cuMemMap", handle);
    this.space.map("cuMemMap", address, size, offset, rec);
    try {
      this.native.hostMemMap(address, size, offset, rec.payload as NativeHandle);
    } catch (e) {
      this.space.unmap("cuMemMap", address, size, true);
      throw e;
    }
  }

  protected doMemUnmap(address: number, size: number): void {
    checkBytes("cuMemUnmap", "ptr", address);
    checkBytes("cuMemUnmap", "size", size);
    // Unmapping gaps too is harmless here: they go back to PROT_NONE reserved.
    this.space.unmap("cuMemUnmap", address, size, this.strictUnmap);
    this.native.hostMemUnmap(address, size);
  }

  protected doMemSetAccess(address: number, size: number): void {
    checkBytes("cuMemSetAccess", "ptr", address);
    checkBytes("cuMemSetAccess", "size", size);
    this.space.setAccess("cuMemSetAccess", address, size);
    this.native.hostMemSetAccess(address, size);
  }

  /** Free = capacity minus what this driver holds (not the machine's free memory). */
  protected doMemGetInfo(): MemInfo {
    return { freeBytes: this.space.capacity - this.space.liveBytes, totalBytes: this.space.capacity };
  }

  protected doMemAlloc(size: number): number {
    checkBytes("cuMemAlloc", "size", size);
    if (size === 0) throw vmmError(INVALID_VALUE, "cuMemAlloc", "size=0", "size is 0");
    const page = this.native.hostPageSize();
    const bytes = Math.ceil(size / page) * page;
    this.space.charge("cuMemAlloc", bytes);
    let address: number;
    try {
      address = this.native.hostMemAlloc(bytes);
    } catch (e) {
      this.space.refund(bytes);
      throw e;
    }
    this.space.addAllocation(address, new PhysicalRecord(0, bytes, undefined));
    return address;
  }

  protected doMemFree(address: number): void {
    checkBytes("cuMemFree", "ptr", address);
    const rec = this.space.freeAllocation("cuMemFree", address);
    this.native.hostMemFree(address, rec.size);
  }

  protected doEventCreate(): EventHandle {
    return this.events.create();
  }
  protected doEventRecord(event: EventHandle, stream: number): void {
    this.events.record(event, stream);
  }
  protected doEventQuery(event: EventHandle): boolean {
    this.events.check("cuEventQuery", event);
    return true;
  }
  protected doEventSynchronize(event: EventHandle): void {
    this.events.check("cuEventSynchronize", event);
  }
  protected doEventDestroy(event: EventHandle): void {
    this.events.destroy(event);
  }
  protected doStreamWaitEvent(stream: number, event: EventHandle): void {
    this.events.waitEvent(stream, event);
  }
  protected doStreamSynchronize(stream: number): void {
    checkStream("cuStreamSynchronize", stream);
  }
  protected doCtxSynchronize(): void {}

  memset(address: number, value: number, size: number): void {
    checkBytes("memset", "ptr", address);
    checkBytes("memset", "size", size);
    this.space.access("cuMemsetD8", address, size, () => {});
    this.native.hostMemset(address, value & 0xff, size);
  }
  write(address: number, data: Uint8Array): void {
    checkBytes("write", "ptr", address);
    this.space.access("cuMemcpyHtoD", address, data.byteLength, () => {});
    this.native.hostWrite(address, data);
  }
  read(address: number, size: number): Uint8Array {
    checkBytes("read", "ptr", address);
    checkBytes("read", "size", size);
    this.space.access("cuMemcpyDtoH", address, size, () => {});
    const out = new Uint8Array(size);
    this.native.hostRead(address, out);
    return out;
  }

  /** Nothing of its own to release; `leaks()` tells what the caller left behind. */
  close(): void {}

  /** What is still held: reservations, mappings and physical bytes (all 0 after a clean teardown). */
  leaks(): { reservations: number; mappings: number; liveBytes: number } {
    return { reservations: this.space.reservationCount, mappings: this.space.mappingCount, liveBytes: this.space.liveBytes };
  }
}
