/**
 * The CUDA virtual-memory API through the native addon: one addon call per driver call,
 * on the device's primary context (retained here, released by close()). CUDA enforces
 * its own rules; nothing is checked twice here.
 */
import type { DeviceInfo, EventHandle, MemInfo, PhysicalHandle } from "./driver.js";
import { MeteredDriver } from "./metered-driver.js";
import { loadNative, type NativeAddon, type NativeDevice, type NativeEvent, type NativeHandle } from "./native.js";
import { cudaFirstUseProbe } from "./probe.js";
import { CUDA_PROBE_FAILED, INVALID_DEVICE, NO_DEVICE, checkBytes, checkStream, vmmError } from "./vmm-error.js";

export interface CudaDriverOptions {
  /** Device ordinal (default 0). */
  readonly ordinal?: number;
}

export class CudaDriver extends MeteredDriver {
  readonly name = "cuda" as const;
  readonly device: DeviceInfo;
  /** The driver library and version (e.g. 13000 for CUDA 13.0). */
  readonly driver: { readonly library: string; readonly driverVersion: number };
  private readonly native: NativeAddon;
  private readonly dev: NativeDevice;
  private nextId = 1;
  private nextEventId = 1;
  private closed = false;

  constructor(options: CudaDriverOptions = {}) {
    super();
    const ordinal = options.ordinal ?? 0;
    // libcuda is loaded here only once a child process has survived loading it.
    const probe = cudaFirstUseProbe();
    if (probe?.crashed) throw vmmError(CUDA_PROBE_FAILED, "cuInit", "", `libcuda not loaded in this process: ${probe.crashed}`);
    this.native = loadNative();
    this.driver = this.native.cudaLoad();
    const count = this.native.cudaDeviceCount();
    if (count === 0) throw vmmError(NO_DEVICE, "cuDeviceGetCount", "", "the driver sees no CUDA device");
    if (!Number.isInteger(ordinal) || ordinal < 0 || ordinal >= count) {
      throw vmmError(INVALID_DEVICE, "cuDeviceGet", `ordinal=${ordinal}`, `${count} device(s) present`);
    }
    const [minimum, recommended] = this.native.cudaGranularity(ordinal);
    this.device = Object.freeze({
      ordinal,
      name: this.native.cudaDeviceName(ordinal),
      totalBytes: this.native.cudaDeviceTotalMem(ordinal),
      vmmSupported: this.native.cudaDeviceVmmSupported(ordinal),
      granularity: Object.freeze({ minimum, recommended }),
    });
    this.dev = this.native.cudaDeviceOpen(ordinal);
  }

  protected doMemCreate(size: number): PhysicalHandle {
    checkBytes("cuMemCreate", "size", size);
    return this.native.cudaMemCreate(this.dev, size, this.nextId++);
  }
  protected doMemRelease(handle: PhysicalHandle): void {
    this.native.cudaMemRelease(this.dev, handle as NativeHandle);
  }
  protected doMemAddressReserve(size: number, alignment: number): number {
    checkBytes("cuMemAddressReserve", "size", size);
    checkBytes("cuMemAddressReserve", "alignment", alignment);
    return this.native.cudaMemAddressReserve(this.dev, size, alignment);
  }
  protected doMemAddressFree(address: number, size: number): void {
    checkBytes("cuMemAddressFree", "ptr", address);
    checkBytes("cuMemAddressFree", "size", size);
    this.native.cudaMemAddressFree(this.dev, address, size);
  }
  protected doMemMap(address: number, size: number, offset: number, handle: PhysicalHandle): void {
    checkBytes("cuMemMap", "ptr", address);
    checkBytes("cuMemMap", "size", size);
    checkBytes("cuMemMap", "offset", offset);
    this.native.cudaMemMap(this.dev, address, size, offset, handle as NativeHandle);
  }
  protected doMemUnmap(address: number, size: number): void {
    checkBytes("cuMemUnmap", "ptr", address);
    checkBytes("cuMemUnmap", "size", size);
    this.native.cudaMemUnmap(this.dev, address, size);
  }
  protected doMemSetAccess(address: number, size: number): void {
    checkBytes("cuMemSetAccess", "ptr", address);
    checkBytes("cuMemSetAccess", "size", size);
    this.native.cudaMemSetAccess(this.dev, address, size);
  }
  protected doMemGetInfo(): MemInfo {
    const [freeBytes, totalBytes] = this.native.cudaMemGetInfo(this.dev);
    return { freeBytes, totalBytes };
  }
  protected doMemAlloc(size: number): number {
    checkBytes("cuMemAlloc", "size", size);
    return this.native.cudaMemAlloc(this.dev, size);
  }
  protected doMemFree(address: number): void {
    checkBytes("cuMemFree", "ptr", address);
    this.native.cudaMemFree(this.dev, address);
  }

  protected doEventCreate(): EventHandle {
    return this.native.cudaEventCreate(this.dev, this.nextEventId++);
  }
  protected doEventRecord(event: EventHandle, stream: number): void {
    checkStream("cuEventRecord", stream);
    this.native.cudaEventRecord(this.dev, event as NativeEvent, stream);
  }
  protected doEventQuery(event: EventHandle): boolean {
    return this.native.cudaEventQuery(this.dev, event as NativeEvent);
  }
  protected doEventSynchronize(event: EventHandle): void {
    this.native.cudaEventSynchronize(this.dev, event as NativeEvent);
  }
  protected doEventDestroy(event: EventHandle): void {
    this.native.cudaEventDestroy(this.dev, event as NativeEvent);
  }
  protected doStreamWaitEvent(stream: number, event: EventHandle): void {
    checkStream("cuStreamWaitEvent", stream);
    this.native.cudaStreamWaitEvent(this.dev, stream, event as NativeEvent);
  }
  protected doStreamSynchronize(stream: number): void {
    checkStream("cuStreamSynchronize", stream);
    this.native.cudaStreamSynchronize(this.dev, stream);
  }
  protected doCtxSynchronize(): void {
    this.native.cudaSynchronize(this.dev);
  }

  memset(address: number, value: number, size: number): void {
    checkBytes("cuMemsetD8", "ptr", address);
    checkBytes("cuMemsetD8", "size", size);
    this.native.cudaMemset(this.dev, address, value & 0xff, size);
  }
  write(address: number, data: Uint8Array): void {
    checkBytes("cuMemcpyHtoD", "ptr", address);
    this.native.cudaWrite(this.dev, address, data);
  }
  read(address: number, size: number): Uint8Array {
    checkBytes("cuMemcpyDtoH", "ptr", address);
    checkBytes("cuMemcpyDtoH", "size", size);
    const out = new Uint8Array(size);
    this.native.cudaRead(this.dev, address, out);
    return out;
  }
  /** cuCtxSynchronize, uncounted: waits for queued work (memset is asynchronous). Counted: ctxSynchronize(). */
  synchronize(): void {
    this.native.cudaSynchronize(this.dev);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.native.cudaDeviceClose(this.dev);
  }
}
