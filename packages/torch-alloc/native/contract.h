// The contract between the native side and the TypeScript bridge: operation, status and text
// operation numbers and the free queue's layout. src/ops.ts holds the same numbers under
// SCREAMING_SNAKE names (kOpAllocCached = OP_ALLOC_CACHED); test/contract.test.ts reads this
// file and fails when the two disagree, so a number changes here and there together.
#pragma once

extern "C" {

// The hot-path operations, all numbers (addresses, sizes and CUstream values are < 2^53).
enum GmlakeOp {
  kOpAlloc = 1,         // (size, device, stream) -> address, or a negative status
  kOpFree = 2,          // (address, size, stream) -> 0, or a negative status
  kOpRecordStream = 3,  // (address, stream) -> 0, or a negative status
  kOpEmptyCache = 4,    // () -> 0, or a negative status
  kOpPing = 5,          // (a) -> a: the bare round trip, for the threading benchmark
  kOpFlush = 6,         // () -> 0: only hands the queued frees over (the queue is full)
  kOpBenchPairs = 7,    // (pairs, 0, stream) -> ns per alloc+free pair timed inside JS (threading_bench's js_pair)
  kOpAllocCached = 8,   // (size, device, stream) -> address from memory the policy holds, or kStatusNotCached
  kOpPeek = 9,          // (size, device, stream) -> where kOpAlloc would land now (no change), or kStatusNotCached
  kOpSetCapacity = 10,  // (bytes, device) -> 0: the memory budget from the next allocation on
  kOpSetMemoryFraction = 11,  // (fraction, device) -> the budget's bytes: fraction x the device's memory
  // private pools (CUDA graphs, MemPool): passed through to JS like any call (src/private-pools.ts)
  kOpPoolBegin = 12,    // (pool id first, second, window) -> the pool's ordinal, or a negative status
  kOpPoolAlloc = 13,    // (size, ordinal x 2 + capturing, stream) -> address, or a negative status (-4: refused during capture)
  kOpPoolEnd = 14,      // (ordinal) -> 0
  kOpPoolRelease = 15,  // (pool id first, second) -> bytes given back to the engine now
  kOpPoolUseCount = 16, // (pool id first, second) -> its uses
  kOpPoolLive = 17,     // (pool id first, second, address) -> 1 if a live block of it starts there; address 0: its live blocks
  kOpPoolCheckpoint = 18,      // (pool id first, second) -> a checkpoint of its blocks (getCheckpointState): its id > 0
  kOpPoolDropCheckpoint = 19,  // (checkpoint id) -> 1 if dropped, 0 if there was none
  kOpFreeInPoolWindow = 20,    // (address, size, stream): kOpFree while a pool window is open (queued alike, never taken back)
  kOpMakeAhead = 21,           // (size, device, stream) foreseen next: the last answer made ahead, then where this lands, or kStatusNotCached
};

// Frees need no answer, so gmlake_embed_call(kOpFree) only queues them (no isolate, a
// mutex); the next call of any kind hands the queue to JS first, through a Float64Array
// over this many slots: [0] frees queued, [1] of them failed (JS sets it), then
// (address, size, stream) each. The engine sees every free before the call that follows it
// (unless the front cache below holds it, or an alloc took it back: GMLAKE_TAKEBACK).
constexpr int kFreeQueueSlots = 256;

// The front cache (frontCacheEntries, off by default): the last N frees are held here, not
// queued, and an alloc of the same size on the same stream takes one back with no call into
// JS. Before the engine would grow (kOpAllocCached answers kStatusNotCached), before
// empty_cache and before any text operation, every held block goes to the queue.
constexpr int kFrontCacheMaxEntries = 256;
// The queue's slots: the header (GmlakeQueueSlot), then (address, size, stream) for the queue
// plus a whole cache. An entry with a negative size is an allocation a caller took from a
// foreseen answer: the engine makes it, at that address, before anything after it.
enum GmlakeQueueSlot {
  kQueueFrees = 0,             // frees queued (entries after the header)
  kQueueFreeErrors = 1,        // of them failed (the bridge's text op says why)
  kQueueFrontCacheHits = 2,    // front-cache hits so far
  kQueueFrontCacheHitBytes = 3,
  kQueueFrontCachePasses = 4,  // frees the front cache passed to the engine
  kQueueDrains = 5,            // hand-overs the JS thread made on its own (GMLAKE_DRAIN_US)
  kQueueDrainedFrees = 6,
  kQueueSpeculations = 7,      // answers the JS thread foresaw (GMLAKE_SPECULATE)
  kQueueSpecHits = 8,          // allocations that took one
  kQueueSpecContext = 9,       // how many allocations the foresight looks back on (0: off)
  kQueueTakebacks = 10,        // allocations that took a queued free back (GMLAKE_TAKEBACK): pairs the engine never saw
  kQueueTakebackBytes = 11,
  kQueueTakebackOn = 12,       // 1: the take-back is on
  // Allocations that took no answer worked out ahead (GMLAKE_SPECULATE), by why:
  kQueueSpecMissNone = 13,     // none standing: not worked out since the engine last changed (the JS thread busy), or nothing foreseen
  kQueueSpecMissOther = 14,    // one for another size or stream
  kQueueSpecMissBehind = 15,   // one for this request, but frees were queued after it was worked out
  kQueueSpecMissNoneAfterFree = 16,  // of kQueueSpecMissNone: a free came since the allocation before it (not a burst's)
  kQueueDrainWaitUs = 17,      // how long queued frees wait for the JS thread's drain now (GMLAKE_DRAIN_US; -1: no drains)
  // Of kQueueSpecMissNone, by what the JS thread last found (the five add up to it):
  kQueueSpecMissNoneLate = 18,        // nothing yet: it had not looked since the engine last changed
  kQueueSpecMissNoneUnforeseen = 19,  // the foresight knew no allocation after the last ones
  kQueueSpecMissNoneDeclined = 20,    // the policy's peek had no answer (it would grow, or the foreseen size fits nothing free)
  kQueueSpecMissNoneThrottled = 21,   // the peek throttle passed the chance up (few answers were being taken)
  kQueueSpecMissNoneAfterAnswer = 22, // nothing yet: the allocation before took the last answer standing
};
constexpr int kFreeQueueHeader = 23;
constexpr int kFreeQueueLength = kFreeQueueHeader + 3 * (kFreeQueueSlots + kFrontCacheMaxEntries);

// Statuses below 0 returned by the operations.
enum GmlakeStatus {
  kStatusOom = -1,        // out of memory after the caches were freed and the request retried
  kStatusError = -2,      // a JS error; gmlake_embed_text(kTextLastError) says which
  kStatusNotStarted = -3, // gmlake_embed_start() did not succeed
  kStatusCapture = -4,    // kOpPoolAlloc during a CUDA-graph capture: growing the pool would need a sync or an unmap
  kStatusNotCached = -5,  // kOpAllocCached: the policy would have to grow
};

// Text operations: the result is malloc'ed (free it with free()).
enum GmlakeTextOp {
  kTextStats = 1,      // (unused) -> the engine's statistics, JSON
  kTextSnapshot = 2,   // (path) -> "" or an error message; writes a memory-viz pickle
  kTextLastError = 3,  // (unused) -> the last error of this thread's design (OOM report or JS error)
  kTextClose = 4,      // (unused) -> "" or an error: frees every block, tears the policy down, checks leaks
  kTextFreeErrors = 5, // (unused) -> why the queued frees that failed failed, one line each
  kTextResetPeaks = 6, // (unused) -> "": every peak back to its current value (reset_peak_memory_stats)
  kTextPoolRestore = 7, // (checkpoint id) -> "F A", F addresses freed, A "address size stream" allocated; or "gmlake: why"
};

}  // extern "C"
