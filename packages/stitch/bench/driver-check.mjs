// Replays the small traces and random mixes with every registered policy on one driver
// (default: cuda when present, else host) with integrity and invariant checks on, and
// prints what it found. Run after `pnpm build`: node bench/driver-check.mjs [cuda|host|sim]
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { createDriver } from "@gmlake/vmm";
import { readSnapshot } from "@gmlake/torch-trace";
import { Allocator, listPolicies, privatePoolTags, replay } from "../dist/index.js";

const which = process.argv[2] ?? "auto";
const driver = createDriver(which, which === "host" ? { capacityBytes: 16 * 2 ** 30 } : {});
console.log(`driver ${driver.name}: ${driver.device.name}, ${(driver.device.totalBytes / 2 ** 30).toFixed(1)} GiB, granularity ${driver.device.granularity.minimum}`);
const shared = process.env.GMLAKE_SHARED ?? join(resolve(dirname(fileURLToPath(import.meta.url)), "../../.."), "..", "shared");
const traces = ["small/default.pickle", "small/expandable.pickle", "small/default_end.pickle", "small/train_default.pickle", "small/train_expandable.pickle"];
let failures = 0;
for (const t of traces) {
  const p = join(shared, "traces", t);
  if (!existsSync(p)) continue;
  const snap = await readSnapshot(p);
  for (const { name } of listPolicies()) {
    const t0 = performance.now();
    try {
      const r = replay(snap.events, {
        policy: name,
        driver,
        settings: snap.allocatorSettings,
        integrity: true,
        checkInvariants: 64,
        onOom: "continue",
        pools: privatePoolTags(snap.events, snap.segments),
      });
      const info = driver.memGetInfo();
      const bad = r.integrityErrors > 0;
      if (bad) failures++;
      console.log(
        `${t.padEnd(28)} ${name.padEnd(11)} ${bad ? "INTEGRITY ERRORS " + r.integrityErrors : "ok"}  checked ${r.integrityChecked}  peak reserved ${(r.peakReservedBytes / 2 ** 30).toFixed(2)} GiB  driver ${(r.driverTimeUs / 1000).toFixed(1)} ms  wall ${(performance.now() - t0).toFixed(0)} ms  free after ${(info.freeBytes / 2 ** 30).toFixed(1)} GiB`,
      );
    } catch (e) {
      failures++;
      console.log(`${t.padEnd(28)} ${name.padEnd(11)} FAILED ${e.code ?? ""} ${e.message}`);
    }
  }
}
// random mix with stitched-looking churn, every policy
for (const { name } of listPolicies()) {
  try {
    const a = new Allocator(name, driver, { integrity: true, checkInvariants: 16 });
    let x = 12345;
    const rnd = () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32);
    const live = [];
    for (let i = 0; i < 3000; i++) {
      if (rnd() < 0.55 || live.length === 0) {
        const b = a.tryMalloc(Math.floor(rnd() ** 3 * 300 * 2 ** 20) + 1, rnd() < 0.2 ? 7 : 0);
        if (b) live.push(b);
      } else a.free(live.splice(Math.floor(rnd() * live.length), 1)[0]);
    }
    a.close(live);
    const bad = a.integrity.errors > 0;
    if (bad) failures++;
    console.log(`random mix                   ${name.padEnd(11)} ${bad ? "INTEGRITY ERRORS " + a.integrity.errors : "ok"}  checked ${a.integrity.checked}  peak reserved ${(a.stats.peakReservedBytes / 2 ** 30).toFixed(2)} GiB`);
  } catch (e) {
    failures++;
    console.log(`random mix                   ${name.padEnd(11)} FAILED ${e.code ?? ""} ${e.message}`);
  }
}
driver.close();
console.log(failures === 0 ? "all checks passed" : `${failures} failures`);
process.exitCode = failures === 0 ? 0 : 1;
