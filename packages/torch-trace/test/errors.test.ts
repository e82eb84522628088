import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { pickle } from "@gmlake/trace";
import { describe, expect, it } from "vitest";
import { readSnapshot, readSnapshotBytes, SnapshotError, type SnapshotErrorCode } from "../src/index.js";
import { asyncErrorOf, errorOf } from "./error-of.js";
import { fixture } from "./shared-dir.js";

const good = readFileSync(fixture("expandable_end.p4.pickle"));



function expectError(e: SnapshotError, code: SnapshotErrorCode, name: string, detail: RegExp): void {
  expect(e.code).toBe(code);
  expect(e.message).toContain(name);
  expect(e.message).toMatch(detail);
  expect(e.message).not.toContain("\n");
}

describe("bad input gives a SnapshotError with a code and a one-line message", () => {
  const dir = mkdtempSync(join(tmpdir(), "torch-trace-"));

  it("NOT_FOUND and IS_DIRECTORY", async () => {
    expectError(await asyncErrorOf(readSnapshot(join(dir, "nope.pickle"))), "NOT_FOUND", "nope.pickle", /no such file/);
    expectError(await asyncErrorOf(readSnapshot(dir)), "IS_DIRECTORY", dir, /directory/);
  });

  it("EMPTY: an empty file and a gzip of nothing", async () => {
    const p = join(dir, "empty.pickle");
    writeFileSync(p, new Uint8Array(0));
    expectError(await asyncErrorOf(readSnapshot(p)), "EMPTY", "empty.pickle", /empty/);
    expectError(errorOf(() => readSnapshotBytes(gzipSync(new Uint8Array(0)), { name: "e.gz" })), "EMPTY", "e.gz", /no data/);
  });

  it("TRUNCATED: a pickle cut short, with the byte offset", () => {
    for (const cut of [1, 2, 3, 100, good.length >> 1, good.length - 1]) {
      const e = errorOf(() => readSnapshotBytes(good.subarray(0, cut), { name: "cut.pickle" }));
      expectError(e, "TRUNCATED", "cut.pickle", /truncated/);
      expect(e.message).toMatch(/at byte \d+/);
      expect(e.offset).toBeLessThanOrEqual(cut);
    }
  });

  it("TRUNCATED: a gzip cut short", () => {
    const gz = gzipSync(good);
    expectError(errorOf(() => readSnapshotBytes(gz.subarray(0, gz.length >> 1), { name: "cut.gz" })), "TRUNCATED", "cut.gz", /truncated gzip/);
  });

  it("BAD_GZIP: a flipped checksum byte", () => {
    const gz = gzipSync(good);
    gz[gz.length - 6] ^= 0xff; // CRC32 of the trailer
    expectError(errorOf(() => readSnapshotBytes(gz, { name: "crc.gz" })), "BAD_GZIP", "crc.gz", /bad gzip data/);
  });

  it("BAD_GZIP: flipped bytes in the deflate data", () => {
    const gz = gzipSync(good);
    for (let i = 20; i < 40; i++) gz[i] ^= 0x5a;
    const e = errorOf(() => readSnapshotBytes(gz, { name: "flip.gz" }));
    expect(["BAD_GZIP", "TRUNCATED"]).toContain(e.code);
  });

  it("BAD_OPCODE: an unknown opcode, at its offset", () => {
    const b = Uint8Array.from(good);
    const at = b.indexOf(0x8c, 20); // a SHORT_BINUNICODE
    b[at] = 0xff;
    const e = errorOf(() => readSnapshotBytes(b, { name: "op.pickle" }));
    expectError(e, "BAD_OPCODE", "op.pickle", /unknown opcode 0xff/);
    expect(e.offset).toBe(at);
  });

  it("flipped bytes in a plain pickle: an error naming the offset, never a crash", () => {
    let errors = 0;
    for (let at = 2; at < good.length; at += 97) {
      const b = Uint8Array.from(good);
      b[at] ^= 0xff;
      try {
        readSnapshotBytes(b, { name: "flip.pickle" });
      } catch (e) {
        expect(e).toBeInstanceOf(SnapshotError);
        expect((e as SnapshotError).message).toContain("flip.pickle");
        errors++;
      }
    }
    expect(errors).toBeGreaterThan(0);
  });

  it("NOT_A_PICKLE: text, JSON, a zip, a newer protocol", () => {
    expectError(errorOf(() => readSnapshotBytes(Buffer.from("hello world\n"), { name: "t.txt" })), "NOT_A_PICKLE", "t.txt", /not a pickle/);
    expectError(errorOf(() => readSnapshotBytes(Buffer.from('{"a": 1}'), { name: "j.json" })), "NOT_A_PICKLE", "j.json", /JSON/);
    expectError(errorOf(() => readSnapshotBytes(Buffer.from("PK\x03\x04rest"), { name: "m.pt" })), "NOT_A_PICKLE", "m.pt", /zip/);
    expectError(errorOf(() => readSnapshotBytes(Uint8Array.of(0x80, 9, 0x4e, 0x2e), { name: "p9" })), "NOT_A_PICKLE", "p9", /protocol 9/);
    expectError(errorOf(() => readSnapshotBytes(gzipSync(Buffer.from("plain text")), { name: "t.gz" })), "NOT_A_PICKLE", "t.gz", /inside the gzip/);
  });

  it("BAD_SHAPE: pickles of the wrong shape", () => {
    expectError(errorOf(() => readSnapshotBytes(pickle([1, 2, 3]), { name: "list" })), "BAD_SHAPE", "list", /top level is list/);
    expectError(errorOf(() => readSnapshotBytes(pickle({ a: 1 }), { name: "d" })), "BAD_SHAPE", "d", /without device_traces or segments/);
    expectError(errorOf(() => readSnapshotBytes(pickle({ device_traces: 5 }), { name: "d" })), "BAD_SHAPE", "d", /device_traces is int/);
    expectError(errorOf(() => readSnapshotBytes(pickle({ device_traces: [[7]] }), { name: "d" })), "BAD_SHAPE", "d", /device_traces\[0\]\[0\] is int/);
    expectError(
      errorOf(() => readSnapshotBytes(pickle({ device_traces: [[{ action: "alloc", addr: "x", size: 1 }]] }), { name: "d" })),
      "BAD_SHAPE", "d", /device_traces\[0\]\[0\]\.addr is str/,
    );
    expectError(errorOf(() => readSnapshotBytes(pickle({ device_traces: [], segments: [{ address: 1 }] }), { name: "s" })), "BAD_SHAPE", "s", /segments\[0\]\.total_size is missing/);
  });

  it("BAD_PICKLE: structural errors (stack underflow, missing memo)", () => {
    expectError(errorOf(() => readSnapshotBytes(Uint8Array.of(0x80, 4, 0x30, 0x2e), { name: "u" })), "BAD_PICKLE", "u", /stack underflow/);
    expectError(errorOf(() => readSnapshotBytes(Uint8Array.of(0x80, 4, 0x68, 3, 0x2e), { name: "m" })), "BAD_PICKLE", "m", /memo key 3/);
    expectError(errorOf(() => readSnapshotBytes(Uint8Array.of(0x80, 4, 0x4e, 0x4e, 0x2e), { name: "s" })), "BAD_PICKLE", "s", /STOP with 2 values/);
  });

  it("accepts ArrayBuffer input and names <bytes> by default", () => {
    const ab = good.buffer.slice(good.byteOffset, good.byteOffset + good.length);
    expect(readSnapshotBytes(ab).events.length).toBe(32);
    expect(errorOf(() => readSnapshotBytes(new Uint8Array(0))).message).toBe("<bytes>: empty file");
  });
});
