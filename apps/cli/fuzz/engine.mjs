#!/usr/bin/env node
// A coverage-guided fuzzer for the snapshot reader and the replay path (target.mjs).
//
//   node apps/cli/fuzz/engine.mjs [--runs N] [--max-seconds S] [--seed N] [--corpus DIR]
//                                 [--findings DIR] [--max-len BYTES] [--timeout-ms MS]
//                                 [--target FILE]
//
// --target: another fuzz target (default target.mjs): a module exporting fuzzOne(bytes), and
// seeds() and dictionary where it has its own (then the snapshot fixtures, regressions and
// pickle dictionary are not used). policy-target.mjs: generated outside policies.
//
// The compiled packages are instrumented as they load (coverage-hooks.mjs: Jazzer.js's
// Babel coverage plugin, one counter per branch); each input runs in this process and is
// kept in the corpus when it reaches a counter bucket (1, 2, 3, 4-7, ... hits, as AFL and
// libFuzzer count) never seen before. Mutations: bit flips, interesting bytes and 32-bit
// integers, inserts, deletes, duplicated chunks, pickle opcodes and snapshot keys from a
// dictionary, and crossover, stacked 1-16 at a time. Seeds: the reader's fixtures (real
// snapshots of every protocol) and every earlier finding (fuzz/regressions/).
//
// A finding (anything but a SnapshotError / BAD_TRACE thrown, or one input running longer
// than --timeout-ms) is written to --findings (default: a temp dir), printed, and the run
// exits 1. Copy it into apps/cli/fuzz/regressions/: test/fuzz-regressions.test.ts then
// replays it on every test run. Exit 0 prints the totals as one JSON line at the end.
// Needs a build first (pnpm build).
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { register } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
const { values: opt } = parseArgs({
  options: {
    runs: { type: "string", default: "1000000000" },
    "max-seconds": { type: "string", default: "60" },
    seed: { type: "string", default: String(Date.now() % 2 ** 31) },
    corpus: { type: "string" },
    findings: { type: "string" },
    "max-len": { type: "string", default: "16384" },
    "timeout-ms": { type: "string", default: "2000" },
    quiet: { type: "boolean", default: false },
    target: { type: "string", default: "./target.mjs" },
    "keep-going": { type: "boolean", default: false },
  },
});
const RUNS = Number(opt.runs);
const MAX_MS = Number(opt["max-seconds"]) * 1000;
const MAX_LEN = Number(opt["max-len"]);
const TIMEOUT_MS = Number(opt["timeout-ms"]);
const SEED = Number(opt.seed);

// ---- coverage map: the instrumented modules write their counters into slices of it ----
const MAP = new Uint8Array(1 << 21);
let edges = 0;
globalThis.__gmlakeCoverage = {
  slice(n) {
    if (edges + n > MAP.length) throw new Error("coverage map full");
    const s = MAP.subarray(edges, edges + n);
    edges += n;
    return s;
  },
};
if (!process.env.FUZZ_NO_COVERAGE) register("./coverage-hooks.mjs", import.meta.url);
// a path from the working folder, else from this folder (policy-target.mjs)
const target = await import(existsSync(opt.target) ? pathToFileURL(resolve(opt.target)).href : new URL(opt.target, import.meta.url).href);
const { fuzzOne } = target;
const { pickle } = await import("@gmlake/trace");

// ---- randomness (seeded: a run is replayed with the same --seed and seeds) ----
let rs = SEED >>> 0 || 1;
function rnd() {
  rs ^= rs << 13;
  rs >>>= 0;
  rs ^= rs >>> 17;
  rs ^= rs << 5;
  rs >>>= 0;
  return rs / 4294967296;
}
const below = (n) => Math.floor(rnd() * n);

// ---- seeds ----
const seeds = [];
const addDir = (dir) => {
  if (!existsSync(dir)) return;
  for (const f of readdirSync(dir).sort()) {
    if (f.endsWith(".json") || f.endsWith(".md")) continue;
    const b = readFileSync(join(dir, f));
    if (b.length > 0 && b.length <= MAX_LEN) seeds.push(new Uint8Array(b));
  }
};
if (typeof target.seeds === "function") {
  for (const b of target.seeds()) if (b.length > 0 && b.length <= MAX_LEN) seeds.push(b);
} else {
  addDir(join(here, "../../../packages/torch-trace/test/fixtures"));
  addDir(join(here, "regressions"));
}
if (opt.corpus) {
  mkdirSync(opt.corpus, { recursive: true });
  addDir(opt.corpus);
}
// A minimal well-formed snapshot, so that replay paths are reachable from the start.
if (typeof target.seeds !== "function") seeds.push(
  pickle({
    device_traces: [[
      { action: "segment_alloc", addr: 1 << 30, size: 2 << 20, stream: 0, time_us: 1 },
      { action: "alloc", addr: 1 << 30, size: 512, stream: 0, time_us: 2 },
      { action: "free_requested", addr: 1 << 30, size: 512, stream: 0, time_us: 3 },
      { action: "free_completed", addr: 1 << 30, size: 512, stream: 0, time_us: 3 },
    ]],
    segments: [],
    allocator_settings: { max_split_size: -1, expandable_segments: false },
  }),
);

// ---- dictionary: pickle opcodes with their arguments, and the snapshot's words ----
const te = new TextEncoder();
const str = (s) => Uint8Array.from([0x8c, s.length, ...te.encode(s)]);
const DICT = target.dictionary ?? [
  ...["device_traces", "segments", "allocator_settings", "external_annotations", "action", "addr", "size", "stream", "time_us", "frames", "device_free", "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "snapshot", "oom", "blocks", "address", "total_size", "requested_size", "state", "active_allocated", "device", "is_expandable", "segment_pool_id", "expandable_segments", "max_split_size", "roundup_power2_divisions"].map(str),
  ...[[0x80, 4], [0x80, 2], [0x95, 8, 0, 0, 0, 0, 0, 0, 0], [0x28], [0x7d], [0x5d], [0x29], [0x8f], [0x75], [0x65], [0x61], [0x73], [0x74], [0x85], [0x86], [0x87], [0x94], [0x71, 0], [0x68, 0], [0x6a, 1, 0, 0, 0], [0x72, 1, 0, 0, 0], [0x4e], [0x88], [0x89], [0x4b, 1], [0x4d, 0, 1], [0x4a, 0, 0, 0, 0x80], [0x8a, 8, 0, 0, 0, 0, 0, 0, 0, 0x80], [0x8a, 1, 0xff], [0x8b, 0, 0, 0, 0], [0x47, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0], [0x46, 0x31, 0x0a], [0x49, 0x30, 0x30, 0x0a], [0x2e], [0x30], [0x31], [0x32], [0x1f, 0x8b]].map((a) => Uint8Array.from(a)),
];
const INTERESTING8 = [0, 1, 0x7f, 0x80, 0xff, 0x10, 0x20, 0x40];
const INTERESTING32 = [0, 1, 0xffffffff, 0x7fffffff, 0x80000000, 255, 256, 65535, 65536, 1 << 20, 1 << 30];

function mutateOnce(b, other) {
  const n = b.length;
  switch (below(10)) {
    case 0: {
      if (n === 0) return b;
      const c = b.slice();
      const i = below(n);
      c[i] ^= 1 << below(8);
      return c;
    }
    case 1: {
      if (n === 0) return b;
      const c = b.slice();
      c[below(n)] = rnd() < 0.5 ? INTERESTING8[below(INTERESTING8.length)] : below(256);
      return c;
    }
    case 2: {
      if (n < 4) return b;
      const c = b.slice();
      new DataView(c.buffer).setUint32(below(n - 3), INTERESTING32[below(INTERESTING32.length)], true);
      return c;
    }
    case 3: {
      const ins = Uint8Array.from({ length: 1 + below(8) }, () => below(256));
      return splice(b, below(n + 1), 0, ins);
    }
    case 4: {
      if (n === 0) return b;
      const at = below(n);
      return splice(b, at, Math.min(n - at, 1 + below(16)), new Uint8Array(0));
    }
    case 5: {
      if (n === 0) return b;
      const at = below(n);
      const len = Math.min(n - at, 1 + below(64));
      const times = 1 + below(rnd() < 0.1 ? 64 : 4);
      const chunk = new Uint8Array(len * times);
      for (let t = 0; t < times; t++) chunk.set(b.subarray(at, at + len), t * len);
      return splice(b, below(n + 1), 0, chunk);
    }
    case 6:
    case 7:
      return splice(b, below(n + 1), rnd() < 0.3 ? Math.min(n, below(4)) : 0, DICT[below(DICT.length)]);
    case 8: {
      // crossover: our head, the other's tail
      const cut = below(n + 1);
      const oc = below(other.length + 1);
      const c = new Uint8Array(cut + other.length - oc);
      c.set(b.subarray(0, cut));
      c.set(other.subarray(oc), cut);
      return c;
    }
    default: {
      if (n === 0 || other.length === 0) return b;
      const at = below(other.length);
      const len = Math.min(other.length - at, 1 + below(32));
      return splice(b, below(n + 1), Math.min(n, below(len + 1)), other.subarray(at, at + len));
    }
  }
}

function splice(b, at, del, ins) {
  del = Math.min(del, b.length - at);
  const c = new Uint8Array(b.length - del + ins.length);
  c.set(b.subarray(0, at));
  c.set(ins, at);
  c.set(b.subarray(at + del), at + ins.length);
  return c;
}

// ---- the loop ----
const BUCKET = new Uint8Array(256);
for (let v = 1; v < 256; v++) BUCKET[v] = v === 1 ? 1 : v === 2 ? 2 : v === 3 ? 4 : v < 8 ? 8 : v < 16 ? 16 : v < 32 ? 32 : v < 128 ? 64 : 128;
let virgin = new Uint8Array(0);
let covered = 0;

/** Runs one input; true when it reached a new counter bucket. */
function runOne(input) {
  MAP.fill(0, 0, edges);
  const t0 = performance.now();
  try {
    fuzzOne(input);
  } catch (e) {
    finding(input, e);
  }
  const ms = performance.now() - t0;
  if (ms > TIMEOUT_MS) finding(input, new Error(`slow input: ${ms.toFixed(0)} ms (over --timeout-ms ${TIMEOUT_MS})`));
  if (virgin.length < edges) {
    const v = new Uint8Array(edges);
    v.set(virgin);
    virgin = v;
  }
  let fresh = false;
  for (let i = 0; i < edges; i++) {
    const c = MAP[i];
    if (c === 0) continue;
    const bk = BUCKET[c];
    if ((virgin[i] & bk) === 0) {
      if (virgin[i] === 0) covered++;
      virgin[i] |= bk;
      fresh = true;
    }
  }
  return fresh;
}

const findingsDir = opt.findings ?? mkdtempSync(join(tmpdir(), "gmlake-fuzz-findings-"));
// --keep-going: each kind of finding (its message with the numbers taken out) written once and
// counted, the run goes on, and its exit status is 1 at the end if there was any
const kinds = new Map();
let findings = 0;
function finding(input, e) {
  findings++;
  const kind = String(e instanceof Error ? e.message : e).replace(/0x[0-9a-f]+|\d+/g, "N").slice(0, 200);
  if (kinds.has(kind)) return void kinds.set(kind, kinds.get(kind) + 1);
  kinds.set(kind, 1);
  mkdirSync(findingsDir, { recursive: true });
  const name = `finding-${createHash("sha1").update(input).digest("hex").slice(0, 16)}.bin`;
  writeFileSync(join(findingsDir, name), input);
  console.error(`fuzz: FINDING after ${execs} executions: ${e instanceof Error ? e.stack : String(e)}`);
  console.error(`fuzz: input (${input.length} bytes) written to ${join(findingsDir, name)}; replay with the same --seed ${SEED}`);
  if (!opt["keep-going"]) process.exit(1);
}

const corpus = [];
let execs = 0;
const t0 = performance.now();
for (const s of seeds) {
  execs++;
  runOne(s);
  corpus.push(s);
}
const seedCount = corpus.length;
let lastReport = t0;
let saved = 0;
const log = (what) => {
  if (!opt.quiet) console.log(`fuzz: ${what} #${execs} ${((execs / (performance.now() - t0)) * 1000).toFixed(0)} exec/s, corpus ${corpus.length}, ${covered}/${edges} edges, ${((performance.now() - t0) / 1000).toFixed(0)} s, heap ${(process.memoryUsage().heapUsed / 2 ** 20).toFixed(0)} MiB, rss ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)} MiB, buffers ${(process.memoryUsage().arrayBuffers / 2 ** 20).toFixed(0)} MiB`);
};
log("seeded");
while (execs < RUNS && performance.now() - t0 < MAX_MS) {
  // Newer entries (deeper paths) are picked more often.
  const base = corpus[rnd() < 0.5 ? corpus.length - 1 - below(Math.min(corpus.length, 64)) : below(corpus.length)];
  let x = base;
  const k = 1 << below(5);
  for (let j = 0; j < k; j++) x = mutateOnce(x, corpus[below(corpus.length)]);
  if (x.length > MAX_LEN) x = x.subarray(0, MAX_LEN);
  execs++;
  if (runOne(x) && corpus.length < 20000) {
    corpus.push(x);
    if (opt.corpus) {
      writeFileSync(join(opt.corpus, `c-${createHash("sha1").update(x).digest("hex").slice(0, 16)}`), x);
      saved++;
    }
  }
  if (performance.now() - lastReport > 10_000) {
    lastReport = performance.now();
    log("pulse");
  }
}
log("done");
console.log(JSON.stringify({ executions: execs, seconds: Math.round((performance.now() - t0) / 1000), seeds: seedCount, corpus: corpus.length, savedToCorpus: saved, edgesCovered: covered, edges, findings, findingKinds: Object.fromEntries(kinds), seed: SEED }));
if (findings > 0) process.exit(1);
