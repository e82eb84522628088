/**
 * The operations, statuses and text operations of the bridge's `call` and `text`
 * (native/contract.h's numbers, test/contract.test.ts checks them): one place for the bridge and the pair pattern.
 */
export const OP_ALLOC = 1;
export const OP_FREE = 2;
export const OP_RECORD_STREAM = 3;
export const OP_EMPTY_CACHE = 4;
export const OP_PING = 5;
export const OP_FLUSH = 6;
/** (pairs, unused, stream) -> ns per alloc+free pair of bench/live-pair.mjs's loop, run here (threading_bench's js_pair). */
export const OP_BENCH_PAIRS = 7;
/** (size, device, stream) -> an address served from memory the policy holds (no driver call on memory), or STATUS_NOT_CACHED. */
export const OP_ALLOC_CACHED = 8;
/** (size, device, stream) -> where OP_ALLOC would land now from the stream's free memory (Allocator.peekCached), or STATUS_NOT_CACHED; changes nothing. */
export const OP_PEEK = 9;
/** (bytes, device) -> 0: the memory budget, from the next allocation on (LiveAllocator.setCapacity). */
export const OP_SET_CAPACITY = 10;
/** (fraction, device) -> the budget's bytes: fraction x the device's memory (torch.cuda.set_per_process_memory_fraction). */
export const OP_SET_MEMORY_FRACTION = 11;
/** (pool id first, second, window 1 | 0) -> the pool's ordinal: beginAllocateToPool (before a capture begins) or createOrIncrefPool (MemPool). */
export const OP_POOL_BEGIN = 12;
/** (size, ordinal x 2 + capturing, stream) -> an address from that private pool, or a status (STATUS_CAPTURE: growing it during a capture would need a sync or an unmap). */
export const OP_POOL_ALLOC = 13;
/** (ordinal) -> 0: endAllocateToPool. */
export const OP_POOL_END = 14;
/** (pool id first, second) -> the bytes given back to the engine now: releasePool. */
export const OP_POOL_RELEASE = 15;
/** (pool id first, second) -> its uses (0: none): getPoolUseCount. */
export const OP_POOL_USE_COUNT = 16;
/** (pool id first, second, address) -> 1 when a live block of the pool starts there, else 0; address 0: its live blocks (checkPoolLiveAllocations). */
export const OP_POOL_LIVE = 17;
/** (pool id first, second) -> a checkpoint of the pool's blocks (getCheckpointState): its id (> 0). */
export const OP_POOL_CHECKPOINT = 18;
/** (checkpoint id) -> 1 when it was dropped (its AllocatorState destroyed), 0 when there was none. */
export const OP_POOL_DROP_CHECKPOINT = 19;
/** (address, size, stream): OP_FREE while a pool window is open; queued alike, never taken back (GMLAKE_TAKEBACK). */
export const OP_FREE_IN_POOL_WINDOW = 20;
/**
 * (size, device, stream) of the allocation foreseen after the answers worked out so far: the
 * last of them made ahead (unless a caller took it), then where this one would land, or
 * STATUS_NOT_CACHED (the JS thread's own call, native/embedding.cc Speculate).
 */
export const OP_MAKE_AHEAD = 21;
export const STATUS_OOM = -1;
export const STATUS_ERROR = -2;
/** OP_ALLOC_CACHED: the policy cannot serve it without growing; the front cache gives its blocks back and asks OP_ALLOC. */
export const STATUS_NOT_CACHED = -5;
/** An allocation during CUDA-graph capture that would need a driver call (contract.h kStatusCapture). */
export const STATUS_CAPTURE = -4;
export const TEXT_STATS = 1;
export const TEXT_SNAPSHOT = 2;
export const TEXT_LAST_ERROR = 3;
export const TEXT_CLOSE = 4;
export const TEXT_FREE_ERRORS = 5;
/** Every peak (allocated, active, requested, reserved bytes) back to its current value: torch.cuda.reset_peak_memory_stats(). */
export const TEXT_RESET_PEAKS = 6;
/** (checkpoint id) -> setCheckpointPoolState's lists, "F A" then F addresses freed and A "address size stream" allocated; or "gmlake: why". */
export const TEXT_POOL_RESTORE = 7;
/** Frees the free queue holds before a call must hand them over (native/contract.h kFreeQueueSlots). */
export const FREE_QUEUE_SLOTS = 256;
/** The front cache's largest size in blocks (contract.h kFrontCacheMaxEntries; frontCacheEntries). */
export const FRONT_CACHE_MAX_ENTRIES = 256;
/**
 * The free queue's header, its slots QUEUE_* below. An entry with a negative size is an
 * allocation a caller took from a foreseen answer: the engine makes it, at that address.
 */
export const FREE_QUEUE_HEADER = 23;
/** The header's slots by name (contract.h GmlakeQueueSlot). */
export const QUEUE_FREES = 0;
export const QUEUE_FREE_ERRORS = 1;
export const QUEUE_FRONT_CACHE_HITS = 2;
export const QUEUE_FRONT_CACHE_HIT_BYTES = 3;
export const QUEUE_FRONT_CACHE_PASSES = 4;
export const QUEUE_DRAINS = 5;
export const QUEUE_DRAINED_FREES = 6;
export const QUEUE_SPECULATIONS = 7;
export const QUEUE_SPEC_HITS = 8;
export const QUEUE_SPEC_CONTEXT = 9;
/** Allocations that took a queued free back (GMLAKE_TAKEBACK): alloc+free pairs the engine never saw. */
export const QUEUE_TAKEBACKS = 10;
export const QUEUE_TAKEBACK_BYTES = 11;
/** 1: the take-back is on. */
export const QUEUE_TAKEBACK_ON = 12;
/** Allocations that took no answer worked out ahead, by why: none standing (not worked out since the engine last changed, or nothing foreseen), */
export const QUEUE_SPEC_MISS_NONE = 13;
/** one for another size or stream, */
export const QUEUE_SPEC_MISS_OTHER = 14;
/** one for this request with frees queued after it was worked out. */
export const QUEUE_SPEC_MISS_BEHIND = 15;
/** Of QUEUE_SPEC_MISS_NONE: those with a free since the allocation before them (not back to back, so no chain covers them). */
export const QUEUE_SPEC_MISS_NONE_AFTER_FREE = 16;
/** How long queued frees wait for the JS thread's drain now, in us (GMLAKE_DRAIN_US; auto: as learned); -1: no drains. */
export const QUEUE_DRAIN_WAIT_US = 17;
/** Of QUEUE_SPEC_MISS_NONE, by what the JS thread last found (the five add up to it): nothing yet (it had not looked since the engine last changed), */
export const QUEUE_SPEC_MISS_NONE_LATE = 18;
/** no allocation foreseen after the last ones, */
export const QUEUE_SPEC_MISS_NONE_UNFORESEEN = 19;
/** the policy's peek had no answer (it would grow, or nothing free fits), */
export const QUEUE_SPEC_MISS_NONE_DECLINED = 20;
/** the peek throttle passed the chance up, */
export const QUEUE_SPEC_MISS_NONE_THROTTLED = 21;
/** nothing yet: the allocation before took the last answer standing. */
export const QUEUE_SPEC_MISS_NONE_AFTER_ANSWER = 22;
/** The free queue's Float64Array: the header, then (address, size, stream) for the queue and a whole front cache given back. */
export const FREE_QUEUE_LENGTH = FREE_QUEUE_HEADER + 3 * (FREE_QUEUE_SLOTS + FRONT_CACHE_MAX_ENTRIES);
