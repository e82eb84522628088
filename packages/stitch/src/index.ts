export { Block, splitFront, splitBack, absorb } from "./block.js";
export { BlockPool, releaseAvailableCachedBlocks } from "./block-pool.js";
export { lowerBound, lowerBoundOf } from "./lower-bound.js";
export { AllocatorContext } from "./context.js";
export type { PolicyContext, PhysicalChunk, DeviceFacts } from "./policy-context.js";
export { PYTORCH_KNOBS, pytorchKnobs, type PytorchKnobs, type PytorchOptions } from "./pytorch-knobs.js";
export { Allocator, type AllocatorOptions, type CloseReport } from "./engine.js";
export { StitchError, OutOfMemoryError, isDriverOom, type StitchErrorCode } from "./errors.js";
export { IntegrityChecker } from "./integrity.js";
export { InvariantChecker } from "./invariants.js";
export {
  registerPolicy,
  unregisterPolicy,
  getPolicy,
  listPolicies,
  resolveOptions,
  policyDefaults,
  optionsForPolicies,
  POLICY_REGISTRY_VERSION,
  isBuiltinPolicy,
  policyModuleOf,
  type Policy,
  type PolicyInstance,
  type PolicyOptions,
} from "./policy.js";
export * from "./rounding.js";
export { BYTE_UNITS, checkKnob, describeKnobRange, formatKnobValue, knobDefaults, parseByteSize, type Knob, type KnobSchema, type KnobValue } from "./knobs.js";
export { AllocatorStats } from "./stats.js";
export { CachingAllocator, cachingPolicy, type CachingOptions } from "./policies/caching.js";
export { ExpandableAllocator, expandablePolicy, type ExpandableOptions } from "./policies/expandable.js";
export { VmsAllocator, vmsPolicy, type VmsOptions } from "./policies/vms.js";
export { GmlakeAllocator, gmlakePolicy, type GmlakeOptions } from "./policies/gmlake.js";
export { BUILTIN_POLICIES } from "./policies/builtin.js";
export { PolicyFault, PolicyGuard, watchPolicyCalls, type PolicyCallWatch } from "./policy-guard.js";
export { PolicyThread, policyThreadData, servePolicyThread, policyCallBudgetMs, type ThreadAnswer } from "./policy-thread.js";
export { loadPolicyModule, loadPolicyModules, resolvePolicyModule } from "./policy-module.js";
export { replay, type ReplayOptions, type ReplayResult, type ReplayProbe, type OomReport } from "./replay.js";
export { replayRow, type ReplayRow } from "./replay-row.js";
export { verify, type VerifyOptions, type VerifyResult, type SnapshotLike, type SegmentEvent } from "./verify.js";
export { AddressOracleDriver } from "./address-oracle.js";
export { LaggingGpu } from "./lagging-gpu.js";
export { planTrace, type TracePlan } from "./pairing.js";
export { privatePoolTags, poolStreamKey, poolStreamsOf } from "./private-pools.js";
export { smallestCapacity, FIT_RESOLUTION, type FitOptions, type FitResult } from "./fit.js";
export { memoryAtPeak, memoryState, type MemoryState, type PoolFigures, type FreeBucket } from "./peak-state.js";
