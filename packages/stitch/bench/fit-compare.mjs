// Will it fit: the smallest capacity on which each policy runs each trace (bisection over
// sim replays, exact to 2 MiB), beside the limit no allocator can beat (the peak of
// requested bytes; the peak allocated after PyTorch's rounding too), and vms's peak
// reserved without a capacity. Run after `pnpm build`:
//   node bench/fit-compare.mjs [--trace SUBSTRING] [--policies a,b] [--options JSON] [--markdown]
// --options go to vms. Traces: ../shared/traces and corpus/ (twins recorded under
// expandable_segments make the same requests and are skipped).
import { dirname, join, resolve, basename } from "node:path";
import { fileURLToPath } from "node:url";
import { SimDriver } from "@gmlake/vmm";
import { readSnapshot } from "@gmlake/torch-trace";
import { listPolicies, replay, smallestCapacity } from "../dist/index.js";
import { traceFiles } from "./trace-files.mjs";

const args = process.argv.slice(2);
const opt = (k, d) => {
  const i = args.indexOf(k);
  return i >= 0 ? args[i + 1] : d;
};
const here = dirname(fileURLToPath(import.meta.url));
const shared = process.env.GMLAKE_SHARED ?? join(resolve(here, "../../.."), "..", "shared");
const only = opt("--trace", null);
const vmsOptions = JSON.parse(opt("--options", "{}"));
const registered = new Set(listPolicies().map((p) => p.name));
const policies = opt("--policies", "caching,expandable,gmlake,vms").split(",").filter((p) => registered.has(p));
const files = [...traceFiles(join(shared, "traces")), ...traceFiles(join(resolve(here, "../../.."), "corpus"))]
  .filter((f) => !/_expandable|_stacks/.test(basename(f)) && (!only || f.includes(only)));

const GiB = 2 ** 30;
const g = (b) => (b === null ? "-" : (b / GiB).toFixed(3));
const rows = [];
for (const f of files) {
  const snap = await readSnapshot(f);
  const name = basename(f).replace(/\.pickle(\.gz)?$/, "");
  const row = { trace: name, fits: {} };
  for (const policy of policies) {
    const options = policy === "vms" ? vmsOptions : undefined;
    const base = { policy, options, driver: new SimDriver(), settings: snap.allocatorSettings };
    const free = replay(snap.events, { ...base, recorder: null });
    row.requested = free.peakRequestedBytes;
    row.allocated = Math.max(row.allocated ?? 0, free.peakAllocatedBytes);
    const fit = smallestCapacity(snap.events, { ...base, peakReservedBytes: free.peakReservedBytes, peakRequestedBytes: free.peakRequestedBytes });
    row.fits[policy] = { smallest: fit.smallestCapacityBytes, reserved: free.peakReservedBytes, creates: free.driverCalls.memCreate, driverMs: free.driverTimeUs / 1000 };
  }
  rows.push(row);
  if (!args.includes("--markdown")) process.stderr.write(`${name} done\n`);
}

const header = ["trace", "peak requested", ...policies.map((p) => `${p} smallest`), "vms gap %", "vms reserved (no capacity)", "vms best?"];
const out = [];
let met = 0;
for (const r of rows) {
  const v = r.fits.vms;
  const others = policies.filter((p) => p !== "vms").map((p) => r.fits[p].smallest).filter((x) => x !== null);
  const best = v && v.smallest !== null && others.every((o) => v.smallest <= o);
  const within = v && v.smallest !== null && v.smallest <= 1.01 * r.requested;
  if (best && within) met++;
  out.push([r.trace, g(r.requested), ...policies.map((p) => g(r.fits[p].smallest)), v ? ((100 * (v.smallest - r.requested)) / r.requested).toFixed(2) : "-", v ? g(v.reserved) : "-", v ? `${best ? "yes" : "NO"}${within ? "" : " (>1%)"}` : "-"]);
}
if (args.includes("--markdown")) {
  console.log(`| ${header.join(" | ")} |\n| ${header.map(() => "---").join(" | ")} |`);
  for (const o of out) console.log(`| ${o.join(" | ")} |`);
} else {
  const w = header.map((h, i) => Math.max(h.length, ...out.map((o) => o[i].length)));
  console.log(header.map((h, i) => h.padEnd(w[i])).join("  "));
  for (const o of out) console.log(o.map((c, i) => c.padEnd(w[i])).join("  "));
}
console.log(`GiB = 2^30 bytes; sim driver; vms options ${JSON.stringify(vmsOptions)}; vms at or below every other policy and within 1% of peak requested on ${met} of ${rows.length} traces`);
