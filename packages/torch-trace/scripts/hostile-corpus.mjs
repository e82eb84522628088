#!/usr/bin/env node
// Writes a corpus of hostile snapshot files, one (or a few) per class of attack that once
// crashed, hung or fooled the reader, each gzip-compressed to under 1 MB, plus
// manifest.json saying what the CLI must do with each: exit code and a pattern its one
// stderr line must match (exit 0: a valid but costly trace, which must just be fast).
//
//   node packages/torch-trace/scripts/hostile-corpus.mjs OUT_DIR
//
// Needs @gmlake/trace built (its pickle writer makes the well-formed parts).
// apps/cli/test/hostile.test.ts runs `gmlake inspect` and `gmlake replay` on every file.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { PyFloat, PyTuple, pickle } from "@gmlake/trace";

const out = process.argv[2];
if (!out) {
  console.error("usage: hostile-corpus.mjs OUT_DIR");
  process.exit(2);
}
mkdirSync(out, { recursive: true });

/** Raw pickle bytes from parts: numbers are opcodes/bytes, strings latin-1, arrays/Uint8Arrays spliced. */
function raw(...parts) {
  const chunks = [];
  const add = (p) => {
    if (typeof p === "number") chunks.push(Uint8Array.of(p));
    else if (typeof p === "string") chunks.push(Buffer.from(p, "latin1"));
    else if (p instanceof Uint8Array) chunks.push(p);
    else for (const q of p) add(q);
  };
  add(parts);
  return Buffer.concat(chunks);
}
/** `unit` repeated n times, as one buffer. */
const rep = (unit, n) => Buffer.from(raw(unit)).toString("latin1").repeat(n);
const u32 = (n) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
};
const PROTO4 = [0x80, 4];
const NONE = 0x4e, MEMOIZE = 0x94, BINGET = 0x68, EMPTY_DICT = 0x7d, EMPTY_LIST = 0x5d, MARK = 0x28, APPENDS = 0x65, APPEND = 0x61, POP = 0x30, STOP = 0x2e, LONG4 = 0x8b, LONG_BINGET = 0x6a, LONG_BINPUT = 0x72;

const manifest = [];
/** Writes one case: `bytes` (a pickle; gzip-compressed here unless plain) and what the CLI must do. */
function emit(name, klass, bytes, expect, { plain = false } = {}) {
  const file = `${name}${plain ? ".pickle" : ".pickle.gz"}`;
  const data = plain ? bytes : gzipSync(bytes, { level: 9 });
  if (data.length >= 1 << 20) throw new Error(`${file}: ${data.length} bytes, over 1 MB`);
  writeFileSync(join(out, file), data);
  manifest.push({ file, class: klass, bytes: data.length, pickleBytes: bytes.length, ...expect });
}
const limit = (name) => ({ exit: 2, stderr: `limit ${name}=` });
const badValue = (field) => ({ exit: 2, stderr: `\\.${field} is ` });

// ---- pickle VM resources -------------------------------------------------------------
// 10^8 NONEs (100 MB): the gzip inflate limit ends it; 2*10^7: the stack limit.
emit("stack-none-1e8", "stack", raw(PROTO4, rep(NONE, 1e8), STOP), limit("maxInflatedBytes"));
emit("stack-none-2e7", "stack", raw(PROTO4, rep(NONE, 2e7), STOP), limit("maxStackDepth"));
emit("stack-marks", "stack", raw(PROTO4, rep(MARK, 2e7), STOP), limit("maxStackDepth"));
// One value, memoized over and over (MEMOIZE appends a memo entry each time).
emit("memo-memoize", "memo", raw(PROTO4, NONE, rep(MEMOIZE, 2e7), STOP), limit("maxMemoEntries"));
emit("memo-long-binput", "memo", raw(PROTO4, NONE, LONG_BINPUT, u32(0xfffffff0), STOP), limit("maxMemoEntries"));
// BINGET of one memo entry pushed 10^7 times.
emit("memo-binget", "stack", raw(PROTO4, NONE, MEMOIZE, rep([BINGET, 0], 1e7), STOP), limit("maxStackDepth"));
// ... and appended, 1,000 at a time, into one list: 10^7 items.
// (15 M items, 120 MB: within the budget of a 30 MB pickle, so the shape check ends it.)
emit("memo-binget-appends", "objects", raw(PROTO4, EMPTY_LIST, NONE, MEMOIZE, POP, rep([MARK, rep([BINGET, 0], 1000), APPENDS], 15000), STOP), { exit: 2, stderr: "top level is list" });
// Tens of millions of empty dicts (and lists) appended 1,000 at a time.
emit("objects-empty-dicts", "objects", raw(PROTO4, EMPTY_LIST, rep([MARK, rep(EMPTY_DICT, 1000), APPENDS], 25000), STOP), limit("maxValueBytes"));
emit("objects-empty-lists", "objects", raw(PROTO4, EMPTY_LIST, rep([MARK, rep(EMPTY_LIST, 1000), APPENDS], 25000), STOP), limit("maxValueBytes"));
// Nested lists, 900k deep (built on the stack, then folded by APPENDs): nothing may recurse on them.
emit("objects-nested-lists", "objects", raw(PROTO4, rep(EMPTY_LIST, 9e5), rep(APPEND, 9e5 - 1), STOP), { exit: 2, stderr: "top level is list" });
// One integer of 10 MB (LONG4): the per-integer limit; one of 100 MB: the inflate limit.
emit("long4-10mb", "decoded", raw(PROTO4, LONG4, u32(10 << 20), Buffer.alloc(10 << 20), STOP), limit("maxIntBytes"));
emit("long4-100mb", "decoded", raw(PROTO4, LONG4, u32(100 << 20), Buffer.alloc(100 << 20), STOP), limit("maxInflatedBytes"));
// Strings can decode at most the pickle's own bytes (2x with UTF-16), well within the default;
// this case runs with `--limit maxDecodedBytes=1MiB` (its "limits" field) to prove the bound.
emit("strings-many", "decoded", raw(PROTO4, EMPTY_LIST, MARK, rep([0x58, u32(1 << 20), "x".repeat(1 << 20)], 8), APPENDS, STOP), { ...limit("maxDecodedBytes"), limits: "maxDecodedBytes=1MiB" });
// A text FLOAT of 10^6 digits that does not parse (the old check backtracked for minutes),
// and one of 3,000 that the linear check must refuse at once.
emit("float-text-1e6", "parser", raw(0x28, 0x46, "1".repeat(1e6) + "x\n", STOP), limit("maxIntBytes"));
emit("float-text-3000", "parser", raw(0x28, 0x46, "1".repeat(3000) + "x\n", 0x74, STOP), { exit: 2, stderr: "FLOAT with bad text" });
emit("int-text-1e6", "parser", raw(0x28, 0x49, "7".repeat(1e6) + "\n", STOP), limit("maxIntBytes"));
// A gzip bomb: 768 MiB of zeros in 12 gzip members.
{
  const zeros = Buffer.alloc(64 << 20);
  const member = gzipSync(zeros, { level: 9 });
  const bomb = Buffer.concat(Array.from({ length: 12 }, () => member));
  writeFileSync(join(out, "gzip-bomb.pickle.gz"), bomb);
  manifest.push({ file: "gzip-bomb.pickle.gz", class: "gzip", bytes: bomb.length, pickleBytes: 12 * (64 << 20), ...limit("maxInflatedBytes") });
}

// ---- well-formed snapshots that cost too much the old way: must simply be fast ------
const entry = (action, addr, size, time, extra = {}) => ({ action, addr, size, stream: 0, time_us: time, ...extra });
{
  // 100k segments (ring buffer overflowed: one free whose alloc is gone) -> reconstruction.
  const t = [];
  for (let i = 0; i < 100_000; i++) t.push(entry("segment_alloc", 2 ** 30 + i * 2 ** 21, 2 ** 21, 1000 + i));
  t.push(entry("free_completed", 2 ** 40, 512, 200_000));
  emit("ring-100k-segments", "reconstruct", pickle({ device_traces: [t], segments: [], allocator_settings: {} }), { exit: 0 });
}
{
  // 20k private pools (segments of distinct pool ids, each opened by a segment_alloc).
  const segs = [];
  const t = [];
  for (let i = 0; i < 20_000; i++) {
    const addr = 2 ** 32 + i * 2 ** 21;
    segs.push({ device: 0, address: addr, total_size: 2 ** 21, allocated_size: 512, active_size: 512, requested_size: 512, stream: 0, segment_type: "large", segment_pool_id: new PyTuple([1, i + 1]), is_expandable: false, blocks: [{ address: addr, size: 512, requested_size: 512, state: "active_allocated" }, { address: addr + 512, size: 2 ** 21 - 512, requested_size: 0, state: "inactive" }] });
    t.push(entry("segment_alloc", addr, 2 ** 21, 1000 + 2 * i), entry("alloc", addr, 512, 1001 + 2 * i));
  }
  emit("pools-20k", "pools", pickle({ device_traces: [t], segments: segs, allocator_settings: {} }), { exit: 0 });
}
// A dict key given twice: Python keeps the last value (here: 2 events, not 3). Written by
// hand (no memo), since the pickle writer cannot repeat a key.
{
  const str = (t) => [0x8c, t.length, t];
  const int = (n) => [0x4a, Buffer.from(new Int32Array([n]).buffer)];
  const dict = (pairs) => [EMPTY_DICT, MARK, pairs.map(([k, v]) => [str(k), v]), 0x75];
  const ev = (action, addr, time) => dict([["action", str(action)], ["addr", int(addr)], ["size", int(512)], ["stream", int(0)], ["time_us", int(time)]]);
  const traces = (...evs) => [EMPTY_LIST, MARK, [EMPTY_LIST, MARK, evs, APPENDS], APPENDS];
  const root = dict([["device_traces", traces(ev("alloc", 4096, 1))], ["device_traces", traces(ev("alloc", 8192, 5), ev("free_completed", 8192, 6))], ["segments", EMPTY_LIST]]);
  emit("duplicate-device-traces", "semantics", raw(PROTO4, root, STOP), { exit: 0, events: 2 });
}

// ---- values PyTorch cannot record -------------------------------------------------------
const snap = (t, segs = []) => pickle({ device_traces: [t], segments: segs, allocator_settings: {} });
const seg = (device, extra = {}) => ({ device, address: 2 ** 30, total_size: 2 ** 21, allocated_size: 0, active_size: 0, requested_size: 0, stream: 0, segment_type: "large", is_expandable: false, blocks: [], ...extra });
emit("device-1e9", "values", snap([entry("alloc", 4096, 512, 1)], [seg(1e9)]), badValue("device"));
emit("device-minus-1", "values", snap([entry("alloc", 4096, 512, 1)], [seg(-1)]), badValue("device"));
emit("size-negative", "values", snap([entry("alloc", 4096, -512, 1)]), badValue("size"));
emit("size-nan", "values", snap([entry("alloc", 4096, new PyFloat(NaN), 1)]), badValue("size"));
emit("size-2e63", "values", snap([entry("alloc", 4096, 2n ** 63n, 1)]), badValue("size"));
emit("segment-size-2e63", "values", snap([], [seg(0, { total_size: 2n ** 63n })]), badValue("total_size"));
emit("time-nan", "values", snap([entry("alloc", 4096, 512, new PyFloat(NaN))]), badValue("time_us"));
emit("time-backwards", "values", snap([entry("alloc", 4096, 512, 2000), entry("free_completed", 4096, 512, 1000)]), badValue("time_us"));
emit("stream-nan", "values", snap([{ ...entry("alloc", 4096, 512, 1), stream: new PyFloat(NaN) }]), badValue("stream"));
emit("stream-fraction", "values", snap([{ ...entry("alloc", 4096, 512, 1), stream: new PyFloat(1.5) }]), badValue("stream"));
emit("stream-2e60", "values", snap([{ ...entry("alloc", 4096, 512, 1), stream: 2n ** 60n }]), badValue("stream"));
emit("segments-overlap", "values", snap([], [seg(0), seg(0, { address: 2 ** 30 + 4096 })]), { exit: 2, stderr: "overlaps" });

// ---- text that must not reach a terminal raw ---------------------------------------------
emit("escapes-in-keys", "terminal", pickle({ "\x1b]0;pwned\x07\x1b[2J": 1, "a\nb": 2 }), { exit: 2, stderr: "without device_traces", noControl: true });

writeFileSync(join(out, "manifest.json"), JSON.stringify(manifest, null, 1) + "\n");
console.log(`${manifest.length} files in ${out}`);
