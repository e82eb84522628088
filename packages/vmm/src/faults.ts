/**
 * withFaults(driver, plan): fails chosen calls the way the real driver would, to test
 * the error paths of whatever sits on top. A call fails when it is named in `plan.at` by
 * its ordinal (1 = that call's first use through this adaptor), or at random (seeded,
 * reproducible) with `plan.random.probability`. A failed call never reaches the inner
 * driver, so it has no effect, as a failed CUDA call has none.
 */
import { DriverAdaptor } from "./driver-adaptor.js";
import { DRIVER_CALLS, type DriverCall, type EventHandle, type MemInfo, type PhysicalHandle, type VmmDriver } from "./driver.js";
import { INVALID_HANDLE, INVALID_VALUE, LAUNCH_FAILED, OUT_OF_MEMORY, vmmError } from "./vmm-error.js";

/**
 * The error each call fails with by default: what the real driver returns when it runs
 * out; for the waits, the asynchronous error of an earlier kernel that they report.
 */
export const FAULT_CODES: Readonly<Record<DriverCall, string>> = Object.freeze({
  memCreate: OUT_OF_MEMORY,
  memAlloc: OUT_OF_MEMORY,
  memAddressReserve: OUT_OF_MEMORY,
  memMap: OUT_OF_MEMORY,
  memSetAccess: OUT_OF_MEMORY,
  memGetInfo: INVALID_VALUE,
  memRelease: INVALID_VALUE,
  memAddressFree: INVALID_VALUE,
  memUnmap: INVALID_VALUE,
  memFree: INVALID_VALUE,
  eventCreate: OUT_OF_MEMORY,
  eventRecord: INVALID_HANDLE,
  eventQuery: LAUNCH_FAILED,
  eventSynchronize: LAUNCH_FAILED,
  eventDestroy: INVALID_HANDLE,
  streamWaitEvent: INVALID_HANDLE,
  streamSynchronize: LAUNCH_FAILED,
  ctxSynchronize: LAUNCH_FAILED,
});

const CUDA_NAMES: Readonly<Record<DriverCall, string>> = {
  memCreate: "cuMemCreate",
  memRelease: "cuMemRelease",
  memAddressReserve: "cuMemAddressReserve",
  memAddressFree: "cuMemAddressFree",
  memMap: "cuMemMap",
  memUnmap: "cuMemUnmap",
  memSetAccess: "cuMemSetAccess",
  memGetInfo: "cuMemGetInfo",
  memAlloc: "cuMemAlloc",
  memFree: "cuMemFree",
  eventCreate: "cuEventCreate",
  eventRecord: "cuEventRecord",
  eventQuery: "cuEventQuery",
  eventSynchronize: "cuEventSynchronize",
  eventDestroy: "cuEventDestroy",
  streamWaitEvent: "cuStreamWaitEvent",
  streamSynchronize: "cuStreamSynchronize",
  ctxSynchronize: "cuCtxSynchronize",
};

export interface FaultAt {
  readonly call: DriverCall;
  /** 1-based: the n-th use of `call` through this adaptor. */
  readonly ordinal: number;
  /** Defaults to FAULT_CODES[call]. */
  readonly code?: string;
}

export interface FaultPlan {
  readonly at?: readonly FaultAt[];
  readonly random?: {
    readonly seed: number;
    /** Chance in [0, 1] that an eligible call fails. */
    readonly probability: number;
    /** Calls eligible for random failure (default: memCreate, memAlloc, memAddressReserve, memMap). */
    readonly calls?: readonly DriverCall[];
  };
}

export interface InjectedFault {
  readonly call: DriverCall;
  readonly ordinal: number;
  readonly code: string;
}

/** mulberry32: small, fast, and the same sequence for the same seed everywhere. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class FaultDriver extends DriverAdaptor {
  /** Every failure injected so far, in order. */
  readonly injected: InjectedFault[] = [];
  /** Uses of each call through this adaptor (failed ones included). */
  readonly ordinals: Record<DriverCall, number>;
  private readonly planned = new Map<string, string>();
  private readonly random?: () => number;
  private readonly probability: number;
  private readonly randomCalls: ReadonlySet<DriverCall>;

  constructor(inner: VmmDriver, plan: FaultPlan) {
    super(inner);
    this.ordinals = Object.fromEntries(DRIVER_CALLS.map((c) => [c, 0])) as Record<DriverCall, number>;
    for (const f of plan.at ?? []) {
      if (!DRIVER_CALLS.includes(f.call) || !Number.isInteger(f.ordinal) || f.ordinal < 1) {
        throw vmmError(INVALID_VALUE, "withFaults", `${String(f.call)}#${f.ordinal}`, "expected a driver call and an ordinal >= 1");
      }
      this.planned.set(`${f.call}#${f.ordinal}`, f.code ?? FAULT_CODES[f.call]);
    }
    const r = plan.random;
    this.probability = r?.probability ?? 0;
    if (r) {
      if (!(r.probability >= 0 && r.probability <= 1)) {
        throw vmmError(INVALID_VALUE, "withFaults", `probability=${r.probability}`, "probability must be in [0, 1]");
      }
      this.random = mulberry32(r.seed);
    }
    this.randomCalls = new Set(r?.calls ?? ["memCreate", "memAlloc", "memAddressReserve", "memMap"]);
  }

  /** Throws the planned (or drawn) failure for this use of `call`, if any. */
  private gate(call: DriverCall): void {
    const ordinal = ++this.ordinals[call];
    let code = this.planned.size > 0 ? this.planned.get(`${call}#${ordinal}`) : undefined;
    if (code === undefined && this.random && this.randomCalls.has(call) && this.random() < this.probability) {
      code = FAULT_CODES[call];
    }
    if (code === undefined) return;
    this.injected.push({ call, ordinal, code });
    throw vmmError(code, CUDA_NAMES[call], `use #${ordinal}`, "injected by withFaults");
  }

  override memCreate(size: number): PhysicalHandle {
    this.gate("memCreate");
    return this.inner.memCreate(size);
  }
  override memRelease(handle: PhysicalHandle): void {
    this.gate("memRelease");
    this.inner.memRelease(handle);
  }
  override memAddressReserve(size: number, alignment?: number): number {
    this.gate("memAddressReserve");
    return this.inner.memAddressReserve(size, alignment);
  }
  override memAddressFree(address: number, size: number): void {
    this.gate("memAddressFree");
    this.inner.memAddressFree(address, size);
  }
  override memMap(address: number, size: number, offset: number, handle: PhysicalHandle): void {
    this.gate("memMap");
    this.inner.memMap(address, size, offset, handle);
  }
  override memUnmap(address: number, size: number): void {
    this.gate("memUnmap");
    this.inner.memUnmap(address, size);
  }
  override memSetAccess(address: number, size: number): void {
    this.gate("memSetAccess");
    this.inner.memSetAccess(address, size);
  }
  override memGetInfo(): MemInfo {
    this.gate("memGetInfo");
    return this.inner.memGetInfo();
  }
  override memAlloc(size: number): number {
    this.gate("memAlloc");
    return this.inner.memAlloc(size);
  }
  override memFree(address: number): void {
    this.gate("memFree");
    this.inner.memFree(address);
  }
  override eventCreate(): EventHandle {
    this.gate("eventCreate");
    return this.inner.eventCreate();
  }
  override eventRecord(event: EventHandle, stream: number): void {
    this.gate("eventRecord");
    this.inner.eventRecord(event, stream);
  }
  override eventQuery(event: EventHandle): boolean {
    this.gate("eventQuery");
    return this.inner.eventQuery(event);
  }
  override eventSynchronize(event: EventHandle): void {
    this.gate("eventSynchronize");
    this.inner.eventSynchronize(event);
  }
  override eventDestroy(event: EventHandle): void {
    this.gate("eventDestroy");
    this.inner.eventDestroy(event);
  }
  override streamWaitEvent(stream: number, event: EventHandle): void {
    this.gate("streamWaitEvent");
    this.inner.streamWaitEvent(stream, event);
  }
  override streamSynchronize(stream: number): void {
    this.gate("streamSynchronize");
    this.inner.streamSynchronize(stream);
  }
  override ctxSynchronize(): void {
    this.gate("ctxSynchronize");
    this.inner.ctxSynchronize();
  }
}

export function withFaults(driver: VmmDriver, plan: FaultPlan): FaultDriver {
  return new FaultDriver(driver, plan);
}
