export { LiveAllocator, type LiveConfig, type LiveDriverName } from "./live-allocator.js";
export { parseKnobText, coerceKnobs } from "./knobs.js";
export { createBridge, type Bridge, type BridgeConfig } from "./bridge.js";
