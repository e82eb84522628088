/**
 * The operations, statuses and text operations of the bridge's `call` and `text`
 * (native/embed.h's numbers): one place for the bridge and the pair pattern.
 */
export const OP_ALLOC = 1;
export const OP_FREE = 2;
export const OP_RECORD_STREAM = 3;
export const OP_EMPTY_CACHE = 4;
export const OP_PING = 5;
export const OP_FLUSH = 6;
/** (pairs, unused, stream) -> ns per alloc+free pair of bench/live-pair.mjs's loop, run here (threading_bench's js_pair). */
export const OP_BENCH_PAIRS = 7;
export const STATUS_OOM = -1;
export const STATUS_ERROR = -2;
export const TEXT_STATS = 1;
export const TEXT_SNAPSHOT = 2;
export const TEXT_LAST_ERROR = 3;
export const TEXT_CLOSE = 4;
export const TEXT_FREE_ERRORS = 5;
/** Slots of the free queue (native/embed.h kFreeQueueSlots). */
export const FREE_QUEUE_SLOTS = 256;
