// How close the sim's model of cudaMalloc placement comes to the addresses an H200 gave
// PyTorch, and whether it matters: for every default-mode trace, free-running caching on
// the sim with allocPlacement "cuda" (the model) and "bump" (increasing addresses).
// Run after `pnpm build`:   node bench/placement-check.mjs [--perturb SEEDS] [TRACE_DIR ...]
//   misranked: segments whose rank among the live segments (by address) differs from the recording's
//   segments / peak: the segment decisions (kind, size, which segment) and the peak reserved equal the recording's
//   allocs moved: allocations placed at another (segment, offset) than recorded (best-fit ties broken otherwise)
// --perturb SEEDS: what memory outside PyTorch could change. Each seed replays with the
// model plus phantom cudaMallocs (after 5% of the segment allocations, 2-32 MiB, never
// freed: stand-ins for lazily loaded CUDA modules and library buffers, which a trace does
// not show) and counts the runs whose segments or peak differ from the recording's.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { DriverAdaptor, SimDriver, mulberry32 } from "@gmlake/vmm";
import { EventKind } from "@gmlake/trace";
import { readSnapshot } from "@gmlake/torch-trace";
import { traceFiles } from "./trace-files.mjs";
import { verify } from "../dist/index.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const shared = process.env.GMLAKE_SHARED ?? join(repo, "..", "shared");
const argv = process.argv.slice(2);
const pi = argv.indexOf("--perturb");
const seeds = pi >= 0 ? Number(argv.splice(pi, 2)[1]) : 0;
const dirs = argv.length > 0 ? argv : [join(shared, "traces"), join(repo, "corpus")];

/** Phantom allocations outside the allocator: taken from the same heap, never freed. */
class PhantomDriver extends DriverAdaptor {
  constructor(inner, seed) {
    super(inner);
    this.rand = mulberry32(seed);
  }
  memAlloc(size) {
    if (this.rand() < 0.05) this.inner.memAlloc((1 + Math.floor(this.rand() * 16)) * 2 * 2 ** 20);
    return this.inner.memAlloc(size);
  }
}

/** Per segment_alloc: its rank among live segments; per alloc: (segment ordinal, offset). */
function names(log) {
  const live = []; // [start, end, ordinal] sorted by start
  const ranks = [];
  const allocs = [];
  let next = 0;
  for (let i = 0; i < log.length; i++) {
    const k = log.kind[i];
    const a = log.addr[i];
    if (k === EventKind.segmentAlloc) {
      let r = 0;
      while (r < live.length && live[r][0] < a) r++;
      ranks.push(r);
      live.splice(r, 0, [a, a + log.size[i], next++]);
    } else if (k === EventKind.segmentFree) {
      const r = live.findIndex((s) => s[0] === a);
      if (r >= 0) live.splice(r, 1);
    } else if (k === EventKind.alloc) {
      const s = live.find((x) => a >= x[0] && a < x[1]);
      allocs.push(s ? `${s[2]}+${a - s[0]}` : `?${a}`);
    }
  }
  return { ranks, allocs };
}

console.log(`| trace | segments | placement | misranked | segments equal | peak equal | allocs moved |${seeds ? ` perturbed: segments differ | peak differs (max MiB) |` : ""}`);
console.log(`| --- | ---: | --- | ---: | --- | --- | ---: |${seeds ? " ---: | ---: |" : ""}`);
for (const f of dirs.flatMap(traceFiles)) {
  const snap = await readSnapshot(f);
  if (snap.allocatorSettings.expandableSegments) continue;
  const rec = names(snap.events);
  for (const placement of ["cuda", "bump"]) {
    const v = verify(snap, { addressOracle: false, driver: new SimDriver({ allocPlacement: placement }) });
    const got = names(v.replay.log);
    let misranked = 0;
    for (let i = 0; i < Math.min(rec.ranks.length, got.ranks.length); i++) if (rec.ranks[i] !== got.ranks[i]) misranked++;
    let moved = 0;
    for (let i = 0; i < Math.min(rec.allocs.length, got.allocs.length); i++) if (rec.allocs[i] !== got.allocs[i]) moved++;
    const peak = v.replayedPeakReservedBytes - v.recordedPeakReservedBytes;
    let perturbed = "";
    if (seeds && placement === "cuda") {
      let segDiff = 0;
      let peakDiff = 0;
      let worst = 0;
      for (let seed = 1; seed <= seeds; seed++) {
        const p = verify(snap, { addressOracle: false, driver: new PhantomDriver(new SimDriver(), seed) });
        const d = p.replayedPeakReservedBytes - p.recordedPeakReservedBytes;
        if (p.firstMismatch !== null) segDiff++;
        if (d !== 0) peakDiff++;
        if (Math.abs(d) > Math.abs(worst)) worst = d;
      }
      perturbed = ` ${segDiff} of ${seeds} | ${peakDiff} of ${seeds} (${worst > 0 ? "+" : ""}${(worst / 2 ** 20).toFixed(0)}) |`;
    } else if (seeds) perturbed = " | |";
    console.log(
      `| ${f.slice(f.lastIndexOf("traces/") >= 0 ? f.lastIndexOf("traces/") + 7 : f.lastIndexOf("/") + 1)} | ${rec.ranks.length} | ${placement} | ${misranked} | ${v.firstMismatch === null ? "yes" : `no (#${v.firstMismatch.index})`} | ${peak === 0 ? "yes" : `no (${peak > 0 ? "+" : ""}${(peak / 2 ** 20).toFixed(0)} MiB)`} | ${moved} of ${rec.allocs.length} |${perturbed}`,
    );
  }
}
