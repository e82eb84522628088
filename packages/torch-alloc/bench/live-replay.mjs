// Per-call cost of the JS side in a realistic state: the alloc/free sequence of a real
// recorded trace (../shared/traces) driven through the bridge the way native/embedding.cc
// drives it (call slots for allocs; frees written into the free queue and handed over at
// the next call, a flush when the queue is full), on the sim driver, record off. Each
// trace address is mapped to the address the bridge returned. A PyTorch free reaches the
// allocator at the trace's free_requested (free_completed when a trace lacks the request);
// the program's empty_cache calls are made too.
//   node bench/live-replay.mjs [--trace gpt2_ft] [--policy vms] [--reps 5] [--warmup 1]
//                              [--streams recorded|one] [--record false|true] [--knobs JSON]
//                              [--evict-kib N] [--front-cache N [--recall]] [--drain [--speculate K]] [--takeback]
// Prints one JSON line: ns per alloc+free pair over the whole trace and over its second
// half (the steady state; an alloc's share of the frees and empty_cache calls with it), best
// and median of the reps (each rep a fresh bridge; warm-up reps first, not counted), and what
// the engine decided (peak reserved, segments, driver calls, a hash of every address handed
// out): equal before and after a speed change.
// --evict-kib N: the caches are swept (N KiB read) before each call and only the calls are
// timed (a clock read around each, about 40 ns, counted): a cold-cache state nearer to
// PyTorch's process, where the training's own work runs between two allocations.
// --front-cache N: the native front cache as free_queue.cc keeps it (frontCacheEntries = N): the
// last N frees held, an alloc of a held block's size and stream served from it without a
// call (not timed: no JS runs), OP_ALLOC_CACHED while blocks are held, and the held blocks
// queued before OP_ALLOC when the policy would grow, before empty_cache and at the end.
// "decided" then also says how many allocations it served (front_cache_hits).
// --recall: a design not built, evaluated here: before each call into the engine while
// blocks are held, every held block next to a free mapped block goes back to the engine (so
// it merges as a plain free would); "decided" counts them (front_cache_recalls). The check
// runs in JS after an OP_FLUSH that hands the queue over, so its ns are not the design's.
// --drain: the JS thread's free draining (GMLAKE_THREADING=thread): each free is handed to
// the engine by an untimed OP_FLUSH as soon as it is queued, as the JS thread does while it
// waits for the next request, so a timed call finds no free to take first.
// --speculate K (with --drain): GMLAKE_SPECULATE=K as embedding.cc does it: after each call and
// each drain the JS thread asks the engine where the allocation it expects next would land
// (engine.peekCached; expected: the one that followed the same last k allocations, sizes and
// streams, the last time, k = K .. 1), and an allocation that was foreseen takes that answer
// with no call (not timed; the JS thread is assumed to be done before it comes); the engine
// then makes it (checked: at the same address). "decided" counts the hits.
// --takeback: FreeQueue's take-back (GMLAKE_TAKEBACK=1, off by default): an alloc takes back the newest
// queued free (of the last 32) of its size and stream, with no call (not timed); without --drain a
// free stays queued until the next call, as with a Locker per call. "decided" counts them (takebacks).
// Profile with `node --cpu-prof --cpu-prof-dir=prof bench/live-replay.mjs ...`.
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import { planTrace } from "@gmlake/stitch";
import { EventKind } from "@gmlake/trace";
import { readSnapshot } from "@gmlake/torch-trace";

import {
  createBridge,
  FREE_QUEUE_HEADER,
  FREE_QUEUE_LENGTH,
  FREE_QUEUE_SLOTS,
  FRONT_CACHE_MAX_ENTRIES,
  OP_ALLOC,
  OP_ALLOC_CACHED,
  OP_EMPTY_CACHE,
  OP_FLUSH,
  STATUS_NOT_CACHED,
} from "../dist/bridge.js";

const { values } = parseArgs({
  options: {
    trace: { type: "string", default: "gpt2_ft" },
    policy: { type: "string", default: "vms" },
    reps: { type: "string", default: "5" },
    warmup: { type: "string", default: "1" },
    streams: { type: "string", default: "recorded" },
    record: { type: "string", default: "false" },
    knobs: { type: "string", default: "{}" },
    "evict-kib": { type: "string", default: "0" },
    "front-cache": { type: "string", default: "0" },
    recall: { type: "boolean", default: false },
    drain: { type: "boolean", default: false },
    speculate: { type: "string", default: "0" },
    takeback: { type: "boolean", default: false },
  },
});
const reps = Number(values.reps);
const warmup = Number(values.warmup);
if (!(reps > 0) || !(warmup >= 0) || !["recorded", "one"].includes(values.streams) || !["true", "false"].includes(values.record)) {
  console.error("live-replay: --reps takes a positive number, --warmup a number >= 0, --streams recorded or one, --record true or false");
  process.exit(2);
}
const evictKib = Number(values["evict-kib"]);
if (!(evictKib >= 0)) {
  console.error("live-replay: --evict-kib takes a number >= 0");
  process.exit(2);
}
const junk = evictKib > 0 ? new Float64Array(evictKib * 128) : null;
const frontCache = Number(values["front-cache"]);
if (values.recall && frontCache === 0) {
  console.error("live-replay: --recall needs --front-cache N (N > 0)");
  process.exit(2);
}
if (!(Number.isInteger(frontCache) && frontCache >= 0 && frontCache <= FRONT_CACHE_MAX_ENTRIES)) {
  console.error(`live-replay: --front-cache takes a whole number from 0 to ${FRONT_CACHE_MAX_ENTRIES}`);
  process.exit(2);
}
const specK = Number(values.speculate);
if (!(Number.isInteger(specK) && specK >= 0 && specK <= 8)) {
  console.error("live-replay: --speculate takes a whole number from 0 (off) to 8");
  process.exit(2);
}
if (specK > 0 && (!values.drain || frontCache > 0)) {
  console.error("live-replay: --speculate needs --drain (and no --front-cache)");
  process.exit(2);
}
if (values.takeback && frontCache > 0) {
  console.error("live-replay: --takeback is off with the front cache (it holds the frees instead)");
  process.exit(2);
}
let knobs;
try {
  knobs = JSON.parse(values.knobs);
} catch {
  console.error(`live-replay: --knobs takes a JSON object, not ${values.knobs}`);
  process.exit(2);
}
const shared = process.env.GMLAKE_SHARED ?? join(resolve(dirname(fileURLToPath(import.meta.url)), "../../.."), "..", "shared");
const file = [values.trace, join(shared, "traces", `${values.trace}.pickle.gz`), join(shared, "traces", values.trace)].find((f) => existsSync(f) && f.includes("."));
if (file === undefined) {
  console.error(`live-replay: no trace ${values.trace} (a path, or a name in ${join(shared, "traces")}; set GMLAKE_SHARED)`);
  process.exit(2);
}

// ---- the trace as a flat op list (typed arrays, built once: not timed) ----
const snap = await readSnapshot(file);
const log = snap.events;
const { ref, emptyCache } = planTrace(log);
const device = log.length > 0 ? log.device[0] : 0; // one device: the first one's events
const OP_K_ALLOC = 0;
const OP_K_FREE = 1;
const OP_K_EMPTY = 2;
const kind = new Uint8Array(log.length);
const size = new Float64Array(log.length); // alloc: bytes
const stream = new Float64Array(log.length); // alloc: raw stream
const slot = new Int32Array(log.length); // alloc: its slot in addrOf; free: its alloc's slot
const slotOf = new Int32Array(log.length).fill(-1); // event index of an alloc -> slot
let ops = 0;
let allocs = 0;
const freed = new Uint8Array(log.length); // by alloc event index: free already issued
for (let i = 0; i < log.length; i++) {
  const k = log.kind[i];
  if (log.device[i] !== device) continue;
  if (emptyCache[i] === 1) {
    kind[ops++] = OP_K_EMPTY;
    continue;
  }
  if (k === EventKind.alloc) {
    kind[ops] = OP_K_ALLOC;
    size[ops] = log.size[i];
    stream[ops] = values.streams === "one" ? 0 : log.streams[log.stream[i]];
    slotOf[i] = allocs;
    slot[ops++] = allocs++;
  } else if (k === EventKind.freeRequested || k === EventKind.freeCompleted) {
    const a = ref[i];
    if (a < 0 || freed[a] === 1) continue; // alloc not in the trace, or freed at its request
    freed[a] = 1;
    kind[ops] = OP_K_FREE;
    slot[ops++] = slotOf[a];
  }
}
const stillLive = allocs - freed.reduce((n, f) => n + f, 0);
// The second half of the trace (from its middle alloc on) is timed on its own too: the
// steady state, after the warm-up steps that grow the pools (and, on a GPU, call the driver).
let midOp = 0;
for (let j = 0, seen = 0; j < ops; j++) if (kind[j] === OP_K_ALLOC && seen++ === allocs >> 1) midOp = j;
const secondHalf = allocs - (allocs >> 1);

// ---- one rep: a fresh bridge, the whole sequence, driven as embedding.cc drives it ----
async function rep() {
  const bridge = await createBridge({ policy: values.policy, knobs, driver: "sim", record: values.record === "true", device, frontCacheEntries: frontCache });
  const queue = new Float64Array(FREE_QUEUE_LENGTH);
  const slots = new Float64Array(4);
  bridge.attachFreeQueue(queue);
  const call = bridge.attachCallSlots(slots);
  const addrOf = new Float64Array(allocs);
  const sizeOf = new Float64Array(allocs);
  const streamOf = new Float64Array(allocs);
  let queued = 0;
  const enqueue = (addr, sz, st) => {
    const at = FREE_QUEUE_HEADER + 3 * queued++;
    queue[at] = addr;
    queue[at + 1] = sz;
    queue[at + 2] = st;
  };
  // the front cache: held (address, size, stream), oldest first
  const held = [];
  let hits = 0;
  let recalls = 0;
  const heldNextToFree = () => {
    invoke(OP_FLUSH, 0, 0, 0); // the engine takes the queued frees first
    const free = (x) => x !== null && !x.allocated && x.mapped;
    for (let q = held.length - 1; q >= 0; q--) {
      const b = bridge.live.blockAt(held[q][0]);
      if (b !== undefined && (free(b.prev) || free(b.next))) {
        enqueue(...held[q]);
        held.splice(q, 1);
        recalls++;
      }
    }
  };
  const giveBack = () => {
    for (const [addr, sz, st] of held) enqueue(addr, sz, st);
    held.length = 0;
  };
  const untimed = (op, a, b, c) => {
    queue[0] = queued; // HandOverFrees: the frees queued since the last call
    queued = 0;
    slots[0] = op;
    slots[1] = a;
    slots[2] = b;
    slots[3] = c;
    call();
    if (queue[1] !== 0) throw new Error(`live-replay: a queued free failed: ${bridge.text(5, "")}`);
    return slots[0];
  };
  // --evict-kib: the calls alone are timed (the clock read around each), with the caches
  // swept before each, as the training's own work between two allocations sweeps them.
  let inCalls = 0n;
  let inCallsMid = 0n;
  const timed = (op, a, b, c) => {
    let x = 0;
    for (let i = 0; i < junk.length; i += 8) x += junk[i]; // one read per 64-byte line
    junk[0] = x;
    const t = process.hrtime.bigint();
    const r = untimed(op, a, b, c);
    inCalls += process.hrtime.bigint() - t;
    return r;
  };
  const invoke = junk === null ? untimed : timed;
  // --speculate: what the JS thread expects next, and where the engine would put it
  const succ = new Map(); // the last k allocations' keys, joined -> the allocation that followed
  const hist = [];
  let spec = null;
  let specHits = 0;
  let takebacks = 0;
  const speculate = () => {
    spec = null;
    if (specK === 0 || queued > 0) return;
    let next;
    for (let k = hist.length; k >= 1 && next === undefined; k--) next = succ.get(hist.slice(hist.length - k).join("|"));
    if (next === undefined) return;
    const addr = bridge.live.allocator.peekCached(next[0], next[1]);
    if (addr !== null) spec = { size: next[0], stream: next[1], addr };
  };
  const t0 = process.hrtime.bigint();
  let tMid = t0;
  for (let j = 0; j < ops; j++) {
    if (j === midOp) {
      tMid = process.hrtime.bigint();
      inCallsMid = inCalls;
    }
    const k = kind[j];
    if (k === OP_K_ALLOC) {
      const sz = size[j];
      const st = stream[j];
      sizeOf[slot[j]] = sz;
      streamOf[slot[j]] = st;
      if (frontCache > 0) {
        let h = held.length - 1;
        while (h >= 0 && (held[h][1] !== sz || held[h][2] !== st)) h--;
        if (h >= 0) {
          addrOf[slot[j]] = held[h][0];
          held.splice(h, 1);
          hits++;
          continue;
        }
      }
      if (specK > 0) {
        const hit = spec !== null && spec.size === sz && spec.stream === st && queued === 0;
        for (let k = 1; k <= hist.length; k++) succ.set(hist.slice(hist.length - k).join("|"), [sz, st]);
        hist.push(`${sz}:${st}`);
        if (hist.length > specK) hist.shift();
        if (hit) {
          const p = untimed(OP_ALLOC, sz, device, st); // the JS thread makes it after the caller took it
          if (p !== spec.addr) throw new Error(`live-replay: speculated 0x${spec.addr.toString(16)} for alloc(${sz}), the engine made 0x${p.toString(16)}`);
          addrOf[slot[j]] = p;
          specHits++;
          speculate();
          continue;
        }
      }
      if (values.takeback) {
        // FreeQueue::TakeBack: the newest of the last kTakeBackScan queued frees of this size and stream
        let q = queued - 1;
        while (q >= 0 && q >= queued - 32 && (queue[FREE_QUEUE_HEADER + 3 * q + 1] !== sz || queue[FREE_QUEUE_HEADER + 3 * q + 2] !== st)) q--;
        if (q >= 0 && q >= queued - 32) {
          const at = FREE_QUEUE_HEADER + 3 * q;
          addrOf[slot[j]] = queue[at];
          queue.copyWithin(at, at + 3, FREE_QUEUE_HEADER + 3 * queued);
          queued--;
          takebacks++;
          continue;
        }
      }
      if (values.recall && held.length > 0) heldNextToFree();
      let p = held.length > 0 ? invoke(OP_ALLOC_CACHED, sz, device, st) : invoke(OP_ALLOC, sz, device, st);
      if (p === STATUS_NOT_CACHED) {
        giveBack();
        p = invoke(OP_ALLOC, sz, device, st);
      }
      if (p < 0) throw new Error(`live-replay: alloc(${sz}) failed: ${bridge.text(3, "")}`);
      addrOf[slot[j]] = p;
      speculate();
    } else if (k === OP_K_FREE) {
      if (queued === FREE_QUEUE_SLOTS) invoke(OP_FLUSH, 0, 0, 0);
      const s = slot[j];
      if (frontCache > 0) {
        held.push([addrOf[s], sizeOf[s], streamOf[s]]);
        if (held.length > frontCache) enqueue(...held.shift());
      } else {
        enqueue(addrOf[s], sizeOf[s], streamOf[s]);
      }
      if (values.drain && queued > 0) {
        untimed(OP_FLUSH, 0, 0, 0);
        speculate();
      }
    } else {
      giveBack();
      invoke(OP_EMPTY_CACHE, 0, 0, 0);
    }
  }
  giveBack();
  if (queued > 0) invoke(OP_FLUSH, 0, 0, 0);
  const tEnd = process.hrtime.bigint();
  const ns = junk === null ? Number(tEnd - t0) : Number(inCalls);
  const nsMid = junk === null ? Number(tEnd - tMid) : Number(inCalls - inCallsMid);
  const st = bridge.live.stats();
  let h = 0x811c9dc5; // FNV-1a over every address handed out, in order: equal iff every placement is
  for (let i = 0; i < allocs; i++) {
    h = Math.imul(h ^ (addrOf[i] % 2 ** 32), 16777619);
    h = Math.imul(h ^ Math.floor(addrOf[i] / 2 ** 32), 16777619);
  }
  const decided = {
    ...(frontCache > 0 ? { front_cache_hits: hits } : {}),
    ...(values.recall ? { front_cache_recalls: recalls } : {}),
    ...(specK > 0 ? { speculated_hits: specHits } : {}),
    ...(values.takeback ? { takebacks } : {}),
    addresses_hash: (h >>> 0).toString(16),
    peak_reserved_bytes: st["reserved_bytes.all.peak"],
    reserved_bytes: st["reserved_bytes.all.current"],
    segments: st["segment.all.current"],
    peak_allocated_bytes: st["allocated_bytes.all.peak"],
    num_alloc_retries: st.num_alloc_retries,
    num_sync_all_streams: st.num_sync_all_streams,
    num_cross_stream_reuses: st.num_cross_stream_reuses,
    driver_calls: Object.fromEntries(Object.entries(st.driver_calls).filter(([, v]) => v !== 0)),
  };
  bridge.live.close();
  return { nsPerPair: ns / allocs, nsPerPairSecondHalf: nsMid / secondHalf, decided };
}

const times = [];
const steady = [];
let decided = null;
for (let r = 0; r < warmup + reps; r++) {
  const x = await rep();
  if (decided === null) decided = x.decided;
  else if (JSON.stringify(decided) !== JSON.stringify(x.decided)) throw new Error("live-replay: two reps decided differently");
  if (r >= warmup) {
    times.push(x.nsPerPair);
    steady.push(x.nsPerPairSecondHalf);
  }
}
times.sort((a, b) => a - b);
steady.sort((a, b) => a - b);
console.log(
  JSON.stringify({
    trace: values.trace,
    policy: values.policy,
    streams: values.streams,
    record: values.record === "true",
    evict_kib: evictKib,
    front_cache_entries: frontCache,
    drain: values.drain,
    speculate: specK,
    takeback: values.takeback,
    pairs: allocs,
    still_live_at_end: stillLive,
    reps,
    ns_per_pair_min: Math.round(times[0]),
    ns_per_pair_median: Math.round(times[reps >> 1]),
    second_half_ns_per_pair_min: Math.round(steady[0]),
    second_half_ns_per_pair_median: Math.round(steady[reps >> 1]),
    decided,
  }),
);
