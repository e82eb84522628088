// How fast the sim driver takes the calls of a stitching replay: stitch views of 1..64
// random handles out of a pool, set access, unmap, free; reports driver calls per second
// of wall time and the modelled H200 driver time.   node bench/sim-throughput.mjs [views]
import { SimDriver } from "../dist/index.js";

const views = Number(process.argv[2] ?? 20000);
const d = new SimDriver();
const g = d.device.granularity.minimum;
const pool = Array.from({ length: 4096 }, () => d.memCreate(g));
let seed = 12345;
const rand = (n) => {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return (seed >>> 8) % n;
};
d.resetStats();
const t0 = performance.now();
const live = [];
for (let v = 0; v < views; v++) {
  const k = 1 + rand(64);
  const va = d.memAddressReserve(k * g);
  const start = rand(pool.length - k);
  for (let i = 0; i < k; i++) d.memMap(va + i * g, g, 0, pool[start + i]);
  d.memSetAccess(va, k * g);
  live.push([va, k]);
  // Keep about 32 views live, like a cache of stitched blocks; free the oldest.
  if (live.length > 32) {
    const [old, n] = live.shift();
    d.memUnmap(old, n * g);
    d.memAddressFree(old, n * g);
  }
}
const ms = performance.now() - t0;
const s = d.stats();
console.log(
  `${views} stitched views, ${s.totalCalls} driver calls (${s.calls.memMap} maps) in ${ms.toFixed(0)} ms: ` +
    `${((s.totalCalls / ms) * 1000 / 1e6).toFixed(2)} M calls/s; modelled H200 driver time ${(s.totalTimeUs / 1e6).toFixed(2)} s`,
);
