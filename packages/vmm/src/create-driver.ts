/** createDriver(name, options): one entry point for the three drivers. */
import type { CostTable } from "./cost-model.js";
import { CudaDriver } from "./cuda-driver.js";
import type { VmmDriver } from "./driver.js";
import { HostDriver } from "./host-driver.js";
import { loadNative } from "./native.js";
import { cudaFirstUseProbe } from "./probe.js";
import { SimDriver } from "./sim-driver.js";
import { INVALID_VALUE, vmmError } from "./vmm-error.js";

export interface CreateDriverOptions {
  /** cuda: device ordinal (default 0). */
  readonly ordinal?: number;
  /** host, sim: physical bytes available (host: half the memory free now, defaultHostCapacity; sim: H200_BYTES). */
  readonly capacityBytes?: number;
  /** host, sim: allocation granularity (default 2 MiB). */
  readonly granularity?: number;
  /** sim: per-call cost overrides. */
  readonly costs?: Partial<CostTable>;
}

/**
 * Whether cuda would work here: the driver loads and sees a device. Asked of the
 * child-process probe first (cudaFirstUseProbe), so a crashing libcuda answers false.
 */
export function cudaAvailable(): boolean {
  const probe = cudaFirstUseProbe();
  if (probe !== null) return probe.ok && probe.devices.length > 0;
  try {
    const native = loadNative();
    native.cudaLoad();
    return native.cudaDeviceCount() > 0;
  } catch {
    return false;
  }
}

/** 'auto' = cuda when a driver and a device are present, else host. */
export function createDriver(name: "cuda" | "host" | "sim" | "auto", options: CreateDriverOptions = {}): VmmDriver {
  switch (name) {
    case "cuda":
      return new CudaDriver({ ordinal: options.ordinal });
    case "host":
      return new HostDriver({ capacityBytes: options.capacityBytes, granularity: options.granularity });
    case "sim":
      return new SimDriver({ capacityBytes: options.capacityBytes, granularity: options.granularity, costs: options.costs });
    case "auto":
      return cudaAvailable() ? createDriver("cuda", options) : createDriver("host", options);
    default:
      throw vmmError(INVALID_VALUE, "createDriver", `name=${String(name)}`, "expected cuda, host, sim or auto");
  }
}
