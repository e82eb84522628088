// Device synchronizations, unmaps, maps, creates and event calls per training step, with
// a policy driven the way the live library drives it (packages/torch-alloc's
// LiveAllocator): the live default knobs (vms: cross-stream reuse on), the program's free
// at the trace's free_requested (Allocator.free: the engine itself defers a block used on
// another stream until an event there completed), release-and-retry on out of memory. The
// driver is the sim behind a model of a GPU running `--lag-ms` behind the CPU on the
// trace's own clock (LaggingGpu), so that events complete late as they do live.
// Steps are cut at the end of each Optimizer.zero_grad annotation (else Optimizer.step;
// else --parts equal slices by event). Run after `pnpm build`:
//   node bench/sync-steps.mjs [--trace SUBSTRING] [--lag-ms 20] [--policy vms] [--options JSON] [--steps]
// Prints one summary row per trace (peak reserved, device syncs and host waits for one
// event, unmaps, maps, creates, event calls, the modelled stall of both; also after the
// first step) and, with --steps, the per-step table of each trace.
import { join, resolve } from "node:path";
import { readSnapshot } from "@gmlake/torch-trace";
import { driveLive } from "./live-drive.mjs";
import { traceFiles } from "./trace-files.mjs";

const args = process.argv.slice(2);
const opt = (k, d) => {
  const i = args.indexOf(k);
  return i >= 0 ? args[i + 1] : d;
};
const policy = opt("--policy", "vms");
const lagUs = Number(opt("--lag-ms", "20")) * 1000;
const options = JSON.parse(opt("--options", "{}"));
const only = opt("--trace", null);
const parts = Number(opt("--parts", "12"));
const perStep = args.includes("--steps");
const root = resolve(import.meta.dirname, "../../..");
const shared = process.env.GMLAKE_SHARED ?? join(root, "..", "shared");
const files = [...traceFiles(join(shared, "traces")), ...traceFiles(join(root, "corpus"))].filter(
  (f) => !f.includes("/small/") && !f.includes("_stacks") && (!only || f.includes(only)),
);
if (files.length === 0) {
  console.error(`no traces under ${join(shared, "traces")} or ${join(root, "corpus")} (set GMLAKE_SHARED)`);
  process.exit(2);
}

/** Event index where each step ends (exclusive), from the annotations. */
function stepEnds(snap) {
  const L = snap.events;
  const pick = (name) => snap.annotations.filter((a) => a.stage === "END" && a.name.startsWith(name)).map((a) => a.timeUs);
  let cuts = pick("Optimizer.zero_grad");
  if (cuts.length === 0) cuts = pick("Optimizer.step");
  const ends = [];
  if (cuts.length > 0) {
    let i = 0;
    for (const t of cuts) {
      while (i < L.length && L.timeUs[i] <= t) i++;
      ends.push(i);
    }
    if (ends[ends.length - 1] < L.length) ends[ends.length - 1] = L.length; // teardown frees go to the last step
    return { ends, by: "annotation" };
  }
  for (let k = 1; k <= parts; k++) ends.push(Math.round((k * L.length) / parts));
  return { ends, by: "slice" };
}

const COLS = ["ctxSynchronize", "memUnmap", "memMap", "memCreate", "memRelease", "eventCreate", "eventRecord", "eventQuery", "eventSynchronize", "streamWaitEvent"];

function run(snap) {
  const { ends, by } = stepEnds(snap);
  const rows = [];
  let s0 = Object.fromEntries(COLS.map((c) => [c, 0])); // no call before the first event
  let stall0 = 0;
  let def0 = 0;
  let step = 0;
  const onEvent = (i, gpu, e) => {
    if (i + 1 !== ends[step]) return;
    const s1 = gpu.stats().calls;
    const row = { step: step + 1 };
    for (const c of COLS) row[c] = s1[c] - s0[c];
    row.stallMs = (gpu.stallUs - stall0) / 1000;
    row.deferredFrees = e.stats.numDeferredFrees - def0;
    row.reservedGiB = e.stats.peakReservedBytes / 2 ** 30;
    rows.push(row);
    s0 = { ...s1 };
    stall0 = gpu.stallUs;
    def0 = e.stats.numDeferredFrees;
    step++;
  };
  const { oom, peak, engine } = driveLive(snap, { policy, options, lagUs, onEvent, keepOpen: true });
  if (oom >= 0) throw new Error(`out of memory at event ${oom}`);
  const counters = engine.instance.counters?.() ?? {};
  engine.close();
  return { rows, peak, by, counters };
}

const fmt = (v) => (typeof v === "number" && !Number.isInteger(v) ? v.toFixed(2) : String(v));
const summary = [];
for (const f of files) {
  const snap = await readSnapshot(f);
  const name = f.split("/").pop().replace(/\.pickle(\.gz)?$/, "");
  const { rows, peak, by } = run(snap);
  const sum = (c, from = 0) => rows.slice(from).reduce((n, r) => n + r[c], 0);
  summary.push({ name, steps: `${rows.length} (${by})`, peak: (peak / 2 ** 30).toFixed(3), syncs: sum("ctxSynchronize"), syncsAfter1: sum("ctxSynchronize", 1), waits: sum("eventSynchronize"), waitsAfter1: sum("eventSynchronize", 1), unmaps: sum("memUnmap"), unmapsAfter1: sum("memUnmap", 1), maps: sum("memMap"), creates: sum("memCreate"), events: sum("eventCreate") + sum("eventRecord") + sum("eventQuery") + sum("streamWaitEvent"), stall: sum("stallMs").toFixed(1), stallAfter1: sum("stallMs", 1).toFixed(1) });
  if (perStep) {
    console.log(`\n${name} (${policy}, GPU ${lagUs / 1000} ms behind the CPU; steps by ${by})\n`);
    console.log(`| step | syncs | unmaps | maps | creates | releases | eventCreate | eventRecord | eventQuery | eventSynchronize | streamWaitEvent | deferred frees | modelled stall ms | peak reserved GiB |`);
    console.log(`|${" --- |".repeat(14)}`);
    for (const r of rows) console.log(`| ${[r.step, ...COLS.map((c) => r[c]), r.deferredFrees, r.stallMs, r.reservedGiB].map(fmt).join(" | ")} |`);
  }
}
console.log(`\n${policy} as live drives it (knobs ${JSON.stringify(options)}), GPU ${lagUs / 1000} ms behind the CPU\n`);
console.log("| trace | steps | peak reserved GiB | syncs (after step 1) | event waits (after step 1) | unmaps (after step 1) | maps | creates | event calls | modelled stall ms (after step 1) |");
console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const s of summary) console.log(`| ${s.name} | ${s.steps} | ${s.peak} | ${s.syncs} (${s.syncsAfter1}) | ${s.waits} (${s.waitsAfter1}) | ${s.unmaps} (${s.unmapsAfter1}) | ${s.maps} | ${s.creates} | ${s.events} | ${s.stall} (${s.stallAfter1}) |`);
