/**
 * `@gmlake/stitch/policy`: everything a policy is written with, and nothing that would let
 * it go around the engine. A policy gets a PolicyContext (acquire/release physical memory,
 * reserve/map/unmap ranges, report retries and segments, read device facts and settings)
 * and builds on the shared mechanisms the built-in policies use: Block chains (split and
 * merge), BlockPool best fit, PyTorch's rounding and knobs.
 */
import "./register-builtins.js";
export type { PolicyContext, PhysicalChunk, DeviceFacts, MapAccess } from "./core/policy-context.js";
export type { Policy, PolicyInstance, PolicyOptions } from "./core/policy.js";
export { registerPolicy } from "./core/policy.js";
export type { Knob, KnobSchema, KnobValue } from "./core/knobs.js";
export { Block, splitFront, splitBack, absorb, releaseAvailableCachedBlocks } from "./core/block.js";
export { BlockPool } from "./core/block-pool.js";
export { lowerBound, lowerBoundOf } from "./core/lower-bound.js";
export { StitchError, isDriverOom } from "./core/errors.js";
export * from "./core/rounding.js";
export { PYTORCH_KNOBS, pytorchKnobs, type PytorchKnobs, type PytorchOptions } from "./core/pytorch-knobs.js";
export { EventKind } from "@gmlake/trace";
