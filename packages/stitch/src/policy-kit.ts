/**
 * `@gmlake/stitch/policy`: everything a policy is written with, and nothing that would let
 * it go around the engine. A policy gets a PolicyContext (acquire/release physical memory,
 * reserve/map/unmap ranges, report retries and segments, read device facts and settings)
 * and builds on the shared mechanisms the built-in policies use: Block chains (split and
 * merge), BlockPool best fit, PyTorch's rounding and knobs.
 */
export type { PolicyContext, PhysicalChunk, DeviceFacts, MapAccess } from "./policy-context.js";
export type { Policy, PolicyInstance, PolicyOptions } from "./policy.js";
export { registerPolicy } from "./policy.js";
export type { Knob, KnobSchema, KnobValue } from "./knobs.js";
export { Block, splitFront, splitBack, absorb } from "./block.js";
export { BlockPool, releaseAvailableCachedBlocks } from "./block-pool.js";
export { lowerBound, lowerBoundOf } from "./lower-bound.js";
export { StitchError, isDriverOom } from "./errors.js";
export * from "./rounding.js";
export { PYTORCH_KNOBS, pytorchKnobs, type PytorchKnobs, type PytorchOptions } from "./pytorch-knobs.js";
export { EventKind } from "@gmlake/trace";
