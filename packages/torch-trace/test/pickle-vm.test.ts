import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { PickleVM, readSnapshotBytes, SnapshotError } from "../src/index.js";
import { fixture } from "./shared-dir.js";

type Enc = null | boolean | string | Enc[] | { int: string } | { float: string } | { bytes: number[] } | { dict: Record<string, Enc> };

/** values.json holds Python's view of values.p*.pickle (ints as decimal text). */
function decode(e: Enc): unknown {
  if (e === null || typeof e === "boolean" || typeof e === "string") return e;
  if (Array.isArray(e)) return e.map(decode);
  if ("int" in e) {
    const big = BigInt(e.int);
    return BigInt(Number(big)) === big ? Number(big) : big;
  }
  if ("float" in e) return e.float === "inf" ? Infinity : Number(e.float);
  if ("bytes" in e) return new Uint8Array(e.bytes);
  return new Map(Object.entries(e.dict).map(([k, v]) => [k, decode(v)]));
}

const run = (bytes: Uint8Array): unknown => new PickleVM(bytes, "t").run();
const P = (...b: number[]): Uint8Array => new Uint8Array(b);

describe("PickleVM", () => {
  const expected = decode(JSON.parse(readFileSync(fixture("values.json"), "utf8")) as Enc) as Map<string, unknown>;
  for (const p of [0, 1, 2, 3, 4, 5]) {
    it(`reads protocol ${p} values exactly as CPython wrote them`, () => {
      const v = run(readFileSync(fixture(`values.p${p}.pickle`))) as Map<string, unknown>;
      const want = new Map(expected);
      if (p < 3) want.delete("byts"); // protocols 0-2 encode bytes through GLOBAL; not in fixtures
      expect(v).toEqual(want);
    });
  }

  it("LONG1 is signed little-endian two's complement", () => {
    const long1 = (...bytes: number[]): unknown => run(P(0x80, 2, 0x8a, bytes.length, ...bytes, 0x2e));
    expect(long1()).toBe(0);
    expect(long1(0xff)).toBe(-1);
    expect(long1(0x80)).toBe(-128);
    expect(long1(0xff, 0x00)).toBe(255);
    expect(long1(0x00, 0x78, 0x56, 0x34, 0xd2, 0x7f)).toBe(0x7fd234567800);
    expect(long1(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)).toBe(2n ** 63n - 1n); // not exact as a double
    expect(long1(0, 0, 0, 0, 0, 0, 0, 0x80)).toBe(-(2 ** 63)); // exact as a double
    expect(long1(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00)).toBe(2n ** 64n - 1n);
    expect(long1(0x01, 0, 0, 0, 0, 0, 0x20)).toBe(2n ** 53n + 1n);
    expect(long1(0x00, 0, 0, 0, 0, 0, 0x20)).toBe(2 ** 53);
    expect(long1(0x6b, 0x1d, 0x3f, 0x5a, 0x6b, 0x61, 0x06)).toBe(0x06616b5a3f1d6b);
  });

  it("LONG4 and BINFLOAT (big-endian)", () => {
    expect(run(P(0x80, 2, 0x8b, 2, 0, 0, 0, 0x00, 0x80, 0x2e))).toBe(-32768);
    expect(run(P(0x80, 2, 0x47, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x2e))).toBe(1.5);
  });

  it("memo: BINPUT/LONG_BINPUT/MEMOIZE with BINGET/LONG_BINGET", () => {
    // [s, s, s] with s memoized three ways
    const b = P(0x80, 4, 0x5d, 0x28, 0x8c, 1, 0x61, 0x94, 0x71, 7, 0x72, 9, 0, 0, 0, 0x68, 0, 0x68, 7, 0x6a, 9, 0, 0, 0, 0x65, 0x2e);
    expect(run(b)).toEqual(["a", "a", "a", "a"]);
  });

  it("tolerates NUL padding after STOP", () => {
    expect(run(P(0x80, 4, 0x4b, 7, 0x2e, 0, 0, 0, 0))).toBe(7);
  });

  it("reads protocol 2 (BINPUT) and 4 snapshots with two devices, unknown actions and keys", () => {
    for (const f of ["multi_device.p2.pickle", "multi_device.p4.pickle"]) {
      // The fixture moved part of device 0's trace to device 2 (its segments stay on 0).
      const snap = readSnapshotBytes(readFileSync(fixture(f)), { name: f, reconstruct: false });
      expect(snap.devices).toEqual([0, 2]);
      expect(snap.unknownActions).toEqual({ annotate: 1 });
      expect(snap.extraEntryKeys).toEqual({ pool_id: 1 });
      expect(snap.extraKeys).toEqual(["extra_top"]);
      const log = snap.events;
      expect(log.length).toBe(32 + 2);
      // Device 0 first (10 events), then device 2; device 1 has an empty list.
      expect(Array.from(log.device.subarray(0, log.length)).filter((d) => d === 0).length).toBe(10);
      expect(log.device[10]).toBe(2);
      const last = log.length - 1;
      expect(log.streams[log.stream[last]]).toBe(7);
      expect(log.timeUs[last]).toBe(0); // missing time_us
      expect(log.addr[last]).toBe(4096);
    }
  });

  it("every protocol of the same snapshot yields the same events", () => {
    const ref = readSnapshotBytes(readFileSync(fixture("expandable_end.p4.pickle")));
    for (const f of ["p0.pickle", "p1.pickle", "p2.pickle", "p3.pickle", "p5.pickle", "p4.pickle.gz"]) {
      const s = readSnapshotBytes(readFileSync(fixture(`expandable_end.${f}`)));
      expect(s.events.length).toBe(ref.events.length);
      for (const col of ["kind", "addr", "size", "stream", "device", "timeUs", "aux"] as const) {
        expect(Array.from(s.events[col].subarray(0, s.events.length))).toEqual(Array.from(ref.events[col].subarray(0, ref.events.length)));
      }
      expect(s.segments).toEqual(ref.segments);
      expect(s.allocatorSettings).toEqual(ref.allocatorSettings);
    }
    expect(ref.allocatorSettings.expandableSegments).toBe(true);
    expect(ref.allocatorSettings.allocConf).toBe("expandable_segments:True");
  });

  it("refuses object construction opcodes", () => {
    const e = (() => {
      try {
        run(P(0x80, 2, 0x63, ...Buffer.from("os\nsystem\n"), 0x2e));
      } catch (err) {
        return err as SnapshotError;
      }
    })();
    expect(e).toBeInstanceOf(SnapshotError);
    expect(e?.code).toBe("BAD_OPCODE");
    expect(e?.message).toContain("GLOBAL");
  });
});
