// The stream-safety calls the engine makes in a replay (sim driver: bookkeeping, counted)
// for every public trace x policy: device syncs before unmap/free, cross-stream reuses
// (each an eventRecord + streamWaitEvent), stream marks (vms's moves: an event each) and
// the unmaps they let go without a sync, and the stream and memory calls in the second half. Run after `pnpm build`:
//   node bench/stream-safety.mjs
import { existsSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { SimDriver } from "@gmlake/vmm";
import { readSnapshot } from "@gmlake/torch-trace";
import { BUILTIN_POLICIES, privatePoolTags, replay } from "../dist/index.js";

const dir = join(process.env.GMLAKE_SHARED ?? resolve(import.meta.dirname, "../../../../shared"), "traces");
if (!existsSync(dir)) throw new Error(`no traces in ${dir}`);
const stream = (c) => Object.entries(c).filter(([k]) => /^(event|stream|ctx)/.test(k)).reduce((n, [, v]) => n + v, 0);
console.log("| trace | policy | syncs | cross-stream reuses | stream marks | unmaps without a sync | stream calls, 2nd half | memory calls, 2nd half |");
console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
for (const f of readdirSync(dir).filter((n) => n.endsWith(".pickle.gz")).sort()) {
  const snap = await readSnapshot(join(dir, f));
  for (const p of BUILTIN_POLICIES) {
    const r = replay(snap.events, { policy: p.name, driver: new SimDriver(), settings: snap.allocatorSettings, pools: privatePoolTags(snap.events, snap.segments), recorder: null, recordAllocations: false });
    const second = stream(r.driverCallsSecondHalf);
    const mem = Object.values(r.driverCallsSecondHalf).reduce((n, v) => n + v, 0) - second;
    console.log(`| ${f.replace(".pickle.gz", "")} | ${p.name} | ${r.streamSafety.syncs} | ${r.streamSafety.crossStreamReuses} | ${r.streamSafety.streamMarks} | ${r.streamSafety.unfencedUnmaps} | ${second} | ${mem} |`);
  }
}
