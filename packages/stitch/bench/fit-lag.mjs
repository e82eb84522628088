// Will it fit, as live: the smallest capacity per trace and policy when the trace is driven as
// the live library drives the engine and the GPU runs behind the CPU (live-drive.mjs), so that
// frees used on another stream, and handles moved off a stream still working, are not free at
// once. fit-compare.mjs's search assumes an idle GPU; live runs on an H200 matched this one's
// answers (BENCHMARKS "Under a memory budget"). Bisection over 2 MiB steps between the peak of
// requested bytes and the policy's own peak reserved there. Run after `pnpm build`:
//   node bench/fit-lag.mjs [--trace SUBSTRING] [--policies expandable,vms] [--lag-ms 20] [--options JSON]
// --options go to vms (over the live defaults: cross-stream reuse on).
import { basename, join, resolve } from "node:path";
import { readSnapshot } from "@gmlake/torch-trace";
import { planTrace } from "../dist/index.js";
import { driveLive } from "./live-drive.mjs";
import { traceFiles } from "./trace-files.mjs";

const args = process.argv.slice(2);
const opt = (k, d) => {
  const i = args.indexOf(k);
  return i >= 0 ? args[i + 1] : d;
};
const root = resolve(import.meta.dirname, "../../..");
const shared = process.env.GMLAKE_SHARED ?? join(root, "..", "shared");
const only = opt("--trace", null);
const lagUs = Number(opt("--lag-ms", "20")) * 1000;
const policies = opt("--policies", "expandable,vms").split(",");
const vmsOptions = { crossStream: true, ...JSON.parse(opt("--options", "{}")) };
const files = [...traceFiles(join(shared, "traces")), ...traceFiles(join(root, "corpus"))].filter(
  (f) => !/_expandable|_stacks/.test(basename(f)) && !f.includes("/small/") && (!only || f.includes(only)),
);
if (files.length === 0 || !(lagUs >= 0)) {
  console.error(files.length === 0 ? `no traces under ${join(shared, "traces")} or ${join(root, "corpus")} (set GMLAKE_SHARED)` : "--lag-ms takes a number >= 0");
  process.exit(2);
}
const STEP = 2 * 2 ** 20;
const GiB = 2 ** 30;
const rows = [];
for (const f of files) {
  const snap = await readSnapshot(f);
  const plan = planTrace(snap.events);
  const name = basename(f).replace(/\.pickle(\.gz)?$/, "");
  const row = { name, fits: {} };
  for (const policy of policies) {
    const options = policy === "vms" ? vmsOptions : undefined;
    const run = (capacityBytes) => driveLive(snap, { policy, options, lagUs, capacityBytes, plan, keepOpen: capacityBytes === undefined });
    const free = run(undefined);
    row.requested = free.engine.stats.peakRequestedBytes;
    free.engine.close();
    // lo fails (below the requested bytes nothing fits), hi fits
    let lo = Math.floor((row.requested - 1) / STEP) * STEP;
    let hi = Math.ceil(free.peak / STEP) * STEP;
    let n = 1;
    while (run(hi).oom >= 0) {
      lo = hi;
      hi += 64 * STEP;
      n++;
    }
    while (hi - lo > STEP) {
      const mid = Math.floor((lo + hi) / 2 / STEP) * STEP;
      if (run(mid).oom >= 0) lo = mid;
      else hi = mid;
      n++;
    }
    row.fits[policy] = { smallest: hi, free: free.peak, replays: n };
    process.stderr.write(`${name} ${policy}: ${(hi / GiB).toFixed(3)} GiB (${n} replays)\n`);
  }
  rows.push(row);
}
const g = (b) => (b / GiB).toFixed(3);
console.log(`Smallest capacity, GiB, driven as live with the GPU ${lagUs / 1000} ms behind the CPU (vms knobs ${JSON.stringify(vmsOptions)})\n`);
console.log(`| trace | peak requested | ${policies.map((p) => `${p} smallest`).join(" | ")} | ${policies.map((p) => `${p} no capacity`).join(" | ")} |`);
console.log(`| --- | ---: |${" ---: |".repeat(2 * policies.length)}`);
for (const r of rows) console.log(`| ${r.name} | ${g(r.requested)} | ${policies.map((p) => g(r.fits[p].smallest)).join(" | ")} | ${policies.map((p) => g(r.fits[p].free)).join(" | ")} |`);
