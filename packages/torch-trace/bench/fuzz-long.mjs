#!/usr/bin/env node
// A longer fuzz run of the reader: the properties of test/fuzz.test.ts with a case count.
// Usage: node bench/fuzz-long.mjs [cases per property, default 100000] [seed]
// (4.5x that many cases in all: the mutation property runs 2x, the snapshot property 0.5x).
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const runs = Number(process.argv[2] ?? 100000);
const seed = process.argv[3];
if (!Number.isInteger(runs) || runs <= 0) {
  console.error("usage: node bench/fuzz-long.mjs [cases] [seed]");
  process.exit(2);
}
const env = { ...process.env, FUZZ_RUNS: String(runs), ...(seed === undefined ? {} : { FUZZ_SEED: seed }) };
const t0 = Date.now();
const r = spawnSync("pnpm", ["exec", "vitest", "run", "test/fuzz.test.ts"], { cwd: pkg, env, stdio: "inherit" });
console.log(`fuzz-long: ${Math.round(runs * 4.5)} cases (${runs} per property; mutations x2, snapshots x0.5) in ${((Date.now() - t0) / 1000).toFixed(1)} s, exit ${r.status}`);
process.exit(r.status ?? 1);
