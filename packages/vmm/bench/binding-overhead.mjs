// The JS binding's overhead per call: each call timed in a loop through the raw addon and
// through the driver class, next to the same call from a plain C++ loop
// (bench/binding_overhead.cc, built here with g++ -ldl if missing), in the same run.
//   node bench/binding-overhead.mjs [host] [cuda] [--iterations N] [--rounds R] [--json FILE]
// Run after `pnpm --filter @gmlake/vmm build`. cuda is skipped when no driver/device is present.
import { execFileSync } from "node:child_process";
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
const wanted = args.filter((a) => a === "host" || a === "cuda");
const modes = wanted.length ? wanted : ["host", "cuda"];

/** Median over rounds of the per-call time of `iters` iterations (same method as the C++ side). */
function measure(callsPerIter, body) {
  for (let i = 0; i < iterations / 10 + 1; i++) body();
  const perCall = [];
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    for (let i = 0; i < iterations; i++) body();
    perCall.push(((performance.now() - t0) * 1000) / iterations / callsPerIter);
  }
  perCall.sort((a, b) => a - b);
  return perCall[rounds >> 1];
}

function nativeLoop(mode) {
  const bin = process.env.GMLAKE_BENCH_NATIVE ?? join(pkg, "build/bench/binding_overhead");
  if (!process.env.GMLAKE_BENCH_NATIVE) {
    mkdirSync(dirname(bin), { recursive: true });
    try {
      execFileSync("g++", ["-O2", "-std=c++17", "-o", bin, join(pkg, "bench/binding_overhead.cc"), "-ldl"], { stdio: "inherit" });
    } catch (e) {
      if (!existsSync(bin)) throw new Error(`cannot build the C++ loop (g++ failed: ${e.message}) and no prebuilt ${bin}`);
      console.error(`g++ failed; using the prebuilt ${bin}`);
    }
  }
  return JSON.parse(execFileSync(bin, [mode, String(iterations), String(rounds)], { encoding: "utf8" }));
}

function hostJs() {
  const n = loadNative();
  const g = 2 * 1024 * 1024;
  const raw = {};
  const h = n.hostMemCreate(g, 1);
  const va = n.hostMemAddressReserve(g, g);
  raw["memMap+memUnmap"] = measure(2, () => {
    n.hostMemMap(va, g, 0, h);
    n.hostMemUnmap(va, g);
  });
  n.hostMemMap(va, g, 0, h);
  raw.memSetAccess = measure(1, () => n.hostMemSetAccess(va, g));
  const small = new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]);
  const out = new Uint8Array(8);
  raw["write 8 B"] = measure(1, () => n.hostWrite(va, small));
  raw["read 8 B"] = measure(1, () => n.hostRead(va, out));
  n.hostMemUnmap(va, g);
  n.hostMemAddressFree(va, g);
  n.hostMemRelease(h);
  raw["memCreate+memRelease"] = measure(2, () => n.hostMemRelease(n.hostMemCreate(g, 2)));
  raw["memAddressReserve+memAddressFree"] = measure(2, () => n.hostMemAddressFree(n.hostMemAddressReserve(g, g), g));
  return { raw, driver: driverJs(new HostDriver()) };
}

/** The same calls through a VmmDriver (bookkeeping, stats and all). */
function driverJs(d) {
  const g = d.device.granularity.minimum;
  const res = {};
  if (d.name === "cuda") res.memGetInfo = measure(1, () => d.memGetInfo());
  const h = d.memCreate(g);
  const va = d.memAddressReserve(g);
  res["memMap+memUnmap"] = measure(2, () => {
    d.memMap(va, g, 0, h);
    d.memUnmap(va, g);
  });
  d.memMap(va, g, 0, h);
  res.memSetAccess = measure(1, () => d.memSetAccess(va, g));
  const small = new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]);
  res["write 8 B"] = measure(1, () => d.write(va, small));
  res["read 8 B"] = measure(1, () => d.read(va, 8));
  d.memUnmap(va, g);
  d.memAddressFree(va, g);
  d.memRelease(h);
  res["memCreate+memRelease"] = measure(2, () => d.memRelease(d.memCreate(g)));
  res["memAddressReserve+memAddressFree"] = measure(2, () => d.memAddressFree(d.memAddressReserve(g), g));
  d.close();
  return res;
}

function cudaJs() {
  const n = loadNative();
  n.cudaLoad();
  const dev = n.cudaDeviceOpen(0);
  const [g] = n.cudaGranularity(0);
  const raw = {};
  raw.memGetInfo = measure(1, () => n.cudaMemGetInfo(dev));
  const h = n.cudaMemCreate(dev, g, 1);
  const va = n.cudaMemAddressReserve(dev, g, 0);
  raw["memMap+memUnmap"] = measure(2, () => {
    n.cudaMemMap(dev, va, g, 0, h);
    n.cudaMemUnmap(dev, va, g);
  });
  n.cudaMemMap(dev, va, g, 0, h);
  raw.memSetAccess = measure(1, () => n.cudaMemSetAccess(dev, va, g));
  const small = new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]);
  const out = new Uint8Array(8);
  raw["write 8 B"] = measure(1, () => n.cudaWrite(dev, va, small));
  raw["read 8 B"] = measure(1, () => n.cudaRead(dev, va, out));
  n.cudaMemUnmap(dev, va, g);
  n.cudaMemAddressFree(dev, va, g);
  n.cudaMemRelease(dev, h);
  raw["memCreate+memRelease"] = measure(2, () => n.cudaMemRelease(dev, n.cudaMemCreate(dev, g, 2)));
  raw["memAddressReserve+memAddressFree"] = measure(2, () => n.cudaMemAddressFree(dev, n.cudaMemAddressReserve(dev, g, 0), g));
  n.cudaDeviceClose(dev);
  return { raw, driver: driverJs(new CudaDriver()) };
}

const report = { date: new Date().toISOString(), node: process.version, iterations, rounds, modes: {} };
for (const mode of modes) {
  if (mode === "cuda" && !cudaAvailable()) {
    console.log("cuda: skipped (no CUDA driver or device here)");
    continue;
  }
  const cpp = nativeLoop(mode);
  const { raw, driver } = mode === "host" ? hostJs() : cudaJs();
  report.modes[mode] = { cpp, addon: raw, driver };
  console.log(`\n${mode}: us per call, median of ${rounds} rounds of ${iterations} iterations`);
  console.log(
    `${"call".padEnd(34)}${"C++".padStart(10)}${"addon".padStart(10)}${"overhead".padStart(10)}${"driver".padStart(10)}${"overhead".padStart(10)}`,
  );
  for (const op of Object.keys(cpp)) {
    const f = (x) => (x === undefined ? "-" : x.toFixed(3)).padStart(10);
    console.log(`${op.padEnd(34)}${f(cpp[op])}${f(raw[op])}${f(raw[op] - cpp[op])}${f(driver[op])}${f(driver[op] - cpp[op])}`);
  }
}
if (jsonFile) writeFileSync(jsonFile, JSON.stringify(report, null, 2));
