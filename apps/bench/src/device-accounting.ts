import { DriverAdaptor, DRIVER_CALLS, type DriverStats, type PhysicalHandle, type VmmDriver } from "@gmlake/vmm";

/**
 * Checks the allocator's own accounting against the device's: every time the physical
 * bytes held through this driver reach a new peak, it asks the device (cuMemGetInfo) how
 * much memory is gone since the start. At the end, `deviceUsedAtPeakBytes` should equal
 * the allocator's peak reserved. Its own cuMemGetInfo calls are left out of stats(), so
 * the replay's driver figures stay the allocator's.
 */
export class DeviceAccounting extends DriverAdaptor {
  readonly freeBeforeBytes: number;
  private held = 0;
  private peakHeld = 0;
  /** Device memory in use (free at start - free now) when `held` was at its peak. */
  deviceUsedAtPeakBytes = 0;
  peakHeldBytes = 0;
  private probeCalls = 0;
  private probeUs = 0;
  private readonly sizes = new Map<number, number>();

  constructor(inner: VmmDriver) {
    super(inner);
    this.freeBeforeBytes = inner.memGetInfo().freeBytes;
    this.probeCalls = 1;
  }

  private grew(bytes: number): void {
    this.held += bytes;
    if (this.held > this.peakHeld) {
      this.peakHeld = this.held;
      const t0 = performance.now();
      const info = this.inner.memGetInfo();
      this.probeUs += (performance.now() - t0) * 1000;
      this.probeCalls++;
      this.peakHeldBytes = this.held;
      this.deviceUsedAtPeakBytes = this.freeBeforeBytes - info.freeBytes;
    }
  }

  override memCreate(size: number): PhysicalHandle {
    const h = super.memCreate(size);
    this.grew(size);
    return h;
  }
  override memRelease(handle: PhysicalHandle): void {
    super.memRelease(handle);
    this.held -= handle.size;
  }
  override memAlloc(size: number): number {
    const a = super.memAlloc(size);
    this.sizes.set(a, size);
    this.grew(size);
    return a;
  }
  override memFree(address: number): void {
    super.memFree(address);
    this.held -= this.sizes.get(address) ?? 0;
    this.sizes.delete(address);
  }

  override stats(): DriverStats {
    const s = this.inner.stats();
    const calls = { ...s.calls, memGetInfo: Math.max(0, s.calls.memGetInfo - this.probeCalls) };
    // The probes' time is measured here approximately (the inner driver timed them too).
    const timeUs = { ...s.timeUs, memGetInfo: Math.max(0, s.timeUs.memGetInfo - this.probeUs) };
    let totalCalls = 0;
    let totalTimeUs = 0;
    for (const c of DRIVER_CALLS) {
      totalCalls += calls[c];
      totalTimeUs += timeUs[c];
    }
    return { calls, timeUs, totalCalls, totalTimeUs };
  }
}
