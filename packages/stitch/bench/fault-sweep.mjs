// Fault-injection sweep: for every registered policy, every driver call kind it makes
// and ordinals spread over a run (first uses, the middle of multi-chunk map runs, evenly
// spread), fail that one call with the error the real driver gives and check that the
// allocator survives: the replay continues (onOom "continue"), at most the one request
// fails, the invariant checker finds nothing, and at teardown the driver holds no
// handle, mapping or reservation (its own leaks(); /proc/self/maps back to baseline on
// host).
//
//   node bench/fault-sweep.mjs [--driver sim|host|cuda] [--per-call N] [--policy NAME]
//                              [--workload SUBSTRING] [--release-side] [--json]
//   node bench/fault-sweep.mjs --integrity [--driver host|cuda] [--policy NAME] [--trace SUBSTRING]
//     (integrity: every public trace x policy, stamped at malloc and checked at free)
//
// The sweep itself is `runFaultSweep(api, options)`, exported so that
// test/faults.test.ts runs a CI-sized subset against the sources. `api` carries the
// stitch and vmm functions (the bench passes dist, the tests pass src).
import { readFileSync, readdirSync, readlinkSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** Calls that acquire resources: a real driver fails them with OUT_OF_MEMORY. */
export const ACQUIRE_CALLS = ["memCreate", "memAlloc", "memAddressReserve", "memMap", "memSetAccess"];
/** Calls that give resources back: CUDA fails them only on misuse (INVALID_VALUE). */
export const RELEASE_CALLS = ["memRelease", "memUnmap", "memAddressFree", "memFree"];

/** Deterministic PRNG: the fault injector's own, so seeds mean the same everywhere. */
import { mulberry32 as rng } from "@gmlake/vmm";
export { rng };

/**
 * A synthetic request mix as an EventLog: allocs of 512 B .. 48 MiB on two streams, frees
 * in random order (some split into free_requested / free_completed), and a fragmenting
 * phase (many 2-6 MiB blocks, every other one freed, then large requests) so that
 * stitching and growth paths run.
 */
export function syntheticLog(EventLog, EventKind, seed, ops) {
  const r = rng(seed);
  const log = new EventLog(ops * 3 + 16);
  const s0 = log.streamId(0);
  const s1 = log.streamId(0x7f00);
  const live = [];
  let addr = 0x10000;
  let t = 0;
  const alloc = (size, s) => {
    const a = addr;
    addr += size + 512;
    log.push(EventKind.alloc, a, size, s, 0, t++);
    live.push([a, size, s]);
  };
  const free = (k) => {
    const [a, size, s] = live.splice(k, 1)[0];
    if (r() < 0.3) log.push(EventKind.freeRequested, a, size, s, 0, t++);
    log.push(EventKind.freeCompleted, a, size, s, 0, t++);
  };
  const MiB = 1 << 20;
  const third = Math.floor(ops / 3);
  for (let i = 0; i < third; i++) {
    if (live.length > 0 && r() < 0.45) free(Math.floor(r() * live.length));
    else {
      const x = r();
      const size = x < 0.4 ? 1 + Math.floor(r() * 1024 * 1024) : x < 0.8 ? MiB + Math.floor(r() * 20 * MiB) : 20 * MiB + Math.floor(r() * 28 * MiB);
      alloc(size, r() < 0.8 ? s0 : s1);
    }
  }
  while (live.length) free(live.length - 1);
  // fragment: 2-6 MiB blocks, free every other one, then ask for larger blocks
  const frag = [];
  for (let i = 0; i < third / 2; i++) {
    alloc(2 * MiB + Math.floor(r() * 4) * MiB, s0);
    frag.push(live.length - 1);
  }
  for (let k = live.length - 1; k >= 0; k -= 2) free(k);
  for (let i = 0; i < third / 2; i++) {
    if (live.length > 0 && r() < 0.35) free(Math.floor(r() * live.length));
    else alloc(6 * MiB + Math.floor(r() * 40) * MiB, s0);
  }
  while (live.length) free(Math.floor(r() * live.length));
  return log;
}

/** Ordinals to fault for one call kind: the first three, mid-run ones, and evenly spread ones. */
export function pickOrdinals(n, midRun, perCall, seed) {
  const out = new Set();
  for (let k = 1; k <= Math.min(3, n); k++) out.add(k);
  const r = rng(seed);
  const mids = [...midRun];
  for (let i = 0; i < Math.min(mids.length, Math.ceil(perCall / 3)); i++) out.add(mids[Math.floor(r() * mids.length)]);
  const spread = Math.max(0, perCall - out.size);
  for (let i = 1; i <= spread && out.size < n; i++) out.add(Math.max(1, Math.round((i * n) / (spread + 1))));
  return [...out].filter((k) => k >= 1 && k <= n).sort((a, b) => a - b);
}

/**
 * What the kernel says the host driver holds: memfd mappings in /proc/self/maps and
 * memfd file descriptors in /proc/self/fd, both named gmlake-vmm. (The whole maps line
 * count moves with V8's own heap, so only these are compared.) null where /proc is not.
 */
export function hostDriverHeld() {
  try {
    const maps = readFileSync("/proc/self/maps", "utf8").split("\n").filter((l) => l.includes("memfd:gmlake-vmm")).length;
    let fds = 0;
    for (const f of readdirSync("/proc/self/fd")) {
      try {
        if (readlinkSync(`/proc/self/fd/${f}`).includes("memfd:gmlake-vmm")) fds++;
      } catch {
        // the fd of readdir itself is gone by now
      }
    }
    return { maps, fds };
  } catch {
    return null;
  }
}

/** hostDriverHeld() as one number (mappings + fds), -1 without /proc. */
export function procMapsCount() {
  const h = hostDriverHeld();
  return h === null ? -1 : h.maps + h.fds;
}

/**
 * One replay under a fault plan. Returns what happened: completed or the error,
 * injected faults, OOMs, and what the driver still holds afterwards.
 */
function runOne(api, w, policy, makeDriver, plan, integrity) {
  const inner = makeDriver();
  const fd = api.withFaults(inner, plan);
  let error = null;
  let r = null;
  try {
    r = api.replay(w.log, {
      policy,
      driver: fd,
      settings: w.settings,
      options: w.options?.[policy],
      onOom: "continue",
      checkInvariants: 256,
      integrity,
      recorder: null,
      capacity: w.capacity,
    });
  } catch (e) {
    error = e;
  }
  const leaks = inner.leaks ? inner.leaks() : { reservations: 0, mappings: 0, liveBytes: 0 };
  // Whatever a failed run left behind is released here so the next run starts clean.
  inner.close();
  return { r, error, fd, leaks };
}

/**
 * The sweep. api: { listPolicies, replay, withFaults, FAULT_CODES, DRIVER_CALLS };
 * workloads: [{ name, log, settings, capacity? }]; makeDriver(): a fresh inner driver
 * with leaks(). Returns rows per (policy, call) and the failures in detail.
 */
export function runFaultSweep(api, { workloads, makeDriver, policies, perCall = 8, calls = ACQUIRE_CALLS, integrity = false, seed = 1, checkProcMaps = false, onRow }) {
  const names = policies ?? api.listPolicies().map((p) => p.name);
  const rows = [];
  const failures = [];
  for (const policy of names) {
    for (const w of workloads) {
      // Baseline: count each call's uses and find memMap / memSetAccess uses inside multi-chunk runs.
      const seq = [];
      const counter = makeDriver();
      const traced = new Proxy(counter, {
        get(target, prop, recv) {
          const v = Reflect.get(target, prop, recv);
          if (typeof v === "function" && api.DRIVER_CALLS.includes(prop)) {
            return (...args) => {
              seq.push(prop);
              return v.apply(target, args);
            };
          }
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
      const base = runOne(api, w, policy, () => traced, {}, integrity);
      if (base.error) {
        failures.push({ policy, workload: w.name, call: "(none)", ordinal: 0, what: `baseline failed: ${base.error.message}` });
        continue;
      }
      const ordinals = Object.fromEntries(api.DRIVER_CALLS.map((c) => [c, 0]));
      const midRun = Object.fromEntries(api.DRIVER_CALLS.map((c) => [c, new Set()]));
      for (let i = 0; i < seq.length; i++) {
        const c = seq[i];
        const k = ++ordinals[c];
        // a map after a map (a later chunk of one run) or a set-access after >= 2 maps: mid-stitch / mid-growth
        if (c === "memMap" && seq[i - 1] === "memMap") midRun[c].add(k);
        if (c === "memSetAccess" && seq[i - 1] === "memMap" && seq[i - 2] === "memMap") midRun[c].add(k);
        if (c === "memUnmap" && seq[i - 1] === "memUnmap") midRun[c].add(k);
      }
      for (const call of calls) {
        const release = RELEASE_CALLS.includes(call);
        const n = ordinals[call];
        if (n === 0) continue;
        let row = rows.find((x) => x.policy === policy && x.call === call);
        if (!row) {
          row = { policy, call, code: api.FAULT_CODES[call], injected: 0, survived: 0, leaked: 0, extraOoms: 0, uses: 0 };
          rows.push(row);
        }
        row.uses += n;
        for (const k of pickOrdinals(n, midRun[call], perCall, seed + k0(call))) {
          const maps0 = checkProcMaps ? procMapsCount() : 0;
          const out = runOne(api, w, policy, makeDriver, { at: [{ call, ordinal: k }] }, integrity);
          const maps1 = checkProcMaps ? procMapsCount() : 0;
          row.injected += out.fd.injected.length;
          if (release) {
            // A release call fails only on misuse or a lost context (INVALID_VALUE): the error must
            // surface as the driver's typed error, naming the call; resources are not reclaimed after it.
            const typed = out.error && out.error.code === api.FAULT_CODES[call] && /injected/.test(out.error.message);
            const clean = !out.error && out.leaks.reservations + out.leaks.mappings === 0 && out.leaks.liveBytes === 0;
            if (typed || clean) row.survived++;
            else failures.push({ policy, workload: w.name, call, ordinal: k, what: out.error ? `threw ${out.error.name}/${out.error.code}: ${out.error.message}` : `leaked ${JSON.stringify(out.leaks)}` });
            if (!clean) row.leaked++;
            continue;
          }
          const leaked = out.leaks.reservations + out.leaks.mappings + (out.leaks.liveBytes > 0 ? 1 : 0) > 0 || maps1 > maps0;
          if (leaked) row.leaked++;
          const what = [];
          if (out.fd.injected.length !== 1) what.push(`injected ${out.fd.injected.length}`);
          if (out.error) what.push(`threw ${out.error.name}/${out.error.code}: ${String(out.error.message).split("\n")[0]}`);
          if (leaked) what.push(`leaked ${JSON.stringify(out.leaks)} maps ${maps0}->${maps1}`);
          if (out.r) {
            const extra = out.r.ooms - base.r.ooms;
            if (extra > 0) row.extraOoms += extra;
            // One failed request may be reported; more means the fault broke later allocations.
            // Under a capacity the run after a skipped request takes another path, so its OOM
            // count is reported, not judged (test/faults.test.ts checks the retry directly).
            if (extra > 1 && w.capacity === undefined) what.push(`${extra} more OOMs than the baseline (${base.r.ooms})`);
            if (out.r.integrityErrors > 0) what.push(`${out.r.integrityErrors} integrity errors`);
          }
          if (what.length === 0) row.survived++;
          else failures.push({ policy, workload: w.name, call, ordinal: k, what: what.join("; ") });
        }
      }
      if (onRow) onRow(policy, w.name);
    }
  }
  return { rows, failures };
}

function k0(call) {
  let h = 0;
  for (let i = 0; i < call.length; i++) h = (h * 31 + call.charCodeAt(i)) | 0;
  return h >>> 0;
}

/** The table as markdown. */
export function formatRows(rows, release = false) {
  const head = release
    ? "| policy | call | code | uses in baseline | faults injected | surfaced as the typed error | replay stopped, resources left held | requests failed |"
    : "| policy | call | code | uses in baseline | faults injected | survived | leaked | requests failed |";
  const lines = [head, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"];
  for (const r of rows) lines.push(`| ${r.policy} | ${r.call} | ${r.code} | ${r.uses} | ${r.injected} | ${r.survived} | ${r.leaked} | ${r.extraOoms} |`);
  const t = rows.reduce((a, r) => ({ i: a.i + r.injected, s: a.s + r.survived, l: a.l + r.leaked }), { i: 0, s: 0, l: 0 });
  lines.push(`| **all** | | | | **${t.i}** | **${t.s}** | **${t.l}** | |`);
  return lines.join("\n");
}

/** A driver adaptor counting the bytes read back (the integrity checker's reads at each free). */
async function readCounter(vmm, inner) {
  class ReadCounter extends vmm.DriverAdaptor {
    bytesRead = 0;
    read(address, size) {
      this.bytesRead += size;
      return super.read(address, size);
    }
  }
  return new ReadCounter(inner);
}

/**
 * --integrity: every public trace (and the small ones) with every policy, each block
 * stamped at malloc and checked at its free: every byte ('full') on the small traces,
 * first/last bytes and stitch seams on the rest. Prints blocks, bytes read back, mismatches.
 */
async function integrityMain(args, opt, stitch, vmm, readSnapshot, shared, makeDriver) {
  const { readdirSync } = await import("node:fs");
  const onlyPolicy = opt("--policy", null);
  const onlyTrace = opt("--trace", null);
  const dir = join(shared, "traces");
  const files = [
    ...readdirSync(join(dir, "small")).map((f) => join(dir, "small", f)),
    ...readdirSync(dir).filter((f) => f.endsWith(".pickle.gz")).map((f) => join(dir, f)),
  ].filter((f) => !onlyTrace || f.includes(onlyTrace));
  // gmlake stitches only requests >= fragLimit (512 MiB by default): a 2 MiB run too, so real traces are checked across many seams
  const policies = [...stitch.listPolicies().map((p) => ({ name: p.name, policy: p.name })), { name: "gmlake fragLimit=2MiB", policy: "gmlake", options: { fragLimit: 2 * 2 ** 20 } }].filter(
    (p) => !onlyPolicy || p.policy === onlyPolicy,
  );
  const lines = ["| trace | policy | mode | blocks checked | bytes read back | mismatches | leaked | s |", "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"];
  const tot = { blocks: 0, bytes: 0, bad: 0, leaked: 0 };
  for (const f of files) {
    const s = await readSnapshot(f);
    const name = f.slice(dir.length + 1);
    // every byte where it is cheap (the tiny snapshots); ends + seams where a run touches gigabytes
    const mode = name.startsWith("small/") && !name.includes("train_") ? "full" : true;
    for (const { name: policy, policy: pname, options } of policies) {
      const inner = makeDriver();
      const d = await readCounter(vmm, inner);
      const t0 = performance.now();
      const r = stitch.replay(s.events, { policy: pname, options, driver: d, settings: s.allocatorSettings, integrity: mode, recorder: null, onOom: "continue", pools: stitch.privatePoolTags(s.events, s.segments) });
      const sec = (performance.now() - t0) / 1000;
      const l = inner.leaks ? inner.leaks() : { reservations: 0, mappings: 0, liveBytes: 0 };
      const leaked = l.reservations + l.mappings + (l.liveBytes > 0 ? 1 : 0);
      inner.close();
      tot.blocks += r.integrityChecked;
      tot.bytes += d.bytesRead;
      tot.bad += r.integrityErrors;
      tot.leaked += leaked;
      lines.push(`| ${name} | ${policy} | ${mode === "full" ? "full" : "ends+seams"} | ${r.integrityChecked} | ${d.bytesRead} | ${r.integrityErrors} | ${leaked} | ${sec.toFixed(1)} |`);
      process.stderr.write(`  ${name} ${policy}: ${r.integrityChecked} blocks, ${r.integrityErrors} mismatches, ${sec.toFixed(1)} s\n`);
    }
  }
  lines.push(`| **all** | | | **${tot.blocks}** | **${tot.bytes}** | **${tot.bad}** | **${tot.leaked}** | |`);
  console.log(lines.join("\n"));
  process.exitCode = tot.bad + tot.leaked > 0 ? 1 : 0;
}

async function main() {
  const args = process.argv.slice(2);
  const opt = (k, d) => {
    const i = args.indexOf(k);
    return i >= 0 ? args[i + 1] : d;
  };
  const driverName = opt("--driver", args.includes("--integrity") ? "host" : "sim");
  const perCall = Number(opt("--per-call", "12"));
  const onlyPolicy = opt("--policy", null);
  const onlyWorkload = opt("--workload", null);
  const here = dirname(fileURLToPath(import.meta.url));
  const stitch = await import(pathToFileURL(join(here, "../dist/index.js")).href);
  const vmm = await import("@gmlake/vmm");
  const trace = await import("@gmlake/trace");
  const { readSnapshot } = await import("@gmlake/torch-trace");
  const shared = process.env.GMLAKE_SHARED ?? join(resolve(here, "../../.."), "..", "shared");
  const workloads = [];
  for (const f of ["default.pickle", "expandable.pickle", "default_end.pickle", "train_default.pickle", "train_expandable.pickle"]) {
    try {
      const s = await readSnapshot(join(shared, "traces", "small", f));
      workloads.push({ name: f, log: s.events, settings: s.allocatorSettings });
    } catch (e) {
      console.error(`skipping ${f}: ${e.message}`);
    }
  }
  // gmlake stitches requests >= fragLimit (512 MiB by default): 2 MiB here, so faults land inside stitches
  const options = { gmlake: { fragLimit: 2 * 2 ** 20 } };
  for (const seed of [1, 2, 3]) workloads.push({ name: `synthetic-${seed}`, log: syntheticLog(trace.EventLog, trace.EventKind, seed, 600), options });
  // capacity-bound: the allocator's own release-and-retry paths run too
  workloads.push({ name: "synthetic-1@1GiB", log: syntheticLog(trace.EventLog, trace.EventKind, 1, 600), capacity: 2 ** 30, options });
  const chosen = workloads.filter((w) => !onlyWorkload || w.name.includes(onlyWorkload));
  const makeDriver =
    driverName === "sim"
      ? () => new vmm.SimDriver()
      : driverName === "host"
        ? () => new vmm.HostDriver({ capacityBytes: 143771 * 2 ** 20 })
        : () => {
            const d = vmm.createDriver("cuda");
            // cuda has no leaks(): count what memGetInfo says is still taken, against the start
            const free0 = d.memGetInfo().freeBytes;
            d.leaks = () => ({ reservations: 0, mappings: 0, liveBytes: Math.max(0, free0 - d.memGetInfo().freeBytes - 64 * 2 ** 20) });
            return d;
          };
  if (args.includes("--integrity")) return integrityMain(args, opt, stitch, vmm, readSnapshot, shared, makeDriver);
  const api = { ...stitch, withFaults: vmm.withFaults, FAULT_CODES: vmm.FAULT_CODES, DRIVER_CALLS: vmm.DRIVER_CALLS };
  const calls = args.includes("--release-side") ? RELEASE_CALLS : ACQUIRE_CALLS;
  const t0 = performance.now();
  const res = runFaultSweep(api, {
    workloads: chosen,
    makeDriver,
    policies: onlyPolicy ? [onlyPolicy] : undefined,
    perCall,
    calls,
    integrity: driverName === "sim" ? false : true,
    checkProcMaps: driverName === "host",
    onRow: (p, w) => process.stderr.write(`  ${p} ${w} done (${((performance.now() - t0) / 1000).toFixed(1)} s)\n`),
  });
  const s = (performance.now() - t0) / 1000;
  if (args.includes("--json")) console.log(JSON.stringify({ driver: driverName, perCall, seconds: s, ...res }, null, 1));
  else {
    console.log(`fault sweep: driver ${driverName}, ${chosen.length} workloads, up to ${perCall} ordinals per call kind and workload, ${s.toFixed(1)} s`);
    console.log(formatRows(res.rows, calls === RELEASE_CALLS));
    for (const f of res.failures.slice(0, 40)) console.log(`FAIL ${f.policy} ${f.workload} ${f.call}#${f.ordinal}: ${f.what}`);
    if (res.failures.length > 40) console.log(`... ${res.failures.length - 40} more failures`);
  }
  process.exitCode = res.failures.length > 0 ? 1 : 0;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main();
