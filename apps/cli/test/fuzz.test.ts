import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { pickle, PyTuple, type PickleValue } from "@gmlake/trace";
import { cli, gmlakeInProcess, TRACES, type Outcome } from "./run-cli.js";

/**
 * The CLI end to end on hostile files: mutated real snapshots and well-formed snapshots
 * whose events are hostile (negative / 2^60 sizes, double frees, allocs at live
 * addresses, unknown streams). Whatever the file, `gmlake replay|verify` ends in a result
 * or in bad input (exit 2, one line), never an internal failure (exit 1) or a stack
 * trace. In process through the CLI's own pieces (reader -> runReplay / verify, classified
 * by the same isInputError main.ts uses), and a sample spawned as the real process.
 * FUZZ_RUNS scales the in-process cases (default 1500 per property); FUZZ_SEED replays one.
 */
const RUNS = Number(process.env.FUZZ_RUNS ?? 1500);
const SPAWNS = Number(process.env.FUZZ_SPAWNS ?? 16);
const seed = process.env.FUZZ_SEED === undefined ? 20261129 : Number(process.env.FUZZ_SEED);
const TIMEOUT = Math.max(120_000, RUNS * 60);
const POLICIES = ["caching", "expandable", "vms", "gmlake"];

const bases: Uint8Array[] = [gunzipSync(readFileSync(join(import.meta.dirname, "../assets/default-trace.pickle.gz")))];
for (const f of ["default.pickle", "expandable.pickle", "default_end.pickle", "expandable_end.pickle"]) {
  const p = join(TRACES, "small", f);
  if (existsSync(p)) bases.push(readFileSync(p));
}

const tmpIn = mkdtempSync(join(tmpdir(), "gmlake-fuzz-in-"));

let caseNo = 0;
/** The bytes as a file through `inspect`, `replay` (a policy, invariants on) or `verify`. */
function pipeline(bytes: Uint8Array, policy: string, which: number): Promise<Outcome> {
  const f = join(tmpIn, `c${caseNo++ % 64}.pickle`);
  writeFileSync(f, bytes);
  const argv = which === 0 ? ["inspect", f, "--json"] : which === 1 ? ["verify", f, "--json"] : ["replay", f, "--policy", policy, "--invariants", "--json"];
  return gmlakeInProcess(argv);
}

type Mutation = { t: "flip" | "byte" | "insert" | "delete" | "truncate" | "dup"; at: number; v: number; n: number };
const mutation: fc.Arbitrary<Mutation> = fc.record({
  t: fc.constantFrom("flip", "byte", "byte", "insert", "delete", "truncate", "dup"),
  at: fc.nat(),
  v: fc.integer({ min: 0, max: 255 }),
  n: fc.integer({ min: 1, max: 48 }),
});

function mutate(base: Uint8Array, ms: Mutation[]): Uint8Array {
  let b = Uint8Array.from(base);
  for (const m of ms) {
    if (b.length === 0) break;
    const at = m.at % b.length;
    if (m.t === "flip") b[at] = b[at]! ^ (1 << (m.v & 7));
    else if (m.t === "byte") b[at] = m.v;
    else if (m.t === "insert") b = Uint8Array.from([...b.subarray(0, at), ...new Array<number>(m.n % 8 + 1).fill(m.v), ...b.subarray(at)]);
    else if (m.t === "delete") b = Uint8Array.from([...b.subarray(0, at), ...b.subarray(at + m.n)]);
    else if (m.t === "truncate") b = b.slice(0, at);
    else {
      const chunk = b.slice(at, at + m.n);
      const to = (m.v * 7919) % b.length;
      b = Uint8Array.from([...b.subarray(0, to), ...chunk, ...b.subarray(to)]);
    }
  }
  return b;
}

/** Snapshot entries with hostile values a broken recorder or a hand-edited file could hold. */
const hostileSize = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0, max: 64 << 20 }) },
  { weight: 1, arbitrary: fc.constantFrom(-1, -512, 2 ** 60, 2 ** 53 - 1, 2 ** 52, 0) },
  { weight: 1, arbitrary: fc.constantFrom(0.5, Number.NaN, Infinity) },
);
const addrs = [0x7f0000000000, 0x7f0000200000, 0x7f0000400000, 0x7f0000600000, 0x7f0000800000];
const entry = fc.record({
  action: fc.constantFrom("alloc", "alloc", "free_requested", "free_completed", "free_completed", "segment_alloc", "segment_free", "oom", "snapshot", "empty_cache"),
  addr: fc.oneof({ weight: 8, arbitrary: fc.constantFrom(...addrs) }, { weight: 1, arbitrary: fc.constantFrom(-4096, 2 ** 60, 0) }),
  size: hostileSize,
  stream: fc.constantFrom(0, 0x7f0000001234),
  time_us: fc.nat(),
});
const hostileSnapshot = fc.record({
  traces: fc.array(fc.array(entry, { maxLength: 40 }), { minLength: 1, maxLength: 2 }),
  expandable: fc.boolean(),
  gz: fc.boolean(),
});

function snapshotBytes(s: { traces: Record<string, unknown>[][]; expandable: boolean; gz: boolean }): Uint8Array {
  const value = {
    segments: [],
    device_traces: s.traces.map((t) => t.map((e) => ({ ...e, frames: [] }))),
    allocator_settings: { PYTORCH_CUDA_ALLOC_CONF: s.expandable ? "expandable_segments:True" : "", expandable_segments: s.expandable },
  } as unknown as PickleValue;
  const b = pickle(value);
  return s.gz ? gzipSync(b) : b;
}
void PyTuple;

const counts = { ok: 0, "bad-input": 0 };
const params = { numRuns: RUNS, seed };

describe("CLI fuzz (in process): a result or bad input, never an internal failure", () => {
  it(
    `mutated real snapshots through inspect / replay / verify (${RUNS} cases)`,
    async () => {
      await fc.assert(
        fc.asyncProperty(fc.nat(bases.length - 1), fc.array(mutation, { minLength: 1, maxLength: 4 }), fc.constantFrom(...POLICIES), fc.nat(2), async (bi, ms, policy, which) => {
          counts[await pipeline(mutate(bases[bi]!, ms), policy, which)]++;
        }),
        params,
      );
    },
    TIMEOUT,
  );

  it(
    `well-formed snapshots with hostile events (${RUNS} cases)`,
    async () => {
      await fc.assert(
        fc.asyncProperty(hostileSnapshot, fc.constantFrom(...POLICIES), fc.nat(2), async (s, policy, which) => {
          counts[await pipeline(snapshotBytes(s), policy, which)]++;
        }),
        params,
      );
      // both outcomes occur: the generator reaches the replay and its refusals
      expect(counts.ok).toBeGreaterThan(RUNS / 20);
      expect(counts["bad-input"]).toBeGreaterThan(RUNS / 20);
    },
    TIMEOUT,
  );
});

describe("CLI fuzz (spawned): exit 0 or 2 with one line, no stack trace", () => {
  it(`${SPAWNS} mutated files through the real process`, () => {
    const tmp = mkdtempSync(join(tmpdir(), "gmlake-fuzz-"));
    const files = [
      ...fc.sample(fc.tuple(fc.nat(bases.length - 1), fc.array(mutation, { minLength: 1, maxLength: 3 })), { numRuns: SPAWNS / 2, seed }).map(([bi, ms]) => mutate(bases[bi]!, ms)),
      ...fc.sample(hostileSnapshot, { numRuns: SPAWNS / 2, seed }).map(snapshotBytes),
    ];
    const seen = { 0: 0, 2: 0 };
    files.forEach((bytes, i) => {
      const f = join(tmp, `case${i}.pickle`);
      writeFileSync(f, bytes);
      const cmd = i % 3 === 0 ? ["verify", f] : i % 3 === 1 ? ["replay", f, "--policy", POLICIES[i % 4]!] : ["inspect", f];
      const r = cli(cmd);
      expect([0, 2], `${cmd.join(" ")}: ${r.stderr}`).toContain(r.code);
      seen[r.code as 0 | 2]++;
      expect(r.stderr).not.toMatch(/\n\s+at /);
      expect(r.stderr).not.toMatch(/internal error/);
      if (r.code === 2) {
        expect(r.stderr.trimEnd().split("\n"), r.stderr).toHaveLength(1);
        expect(r.stdout).toBe("");
      }
    });
    expect(seen[0] + seen[2]).toBe(files.length);
  });
});
