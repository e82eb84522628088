#!/usr/bin/env node
// Scale of the reader and `gmlake inspect` on a synthetic trace of N events (default 10 M).
// Usage (after `pnpm build`):  node packages/torch-trace/bench/inspect-scale.mjs [events] [--keep FILE]
// Writes a pickle of N events as CPython writes torch's _dump_snapshot (alloc /
// free_requested / free_completed of 64 rotating live blocks of 512 B .. 32 MiB in one
// segment, one stream: a training loop's shape), then times, each in a fresh process:
// readSnapshot alone and `gmlake inspect FILE --json`. Wall time, CPU time and the child's
// peak RSS (ru_maxrss, via a preload that prints them at exit); issue 33's target is 5 s
// and 1 GiB on a 2-core machine. --keep FILE keeps (or reuses) the generated trace.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..", "..");
const args = process.argv.slice(2);
const keepAt = args.indexOf("--keep");
const keep = keepAt >= 0 ? args.splice(keepAt, 2)[1] : undefined;
const N = Number(args[0] ?? 10_000_000);

/**
 * The synthetic trace, deterministic (a fixed linear congruential generator), written byte
 * for byte as CPython's pickler writes torch's _dump_snapshot (protocol 4): each entry dict
 * memoized, its keys and action names memo gets, its 'N/A' a new memoized string each
 * time (two memo entries per event, as in the public traces), no frames (no stacks).
 */
async function generate(n) {
  let buf = new Uint8Array(1 << 26);
  let pos = 0;
  const room = (k) => {
    if (pos + k <= buf.length) return;
    const b = new Uint8Array(buf.length * 2);
    b.set(buf.subarray(0, pos));
    buf = b;
  };
  const byte = (x) => (buf[pos++] = x);
  const u32 = (x) => (byte(x & 255), byte((x >>> 8) & 255), byte((x >>> 16) & 255), byte((x >>> 24) & 255));
  let memo = 0;
  const memoized = new Map();
  const MEMOIZE = () => (byte(0x94), memo++);
  const get = (i) => (i < 256 ? (byte(0x68), byte(i)) : (byte(0x6a), u32(i)));
  const newStr = (t) => {
    byte(0x8c);
    byte(t.length);
    for (const c of t) byte(c.charCodeAt(0));
    return MEMOIZE();
  };
  const str = (t) => {
    const i = memoized.get(t);
    if (i !== undefined) return get(i);
    memoized.set(t, newStr(t));
  };
  const int = (v) => {
    if (v < 256) return byte(0x4b), byte(v);
    if (v < 65536) return byte(0x4d), byte(v & 255), byte(v >> 8);
    if (v < 2 ** 31) return byte(0x4a), u32(v);
    byte(0x8a);
    const bytes = [];
    for (let x = v; x > 0 || bytes.length === 0 || bytes[bytes.length - 1] >= 128; x = Math.floor(x / 256)) bytes.push(x % 256);
    byte(bytes.length);
    for (const x of bytes) byte(x);
  };
  const SLOTS = 64, SLOT = 64 * 2 ** 20, BASE = 2 ** 40;
  let t = 1_700_000_000_000_000, seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed / 2 ** 31);
  const entry = (action, addr, size, dt) => {
    room(128);
    byte(0x7d), MEMOIZE(), byte(0x28);
    str("action"), str(action), str("addr"), int(addr), str("size"), int(size), str("stream"), int(0), str("time_us"), int((t += dt));
    str("compile_context"), newStr("N/A"), str("user_metadata"), str("");
    byte(0x75);
  };
  const state = new Uint8Array(SLOTS); // 0 free, 1 live, 2 free requested
  const size = new Float64Array(SLOTS);
  byte(0x80), byte(4), byte(0x7d), MEMOIZE(), byte(0x28);
  str("segments"), byte(0x5d), MEMOIZE();
  str("device_traces"), byte(0x5d), MEMOIZE(), byte(0x5d), MEMOIZE(), byte(0x28);
  entry("segment_alloc", BASE, SLOTS * SLOT, 1);
  let slot = 0;
  let i = 1;
  // The end frees every block and the segment, so the dump-time state (no segments) agrees.
  for (; i + 3 + 2 * SLOTS < n; i++) {
    if (i % 1000 === 0) (byte(0x65), byte(0x28)); // APPENDS, then MARK: batches of items, as CPython's
    const a = BASE + slot * SLOT;
    if (state[slot] === 1) {
      entry("free_requested", a, size[slot], 3);
      state[slot] = 2;
      continue;
    }
    if (state[slot] === 2) {
      entry("free_completed", a, size[slot], 1);
      state[slot] = 0;
    } else {
      size[slot] = 512 * Math.max(1, Math.floor(2 ** (rand() * 16)));
      entry("alloc", a, size[slot], 5);
      state[slot] = 1;
    }
    slot = (slot * 5 + 1) % SLOTS; // visits every slot, not in address order
  }
  for (let s = 0; s < SLOTS; s++) {
    const a = BASE + s * SLOT;
    if (state[s] === 1) entry("free_requested", a, size[s], 3), i++;
    if (state[s] > 0) entry("free_completed", a, size[s], 1), i++;
  }
  entry("segment_free", BASE, SLOTS * SLOT, 1), i++;
  room(64);
  byte(0x65), byte(0x61); // APPENDS (the entries), APPEND (the device list to device_traces)
  str("allocator_settings"), byte(0x7d), MEMOIZE();
  byte(0x75), byte(0x2e); // SETITEMS, STOP
  console.log(`(${i.toLocaleString("en-US")} events, ${memo.toLocaleString("en-US")} memo entries)`);
  return buf.subarray(0, pos);
}

const PRELOAD = `process.on("exit", () => { const u = process.resourceUsage(); process.stderr.write("\\nMAXRSS " + u.maxRSS + " CPU " + (u.userCPUTime + u.systemCPUTime) + "\\n"); });`;

function measure(label, argv) {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, ["--require", preload, ...argv], { encoding: "utf8", maxBuffer: 64 << 20 });
  const ms = performance.now() - t0;
  const m = /MAXRSS (\d+) CPU (\d+)/.exec(r.stderr);
  if (r.status !== 0) throw new Error(`${label} failed (${r.status}): ${r.stderr.slice(0, 2000)}`);
  const rssMiB = m ? Number(m[1]) / 1024 : NaN;
  const cpuS = m ? Number(m[2]) / 1e6 : NaN;
  console.log(`${label.padEnd(28)} ${(ms / 1000).toFixed(2).padStart(6)} s wall, ${cpuS.toFixed(2)} s CPU, peak RSS ${rssMiB.toFixed(0).padStart(5)} MiB`);
  return { ms, rssMiB, stdout: r.stdout };
}

const dir = mkdtempSync(join(tmpdir(), "gmlake-scale-"));
const preload = join(dir, "rss.cjs");
writeFileSync(preload, PRELOAD);
const file = keep ?? join(dir, "synthetic.pickle");
try {
  if (!existsSync(file)) {
    const t0 = performance.now();
    const bytes = await generate(N);
    writeFileSync(file, bytes);
    console.log(`generated ${(bytes.length / 2 ** 20).toFixed(0)} MiB pickle in ${((performance.now() - t0) / 1000).toFixed(1)} s: ${file}`);
  }
  const reader = `import(${JSON.stringify(join(root, "packages", "torch-trace", "dist", "index.js"))}).then(async (m) => { const s = await m.readSnapshot(${JSON.stringify(file)}); console.log(s.events.length); })`;
  measure("readSnapshot", ["--input-type=module", "-e", reader]);
  const cli = join(root, "apps", "cli", "dist", "main.js");
  const r = measure("gmlake inspect --json", [cli, "inspect", file, "--json"]);
  const j = JSON.parse(r.stdout);
  console.log(`  events ${j.events}, peak requested ${j.peakRequestedBytes}, peak allocated ${j.peakAllocatedBytes}`);
  const ok = r.ms <= 5000 && r.rssMiB <= 1024;
  console.log(ok ? "target met (<= 5 s, <= 1 GiB)" : "TARGET MISSED (5 s, 1 GiB)");
  process.exitCode = ok ? 0 : 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
