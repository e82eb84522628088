import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { pickle, PyTuple, type PickleValue } from "@gmlake/trace";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { readSnapshotBytes, SnapshotError } from "../src/index.js";
import { fixture, tracesDir } from "./shared-dir.js";

/**
 * Property: whatever the bytes, the reader returns a Snapshot or throws a SnapshotError,
 * and it terminates (every opcode consumes input; vitest's timeout catches a hang).
 * FUZZ_RUNS scales every property (default: 10,000+ cases in all); bench/fuzz-long.mjs
 * runs it with a large count. FUZZ_SEED replays a failure.
 */
const RUNS = Number(process.env.FUZZ_RUNS ?? 2500);
const seed = process.env.FUZZ_SEED === undefined ? undefined : Number(process.env.FUZZ_SEED);
const params = { numRuns: RUNS, ...(seed === undefined ? {} : { seed }) };
const TIMEOUT = Math.max(60_000, RUNS * 40);

function readsOrThrowsSnapshotError(bytes: Uint8Array): boolean {
  try {
    readSnapshotBytes(bytes, { name: "fuzz" });
    return true;
  } catch (e) {
    if (e instanceof SnapshotError) {
      if (e.message.includes("\n")) throw new Error(`multi-line message: ${e.message}`);
      return true;
    }
    throw e;
  }
}

// Real snapshots to mutate: the small fixtures, plus ../shared/traces/small when present.
const bases: Uint8Array[] = [
  readFileSync(fixture("expandable_end.p4.pickle")),
  readFileSync(fixture("multi_device.p2.pickle")),
  readFileSync(fixture("expandable_end.p0.pickle")),
  readFileSync(fixture("expandable_end.p4.pickle.gz")),
];
const shared = tracesDir();
if (shared !== null) {
  for (const f of readdirSync(join(shared, "small"))) {
    if (f.startsWith("train")) continue; // 150 KB each: kept for the long run's speed elsewhere
    const b = readFileSync(join(shared, "small", f));
    bases.push(b);
  }
  bases.push(gzipSync(readFileSync(join(shared, "small", "default.pickle"))));
}

type Mutation =
  | { t: "flip"; at: number; bit: number }
  | { t: "byte"; at: number; v: number }
  | { t: "insert"; at: number; bytes: number[] }
  | { t: "delete"; at: number; n: number }
  | { t: "truncate"; at: number }
  | { t: "dup"; at: number; n: number; to: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ t: fc.constant("flip" as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ t: fc.constant("byte" as const), at: fc.nat(), v: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ t: fc.constant("insert" as const), at: fc.nat(), bytes: fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 8 }) }),
  fc.record({ t: fc.constant("delete" as const), at: fc.nat(), n: fc.integer({ min: 1, max: 16 }) }),
  fc.record({ t: fc.constant("truncate" as const), at: fc.nat() }),
  fc.record({ t: fc.constant("dup" as const), at: fc.nat(), n: fc.integer({ min: 1, max: 64 }), to: fc.nat() }),
);

function mutate(base: Uint8Array, ms: Mutation[]): Uint8Array {
  let b = Uint8Array.from(base);
  for (const m of ms) {
    if (b.length === 0) break;
    const at = m.at % b.length;
    switch (m.t) {
      case "flip":
        b[at] ^= 1 << m.bit;
        break;
      case "byte":
        b[at] = m.v;
        break;
      case "insert":
        b = Uint8Array.from([...b.subarray(0, at), ...m.bytes, ...b.subarray(at)]);
        break;
      case "delete":
        b = Uint8Array.from([...b.subarray(0, at), ...b.subarray(at + m.n)]);
        break;
      case "truncate":
        b = b.slice(0, at);
        break;
      case "dup": {
        const chunk = b.slice(at, at + m.n);
        const to = m.to % b.length;
        b = Uint8Array.from([...b.subarray(0, to), ...chunk, ...b.subarray(to)]);
        break;
      }
    }
  }
  return b;
}

/** Plain Python-like values (what snapshots hold), as a tree. */
const pyValue: fc.Arbitrary<PickleValue> = fc.letrec<{ v: PickleValue }>((tie) => ({
  v: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }),
    fc.double(),
    fc.string(),
    fc.constantFrom("alloc", "free_requested", "free_completed", "segment_alloc", "segment_map", "oom", "device_traces", "segments"),
    fc.array(tie("v"), { maxLength: 5 }),
    fc.dictionary(fc.oneof(fc.string(), fc.constantFrom("action", "addr", "size", "stream", "time_us", "device_traces", "segments", "allocator_settings")), tie("v"), { maxKeys: 5 }),
    fc.array(tie("v"), { maxLength: 3 }).map((a) => new PyTuple(a)),
  ),
})).v;

const entry = fc.record(
  {
    action: fc.constantFrom("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "snapshot", "oom", "annotate"),
    addr: fc.integer({ min: 0, max: 2 ** 47 }),
    size: fc.integer({ min: 0, max: 2 ** 40 }),
    stream: fc.constantFrom(0, 0x7f0000001234, 510105616),
    time_us: fc.integer({ min: 0, max: 2 ** 52 }),
    compile_context: fc.constant("N/A"),
    pool_id: fc.constant(new PyTuple([0, 1])),
  },
  { requiredKeys: ["action", "addr", "size"] },
);

const snapshotValue = fc.record({
  // PyTorch records a device's entries in time order (equal times allowed): sort them.
  device_traces: fc.array(
    fc.array(entry, { maxLength: 30 }).map((l) => {
      const times = l.flatMap((e) => (e.time_us === undefined ? [] : [e.time_us])).sort((x, y) => x - y);
      let k = 0;
      return l.map((e) => (e.time_us === undefined ? e : { ...e, time_us: times[k++] }));
    }),
    { minLength: 1, maxLength: 3 },
  ),
  segments: fc.constant([]),
  allocator_settings: fc.record({ max_split_size: fc.constantFrom(-1, 2 ** 30), roundup_power2_divisions: fc.dictionary(fc.constantFrom("1", "2", "4", "8", "32768"), fc.integer({ min: 0, max: 16 })) }),
});

describe("fuzz: never a crash other than SnapshotError, never a hang", () => {
  it(`mutated real snapshots (${RUNS * 2} cases)`, () => {
    fc.assert(
      fc.property(fc.nat(bases.length - 1), fc.array(mutation, { minLength: 1, maxLength: 4 }), (bi, ms) => readsOrThrowsSnapshotError(mutate(bases[bi], ms))),
      { ...params, numRuns: RUNS * 2 },
    );
  }, TIMEOUT);

  it(`random byte strings, bare and after a pickle header (${RUNS} cases)`, () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.constantFrom([], [0x80, 4], [0x80, 2], [0x80, 4, 0x7d], [0x1f, 0x8b]), (bytes, head) => readsOrThrowsSnapshotError(Uint8Array.from([...head, ...bytes]))),
      { ...params, numRuns: RUNS },
    );
  }, TIMEOUT);

  it(`random well-formed pickles (${RUNS} cases)`, () => {
    fc.assert(fc.property(pyValue, (v) => readsOrThrowsSnapshotError(pickle(v))), { ...params, numRuns: RUNS });
  }, TIMEOUT);

  it(`random well-formed snapshots read back every known entry (${RUNS >> 1} cases)`, () => {
    fc.assert(
      fc.property(snapshotValue, fc.boolean(), (v, gz) => {
        const bytes = pickle(v);
        const snap = readSnapshotBytes(gz ? gzipSync(bytes) : bytes, { reconstruct: false });
        const entries = v.device_traces.flat();
        const known = entries.filter((e) => e.action !== "annotate").length;
        expect(snap.events.length).toBe(known);
        expect(snap.unknownActions.annotate ?? 0).toBe(entries.length - known);
        let i = 0;
        v.device_traces.forEach((list, d) => {
          for (const e of list) {
            if (e.action === "annotate") continue;
            expect(snap.events.device[i]).toBe(d);
            expect(snap.events.size[i]).toBe(e.size);
            expect(snap.events.timeUs[i]).toBe(e.time_us ?? 0);
            expect(snap.events.streams[snap.events.stream[i]]).toBe(e.stream ?? 0);
            if (e.action !== "oom") expect(snap.events.addr[i]).toBe(e.addr);
            i++;
          }
        });
        return true;
      }),
      { ...params, numRuns: RUNS >> 1 },
    );
  }, TIMEOUT);
});
