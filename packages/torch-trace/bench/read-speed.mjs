#!/usr/bin/env node
// Reading speed of the snapshot reader vs CPython's pickle on the same file, same machine.
// Usage (after `pnpm --filter @gmlake/torch-trace build`):
//   node bench/read-speed.mjs [file]   (default: <repo root>/../shared/traces/opt1b_generate.pickle.gz)
// Each side runs in a fresh process, alternating (node, python, node, ...) so that load from
// other processes hits both alike; best of RUNS (default 5) kept. Wall and CPU time (user +
// system of the child) are both printed; the ratio uses wall time. Peak RSS is the child's.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

if (process.argv[2] === "--child") {
  const { readSnapshot } = await import(join(here, "..", "dist", "index.js"));
  const file = process.argv[3];
  const t0 = performance.now();
  const c0 = process.cpuUsage();
  const snap = await readSnapshot(file);
  const ms = performance.now() - t0;
  const c = process.cpuUsage(c0);
  const heap = process.memoryUsage();
  console.log(JSON.stringify({ ms, cpuMs: (c.user + c.system) / 1000, events: snap.events.length, maxRssMiB: process.resourceUsage().maxRSS / 1024, heapUsedMiB: heap.heapUsed / 2 ** 20, arrayBuffersMiB: heap.arrayBuffers / 2 ** 20 }));
  process.exit(0);
}

function repoRoot() {
  let dir = here;
  while (!existsSync(join(dir, "pnpm-workspace.yaml"))) dir = dirname(dir);
  return dir;
}
const shared = process.env.GMLAKE_SHARED ?? resolve(repoRoot(), "..", "shared");
const file = process.argv[2] ?? join(shared, "traces", "opt1b_generate.pickle.gz");
if (!existsSync(file)) {
  console.error(`not found: ${file} (set GMLAKE_SHARED or pass a file)`);
  process.exit(2);
}

const PY = `
import gzip, pickle, resource, sys, time, json
f = sys.argv[1]
t0 = time.perf_counter()
c0 = time.process_time()
raw = open(f, 'rb').read()
data = gzip.decompress(raw) if raw[:2] == b'\\x1f\\x8b' else raw
obj = pickle.loads(data)
ms = (time.perf_counter() - t0) * 1000
cpu = (time.process_time() - c0) * 1000
n = sum(len(t) for t in obj['device_traces'])
print(json.dumps({'ms': ms, 'cpuMs': cpu, 'events': n, 'maxRssMiB': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
`;

const RUNS = Number(process.env.RUNS ?? 5);
function once(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 1 << 20 });
  if (r.status !== 0) throw new Error(`${cmd} failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split("\n").pop());
}
const node = [];
const py = [];
for (let i = 0; i < RUNS; i++) {
  node.push(once(process.execPath, [fileURLToPath(import.meta.url), "--child", file]));
  py.push(once("python3", ["-c", PY, file]));
}
node.sort((a, b) => a.ms - b.ms);
py.sort((a, b) => a.ms - b.ms);
const bestCpu = (rs) => Math.min(...rs.map((r) => r.cpuMs));
if (node[0].events !== py[0].events) throw new Error(`event counts differ: ${node[0].events} vs ${py[0].events}`);
const fmt = (x) => x.toFixed(0).padStart(6);
console.log(`file: ${file} (${node[0].events} events), ${RUNS} runs each, alternating`);
console.log(`readSnapshot -> EventLog  : best ${fmt(node[0].ms)} ms wall, ${fmt(bestCpu(node))} ms CPU  (wall runs: ${node.map((r) => r.ms.toFixed(0)).join(", ")})`);
console.log(`   peak RSS ${node[0].maxRssMiB.toFixed(0)} MiB (heap used at end ${node[0].heapUsedMiB.toFixed(0)} MiB, array buffers ${node[0].arrayBuffersMiB.toFixed(0)} MiB)`);
console.log(`CPython pickle.loads(gzip): best ${fmt(py[0].ms)} ms wall, ${fmt(bestCpu(py))} ms CPU  (wall runs: ${py.map((r) => r.ms.toFixed(0)).join(", ")})`);
console.log(`   peak RSS ${py[0].maxRssMiB.toFixed(0)} MiB`);
const ratio = py[0].ms / node[0].ms;
console.log(`speed ratio CPython / reader: ${ratio.toFixed(2)}x wall, ${(bestCpu(py) / bestCpu(node)).toFixed(2)}x CPU ${ratio >= 1 ? "(target met: at least as fast)" : "(TARGET MISSED)"}`);
process.exitCode = ratio >= 1 ? 0 : 1;
