// @gmlake/stitch, one folder a part:
//   core/              the engine (Allocator), the context a policy gets, Block and BlockPool with split and
//                      merge, the policy registry, knobs, rounding, errors, statistics, the engine's checks
//   policies/          the built-in policies (caching, expandable, vms, gmlake) and their list (builtin.ts)
//   replay/            replaying a recorded trace: pairing, private pools, the trace's checks, result rows
//   analysis/          what runs over replays: verify against the recording, the smallest capacity (fit),
//                      the memory state at the peak
//   outside-policies/  a policy module's loading, and the guard and thread that hold it to the contract
//   driver-adaptors/   drivers that wrap a driver: recorded addresses (address oracle), a GPU that lags, capture's guard
// The entry points stay here: this file, policy-kit.ts (@gmlake/stitch/policy) and testing.ts
// (@gmlake/stitch/testing); each hands the built-in policies to the registry (register-builtins.ts).
import "./register-builtins.js";
export { Block, splitFront, splitBack, absorb, releaseAvailableCachedBlocks } from "./core/block.js";
export { BlockPool } from "./core/block-pool.js";
export { lowerBound, lowerBoundOf } from "./core/lower-bound.js";
export { AllocatorContext } from "./core/context.js";
export type { PolicyContext, PhysicalChunk, DeviceFacts } from "./core/policy-context.js";
export { PYTORCH_KNOBS, pytorchKnobs, type PytorchKnobs, type PytorchOptions } from "./core/pytorch-knobs.js";
export { Allocator, type AllocatorOptions, type CloseReport } from "./core/engine.js";
export { StitchError, OutOfMemoryError, isDriverOom, type StitchErrorCode } from "./core/errors.js";
export { IntegrityChecker } from "./core/integrity.js";
export { InvariantChecker } from "./core/invariants.js";
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
} from "./core/policy.js";
export * from "./core/rounding.js";
export { BYTE_UNITS, checkKnob, describeKnobRange, formatKnobValue, knobDefaults, parseByteSize, parseKnobText, splitKnobAssignment, type Knob, type KnobSchema, type KnobValue } from "./core/knobs.js";
export { AllocatorStats } from "./core/stats.js";
export { CachingAllocator, cachingPolicy, type CachingOptions } from "./policies/caching.js";
export { ExpandableAllocator, expandablePolicy, type ExpandableOptions } from "./policies/expandable.js";
export { VmsAllocator, vmsPolicy, type VmsOptions } from "./policies/vms.js";
export { GmlakeAllocator, gmlakePolicy, type GmlakeOptions } from "./policies/gmlake.js";
export { BUILTIN_POLICIES } from "./policies/builtin.js";
export { PolicyFault, PolicyGuard, watchPolicyCalls, type PolicyCallWatch } from "./outside-policies/policy-guard.js";
export { PolicyThread, policyThreadData, servePolicyThread, policyCallBudgetMs, type ThreadAnswer } from "./outside-policies/policy-thread.js";
export { loadPolicyModule, loadPolicyModules, resolvePolicyModule } from "./outside-policies/policy-module.js";
export { replay, type ReplayOptions, type ReplayResult, type ReplayProbe, type OomReport } from "./replay/replay.js";
export { replayRow, type ReplayRow } from "./replay/replay-row.js";
export { verify, type VerifyOptions, type VerifyResult, type SnapshotLike, type SegmentEvent } from "./analysis/verify.js";
export { AddressOracleDriver } from "./driver-adaptors/address-oracle.js";
export { LaggingGpu } from "./driver-adaptors/lagging-gpu.js";
export { CaptureGuard, CAPTURE_REFUSED } from "./driver-adaptors/capture-guard.js";
export { planTrace, type TracePlan } from "./replay/pairing.js";
export { privatePoolTags, poolStreamKey, poolStreamsOf } from "./replay/private-pools.js";
export { smallestCapacity, FIT_RESOLUTION, type FitOptions, type FitResult } from "./analysis/fit.js";
export { memoryAtPeak, memoryState, type MemoryState, type PoolFigures, type FreeBucket } from "./analysis/peak-state.js";
