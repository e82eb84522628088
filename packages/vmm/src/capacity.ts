/**
 * withCapacity(driver, bytes): a smaller device. memCreate / memAlloc that would take
 * the physical bytes live past `bytes` fail with CUDA_ERROR_OUT_OF_MEMORY before reaching
 * the driver (rmm's limiting_resource_adaptor). Live bytes are counted from the calls:
 * handles created and not released, plus allocations not freed (a handle released while
 * still mapped counts as returned at release; CUDA frees it at its last unmap).
 * memGetInfo reports the limit: free = capacity - live.
 */
import { DriverAdaptor } from "./driver-adaptor.js";
import type { MemInfo, PhysicalHandle, VmmDriver } from "./driver.js";
import { INVALID_VALUE, OUT_OF_MEMORY, vmmError } from "./vmm-error.js";

function checkCapacity(call: string, bytes: number): number {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw vmmError(INVALID_VALUE, call, `bytes=${bytes}`, "capacity must be a non-negative integer");
  return bytes;
}

export class CapacityDriver extends DriverAdaptor {
  /** Physical bytes live through this adaptor. */
  liveBytes = 0;
  peakBytes = 0;
  /** Requests refused for lack of capacity. */
  rejected = 0;
  private readonly allocs = new Map<number, number>();

  /** The limit (setCapacity changes it; bytes held past a lowered limit stay held). */
  capacityBytes: number;

  constructor(inner: VmmDriver, capacityBytes: number) {
    super(inner);
    this.capacityBytes = checkCapacity("withCapacity", capacityBytes);
  }

  /** A new limit from the next request on (a memory budget that changes at run time). */
  setCapacity(bytes: number): void {
    this.capacityBytes = checkCapacity("setCapacity", bytes);
  }

  private admit(call: string, bytes: number): void {
    if (bytes > this.capacityBytes - this.liveBytes) {
      this.rejected++;
      throw vmmError(
        OUT_OF_MEMORY,
        call,
        `size=${bytes}`,
        `capacity ${this.capacityBytes} bytes, ${this.liveBytes} live, ${bytes} requested`,
      );
    }
  }
  private add(bytes: number): void {
    this.liveBytes += bytes;
    if (this.liveBytes > this.peakBytes) this.peakBytes = this.liveBytes;
  }

  override memCreate(size: number): PhysicalHandle {
    this.admit("cuMemCreate", size);
    const h = this.inner.memCreate(size);
    this.add(h.size);
    return h;
  }
  override memRelease(handle: PhysicalHandle): void {
    this.inner.memRelease(handle);
    this.liveBytes -= handle.size;
  }
  override memAlloc(size: number): number {
    this.admit("cuMemAlloc", size);
    const address = this.inner.memAlloc(size);
    this.allocs.set(address, size);
    this.add(size);
    return address;
  }
  override memFree(address: number): void {
    this.inner.memFree(address);
    const size = this.allocs.get(address) ?? 0;
    this.allocs.delete(address);
    this.liveBytes -= size;
  }
  override memGetInfo(): MemInfo {
    const inner = this.inner.memGetInfo();
    const free = Math.max(0, Math.min(inner.freeBytes, this.capacityBytes - this.liveBytes));
    return { freeBytes: free, totalBytes: this.capacityBytes };
  }
}

export function withCapacity(driver: VmmDriver, bytes: number): CapacityDriver {
  return new CapacityDriver(driver, bytes);
}

/**
 * The most physical bytes a driver lets its user hold: the smallest withCapacity limit
 * between it and the device, else the device's memory. Read without a driver call (a
 * policy asks it on every grow); memGetInfo is the call that also sees other processes.
 */
export function capacityOf(driver: VmmDriver): number {
  let cap = driver.device.totalBytes;
  for (let d: VmmDriver | undefined = driver; d !== undefined; d = d instanceof DriverAdaptor ? d.inner : undefined) {
    if (d instanceof CapacityDriver && d.capacityBytes < cap) cap = d.capacityBytes;
  }
  return cap;
}
