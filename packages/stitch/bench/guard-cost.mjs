// What the policy guard costs: each built-in policy replayed as itself (trusted, unguarded)
// and as a copy of itself (an outside policy: guarded), alternately, best of N runs after a
// warm-up, on the sim driver with no recorder (the engine's own cost, nothing else). The two
// must decide the same (same peaks and counters), else this exits 1. Run after `pnpm build`:
//   node bench/guard-cost.mjs [--reps N] [--trace SUBSTRING] [--policy NAME]
import { existsSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { SimDriver } from "@gmlake/vmm";
import { readSnapshot } from "@gmlake/torch-trace";
import { BUILTIN_POLICIES, privatePoolTags, replay } from "../dist/index.js";

const args = process.argv.slice(2);
const opt = (k, d) => (args.includes(k) ? args[args.indexOf(k) + 1] : d);
const reps = Number(opt("--reps", "5"));
const onlyTrace = opt("--trace", "gpt2_ft.pickle");
const onlyPolicy = opt("--policy", null);
const shared = process.env.GMLAKE_SHARED ?? join(resolve(dirname(fileURLToPath(import.meta.url)), "../../.."), "..", "shared");
const dir = join(shared, "traces");
if (!existsSync(dir)) {
  console.error(`no traces at ${dir} (set GMLAKE_SHARED)`);
  process.exit(2);
}
const traces = readdirSync(dir).filter((f) => f.endsWith(".pickle.gz") && f.includes(onlyTrace)).sort();
console.log("| trace | policy | events | unguarded ms | guarded ms | cost | ns per event |");
console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
let differ = false;
for (const t of traces) {
  const s = await readSnapshot(join(dir, t));
  const pools = privatePoolTags(s.events, s.segments);
  for (const p of BUILTIN_POLICIES.filter((x) => !onlyPolicy || x.name === onlyPolicy)) {
    const copy = { ...p, name: `${p.name}-guarded` };
    const run = (policy) => replay(s.events, { policy, driver: new SimDriver(), settings: s.allocatorSettings, recorder: null, pools });
    const best = [Infinity, Infinity];
    const seen = [];
    for (let i = 0; i <= reps; i++) {
      for (const [j, policy] of [p, copy].entries()) {
        const t0 = performance.now();
        const r = run(policy);
        const ms = performance.now() - t0;
        if (i > 0) best[j] = Math.min(best[j], ms);
        seen[j] = JSON.stringify([r.peakReservedBytes, r.peakAllocatedBytes, r.numAllocRetries, r.ooms, r.counters]);
      }
    }
    if (seen[0] !== seen[1]) differ = true;
    const n = s.events.length;
    console.log(`| ${t} | ${p.name} | ${n} | ${best[0].toFixed(1)} | ${best[1].toFixed(1)} | ${((best[1] / best[0] - 1) * 100).toFixed(0)}% | ${(((best[1] - best[0]) * 1e6) / n).toFixed(0)} |${seen[0] !== seen[1] ? " DIFFERENT RESULTS" : ""}`);
  }
}
process.exit(differ ? 1 : 0);
