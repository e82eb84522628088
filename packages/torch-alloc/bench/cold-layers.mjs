// Where a cold alloc+free pair's time goes, layer by layer: the pattern of
// bench/cold_calls.py (a window of 64 live blocks, 512 B << 0..17, one stream) driven at
// four depths on the sim driver, record off, with 1 MiB of data written between every two
// calls (the caches evicted, as numpy does in cold_calls.py) and only the calls timed:
//   bridge  bridge.call(OP_ALLOC / OP_FREE), as the embedded Node's call slots do
//   live    LiveAllocator.alloc / free (the address table, the counts)
//   engine  Allocator.tryMalloc / free (the books, stream safety)
//   policy  the policy instance's malloc / free alone (no books: a timing probe only)
// Each depth's figure minus the next one's is what that layer costs cold.
//   node bench/cold-layers.mjs [--policy vms] [--pairs 20000] [--reps 5] [--sweep-kib 1024]
//                              [--depth bridge|live|engine|policy] (one depth only)
// Prints one JSON line: median ns per pair over the reps for each depth (a clock read per
// call, about 40 ns, included in each).
import { parseArgs } from "node:util";

import { createBridge, OP_ALLOC, OP_FREE } from "../dist/bridge.js";

const { values } = parseArgs({
  options: {
    policy: { type: "string", default: "vms" },
    pairs: { type: "string", default: "20000" },
    reps: { type: "string", default: "5" },
    "sweep-kib": { type: "string", default: "1024" },
    depth: { type: "string" },
  },
});
const pairs = Number(values.pairs);
const reps = Number(values.reps);
const sweepKib = Number(values["sweep-kib"]);
if (!(pairs > 0) || !(reps > 0) || !(sweepKib >= 0)) {
  console.error("cold-layers: --pairs and --reps take numbers > 0, --sweep-kib a number >= 0");
  process.exit(2);
}
const junk = new Float64Array(sweepKib * 128);
const sweep = () => {
  for (let i = 0; i < junk.length; i += 8) junk[i] += 1; // a write per cache line
};
const sizes = new Float64Array(4096);
let x = 0x2545f491;
for (let i = 0; i < sizes.length; i++) {
  x ^= x << 13;
  x ^= x >>> 17;
  x ^= x << 5;
  sizes[i] = 512 * 2 ** ((x >>> 0) % 18);
}

/** One depth: alloc(size) -> a handle, free(handle). */
function depth(name, bridge) {
  const live = bridge.live;
  const eng = live.allocator;
  const pol = eng.instance;
  switch (name) {
    case "bridge":
      return { alloc: (s) => bridge.call(OP_ALLOC, s, 0, 0), free: (a) => bridge.call(OP_FREE, a, 0, 0) };
    case "live":
      return { alloc: (s) => live.alloc(s, 0), free: (a) => live.free(a) };
    case "engine":
      return { alloc: (s) => eng.tryMalloc(s, 0), free: (b) => eng.free(b) };
    default:
      // policy.malloc's block is freed as the engine would (allocated set, then cleared)
      return {
        alloc: (s) => {
          const b = pol.malloc(s, 0);
          b.allocated = true;
          return b;
        },
        free: (b) => {
          b.allocated = false;
          pol.free(b);
        },
      };
  }
}

async function once(name) {
  const bridge = await createBridge({ policy: values.policy, driver: "sim" });
  const d = depth(name, bridge);
  const win = new Array(64);
  for (let i = 0; i < 64; i++) win[i] = d.alloc(sizes[i]);
  const run = (n, timed) => {
    let ns = 0n;
    for (let i = 0; i < n; i++) {
      const k = i & 63;
      sweep();
      let t = process.hrtime.bigint();
      const h = d.alloc(sizes[(i + 64) & 4095]);
      if (timed) ns += process.hrtime.bigint() - t;
      sweep();
      t = process.hrtime.bigint();
      d.free(win[k]);
      if (timed) ns += process.hrtime.bigint() - t;
      win[k] = h;
    }
    return Number(ns) / n;
  };
  run(Math.ceil(pairs / 4), false); // warm-up: JIT
  return run(pairs, true);
}

const out = { policy: values.policy, pairs, reps, sweep_kib: sweepKib };
const med = (a) => a.sort((p, q) => p - q)[a.length >> 1];
const depths = ["bridge", "live", "engine", "policy"];
if (values.depth !== undefined && !depths.includes(values.depth)) {
  console.error(`cold-layers: --depth takes one of ${depths.join(", ")}`);
  process.exit(2);
}
const names = values.depth === undefined ? depths : [values.depth];
const res = Object.fromEntries(names.map((n) => [n, []]));
for (let r = 0; r < reps; r++) for (const n of names) res[n].push(await once(n));
for (const n of names) out[`${n}_ns`] = Math.round(med(res[n]));
console.log(JSON.stringify(out));
