// Replay every public trace with every registered policy on the sim driver and print
// events/s, peaks, utilization and driver calls. Run after `pnpm build`:
//   node bench/replay-bench.mjs [--reps N] [--policy NAME] [--trace SUBSTRING] [--no-record]
import { existsSync, readdirSync } from "node:fs";
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
const shared = process.env.GMLAKE_SHARED ?? join(resolve(dirname(fileURLToPath(import.meta.url)), "../../.."), "..", "shared");
const dir = join(shared, "traces");
if (!existsSync(dir)) {
  console.error(`no traces at ${dir} (set GMLAKE_SHARED)`);
  process.exit(1);
}
const traces = readdirSync(dir).filter((f) => f.endsWith(".pickle.gz") && (!onlyTrace || f.includes(onlyTrace))).sort();
const policies = listPolicies().map((p) => p.name).filter((p) => !onlyPolicy || p === onlyPolicy);
const GiB = 2 ** 30;
const short = (calls) =>
  Object.entries(calls)
    .filter(([, v]) => v > 0)
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");

console.log(`reps=${reps} (best of), recorder=${record ? "on" : "off"}, driver=sim`);
for (const t of traces) {
  const snap = await readSnapshot(join(dir, t));
  for (const policy of policies) {
    let best = null;
    for (let r = 0; r < reps + 1; r++) {
      const res = replay(snap.events, {
        policy,
        driver: new SimDriver(),
        settings: snap.allocatorSettings,
        recorder: record ? undefined : null,
        recordAllocations: record,
        teardown: false,
      });
      if (r > 0 && (best === null || res.wallMs < best.wallMs)) best = res; // first run warms the JIT
    }
    const b = best;
    console.log(
      [
        t.replace(".pickle.gz", "").padEnd(24),
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
