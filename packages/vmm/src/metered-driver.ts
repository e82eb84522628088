/**
 * Call counting and timing, written once for every driver: each VmmDriver call goes
 * through here and lands in two Float64Arrays indexed by call. Cuda and host measure the
 * wall time of the call with performance.now() (monotonic); the sim overrides the two
 * clock hooks to report its modelled cost instead.
 */
import {
  DRIVER_CALLS,
  type DeviceInfo,
  type DriverCall,
  type DriverName,
  type DriverStats,
  type EventHandle,
  type MemInfo,
  type PhysicalHandle,
  type VmmDriver,
} from "./driver.js";

const CALL_INDEX = Object.fromEntries(DRIVER_CALLS.map((c, i) => [c, i])) as Record<DriverCall, number>;
const C_CREATE = CALL_INDEX.memCreate;
const C_RELEASE = CALL_INDEX.memRelease;
const C_RESERVE = CALL_INDEX.memAddressReserve;
const C_ADDR_FREE = CALL_INDEX.memAddressFree;
const C_MAP = CALL_INDEX.memMap;
const C_UNMAP = CALL_INDEX.memUnmap;
const C_ACCESS = CALL_INDEX.memSetAccess;
const C_INFO = CALL_INDEX.memGetInfo;
const C_ALLOC = CALL_INDEX.memAlloc;
const C_FREE = CALL_INDEX.memFree;
const C_EV_CREATE = CALL_INDEX.eventCreate;
const C_EV_RECORD = CALL_INDEX.eventRecord;
const C_EV_QUERY = CALL_INDEX.eventQuery;
const C_EV_SYNC = CALL_INDEX.eventSynchronize;
const C_EV_DESTROY = CALL_INDEX.eventDestroy;
const C_STREAM_WAIT = CALL_INDEX.streamWaitEvent;
const C_STREAM_SYNC = CALL_INDEX.streamSynchronize;
const C_CTX_SYNC = CALL_INDEX.ctxSynchronize;

export function emptyStats(): DriverStats {
  const zero = () => Object.fromEntries(DRIVER_CALLS.map((c) => [c, 0])) as Record<DriverCall, number>;
  return { calls: zero(), timeUs: zero(), totalCalls: 0, totalTimeUs: 0 };
}

export abstract class MeteredDriver implements VmmDriver {
  abstract readonly name: DriverName;
  abstract readonly device: DeviceInfo;

  private readonly counts = new Float64Array(DRIVER_CALLS.length);
  private readonly times = new Float64Array(DRIVER_CALLS.length);

  /** Start of a call (ms). Failed calls are counted and timed too: the driver did the work. */
  protected clockStart(): number {
    return performance.now();
  }
  /** Microseconds the call took since `t0`. */
  protected clockElapsedUs(t0: number): number {
    return (performance.now() - t0) * 1000;
  }

  private done(call: number, t0: number): void {
    this.counts[call]! += 1;
    this.times[call]! += this.clockElapsedUs(t0);
  }

  protected abstract doMemCreate(size: number): PhysicalHandle;
  protected abstract doMemRelease(handle: PhysicalHandle): void;
  protected abstract doMemAddressReserve(size: number, alignment: number): number;
  protected abstract doMemAddressFree(address: number, size: number): void;
  protected abstract doMemMap(address: number, size: number, offset: number, handle: PhysicalHandle): void;
  protected abstract doMemUnmap(address: number, size: number): void;
  protected abstract doMemSetAccess(address: number, size: number): void;
  protected abstract doMemGetInfo(): MemInfo;
  protected abstract doMemAlloc(size: number): number;
  protected abstract doMemFree(address: number): void;
  protected abstract doEventCreate(): EventHandle;
  protected abstract doEventRecord(event: EventHandle, stream: number): void;
  protected abstract doEventQuery(event: EventHandle): boolean;
  protected abstract doEventSynchronize(event: EventHandle): void;
  protected abstract doEventDestroy(event: EventHandle): void;
  protected abstract doStreamWaitEvent(stream: number, event: EventHandle): void;
  protected abstract doStreamSynchronize(stream: number): void;
  protected abstract doCtxSynchronize(): void;

  abstract memset(address: number, value: number, size: number): void;
  abstract write(address: number, data: Uint8Array): void;
  abstract read(address: number, size: number): Uint8Array;
  abstract close(): void;

  memCreate(size: number): PhysicalHandle {
    const t0 = this.clockStart();
    try {
      return this.doMemCreate(size);
    } finally {
      this.done(C_CREATE, t0);
    }
  }
  memRelease(handle: PhysicalHandle): void {
    const t0 = this.clockStart();
    try {
      this.doMemRelease(handle);
    } finally {
      this.done(C_RELEASE, t0);
    }
  }
  memAddressReserve(size: number, alignment = 0): number {
    const t0 = this.clockStart();
    try {
      return this.doMemAddressReserve(size, alignment);
    } finally {
      this.done(C_RESERVE, t0);
    }
  }
  memAddressFree(address: number, size: number): void {
    const t0 = this.clockStart();
    try {
      this.doMemAddressFree(address, size);
    } finally {
      this.done(C_ADDR_FREE, t0);
    }
  }
  memMap(address: number, size: number, offset: number, handle: PhysicalHandle): void {
    const t0 = this.clockStart();
    try {
      this.doMemMap(address, size, offset, handle);
    } finally {
      this.done(C_MAP, t0);
    }
  }
  memUnmap(address: number, size: number): void {
    const t0 = this.clockStart();
    try {
      this.doMemUnmap(address, size);
    } finally {
      this.done(C_UNMAP, t0);
    }
  }
  memSetAccess(address: number, size: number): void {
    const t0 = this.clockStart();
    try {
      this.doMemSetAccess(address, size);
    } finally {
      this.done(C_ACCESS, t0);
    }
  }
  memGetInfo(): MemInfo {
    const t0 = this.clockStart();
    try {
      return this.doMemGetInfo();
    } finally {
      this.done(C_INFO, t0);
    }
  }
  memAlloc(size: number): number {
    const t0 = this.clockStart();
    try {
      return this.doMemAlloc(size);
    } finally {
      this.done(C_ALLOC, t0);
    }
  }
  memFree(address: number): void {
    const t0 = this.clockStart();
    try {
      this.doMemFree(address);
    } finally {
      this.done(C_FREE, t0);
    }
  }

  eventCreate(): EventHandle {
    const t0 = this.clockStart();
    try {
      return this.doEventCreate();
    } finally {
      this.done(C_EV_CREATE, t0);
    }
  }
  eventRecord(event: EventHandle, stream: number): void {
    const t0 = this.clockStart();
    try {
      this.doEventRecord(event, stream);
    } finally {
      this.done(C_EV_RECORD, t0);
    }
  }
  eventQuery(event: EventHandle): boolean {
    const t0 = this.clockStart();
    try {
      return this.doEventQuery(event);
    } finally {
      this.done(C_EV_QUERY, t0);
    }
  }
  eventSynchronize(event: EventHandle): void {
    const t0 = this.clockStart();
    try {
      this.doEventSynchronize(event);
    } finally {
      this.done(C_EV_SYNC, t0);
    }
  }
  eventDestroy(event: EventHandle): void {
    const t0 = this.clockStart();
    try {
      this.doEventDestroy(event);
    } finally {
      this.done(C_EV_DESTROY, t0);
    }
  }
  streamWaitEvent(stream: number, event: EventHandle): void {
    const t0 = this.clockStart();
    try {
      this.doStreamWaitEvent(stream, event);
    } finally {
      this.done(C_STREAM_WAIT, t0);
    }
  }
  streamSynchronize(stream: number): void {
    const t0 = this.clockStart();
    try {
      this.doStreamSynchronize(stream);
    } finally {
      this.done(C_STREAM_SYNC, t0);
    }
  }
  ctxSynchronize(): void {
    const t0 = this.clockStart();
    try {
      this.doCtxSynchronize();
    } finally {
      this.done(C_CTX_SYNC, t0);
    }
  }

  stats(): DriverStats {
    const s = emptyStats() as { calls: Record<DriverCall, number>; timeUs: Record<DriverCall, number>; totalCalls: number; totalTimeUs: number };
    for (let i = 0; i < DRIVER_CALLS.length; i++) {
      const c = DRIVER_CALLS[i]!;
      s.calls[c] = this.counts[i]!;
      s.timeUs[c] = this.times[i]!;
      s.totalCalls += this.counts[i]!;
      s.totalTimeUs += this.times[i]!;
    }
    return s;
  }
  resetStats(): void {
    this.counts.fill(0);
    this.times.fill(0);
  }
}
