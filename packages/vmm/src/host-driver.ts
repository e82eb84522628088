/**
 * The VMM operations on Linux host memory (memfd + mmap, in the native addon), with the
 * AddressSpace bookkeeping in front so every misuse CUDA refuses is refused here too,
 * before any syscall could corrupt the process (a read of an unmapped page would crash).
 * Physical chunks are ranges of one memfd (MemfdArena): one file descriptor however many
 * chunks are live. close() gives everything back, whatever state a failure left.
 */
import { readFileSync } from "node:fs";
import { freemem, totalmem } from "node:os";

import { AddressSpace, PhysicalRecord } from "./address-space.js";
import type { DeviceInfo, EventHandle, MemInfo, PhysicalHandle } from "./driver.js";
import { EventBook } from "./event-book.js";
import { MeteredDriver } from "./metered-driver.js";
import { MemfdArena } from "./memfd-arena.js";
import { loadNative, type NativeAddon } from "./native.js";
import { DEINITIALIZED, HOST_ADDRESS_SPACE, INVALID_VALUE, OUT_OF_MEMORY, VmmError, checkBytes, checkStream, vmmError } from "./vmm-error.js";

export interface HostDriverOptions {
  /** Allocation granularity in bytes (default 2 MiB, the H200's); a multiple of the page size. */
  readonly granularity?: number;
  /**
   * Physical bytes the driver may hold (default: defaultHostCapacity(), half the memory
   * free when it opens, so that touching all of it, as `--integrity full` does, cannot
   * take the machine down).
   */
  readonly capacityBytes?: number;
  /** Refuse cuMemUnmap over unmapped bytes (CUDA accepts it; default false). */
  readonly strictUnmap?: boolean;
}

/**
 * Half the memory available now (MemAvailable, within the cgroup's limit when there is
 * one), in whole granules: the default capacity of a HostDriver.
 */
export function defaultHostCapacity(granularity: number): number {
  const constrained = typeof process.constrainedMemory === "function" ? (process.constrainedMemory() ?? 0) : 0;
  const limit = constrained > 0 && constrained < totalmem() ? constrained : totalmem();
  const bytes = Math.min(freemem(), limit) / 2;
  return Math.floor(bytes / granularity) * granularity;
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
  private readonly arena: MemfdArena;
  private closed = false;
  /** Released records whose last mapping an unmap is removing (their range goes back after it). */
  private readonly dying: PhysicalRecord[] = [];
  private readonly onUnmapped = (rec: PhysicalRecord): void => {
    if (rec.released) this.dying.push(rec);
  };
  /** Events: host memory has no queue, so they complete at once (see EventBook). */
  readonly events = new EventBook();

  constructor(options: HostDriverOptions = {}) {
    super();
    this.strictUnmap = options.strictUnmap ?? false;
    this.native = loadNative();
    this.arena = new MemfdArena(this.native);
    const page = this.native.hostPageSize();
    const granularity = options.granularity ?? 2 * 1024 * 1024;
    if (!Number.isSafeInteger(granularity) || granularity <= 0 || granularity % page !== 0) {
      throw vmmError(INVALID_VALUE, "HostDriver", `granularity=${granularity}`, `must be a multiple of the page size ${page}`);
    }
    const capacity = options.capacityBytes ?? defaultHostCapacity(granularity);
    this.space = new AddressSpace(granularity, capacity);
    this.device = Object.freeze({
      ordinal: 0,
      name: "host memory (memfd + mmap)",
      totalBytes: capacity,
      vmmSupported: true,
      granularity: Object.freeze({ minimum: granularity, recommended: granularity }),
    });
  }

  /** Refuses any call once closed: the memory is gone, as after CUDA's context is. */
  private live(call: string): void {
    if (this.closed) throw vmmError(DEINITIALIZED, call, "", "the driver was closed");
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
    this.live("cuMemCreate");
    this.space.charge("cuMemCreate", size);
    let offset: number;
    try {
      offset = this.arena.take(size);
    } catch (e) {
      this.space.refund(size);
      throw e;
    }
    const handle: PhysicalHandle = Object.freeze({ id: this.nextId++, size });
    // payload: the range's offset in the memfd; -1 once given back
    this.records.set(handle, new PhysicalRecord(handle.id, size, offset));
    return handle;
  }

  /** Gives a freed record's memfd range back (once). */
  private giveBack(rec: PhysicalRecord): void {
    const offset = rec.payload as number;
    if (offset < 0) return;
    rec.payload = -1;
    this.arena.give(offset, rec.size);
  }

  protected doMemRelease(handle: PhysicalHandle): void {
    const rec = this.record("cuMemRelease", handle);
    this.live("cuMemRelease");
    // Still mapped: CUDA frees the memory at its last unmap, and so does doMemUnmap.
    if (this.space.release("cuMemRelease", rec)) this.giveBack(rec);
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
    this.live("cuMemAddressReserve");
    let address: number;
    try {
      address = this.native.hostMemAddressReserve(size, Math.max(align, this.space.granularity));
    } catch (e) {
      throw addressLimitError(e, size + align, args) ?? e;
    }
    this.space.addReservation(address, size, false);
    return address;
  }

  protected doMemAddressFree(address: number, size: number): void {
    checkBytes("cuMemAddressFree", "ptr", address);
    checkBytes("cuMemAddressFree", "size", size);
    this.live("cuMemAddressFree");
    this.space.freeReservation("cuMemAddressFree", address, size);
    this.native.hostMemAddressFree(address, size);
  }

  protected doMemMap(address: number, size: number, offset: number, handle: PhysicalHandle): void {
    checkBytes("cuMemMap", "ptr", address);
    checkBytes("cuMemMap", "size", size);
    checkBytes("cuMemMap", "offset", offset);
    const rec = this.record("cuMemMap", handle);
    this.live("cuMemMap");
    this.space.map("cuMemMap", address, size, offset, rec);
    try {
      this.native.hostMemMap(address, size, (rec.payload as number) + offset, this.arena.handle);
    } catch (e) {
      this.space.unmap("cuMemMap", address, size, true);
      throw e;
    }
  }

  protected doMemUnmap(address: number, size: number): void {
    checkBytes("cuMemUnmap", "ptr", address);
    checkBytes("cuMemUnmap", "size", size);
    this.live("cuMemUnmap");
    // Unmapping gaps too is harmless here: they go back to PROT_NONE reserved.
    this.dying.length = 0;
    this.space.unmap("cuMemUnmap", address, size, this.strictUnmap, this.onUnmapped);
    this.native.hostMemUnmap(address, size);
    // Released handles whose last mapping this was: their memory goes back now.
    for (const rec of this.dying) if (rec.freed) this.giveBack(rec);
    this.dying.length = 0;
  }

  protected doMemSetAccess(address: number, size: number): void {
    checkBytes("cuMemSetAccess", "ptr", address);
    checkBytes("cuMemSetAccess", "size", size);
    this.live("cuMemSetAccess");
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
    this.live("cuMemAlloc");
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
    this.live("cuMemFree");
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
    this.live("cuMemsetD8");
    this.space.access("cuMemsetD8", address, size, () => {});
    this.native.hostMemset(address, value & 0xff, size);
  }
  write(address: number, data: Uint8Array): void {
    checkBytes("write", "ptr", address);
    this.live("cuMemcpyHtoD");
    this.space.access("cuMemcpyHtoD", address, data.byteLength, () => {});
    this.native.hostWrite(address, data);
  }
  read(address: number, size: number): Uint8Array {
    checkBytes("read", "ptr", address);
    checkBytes("read", "size", size);
    this.live("cuMemcpyDtoH");
    this.space.access("cuMemcpyDtoH", address, size, () => {});
    const out = new Uint8Array(size);
    this.native.hostRead(address, out);
    return out;
  }

  /**
   * Gives back everything still held, whatever state a failure left (a fault mid-stitch,
   * an invariant error, a caller that never tore down): every reservation and allocation
   * is munmapped (their mappings with them) and the memfd closed, so the process holds
   * 0 mappings and 0 fds of this driver. Call leaks() first to see what was left. Later
   * calls fail with CUDA_ERROR_DEINITIALIZED; close() again does nothing. Throws (after
   * releasing all it could) only if the kernel refused an munmap or close.
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    let failure: unknown;
    for (const r of this.space.takeAll()) {
      try {
        // munmap removes the mappings inside the range too; allocations are one munmap each.
        if (r.isAlloc) this.native.hostMemFree(r.start, r.size);
        else this.native.hostMemAddressFree(r.start, r.size);
      } catch (e) {
        failure ??= e;
      }
    }
    try {
      this.arena.close();
    } catch (e) {
      failure ??= e;
    }
    if (failure !== undefined) throw failure;
  }

  /** What is still held: reservations, mappings and physical bytes (all 0 after a clean teardown, and after close()). */
  leaks(): { reservations: number; mappings: number; liveBytes: number } {
    return { reservations: this.space.reservationCount, mappings: this.space.mappingCount, liveBytes: this.space.liveBytes };
  }

  /** File descriptors the driver holds: 1 while any chunk is live, else 0. */
  get fds(): number {
    return this.arena.fds;
  }
}

/** A /proc file's text, or "" where there is none (not Linux, a sandbox). */
function procText(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch {
    return "";
  }
}

/**
 * A reservation refused (ENOMEM, reported as CUDA's OOM) because of the process's own
 * address-space limit (RLIMIT_AS, `ulimit -v`) is a limit of this machine, not the
 * modelled device running out: HOST_ERROR_ADDRESS_SPACE (the CLI's exit 4), so that no
 * replay reports it as an out-of-memory. Null for any other failure.
 */
function addressLimitError(e: unknown, span: number, args: () => string): VmmError | null {
  if (!(e instanceof VmmError) || e.code !== OUT_OF_MEMORY) return null;
  const limit = /^Max address space\s+(\d+)/m.exec(procText("/proc/self/limits"));
  if (limit === null) return null; // unlimited (or unknown): the address space itself is full
  const used = Number(/^VmSize:\s+(\d+) kB/m.exec(procText("/proc/self/status"))?.[1] ?? 0) * 1024;
  const max = Number(limit[1]);
  if (used + span <= max) return null;
  return vmmError(HOST_ADDRESS_SPACE, "cuMemAddressReserve", args, `the process's address-space limit (ulimit -v) of ${max} bytes, ${used} in use`);
}
