// Replay speed on the sim driver: every public trace x every registered policy, best of
// N runs after one warm-up run (the first run's figure is printed too: what a one-shot
// `gmlake replay` sees, JIT warm-up included). Prints a markdown table. Run after
// `pnpm build`:
//   node bench/replay-bench.mjs [--reps N] [--policy NAME] [--trace SUBSTRING] [--no-record] [--details]
//                              [--save FILE | --check FILE]
// --save writes each run's decisions (peaks, driver calls by kind, a hash of every
// recorded event); --check compares against such a file and exits 1 on any difference:
// speed work must leave results bit-identical.
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { SimDriver } from "@gmlake/vmm";
import { readSnapshot } from "@gmlake/torch-trace";
import { listPolicies, replay } from "../dist/index.js";

const args = process.argv.slice(2);
const opt = (k, d) => {
  const i = args.indexOf(k);
  return i >= 0 ? args[i + 1] : d;
};
const reps = Number(opt("--reps", "5"));
const onlyPolicy = opt("--policy", null);
const onlyTrace = opt("--trace", null);
const record = !args.includes("--no-record");
const details = args.includes("--details");
const saveTo = opt("--save", null);
const checkWith = opt("--check", null);
const shared = process.env.GMLAKE_SHARED ?? join(resolve(dirname(fileURLToPath(import.meta.url)), "../../.."), "..", "shared");
const dir = join(shared, "traces");
if (!existsSync(dir)) {
  console.error(`no traces at ${dir} (set GMLAKE_SHARED)`);
  process.exit(2);
}
const traces = readdirSync(dir).filter((f) => f.endsWith(".pickle.gz") && (!onlyTrace || f.includes(onlyTrace))).sort();
const policies = listPolicies().map((p) => p.name).filter((p) => !onlyPolicy || p === onlyPolicy);
const GiB = 2 ** 30;
const short = (calls) =>
  Object.entries(calls)
    .filter(([, v]) => v > 0)
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");

/** FNV-1a over every recorded event's kind, address, size and aux: equal iff the replay decided the same. */
function logHash(log) {
  if (log === null) return "none";
  let h = 0x811c9dc5;
  const mix = (x) => {
    h = Math.imul(h ^ (x & 0xffffffff), 16777619);
    h = Math.imul(h ^ Math.floor(x / 2 ** 32), 16777619);
  };
  for (let i = 0; i < log.length; i++) {
    mix(log.kind[i]);
    mix(log.addr[i]);
    mix(log.size[i]);
    mix(log.aux[i]);
  }
  return (h >>> 0).toString(16);
}

const nonZero = (calls) => Object.fromEntries(Object.entries(calls).filter(([, v]) => v !== 0));
const fingerprint = (r) => ({
  peakReservedBytes: r.peakReservedBytes,
  peakRequestedBytes: r.peakRequestedBytes,
  peakAllocatedBytes: r.peakAllocatedBytes,
  driverCalls: nonZero(r.driverCalls),
  driverCallsSecondHalf: nonZero(r.driverCallsSecondHalf),
  // modelled time: a sum of the same costs, so equal up to the order of summation
  driverTimeUs: Math.round(r.driverTimeUs * 1000) / 1000,
  oom: r.oom?.eventIndex ?? null,
  events: logHash(r.log),
});

const found = {};
const rows = [];
for (const t of traces) {
  const snap = await readSnapshot(join(dir, t));
  for (const policy of policies) {
    let best = null;
    let first = null;
    let bestCpuMs = Infinity;
    for (let r = 0; r < reps + 1; r++) {
      const c0 = process.cpuUsage();
      const res = replay(snap.events, {
        policy,
        driver: new SimDriver(),
        settings: snap.allocatorSettings,
        recorder: record ? undefined : null,
        recordAllocations: record,
        teardown: false,
      });
      const c = process.cpuUsage(c0);
      if (r === 0) first = res;
      else {
        if (best === null || res.wallMs < best.wallMs) best = res; // the first run warms the JIT
        bestCpuMs = Math.min(bestCpuMs, (c.user + c.system) / 1000);
      }
    }
    const name = t.replace(".pickle.gz", "");
    found[`${name} ${policy}`] = fingerprint(first);
    rows.push([name, policy, snap.events.length, best, first, bestCpuMs]);
    if (details) {
      const b = best;
      console.error(
        [
          name.padEnd(24),
          policy.padEnd(11),
          `${(b.eventsPerSecond / 1e6).toFixed(2)} M ev/s`.padStart(13),
          `requested ${(b.peakRequestedBytes / GiB).toFixed(2)} GiB`,
          `reserved ${(b.peakReservedBytes / GiB).toFixed(2)} GiB`,
          `util ${b.utilization.toFixed(3)}`,
          `driver ${(b.driverTimeUs / 1000).toFixed(1)} ms`,
          b.oom ? `OOM@${b.oom.eventIndex}` : "",
          `| calls: ${short(b.driverCalls)}`,
          `| 2nd half: ${short(b.driverCallsSecondHalf) || "none"}`,
        ].join("  "),
      );
    }
  }
}

const cpu = cpus()[0]?.model ?? "?";
const load = loadavg().map((x) => x.toFixed(1)).join(" ");
console.log(
  `Replay speed, sim driver, best of ${reps} after a warm-up run; recorder ${record ? "on" : "off"}; ${cpus().length} CPUs (${cpu}), load average ${load} at the end, Node ${process.versions.node}`,
);
console.log("");
// CPU time (the process's, GC threads included) is what load on a shared machine inflates least.
console.log("| trace | events | policy | M events/s (best wall) | ms (best wall) | M events/s (best CPU time) | M events/s (first run) |");
console.log("| --- | ---: | --- | ---: | ---: | ---: | ---: |");
let slowest = null;
for (const [name, policy, n, b, f, cpuMs] of rows) {
  console.log(
    `| ${name} | ${n} | ${policy} | ${(b.eventsPerSecond / 1e6).toFixed(2)} | ${b.wallMs.toFixed(1)} | ${(n / cpuMs / 1000).toFixed(2)} | ${(f.eventsPerSecond / 1e6).toFixed(2)} |`,
  );
  if (slowest === null || b.eventsPerSecond < slowest[2].eventsPerSecond) slowest = [name, policy, b];
}
if (slowest) console.log(`\nslowest: ${slowest[0]} ${slowest[1]} ${(slowest[2].eventsPerSecond / 1e6).toFixed(2)} M events/s`);

if (saveTo) {
  writeFileSync(saveTo, JSON.stringify(found, null, 1) + "\n");
  console.log(`decisions written to ${saveTo}`);
}
if (checkWith) {
  const want = JSON.parse(readFileSync(checkWith, "utf8"));
  let bad = 0;
  for (const [k, v] of Object.entries(found)) {
    if (!(k in want)) continue;
    if (JSON.stringify(want[k]) !== JSON.stringify(v)) {
      bad++;
      console.log(`DIFFERENT: ${k}\n  want ${JSON.stringify(want[k])}\n  got  ${JSON.stringify(v)}`);
    }
  }
  console.log(bad === 0 ? `decisions identical to ${checkWith} (${Object.keys(found).length} runs)` : `${bad} runs differ from ${checkWith}`);
  if (bad) process.exitCode = 1;
}
