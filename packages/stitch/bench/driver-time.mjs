// Where the driver time goes: every trace x policy replayed on a driver (cuda on a GPU
// host, where each call's time is measured; sim here, where it is the cost model's) with
// every call's time taken one by one, then broken
// down by call kind, by handle size, by how many mappings a set-access / unmap covers,
// by phase (first half, second half, teardown), by the host time since the previous call
// (back to back or after engine work: run 34 found the work between calls sets their cost)
// and by first touch:
//   new-to-process  a create/alloc that takes the process past the most device memory it
//                   ever held (the driver must find fresh physical pages)
//   new-to-run      past what this replay held so far but not past the process's high-water
//                   (memory an earlier replay had and gave back)
//   steady          below this replay's own high-water (memory it gave back and takes again)
// Run after `pnpm build`:
//   node bench/driver-time.mjs [--driver cuda|sim] [--policies vms,caching,gmlake]
//       [--traces DIR[,DIR...]] [--trace SUBSTRING] [--rounds N] [--budget SECONDS] [--out DIR]
//       [--options JSON]
// Writes DIR/driver-time.json (every table) and DIR/driver-time.md; prints the markdown.
// --rounds N (default 1): replay everything N times (measured driver time varies between
// runs: each round is a row of its own, the distributions pool them).
// --budget (default 330): no new replay starts after that many seconds (skipped ones are listed).
// --options: vms knobs (JSON, no spaces when passed through DRIVERTIME_ARGS), e.g.
//   {"minTailHandleBytes":134217728}: measure a setting before it becomes the default.
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { DRIVER_CALLS, DriverAdaptor, createDriver, warmUpDriver } from "@gmlake/vmm";
import { readSnapshot } from "@gmlake/torch-trace";
import { traceFiles } from "./trace-files.mjs";
import { replay } from "../dist/index.js";

const t0 = performance.now();
const args = process.argv.slice(2);
const opt = (k, d) => {
  const i = args.lastIndexOf(k); // the last one wins: a caller's extra arguments override
  return i >= 0 ? args[i + 1] : d;
};
const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const shared = process.env.GMLAKE_SHARED ?? join(repo, "..", "shared");
const driverName = opt("--driver", "cuda");
const policies = opt("--policies", "vms,caching,gmlake").split(",");
const dirs = opt("--traces", `${join(shared, "traces")},${join(repo, "corpus")}`).split(",");
const only = opt("--trace", null);
const budgetS = Number(opt("--budget", "330"));
const rounds = Number(opt("--rounds", "1"));
const outDir = opt("--out", process.env.OUT ?? "driver-time-out");
let vmsOptions = null;
try {
  vmsOptions = JSON.parse(opt("--options", "{}"));
} catch {
  vmsOptions = null;
}
if (!["cuda", "sim", "host"].includes(driverName) || !(budgetS > 0) || !(Number.isInteger(rounds) && rounds > 0) || vmsOptions === null || typeof vmsOptions !== "object") {
  console.error("usage: node bench/driver-time.mjs [--driver cuda|sim|host] [--policies a,b] [--traces DIR,..] [--trace S] [--rounds N] [--budget SECONDS] [--out DIR] [--options JSON]");
  process.exit(2);
}
const traces = dirs.flatMap(traceFiles).filter((f) => !only || f.includes(only));
if (traces.length === 0) {
  console.error(`driver-time: no traces in ${dirs.join(", ")}`);
  process.exit(2);
}

const MiB = 2 ** 20;
const K = Object.fromEntries(DRIVER_CALLS.map((c, i) => [c, i]));
const TOUCH = ["new-to-process", "new-to-run", "steady"];
const PHASE = ["first half", "second half", "teardown"];
const sizeBucket = (b) => {
  const m = b / MiB;
  if (m <= 2) return "2 MiB";
  if (m <= 8) return "4-8 MiB";
  if (m <= 20) return "10-20 MiB";
  if (m <= 64) return "22-64 MiB";
  if (m <= 512) return "66-512 MiB";
  return "> 512 MiB";
};
// Host time since the previous driver call ended: back to back (the same grow's calls), a
// little engine work between, or more (run 34: the work between calls sets their cost).
const GAP = ["after <= 3 us", "after 3-30 us", "after > 30 us"];
const gapBucket = (us) => (us <= 3 ? 0 : us <= 30 ? 1 : 2);
const mapBucket = (n) => (n <= 1 ? "1" : n <= 4 ? "2-4" : n <= 16 ? "5-16" : n <= 64 ? "17-64" : "> 64");

/**
 * Times each call of the driver under it and records it; the process-wide high-water survives
 * replays. Between two calls it does as little as it can: a few typed-array stores, no
 * strings, objects or driver stats (run 34: the host work between driver calls sets what
 * they cost). Measured against the earlier log, which built the stats object twice a call
 * and five string keys: the same totals within the runs' spread (docs/notebook/2026-12-01-driver-time.md, sixth and
 * seventh driver-time runs), so the earlier tables stand. The tables are filed after the
 * replay.
 * Measured drivers (cuda, host) are timed here with performance.now() around the call (the
 * driver's own clock is the same, less its bookkeeping); the sim's modelled time comes from
 * its stats.
 */
class CallLog extends DriverAdaptor {
  static processHigh = 0;
  static processHeld = 0;
  constructor(inner, modelled) {
    super(inner);
    this.modelled = modelled;
    this.runHigh = 0;
    this.runHeld = 0;
    this.statsCalls = 0;
    this.mapped = new Map(); // mapping start -> bytes (set-access and unmap cost per mapping)
    this.allocs = new Map(); // memAlloc address -> bytes
    this.lastEnd = -Infinity; // performance.now() when the previous call returned
    this.n = 0;
    this.ensureCapacity(4096);
  }
  ensureCapacity(cap) {
    const keep = (A, old) => {
      const a = new A(cap);
      if (old) a.set(old.subarray(0, this.n));
      return a;
    };
    this.kind = keep(Uint8Array, this.kind);
    this.bytes = keep(Float64Array, this.bytes);
    this.mappings = keep(Uint32Array, this.mappings);
    this.touchOf = keep(Uint8Array, this.touchOf);
    this.phaseOf = keep(Uint8Array, this.phaseOf);
    this.us = keep(Float64Array, this.us);
    this.gap = keep(Uint8Array, this.gap);
  }
  // replay() reads stats() at its start, at its midpoint event and at its end (teardown follows)
  stats() {
    this.statsCalls++;
    return this.inner.stats();
  }
  get phase() {
    return this.statsCalls <= 1 ? 0 : this.statsCalls === 2 ? 1 : 2;
  }
  touch(bytes) {
    const h = this.runHeld + bytes;
    const p = CallLog.processHeld + bytes;
    const t = p > CallLog.processHigh ? 0 : h > this.runHigh ? 1 : 2;
    return t;
  }
  hold(bytes) {
    this.runHeld += bytes;
    CallLog.processHeld += bytes;
    if (this.runHeld > this.runHigh) this.runHigh = this.runHeld;
    if (CallLog.processHeld > CallLog.processHigh) CallLog.processHigh = CallLog.processHeld;
  }
  mappingsIn(address, size) {
    let n = 0;
    for (let a = address; a < address + size; ) {
      const s = this.mapped.get(a);
      if (s === undefined) break;
      n++;
      a += s;
    }
    return n;
  }
  timed(kind, bytes, mappings, touch, fn) {
    const start = performance.now();
    const s = this.modelled ? this.inner.stats().totalTimeUs : 0;
    try {
      return fn();
    } finally {
      const end = performance.now();
      const us = this.modelled ? this.inner.stats().totalTimeUs - s : (end - start) * 1000;
      if (this.n === this.us.length) this.ensureCapacity(2 * this.n);
      const i = this.n++;
      this.kind[i] = kind;
      this.bytes[i] = bytes;
      this.mappings[i] = mappings;
      this.touchOf[i] = touch;
      this.phaseOf[i] = this.phase;
      this.us[i] = us;
      this.gap[i] = gapBucket((start - this.lastEnd) * 1000);
      this.lastEnd = end;
    }
  }
  /** Every recorded call, in order, to `sink(kind, bytes, mappings, touch, phase, us, gap)`. */
  fileInto(sink) {
    for (let i = 0; i < this.n; i++) sink(this.kind[i], this.bytes[i], this.mappings[i], this.touchOf[i], this.phaseOf[i], this.us[i], this.gap[i]);
  }
  memCreate(size) {
    const h = this.timed(K.memCreate, size, 1, this.touch(size), () => this.inner.memCreate(size));
    this.hold(size);
    return h;
  }
  memRelease(handle) {
    this.timed(K.memRelease, handle.size, 1, 2, () => this.inner.memRelease(handle));
    this.hold(-handle.size);
  }
  memAddressReserve(size, alignment) {
    return this.timed(K.memAddressReserve, size, 0, 2, () => this.inner.memAddressReserve(size, alignment));
  }
  memAddressFree(address, size) {
    this.timed(K.memAddressFree, size, 0, 2, () => this.inner.memAddressFree(address, size));
  }
  memMap(address, size, offset, handle) {
    this.timed(K.memMap, size, 1, 2, () => this.inner.memMap(address, size, offset, handle));
    this.mapped.set(address, size);
  }
  memUnmap(address, size) {
    const n = this.mappingsIn(address, size);
    this.timed(K.memUnmap, size, n, 2, () => this.inner.memUnmap(address, size));
    for (let a = address; a < address + size; ) {
      const s = this.mapped.get(a);
      if (s === undefined) break;
      this.mapped.delete(a);
      a += s;
    }
  }
  memSetAccess(address, size) {
    this.timed(K.memSetAccess, size, this.mappingsIn(address, size), 2, () => this.inner.memSetAccess(address, size));
  }
  memAlloc(size) {
    const a = this.timed(K.memAlloc, size, 1, this.touch(size), () => this.inner.memAlloc(size));
    this.allocs.set(a, size);
    this.hold(size);
    return a;
  }
  memFree(address) {
    const size = this.allocs.get(address) ?? 0;
    this.timed(K.memFree, size, 1, 2, () => this.inner.memFree(address));
    this.allocs.delete(address);
    this.hold(-size);
  }
}

/** Per-group samples (microseconds) -> count, total, median, p90, max. */
class Groups {
  constructor() {
    this.m = new Map();
  }
  add(key, us, mappings = 1) {
    let g = this.m.get(key);
    if (!g) this.m.set(key, (g = { us: [], mappings: 0 }));
    g.us.push(us);
    g.mappings += mappings;
  }
  rows() {
    return [...this.m].map(([key, g]) => {
      const s = Float64Array.from(g.us).sort();
      const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
      const total = s.reduce((a, b) => a + b, 0);
      return { key, calls: s.length, totalMs: total / 1000, medianUs: q(0.5), p90Us: q(0.9), maxUs: s[s.length - 1], usPerMapping: g.mappings > 0 ? total / g.mappings : null };
    });
  }
}

const bySize = new Groups();
const byMappings = new Groups();
const byPhase = new Groups();
const byGap = new Groups();
const byTouch = new Groups();
const runs = [];
const skipped = [];
const fmt = (x, d = 1) => (x === null || x === undefined ? "-" : x.toFixed(d));

// Untimed warm-up: the driver's first use of each call is not charged to a trace.
{
  const d = createDriver(driverName);
  warmUpDriver(d);
  d.close();
}

const driver = createDriver(driverName);
const snaps = new Map();
for (let round = 1; round <= rounds; round++) {
  for (const path of traces) {
    const name = relative(dirname(dirname(path)), path).replace(/\.pickle(\.gz)?$/, "");
    if (!snaps.has(path)) snaps.set(path, await readSnapshot(path));
    const snap = snaps.get(path);
    const log = snap.events;
    const durationMs = log.length > 1 ? (log.timeUs[log.length - 1] - log.timeUs[0]) / 1000 : 0;
    for (const policy of policies) {
      if ((performance.now() - t0) / 1000 > budgetS) {
        skipped.push(`${name} ${policy} (round ${round})`);
        continue;
      }
      const perKind = new Float64Array(DRIVER_CALLS.length);
      const perKindCalls = new Float64Array(DRIVER_CALLS.length);
      const half = [0, 0, 0];
      const halfCalls = [0, 0, 0];
      const sink = (kind, bytes, mappings, touch, phase, us, gap) => {
        const c = DRIVER_CALLS[kind];
        perKind[kind] += us;
        perKindCalls[kind]++;
        half[phase] += us;
        halfCalls[phase]++;
        bySize.add(`${policy}|${c}|${sizeBucket(bytes)}`, us);
        if (c === "memSetAccess" || c === "memUnmap") byMappings.add(`${policy}|${c}|${mapBucket(mappings)}`, us, mappings);
        byPhase.add(`${policy}|${c}|${PHASE[phase]}`, us);
        if (phase < 2) byGap.add(`${policy}|${c}|${GAP[gap]}`, us, mappings);
        if (c === "memCreate" || c === "memAlloc") byTouch.add(`${policy}|${c}|${TOUCH[touch]}`, us);
      };
      const d = new CallLog(driver, driverName === "sim");
      let error = null;
      let r = null;
      try {
        r = replay(log, { policy, driver: d, settings: snap.allocatorSettings, recorder: null, recordAllocations: false, options: policy === "vms" ? vmsOptions : undefined });
      } catch (e) {
        error = String(e?.message ?? e);
      }
      d.fileInto(sink);
      const totalUs = perKind.reduce((a, b) => a + b, 0);
      const row = {
        trace: name,
        policy,
        round,
        events: log.length,
        traceMs: durationMs,
        peakReservedGiB: r ? r.peakReservedBytes / 2 ** 30 : null,
        driverMs: totalUs / 1000,
        // teardown (freeing everything after the last event) is not part of the workload
        driverMsWorkload: (half[0] + half[1]) / 1000,
        pctOfTrace: durationMs > 0 ? (100 * (half[0] + half[1])) / 1000 / durationMs : null,
        secondHalfCalls: halfCalls[1],
        secondHalfMs: half[1] / 1000,
        teardownMs: half[2] / 1000,
        perKindMs: Object.fromEntries(DRIVER_CALLS.map((c, i) => [c, perKind[i] / 1000]).filter(([, v]) => v > 0)),
        perKindCalls: Object.fromEntries(DRIVER_CALLS.map((c, i) => [c, perKindCalls[i]]).filter(([, v]) => v > 0)),
        error,
      };
      runs.push(row);
      console.error(
        `${round}: ${name} ${policy}: ${fmt(row.driverMsWorkload)} ms driver (${fmt(row.pctOfTrace, 2)}% of ${fmt(durationMs / 1000, 2)} s), 2nd half ${row.secondHalfCalls} calls${error ? `, ERROR ${error}` : ""}`,
      );
    }
  }
}
driver.close();

const md = [];
const table = (title, head, rows) => {
  md.push(`### ${title}`, "", `| ${head.join(" | ")} |`, `| ${head.map((_, i) => (i < 3 ? "---" : "---:")).join(" | ")} |`);
  for (const r of rows) md.push(`| ${r.join(" | ")} |`);
  md.push("");
};
md.push(`## Driver time by call (${driverName} driver), ${new Date().toISOString()}`, "");
if (Object.keys(vmsOptions).length > 0) md.push(`vms options: \`${JSON.stringify(vmsOptions)}\``, "");
table(
  "Per trace and policy (workload: first and second half; teardown apart)",
  ["trace", "policy", "round", "driver calls", "driver ms", "% of trace", "2nd-half calls", "2nd-half ms", "teardown ms", "ms by call"],
  runs.map((r) => [
    r.trace,
    r.policy,
    r.round,
    Object.values(r.perKindCalls).reduce((a, b) => a + b, 0),
    fmt(r.driverMsWorkload),
    fmt(r.pctOfTrace, 2),
    r.secondHalfCalls,
    fmt(r.secondHalfMs),
    fmt(r.teardownMs),
    Object.entries(r.perKindMs)
      .map(([k, v]) => `${k} ${v.toFixed(1)}`)
      .join(", ") + (r.error ? ` ERROR ${r.error}` : ""),
  ]),
);
const split = (rows) => rows.map((r) => [...r.key.split("|"), r]).sort((a, b) => (a[0] + a[1] + a[2] < b[0] + b[1] + b[2] ? -1 : 1));
const stat = (r) => [r.calls, fmt(r.totalMs), fmt(r.medianUs), fmt(r.p90Us), fmt(r.maxUs)];
table("By handle / range size (all traces)", ["policy", "call", "size", "calls", "total ms", "median us", "p90 us", "max us"], split(bySize.rows()).map(([p, c, k, r]) => [p, c, k, ...stat(r)]));
table(
  "Set-access and unmap by mappings in the range",
  ["policy", "call", "mappings", "calls", "total ms", "median us", "p90 us", "max us", "us per mapping"],
  split(byMappings.rows()).map(([p, c, k, r]) => [p, c, k, ...stat(r), fmt(r.usPerMapping)]),
);
table("First touch: creates and allocs by whether the memory is new", ["policy", "call", "touch", "calls", "total ms", "median us", "p90 us", "max us"], split(byTouch.rows()).map(([p, c, k, r]) => [p, c, k, ...stat(r)]));
table(
  "By the host time since the previous driver call (workload; per mapping for set-access and unmap)",
  ["policy", "call", "gap", "calls", "total ms", "median us", "p90 us", "max us", "us per mapping"],
  split(byGap.rows()).map(([p, c, k, r]) => [p, c, k, ...stat(r), fmt(r.usPerMapping)]),
);
table("By phase of the trace", ["policy", "call", "phase", "calls", "total ms", "median us", "p90 us", "max us"], split(byPhase.rows()).map(([p, c, k, r]) => [p, c, k, ...stat(r)]));
if (skipped.length) md.push(`Not run (the ${budgetS} s budget was used up): ${skipped.join(", ")}`, "");

mkdirSync(outDir, { recursive: true });
writeFileSync(
  join(outDir, "driver-time.json"),
  JSON.stringify({ driver: driverName, runs, bySize: bySize.rows(), byMappings: byMappings.rows(), byTouch: byTouch.rows(), byPhase: byPhase.rows(), byGap: byGap.rows(), skipped }, null, 1) + "\n",
);
writeFileSync(join(outDir, "driver-time.md"), md.join("\n"));
console.log(md.join("\n"));
console.error(`driver-time: ${runs.length} runs in ${((performance.now() - t0) / 1000).toFixed(1)} s; ${join(outDir, "driver-time.md")}`);
process.exitCode = runs.some((r) => r.error) ? 1 : 0;
