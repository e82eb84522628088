// The JS binding's overhead per call. Each driver call is timed three ways in this one
// process, on the same handles and addresses, in interleaved rounds:
//   loop   - benchLoop() of the bench addon (bench/bench_loop.cc, build/Release/gmlake_vmm_bench.node,
//            built by `pnpm build:bench`): the bare driver call in a C++ loop
//   addon  - the raw addon function from JS (argument checks, handle unwrap, the call)
//   driver - the driver class (HostDriver/CudaDriver: bookkeeping and stats too; own handles)
// and overhead = addon - loop and driver - loop (medians of per-round differences).
// For reference, the same calls from a separate C++ process (bench/binding_overhead.cc,
// built here with g++ -ldl; skipped with --no-process or when it cannot be built).
//   node bench/binding-overhead.mjs [host] [cuda] [--iterations N] [--rounds R] [--no-process] [--json FILE]
// Run after `pnpm --filter @gmlake/vmm build && pnpm --filter @gmlake/vmm build:bench`. cuda is skipped when no driver/device is present.
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { CudaDriver, HostDriver, cudaAvailable } from "../dist/index.js";
import { loadNative } from "../dist/native.js";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
};
const iterations = Number(opt("--iterations", 20000));
const rounds = Number(opt("--rounds", 5));
const jsonFile = opt("--json", undefined);
const withProcess = !args.includes("--no-process");
const wanted = args.filter((a) => a === "host" || a === "cuda");
const modes = wanted.length ? wanted : ["host", "cuda"];
if (!(iterations >= 1) || !(rounds >= 1)) {
  console.error("binding-overhead: --iterations and --rounds must be positive integers");
  process.exit(2);
}

/** The bench addon: not part of the shipped gmlake_vmm.node. */
function loadBenchAddon() {
  const path = process.env.GMLAKE_VMM_BENCH_ADDON ?? join(pkg, "build/Release/gmlake_vmm_bench.node");
  if (!existsSync(path)) {
    console.error(`binding-overhead: ${path} is missing (run \`pnpm --filter @gmlake/vmm build:bench\`)`);
    process.exit(2);
  }
  return createRequire(import.meta.url)(path);
}
const bench = loadBenchAddon();

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/** Per-call us of `iterations` runs of a JS body. */
function jsRound(callsPerIter, body) {
  const t0 = performance.now();
  for (let i = 0; i < iterations; i++) body();
  return ((performance.now() - t0) * 1000) / iterations / callsPerIter;
}

/**
 * One call measured three ways in interleaved rounds (loop, addon, driver, loop, ...), so
 * that drift (frequency, other load) lands on all three alike. `loop(n)` returns the us
 * of n iterations of the in-process C++ loop.
 */
function compare(callsPerIter, loop, addon, driver) {
  const warm = Math.ceil(iterations / 10);
  loop(warm);
  for (let i = 0; i < warm; i++) addon();
  for (let i = 0; i < warm; i++) driver();
  const l = [], a = [], d = [];
  for (let r = 0; r < rounds; r++) {
    l.push(loop(iterations) / iterations / callsPerIter);
    a.push(jsRound(callsPerIter, addon));
    d.push(jsRound(callsPerIter, driver));
  }
  return {
    loop: median(l),
    addon: median(a),
    driver: median(d),
    addonOverhead: median(a.map((x, i) => x - l[i])),
    driverOverhead: median(d.map((x, i) => x - l[i])),
  };
}

/** The same calls from bench/binding_overhead.cc in a separate process (the earlier method). */
function processLoop(mode) {
  if (!withProcess) return null;
  const bin = process.env.GMLAKE_BENCH_NATIVE ?? join(pkg, "build/bench/binding_overhead");
  try {
    if (!process.env.GMLAKE_BENCH_NATIVE) {
      mkdirSync(dirname(bin), { recursive: true });
      try {
        execFileSync("g++", ["-O2", "-std=c++17", "-o", bin, join(pkg, "bench/binding_overhead.cc"), "-ldl"], { stdio: "inherit" });
      } catch (e) {
        if (!existsSync(bin)) throw new Error(`g++ failed (${e.message}) and no prebuilt ${bin}`);
        console.error(`g++ failed; using the prebuilt ${bin}`);
      }
    }
    return JSON.parse(execFileSync(bin, [mode, String(iterations), String(rounds)], { encoding: "utf8" }));
  } catch (e) {
    console.error(`separate-process C++ loop skipped: ${e.message}`);
    return null;
  }
}

/** The shared measurement sequence; `raw` wraps the addon's functions for one mode. */
function measureAll(raw, d) {
  const g = d.device.granularity.minimum;
  const res = {};
  const small = new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]);
  const out = new Uint8Array(8);
  const loop = (call, ...a) => (iters) => bench.benchLoop(raw.prefix + call, iters, ...a);

  if (raw.memGetInfo) res.memGetInfo = compare(1, loop("MemGetInfo"), raw.memGetInfo, () => d.memGetInfo());

  const h = raw.memCreate(g, 1);
  const va = raw.memAddressReserve(g);
  const dh = d.memCreate(g);
  const dva = d.memAddressReserve(g);
  res["memMap+memUnmap"] = compare(
    2,
    loop(`MemMap+${raw.prefix}MemUnmap`, va, g, 0, h),
    () => {
      raw.memMap(va, g, 0, h);
      raw.memUnmap(va, g);
    },
    () => {
      d.memMap(dva, g, 0, dh);
      d.memUnmap(dva, g);
    },
  );
  raw.memMap(va, g, 0, h);
  d.memMap(dva, g, 0, dh);
  res.memSetAccess = compare(1, loop("MemSetAccess", va, g), () => raw.memSetAccess(va, g), () => d.memSetAccess(dva, g));
  res["write 8 B"] = compare(1, loop("Write", va, small), () => raw.write(va, small), () => d.write(dva, small));
  res["read 8 B"] = compare(1, loop("Read", va, out), () => raw.read(va, out), () => d.read(dva, 8));
  raw.memUnmap(va, g);
  raw.memAddressFree(va, g);
  raw.memRelease(h);
  d.memUnmap(dva, g);
  d.memAddressFree(dva, g);
  d.memRelease(dh);

  res["memCreate+memRelease"] = compare(
    2,
    loop(`MemCreate+${raw.prefix}MemRelease`, g),
    () => raw.memRelease(raw.memCreate(g, 2)),
    () => d.memRelease(d.memCreate(g)),
  );
  res["memAddressReserve+memAddressFree"] = compare(
    2,
    loop(`MemAddressReserve+${raw.prefix}MemAddressFree`, g, raw.alignment(g)),
    () => raw.memAddressFree(raw.memAddressReserve(g), g),
    () => d.memAddressFree(d.memAddressReserve(g), g),
  );
  return res;
}

function hostRaw() {
  const n = loadNative();
  return {
    prefix: "host",
    alignment: (g) => g,
    memCreate: (size, id) => n.hostMemCreate(size, id),
    memRelease: (h) => n.hostMemRelease(h),
    memAddressReserve: (size) => n.hostMemAddressReserve(size, size),
    memAddressFree: (va, size) => n.hostMemAddressFree(va, size),
    memMap: (va, size, off, h) => n.hostMemMap(va, size, off, h),
    memUnmap: (va, size) => n.hostMemUnmap(va, size),
    memSetAccess: (va, size) => n.hostMemSetAccess(va, size),
    write: (va, data) => n.hostWrite(va, data),
    read: (va, o) => n.hostRead(va, o),
  };
}

function cudaRaw(dev) {
  const n = loadNative();
  return {
    prefix: "cuda",
    alignment: () => 0,
    memGetInfo: () => n.cudaMemGetInfo(dev),
    memCreate: (size, id) => n.cudaMemCreate(dev, size, id),
    memRelease: (h) => n.cudaMemRelease(dev, h),
    memAddressReserve: (size) => n.cudaMemAddressReserve(dev, size, 0),
    memAddressFree: (va, size) => n.cudaMemAddressFree(dev, va, size),
    memMap: (va, size, off, h) => n.cudaMemMap(dev, va, size, off, h),
    memUnmap: (va, size) => n.cudaMemUnmap(dev, va, size),
    memSetAccess: (va, size) => n.cudaMemSetAccess(dev, va, size),
    write: (va, data) => n.cudaWrite(dev, va, data),
    read: (va, o) => n.cudaRead(dev, va, o),
  };
}

const report = { date: new Date().toISOString(), node: process.version, iterations, rounds, modes: {} };
for (const mode of modes) {
  if (mode === "cuda" && !cudaAvailable()) {
    console.log("cuda: skipped (no CUDA driver or device here)");
    continue;
  }
  const proc = processLoop(mode);
  let res;
  if (mode === "host") {
    const d = new HostDriver();
    res = measureAll(hostRaw(), d);
    d.close();
  } else {
    const n = loadNative();
    n.cudaLoad();
    const dev = n.cudaDeviceOpen(0); // makes the device's primary context current for benchLoop
    const d = new CudaDriver();
    res = measureAll(cudaRaw(dev), d);
    d.close();
    n.cudaDeviceClose(dev);
  }
  report.modes[mode] = { inProcess: res, separateProcess: proc };
  console.log(`\n${mode}: us per call, median of ${rounds} interleaved rounds of ${iterations} iterations`);
  const cols = ["C++ loop", "addon", "overhead", "driver", "overhead", "C++ proc"];
  console.log(`${"call".padEnd(34)}${cols.map((c) => c.padStart(10)).join("")}`);
  const f = (x) => (x === undefined || x === null ? "-" : x.toFixed(3)).padStart(10);
  for (const [op, r] of Object.entries(res)) {
    console.log(`${op.padEnd(34)}${[r.loop, r.addon, r.addonOverhead, r.driver, r.driverOverhead, proc?.[op]].map(f).join("")}`);
  }
}
console.log("\noverhead = median over rounds of (JS time - in-process C++ loop time of the same round)");
if (jsonFile) writeFileSync(jsonFile, JSON.stringify(report, null, 2));
