// How well the sim driver's cost model predicts the driver time measured on the GPU:
// every trace x policy replayed on the sim driver as bench/driver-time.mjs replays them on
// the cuda driver (one driver for the whole run after an untimed warm-up, traces in order,
// the policies in its order, --rounds times; workload time: teardown apart), beside what
// driver-time.mjs measured (its markdown, mean of its rounds). The driver's high-water
// carries over between replays as the process's does, so first touch (memory new to the
// process) lands where it landed on the GPU. Also each row on a fresh driver: the trace as
// the first step of its own process (every growth is first touch). Run after `pnpm build`:
//   node bench/driver-predict.mjs [--measured FILE] [--costs replay|micro] [--rounds N]
//       [--policies vms,caching,gmlake,expandable] [--trace SUBSTRING] [--traces DIR[,DIR...]]
//       [--options JSON] [--by-call] [--fresh FILE[,FILE...]]
// --measured (default: benchmarks/h200-2026-12-01/driver-time.md): driver-time.mjs's output.
// --costs (default replay): H200_REPLAY_COSTS (per-call figures measured inside replays) or
//   micro (H200_COSTS, the one-call-at-a-time microbenchmark).
// --rounds (default 2, as the measured run): predicted ms is the mean over rounds.
// --options: vms knobs (JSON) for the vms rows, to try a decision before changing it.
// --by-call: also a line per call kind (predicted vs measured ms) for each row.
// --fresh: also the fresh-driver prediction against scripts/gpu/driver-time-fresh.sh's
//   tables (each trace x policy in its own process; the mean of the files' medians): what
//   `replay` and `compare` predict, since they replay on a fresh driver.
// Prints a markdown table (trace, policy, workload calls and second-half memory calls, peak
// reserved, measured ms and % of the trace, predicted ms and %, error %, fresh-process ms
// and %) and, per policy, the mean absolute error and the error of the summed time.
import { readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { DriverAdaptor, H200_COSTS, H200_REPLAY_COSTS, SimDriver, warmUpDriver } from "@gmlake/vmm";
import { readSnapshot } from "@gmlake/torch-trace";
import { traceFiles } from "./trace-files.mjs";
import { replay } from "../dist/index.js";

const args = process.argv.slice(2);
const opt = (k, d) => {
  const i = args.lastIndexOf(k);
  return i >= 0 ? args[i + 1] : d;
};
const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const shared = process.env.GMLAKE_SHARED ?? join(repo, "..", "shared");
const measuredFile = opt("--measured", join(repo, "benchmarks/h200-2026-12-01/driver-time.md"));
const costsName = opt("--costs", "replay");
const policies = opt("--policies", "vms,caching,gmlake,expandable").split(",");
const rounds = Number(opt("--rounds", "2"));
const dirs = opt("--traces", `${join(shared, "traces")},${join(repo, "corpus")}`).split(",");
const only = opt("--trace", null);
const byCall = args.includes("--by-call");
const freshFiles = opt("--fresh", null)?.split(",") ?? [];
let vmsOptions;
try {
  vmsOptions = JSON.parse(opt("--options", "{}"));
} catch {
  vmsOptions = null;
}
if (!["replay", "micro"].includes(costsName) || vmsOptions === null || typeof vmsOptions !== "object" || !(Number.isInteger(rounds) && rounds > 0)) {
  console.error("usage: node bench/driver-predict.mjs [--measured FILE] [--costs replay|micro] [--rounds N] [--policies a,b] [--trace S] [--traces DIR,..] [--options JSON] [--by-call] [--fresh FILE,..]");
  process.exit(2);
}
const costs = costsName === "replay" ? H200_REPLAY_COSTS : H200_COSTS;

/** A measurement file's text, or a one-line error and exit 2. */
function readText(file) {
  try {
    return readFileSync(file, "utf8");
  } catch (e) {
    console.error(`driver-predict: cannot read ${file}: ${e.code ?? e.message}`);
    process.exit(2);
  }
}

/** driver-time.mjs's per-trace rows: trace|policy -> { ms, pct, byCall } averaged over rounds. */
function readMeasured(file) {
  const text = readText(file);
  const acc = new Map();
  for (const line of text.split("\n")) {
    const c = line.split("|").map((s) => s.trim());
    // | trace | policy | round | calls | ms | % | 2nd calls | 2nd ms | teardown ms | ms by call |
    if (c.length !== 12 || !/^\d+$/.test(c[3])) continue;
    const key = `${c[1]}|${c[2]}`;
    let a = acc.get(key);
    if (!a) acc.set(key, (a = { n: 0, calls: 0, ms: 0, pct: 0, byCall: {} }));
    a.n++;
    a.calls += Number(c[4]);
    a.ms += Number(c[5]);
    a.pct += Number(c[6]);
    for (const part of c[10].split(", ")) {
      const [k, v] = part.split(" ");
      if (v !== undefined) a.byCall[k] = (a.byCall[k] ?? 0) + Number(v);
    }
  }
  for (const a of acc.values()) {
    a.calls /= a.n;
    a.ms /= a.n;
    a.pct /= a.n;
    for (const k of Object.keys(a.byCall)) a.byCall[k] /= a.n;
  }
  return acc;
}

/** Keeps the sim's per-call times at the end of the workload (replay reads stats() at start, midpoint, end; teardown follows). */
class AtEnd extends DriverAdaptor {
  reads = 0;
  start = null;
  end = null;
  stats() {
    const s = this.inner.stats();
    this.reads++;
    if (this.reads === 1) this.start = s;
    if (this.reads === 3) this.end = s;
    return s;
  }
  close() {} // the driver outlives the replay, as driver-time.mjs's does
  /** Workload time by call kind, microseconds. */
  timeUs() {
    if (!this.start || !this.end) return {};
    return Object.fromEntries(Object.keys(this.end.timeUs).map((k) => [k, this.end.timeUs[k] - this.start.timeUs[k]]));
  }
}

/** driver-time-fresh.sh's rows: trace basename|policy -> { ms, pct } (mean over files of the median over processes). */
function readFresh(files) {
  const acc = new Map();
  for (const file of files) {
    for (const line of readText(file).split("\n")) {
      const c = line.split("|").map((s) => s.trim());
      // | trace | policy | processes | calls | ms median (min..max) | % median (min..max) |
      if (c.length !== 8 || !/^\d+$/.test(c[3]) || !/^\d+$/.test(c[4])) continue;
      const key = `${c[1]}|${c[2]}`;
      let a = acc.get(key);
      if (!a) acc.set(key, (a = { n: 0, ms: 0, pct: 0 }));
      a.n++;
      a.ms += Number.parseFloat(c[5]);
      a.pct += Number.parseFloat(c[6]);
    }
  }
  for (const a of acc.values()) {
    a.ms /= a.n;
    a.pct /= a.n;
  }
  return acc;
}

const measured = readMeasured(measuredFile);
const freshMeasured = readFresh(freshFiles);
const traces = dirs.flatMap(traceFiles).filter((f) => !only || f.includes(only));
const snaps = [];
for (const path of traces) snaps.push({ name: relative(dirname(dirname(path)), path).replace(/\.pickle(\.gz)?$/, ""), snap: await readSnapshot(path) });
const run = (snap, policy, driver) =>
  replay(snap.events, { policy, driver, settings: snap.allocatorSettings, recorder: null, recordAllocations: false, options: policy === "vms" ? vmsOptions : undefined });

const rows = new Map();
const one = new SimDriver({ costs });
warmUpDriver(one);
for (let round = 1; round <= rounds; round++) {
  for (const { name, snap } of snaps) {
    const log = snap.events;
    const durationMs = log.length > 1 ? (log.timeUs[log.length - 1] - log.timeUs[0]) / 1000 : 0;
    for (const policy of policies) {
      const d = new AtEnd(one);
      const r = run(snap, policy, d);
      const key = `${name}|${policy}`;
      let row = rows.get(key);
      if (!row) {
        // memory calls only (stream and event calls are not in driver-time.mjs's counts either)
        const half2 = Object.entries(r.driverCallsSecondHalf).reduce((a, [k, v]) => a + (k.startsWith("mem") ? v : 0), 0);
        const calls = Object.values(r.driverCalls).reduce((a, b) => a + b, 0);
        const fresh = new SimDriver({ costs });
        const rf = run(snap, policy, fresh);
        fresh.close();
        row = { name, policy, durationMs, ms: 0, calls, half2, peak: r.peakReservedBytes, freshMs: rf.driverTimeUs / 1000, sim: {}, m: measured.get(key) ?? null };
        rows.set(key, row);
      }
      row.ms += r.driverTimeUs / 1000 / rounds;
      for (const [k, v] of Object.entries(d.timeUs())) row.sim[k] = (row.sim[k] ?? 0) + v / rounds;
    }
  }
}
one.close();

const f = (x, n = 1) => (x === null || x === undefined || Number.isNaN(x) ? "-" : x.toFixed(n));
const errPct = (p, m) => (m > 0 ? (100 * (p - m)) / m : null);
const out = [
  `## Predicted (sim, ${costsName === "replay" ? "H200_REPLAY_COSTS" : "H200_COSTS"}) vs measured (cuda, ${relative(repo, measuredFile)}) driver time, workload`,
  "",
  "| trace | policy | calls | 2nd-half calls | peak reserved GiB | measured ms | measured % | predicted ms | predicted % | error % | fresh process ms | fresh % |",
  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
];
const pctOf = (r, ms) => (r.durationMs > 0 ? (100 * ms) / r.durationMs : null);
for (const r of rows.values()) {
  const pct = pctOf(r, r.ms);
  out.push(`| ${r.name} | ${r.policy} | ${r.calls} | ${r.half2} | ${f(r.peak / 2 ** 30, 3)} | ${f(r.m?.ms)} | ${f(r.m?.pct, 2)} | ${f(r.ms)} | ${f(pct, 2)} | ${r.m ? f(errPct(r.ms, r.m.ms), 0) : "-"} | ${f(r.freshMs)} | ${f(pctOf(r, r.freshMs), 2)} |`);
  if (byCall && r.m) {
    const kinds = new Set([...Object.keys(r.m.byCall), ...Object.keys(r.sim).filter((k) => r.sim[k] > 0)]);
    const parts = [...kinds].filter((k) => (r.sim[k] ?? 0) > 0 || r.m.byCall[k] > 0.05).map((k) => `${k} ${f((r.sim[k] ?? 0) / 1000)}/${f(r.m.byCall[k] ?? 0)}`);
    out.push(`|  | (predicted/measured ms; measured includes teardown) ${parts.join(", ")} | | | | | | | | | | |`);
  }
}
/** Per policy: the error of `pred(r)` against `meas(r)` (ms) over the rows that have a measurement. */
function errorSummary(pred, meas) {
  out.push("", "| policy | rows | mean abs error % | median abs error % | worst | summed predicted / measured ms |", "| --- | ---: | ---: | ---: | --- | ---: |");
  for (const p of policies) {
    const rs = [...rows.values()].filter((r) => r.policy === p && meas(r) > 0);
    if (rs.length === 0) continue;
    const err = (r) => errPct(pred(r), meas(r));
    const e = rs.map((r) => Math.abs(err(r))).sort((a, b) => a - b);
    const worst = rs.reduce((w, r) => (Math.abs(err(r)) > Math.abs(err(w)) ? r : w));
    const sp = rs.reduce((a, r) => a + pred(r), 0);
    const sm = rs.reduce((a, r) => a + meas(r), 0);
    out.push(`| ${p} | ${rs.length} | ${f(e.reduce((a, b) => a + b, 0) / e.length, 0)} | ${f(e[Math.floor(e.length / 2)], 0)} | ${worst.name} ${f(err(worst), 0)}% | ${f(sp)} / ${f(sm)} (${f(errPct(sp, sm), 0)}%) |`);
  }
}
errorSummary((r) => r.ms, (r) => r.m?.ms ?? 0);
if (freshFiles.length > 0) {
  const fm = (r) => freshMeasured.get(`${r.name.split("/").pop()}|${r.policy}`) ?? null;
  out.push(
    "",
    `## Fresh driver (sim) vs each trace in its own process (cuda, ${freshFiles.map((x) => relative(repo, x)).join(", ")}), workload`,
    "",
    "| trace | policy | measured ms | measured % | predicted ms | predicted % | error % |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
  );
  for (const r of rows.values()) {
    const m = fm(r);
    if (m === null) continue;
    out.push(`| ${r.name} | ${r.policy} | ${f(m.ms)} | ${f(m.pct, 2)} | ${f(r.freshMs)} | ${f(pctOf(r, r.freshMs), 2)} | ${f(errPct(r.freshMs, m.ms), 0)} |`);
  }
  errorSummary((r) => r.freshMs, (r) => fm(r)?.ms ?? 0);
}
console.log(out.join("\n"));
