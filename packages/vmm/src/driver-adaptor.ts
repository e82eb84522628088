/**
 * A VmmDriver that forwards every call to another one (rmm's adaptor pattern): adaptors
 * extend it and override the calls they change. Stats are the inner driver's, so timing
 * stays measured (or modelled) where the work happens.
 */
import type { DeviceInfo, DriverName, DriverStats, EventHandle, MemInfo, PhysicalHandle, VmmDriver } from "./driver.js";

export class DriverAdaptor implements VmmDriver {
  constructor(readonly inner: VmmDriver) {}

  get name(): DriverName {
    return this.inner.name;
  }
  get device(): DeviceInfo {
    return this.inner.device;
  }
  memCreate(size: number): PhysicalHandle {
    return this.inner.memCreate(size);
  }
  memRelease(handle: PhysicalHandle): void {
    this.inner.memRelease(handle);
  }
  memAddressReserve(size: number, alignment?: number): number {
    return this.inner.memAddressReserve(size, alignment);
  }
  memAddressFree(address: number, size: number): void {
    this.inner.memAddressFree(address, size);
  }
  memMap(address: number, size: number, offset: number, handle: PhysicalHandle): void {
    this.inner.memMap(address, size, offset, handle);
  }
  memUnmap(address: number, size: number): void {
    this.inner.memUnmap(address, size);
  }
  memSetAccess(address: number, size: number): void {
    this.inner.memSetAccess(address, size);
  }
  memGetInfo(): MemInfo {
    return this.inner.memGetInfo();
  }
  memAlloc(size: number): number {
    return this.inner.memAlloc(size);
  }
  memFree(address: number): void {
    this.inner.memFree(address);
  }
  eventCreate(): EventHandle {
    return this.inner.eventCreate();
  }
  eventRecord(event: EventHandle, stream: number): void {
    this.inner.eventRecord(event, stream);
  }
  eventQuery(event: EventHandle): boolean {
    return this.inner.eventQuery(event);
  }
  eventSynchronize(event: EventHandle): void {
    this.inner.eventSynchronize(event);
  }
  eventDestroy(event: EventHandle): void {
    this.inner.eventDestroy(event);
  }
  streamWaitEvent(stream: number, event: EventHandle): void {
    this.inner.streamWaitEvent(stream, event);
  }
  streamSynchronize(stream: number): void {
    this.inner.streamSynchronize(stream);
  }
  ctxSynchronize(): void {
    this.inner.ctxSynchronize();
  }
  memset(address: number, value: number, size: number): void {
    this.inner.memset(address, value, size);
  }
  write(address: number, data: Uint8Array): void {
    this.inner.write(address, data);
  }
  read(address: number, size: number): Uint8Array {
    return this.inner.read(address, size);
  }
  stats(): DriverStats {
    return this.inner.stats();
  }
  resetStats(): void {
    this.inner.resetStats();
  }
  close(): void {
    this.inner.close();
  }
}
