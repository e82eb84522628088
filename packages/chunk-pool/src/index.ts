export type { Chunk } from "./chunk.js";
export { ChunkPool, type ChunkPoolOptions, type Translation } from "./chunk-pool.js";
export { ChunkPoolError, type ChunkPoolErrorCode } from "./errors.js";
