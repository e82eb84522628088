export * from "./event-kind.js";
export * from "./event-log.js";
export * from "./allocator-settings.js";
