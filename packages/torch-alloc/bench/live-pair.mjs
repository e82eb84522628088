// Per-call cost of the JS side, without the native layer: alloc+free pairs through the
// bridge's call() (what native/node_host.cc calls) in the pattern of python/gmlake_torch/pair_bench.cc
// (src/pair-pattern.ts: the same loop the library's OP_BENCH_PAIRS runs inside the
// embedded Node), on the sim driver.
//   node bench/live-pair.mjs [--policy vms] [--record true|false] [--pairs 200000] [--reps 5]
// Prints one JSON line: ns per alloc+free pair (median and min of the reps) and the driver
// calls per pair. Profile with `node --cpu-prof --cpu-prof-dir=prof bench/live-pair.mjs ...`.
import { parseArgs } from "node:util";

import { createBridge } from "../dist/bridge.js";
import { PairPattern } from "../dist/pair-pattern.js";

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
const pattern = new PairPattern(bridge.call, stream);
pattern.run(Math.min(pairs, 20000)); // warm-up: JIT, caches
const callsBefore = bridge.live.driver.stats().totalCalls;
const ns = [];
for (let r = 0; r < reps; r++) ns.push(pattern.time(pairs));
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
pattern.drain();
bridge.live.close();
