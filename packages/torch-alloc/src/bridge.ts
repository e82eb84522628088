/**
 * What the embedded Node calls (native/node_host.cc through native/boot.cjs): createBridge
 * loads the policy module if any, starts a LiveAllocator and returns two functions,
 * `call(op, a, b, c)` for the hot path (numbers in, a number out: an address, 0, or a
 * status < 0 with the message kept for `text(TEXT_LAST_ERROR)`) and `text(op, arg)` for
 * statistics, snapshots and close, plus `attachFreeQueue`: frees the native side queued,
 * taken at the start of every call (one isolate entry per alloc+free pair). Ops and
 * statuses are native/contract.h's.
 */
import { renameSync, writeFileSync, writeSync } from "node:fs";

import { BUILTIN_POLICIES, getPolicy, loadPolicyModule, StitchError, type Policy } from "@gmlake/stitch";

import { LiveAllocator, type LiveConfig } from "./live-allocator.js";
import { PairPattern } from "./pair-pattern.js";
import { PoolError } from "./private-pools.js";
import {
  OP_ALLOC,
  OP_ALLOC_CACHED,
  OP_FREE,
  OP_FREE_IN_POOL_WINDOW,
  OP_RECORD_STREAM,
  OP_EMPTY_CACHE,
  OP_PING,
  OP_FLUSH,
  OP_BENCH_PAIRS,
  OP_PEEK,
  OP_MAKE_AHEAD,
  OP_SET_CAPACITY,
  OP_SET_MEMORY_FRACTION,
  OP_POOL_BEGIN,
  OP_POOL_ALLOC,
  OP_POOL_END,
  OP_POOL_RELEASE,
  OP_POOL_USE_COUNT,
  OP_POOL_LIVE,
  OP_POOL_CHECKPOINT,
  OP_POOL_DROP_CHECKPOINT,
  STATUS_ERROR,
  STATUS_NOT_CACHED,
  TEXT_STATS,
  TEXT_SNAPSHOT,
  TEXT_LAST_ERROR,
  TEXT_CLOSE,
  TEXT_FREE_ERRORS,
  TEXT_RESET_PEAKS,
  TEXT_POOL_RESTORE,
  FREE_QUEUE_HEADER,
  FREE_QUEUE_LENGTH,
  QUEUE_FREE_ERRORS,
  QUEUE_FREES,
} from "./ops.js";

export * from "./ops.js";

export interface BridgeConfig extends LiveConfig {
  /**
   * A module whose default export is a policy or a list of them (a path relative to the
   * working directory, a file: URL or a package name), loaded by @gmlake/stitch's
   * loadPolicyModule as --policy-module is in the CLI: the same shapes, the same
   * StitchError BAD_MODULE / DUPLICATE_POLICY.
   */
  readonly policyModule?: string;
}

export interface Bridge {
  call(op: number, a: number, b: number, c: number): number;
  text(op: number, arg: string): string;
  /**
   * The native side's free queue (native/contract.h, free_queue.h): [0] frees queued, [1] of them failed (set
   * here), [2] to [4] the front cache's hits, their bytes and the frees it passed on, then
   * (address, size, stream) each; read at the start of every call and text.
   */
  attachFreeQueue(slots: Float64Array): void;
  /**
   * The hot path without arguments (native/node_host.cc): `call` on slots [0..3] = (op, a, b, c),
   * its answer written to slots [0]. Numbers passed as arguments are boxed on every call
   * (an address is no small integer); typed-array slots are not.
   */
  attachCallSlots(slots: Float64Array): () => void;
  readonly live: LiveAllocator;
  /** The native front cache's size in blocks (LiveConfig.frontCacheEntries; 0: off), read by native/embedding.cc at start. */
  readonly frontCacheEntries: number;
  /** The device the allocator serves (the front cache serves only it). */
  readonly device: number;
  /** The policy can say where an allocation would land (peekCached): what GMLAKE_SPECULATE needs, read by native/embedding.cc at start. */
  readonly peeks: boolean;
  /**
   * Answers worked out ahead are on by default (native/embedding.cc): the policy peeks and is a built-in
   * one. An outside policy's peeks are used only when asked for (GMLAKE_SPECULATE=K): a peek
   * that its malloc then contradicts stops the process, so it is the user's choice.
   */
  readonly speculatesByDefault: boolean;
  /** The engine keeps its history (record): the native take-back (GMLAKE_TAKEBACK) is refused, as its pairs would never reach it. */
  readonly records: boolean;
}

export async function createBridge(config: BridgeConfig): Promise<Bridge> {
  if (config.policyModule) {
    const names = (await loadPolicyModule(config.policyModule)).map((p) => p.name);
    try {
      getPolicy(config.policy);
    } catch {
      throw new StitchError("UNKNOWN_POLICY", `the policy module ${config.policyModule} did not register a policy named ${config.policy} (it exports ${names.join(", ")})`);
    }
  }
  const live = new LiveAllocator(config);
  const device = config.device ?? 0;
  const fail = (e: unknown): number => {
    live.lastError = e instanceof Error ? e.message : String(e);
    return STATUS_ERROR;
  };
  let queue: Float64Array | null = null;
  const freeErrors: string[] = [];
  /**
   * The answers worked out ahead that the native side stands by (free_queue.h's chain): the
   * first from OP_PEEK, each next from OP_MAKE_AHEAD, which first makes those before it
   * (LiveAllocator.allocAhead). `chainLen` of them; each answer holds for the state in which
   * the ones before it are made and nothing else happened. The native side drops them at
   * every hand-over but that of OP_MAKE_AHEAD or OP_FLUSH of nothing but taken answers; so does
   * this side (endChain), undoing those made ahead and not taken, at the first free it is
   * handed and before any other call.
   */
  let chainLen = 0;
  /** The last answer, not made yet: OP_MAKE_AHEAD makes it, unless a caller took it first. */
  let chainHead: { size: number; stream: number; addr: number } | null = null;
  const endChain = (): void => {
    chainLen = 0;
    chainHead = null;
    live.undoAhead();
  };
  /**
   * The frees the native side queued, in their order, before anything else; an entry with a
   * negative size is an allocation a caller already took (GMLAKE_SPECULATE: the address the
   * JS thread peeked for it, with nothing in between), which the engine now makes
   * (or made ahead already).
   */
  const takeFrees = (q: Float64Array): void => {
    const n = q[QUEUE_FREES]!;
    q[QUEUE_FREES] = 0;
    for (let i = 0, at = FREE_QUEUE_HEADER; i < n; i++, at += 3) {
      if (q[at + 1]! < 0) {
        if (live.takeAhead(q[at]!)) continue; // made ahead already, at this address: the caller's now
        if (chainHead !== null && chainHead.addr === q[at]!) chainHead = null; // the last answer, taken: made now
        const got = live.alloc(-q[at + 1]!, q[at + 2]!);
        if (got !== q[at]!) {
          // A tensor already uses q[at]: going on could hand its memory out twice.
          writeSync(2, `gmlake: a foreseen alloc(${-q[at + 1]!}) was handed 0x${q[at]!.toString(16)} but the engine made ${got < 0 ? "none" : "0x" + got.toString(16)}: stopping\n`);
          process.abort();
        }
        continue;
      }
      if (chainLen !== 0) endChain(); // a free: the answers still standing assumed none
      try {
        live.free(q[at]!);
      } catch (e) {
        freeErrors.push(`gmlake: free(0x${q[at]!.toString(16)}, ${q[at + 1]!}) failed: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    if (freeErrors.length > 0) q[QUEUE_FREE_ERRORS] = freeErrors.length;
  };
  const bridge: Bridge = {
    live,
    frontCacheEntries: live.frontCacheEntries,
    device,
    peeks: live.allocator.peeks,
    speculatesByDefault: live.allocator.peeks && (BUILTIN_POLICIES as readonly Policy[]).includes(live.policy),
    records: live.recording,
    attachFreeQueue(slots) {
      if (!(slots instanceof Float64Array) || slots.length !== FREE_QUEUE_LENGTH) {
        throw new TypeError(`attachFreeQueue: expected a Float64Array of ${FREE_QUEUE_LENGTH} slots`);
      }
      queue = slots;
      live.nativeCounts = slots;
    },
    attachCallSlots(slots) {
      if (!(slots instanceof Float64Array) || slots.length !== 4) throw new TypeError("attachCallSlots: expected a Float64Array of 4 slots");
      const call = bridge.call;
      return () => {
        slots[0] = call(slots[0]!, slots[1]!, slots[2]!, slots[3]!);
      };
    },
    call(op, a, b, c) {
      if (queue !== null && queue[QUEUE_FREES] !== 0) takeFrees(queue);
      // a drain or a full queue's flush changes nothing but what it was handed (a free in it ended the chain)
      if (chainLen !== 0 && op !== OP_MAKE_AHEAD && op !== OP_FLUSH) endChain();
      try {
        switch (op) {
          case OP_ALLOC:
          case OP_ALLOC_CACHED: {
            if (b !== device) return fail(new Error(`an allocation on device ${b}: this allocator serves device ${device}`));
            if (op === OP_ALLOC) return live.alloc(a, c);
            return live.allocCached(a, c) ?? STATUS_NOT_CACHED;
          }
          case OP_PEEK: {
            const at = b === device ? live.peek(a, c) : null;
            if (at === null) return STATUS_NOT_CACHED;
            // recording, none is made ahead (an undone allocation would stay in the history)
            if (!live.recording) {
              chainHead = { size: a, stream: c, addr: at };
              chainLen = 1;
            }
            return at;
          }
          case OP_MAKE_AHEAD: {
            // (size, device, stream) of the next allocation foreseen: the answer before it made
            // (unless a caller took it), then where this one lands
            if (chainLen === 0 || b !== device) return STATUS_NOT_CACHED;
            const h = chainHead;
            if (h !== null) {
              chainHead = null;
              if (!live.allocAhead(h.size, h.stream, h.addr)) {
                endChain();
                return STATUS_NOT_CACHED;
              }
            }
            const at = live.peek(a, c);
            if (at === null) return STATUS_NOT_CACHED;
            chainHead = { size: a, stream: c, addr: at };
            chainLen++;
            return at;
          }
          case OP_FREE:
          case OP_FREE_IN_POOL_WINDOW:
            live.free(a);
            return 0;
          case OP_RECORD_STREAM:
            live.recordStream(a, b);
            return 0;
          case OP_EMPTY_CACHE:
            live.emptyCache();
            return 0;
          case OP_SET_CAPACITY:
          case OP_SET_MEMORY_FRACTION: {
            if (b !== device) return fail(new Error(`a memory budget for device ${b}: this allocator serves device ${device}`));
            if (op === OP_SET_MEMORY_FRACTION) return live.setMemoryFraction(a);
            live.setCapacity(a);
            return 0;
          }
          case OP_POOL_BEGIN:
            return live.poolBegin(a, b, c !== 0);
          case OP_POOL_ALLOC:
            return live.poolAlloc(Math.floor(b / 2), a, b % 2 === 1, c);
          case OP_POOL_END:
            live.poolEnd(a);
            return 0;
          case OP_POOL_RELEASE:
            return live.poolRelease(a, b);
          case OP_POOL_USE_COUNT:
            return live.pools.useCount(a, b);
          case OP_POOL_LIVE:
            return live.pools.live(a, b, c);
          case OP_POOL_CHECKPOINT:
            return live.pools.checkpoint(a, b);
          case OP_POOL_DROP_CHECKPOINT:
            return live.pools.dropCheckpoint(a) ? 1 : 0;
          case OP_PING:
            return a;
          case OP_FLUSH:
            return 0;
          case OP_BENCH_PAIRS: {
            const pattern = new PairPattern(bridge.call, c, device);
            pattern.run(Math.ceil(a / 10)); // warm-up: JIT, caches
            const ns = pattern.time(a);
            pattern.drain();
            return ns;
          }
          default:
            return fail(new Error(`unknown operation ${op}`));
        }
      } catch (e) {
        if (e instanceof PoolError) {
          live.lastError = e.message;
          return e.status;
        }
        return fail(e);
      }
    },
    text(op, arg) {
      if (op === TEXT_FREE_ERRORS) {
        if (queue !== null) queue[QUEUE_FREE_ERRORS] = 0;
        return freeErrors.splice(0).join("\n");
      }
      if (queue !== null && queue[QUEUE_FREES] !== 0) takeFrees(queue);
      if (chainLen !== 0) endChain();
      try {
        switch (op) {
          case TEXT_STATS:
            return JSON.stringify(live.stats());
          case TEXT_SNAPSHOT: {
            // Written next to the target, then renamed: never a half-written snapshot.
            const tmp = `${arg}.tmp-${process.pid}`;
            writeFileSync(tmp, live.snapshotBytes(arg));
            renameSync(tmp, arg);
            return "";
          }
          case TEXT_LAST_ERROR:
            return live.lastError;
          case TEXT_RESET_PEAKS:
            live.resetPeaks();
            return "";
          case TEXT_CLOSE:
            return JSON.stringify(live.close());
          case TEXT_POOL_RESTORE: {
            // "F A", the F addresses freed, then A blocks allocated as "address size stream" (numbers < 2^53)
            const r = live.pools.restore(Number(arg));
            return [r.freed.length, r.allocated.length, ...r.freed, ...r.allocated.flat()].join(" ");
          }
          default:
            return `unknown text operation ${op}`;
        }
      } catch (e) {
        return `gmlake: ${e instanceof Error ? e.message : String(e)}`;
      }
    },
  };
  return bridge;
}
