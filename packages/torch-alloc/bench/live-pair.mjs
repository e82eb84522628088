// Per-call cost of the JS side, without the native layer: alloc+free pairs through the
// bridge's call() (what embed.cc calls) in the pattern of python/gmlake_torch/pair_bench.cc
// (the H200's per-call benchmark: 4096 sizes 512 B << 0..17, i.e. up to 64 MiB, a window of
// 64 live blocks replaced in turn, one stream), on the sim driver.
//   node bench/live-pair.mjs [--policy vms] [--record true|false] [--pairs 200000] [--reps 5]
// Prints one JSON line: ns per alloc+free pair (median and min of the reps) and the driver
// calls per pair. Profile with `node --cpu-prof --cpu-prof-dir=prof bench/live-pair.mjs ...`.
import { parseArgs } from "node:util";

import { createBridge, OP_ALLOC, OP_FREE } from "../dist/bridge.js";

const { values } = parseArgs({
  options: {
    policy: { type: "string", default: "vms" },
    record: { type: "string", default: "true" },
    pairs: { type: "string", default: "200000" },
    reps: { type: "string", default: "5" },
    stream: { type: "string", default: "0" },
  },
});
const pairs = Number(values.pairs);
const reps = Number(values.reps);
const stream = Number(values.stream);
if (!(pairs > 0) || !(reps > 0) || !["true", "false"].includes(values.record)) {
  console.error("live-pair: --pairs and --reps take positive numbers, --record true or false");
  process.exit(2);
}
const bridge = await createBridge({ policy: values.policy, driver: "sim", record: values.record === "true" });

// xorshift: the same sizes every run
let x = 0x2545f491;
const rnd = () => {
  x ^= x << 13;
  x ^= x >>> 17;
  x ^= x << 5;
  return x >>> 0;
};
const sizes = new Float64Array(4096).map(() => 512 * 2 ** (rnd() % 18));
const call = bridge.call;
const addr = new Float64Array(64);
const sz = new Float64Array(64);
for (let i = 0; i < 64; i++) {
  sz[i] = sizes[i];
  addr[i] = call(OP_ALLOC, sz[i], 0, stream);
}
let at = 0;
function run(n) {
  for (let j = 0; j < n; j++, at++) {
    const k = at & 63;
    const s = sizes[at & 4095];
    const p = call(OP_ALLOC, s, 0, stream);
    if (p < 0) throw new Error(`alloc failed: ${bridge.live.lastError}`);
    if (call(OP_FREE, addr[k], sz[k], stream) !== 0) throw new Error(`free failed: ${bridge.live.lastError}`);
    addr[k] = p;
    sz[k] = s;
  }
}
run(Math.min(pairs, 20000)); // warm-up: JIT, caches
const callsBefore = bridge.live.driver.stats().totalCalls;
const ns = [];
for (let r = 0; r < reps; r++) {
  const t0 = process.hrtime.bigint();
  run(pairs);
  ns.push(Number(process.hrtime.bigint() - t0) / pairs);
}
ns.sort((a, b) => a - b);
const calls = bridge.live.driver.stats().totalCalls - callsBefore;
console.log(
  JSON.stringify({
    policy: values.policy,
    record: values.record === "true",
    pairs,
    reps,
    ns_per_pair_median: Math.round(ns[reps >> 1]),
    ns_per_pair_min: Math.round(ns[0]),
    driver_calls_per_pair: +(calls / (pairs * reps)).toFixed(4),
  }),
);
for (let i = 0; i < 64; i++) call(OP_FREE, addr[i], sz[i], stream);
bridge.live.close();
