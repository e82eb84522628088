// How fast ChunkPool + SimDriver take a GMLake-shaped load: 2 MiB chunks created in
// segments and mapped side by side, then restitched (the same chunks mapped again in new
// ranges), set access, and torn down. Reports pool calls per second of CPU time (best of
// N, process.cpuUsage, so a loaded machine distorts it less than wall time).
//   pnpm turbo run build --filter @gmlake/chunk-pool... && node bench/pool-throughput.mjs [segments] [reps]
import { SimDriver } from "@gmlake/vmm";
import { ChunkPool } from "../dist/index.js";

const segments = Number(process.argv[2] ?? 800);
const reps = Number(process.argv[3] ?? 10);
const MiB = 2 ** 20;
const C = 2 * MiB;

function once() {
  let seed = 12345;
  const rand = (n) => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return (seed >>> 8) % n;
  };
  const driver = new SimDriver();
  const pool = new ChunkPool(driver);
  const segs = [];
  let calls = 0;
  const t0 = process.cpuUsage();
  for (let s = 0; s < segments; s++) {
    // a pBlock segment: 1..64 new chunks in a fresh range
    const n = 1 + rand(64);
    const chunks = [];
    for (let i = 0; i < n; i++) chunks.push(pool.create(C));
    const va = driver.memAddressReserve(n * C);
    pool.mapRun(va, chunks);
    segs.push({ va, chunks });
    calls += 2 * n + 2;
    // every fourth segment, a stitch: chunks of two earlier segments mapped side by side anew
    if (s % 4 === 3) {
      const a = segs[rand(segs.length)].chunks;
      const b = segs[rand(segs.length)].chunks;
      const run = a === b ? a : a.concat(b);
      const sva = driver.memAddressReserve(run.length * C);
      pool.mapRun(sva, run);
      segs.push({ va: sva, chunks: run, stitched: true });
      calls += run.length + 2;
    }
  }
  // teardown: stitched ranges first (their chunks belong to segments), then segments
  for (const pass of [true, false]) {
    for (const { va, chunks, stitched } of segs) {
      if (Boolean(stitched) !== pass) continue;
      pool.unmapRun(va, chunks);
      driver.memAddressFree(va, chunks.length * C);
      calls += chunks.length + 1;
      if (!pass) for (const c of chunks) pool.release(c);
      if (!pass) calls += chunks.length;
    }
  }
  const t = process.cpuUsage(t0);
  const leaks = driver.leaks();
  if (leaks.mappings !== 0 || leaks.liveBytes !== 0 || leaks.reservations !== 0) throw new Error(`leaked ${JSON.stringify(leaks)}`);
  return { ms: (t.user + t.system) / 1000, calls, chunks: pool.liveChunks };
}

once(); // warm the JIT
let best = null;
for (let r = 0; r < reps; r++) {
  const x = once();
  if (best === null || x.ms < best.ms) best = x;
}
console.log(
  `${segments} segments, ${best.calls} pool/driver calls: best ${best.ms.toFixed(1)} ms CPU of ${reps} -> ` +
    `${(best.calls / best.ms / 1000).toFixed(2)} M calls/s`,
);
