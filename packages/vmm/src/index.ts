export * from "./driver.js";
export {
  VmmError,
  DRIVER_NOT_FOUND,
  DRIVER_TOO_OLD,
  ADDON_NOT_LOADED,
  CUDA_PROBE_FAILED,
  DEINITIALIZED,
  HOST_TOO_MANY_OPEN_FILES,
  HOST_ADDRESS_SPACE,
  HOST_RESOURCE_CODES,
} from "./vmm-error.js";
export { MeteredDriver } from "./metered-driver.js";
export { EventBook } from "./event-book.js";
export { CudaDriver, type CudaDriverOptions } from "./cuda-driver.js";
export { HostDriver, defaultHostCapacity, type HostDriverOptions } from "./host-driver.js";
export { SimDriver, type SimDriverOptions, SIM_VA_BASE, SIM_VA_LIMIT, H200_BYTES } from "./sim-driver.js";
export { H200_COSTS, H200_REPLAY_COSTS, curveUs, type CostTable, type SizeCurve } from "./cost-model.js";
export { MISUSE_CODES } from "./address-space.js";
export { DriverAdaptor } from "./driver-adaptor.js";
export { DefaultStreamDriver } from "./default-stream-driver.js";
export { CapacityDriver, capacityOf, withCapacity } from "./capacity.js";
export { FaultDriver, withFaults, mulberry32, FAULT_CODES, type FaultPlan, type FaultAt, type InjectedFault } from "./faults.js";
export { warmUpDriver } from "./warm-up.js";
export { createDriver, cudaAvailable, type CreateDriverOptions } from "./create-driver.js";
export { probeCuda, probeCudaInProcess, cudaFirstUseProbe, describeProbe, type CudaProbe, type ProbeDevice, type ProbeOptions } from "./probe.js";
export { lowerBound, lowerBoundOf } from "./lower-bound.js";
export { locateAddon, type AddonLocation } from "./native.js";
