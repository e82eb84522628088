import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { pickle, PickleWriter, PyFloat, PyTuple } from "../src/index.js";

const hex = (b: Uint8Array): string => Buffer.from(b).toString("hex");
/** The bytes of one int as written (between PROTO 4 and STOP). */
const intBytes = (v: number | bigint): string => hex(new PickleWriter().int(v).finish()).slice(4, -2);

describe("PickleWriter", () => {
  it("ints take CPython's encodings (BININT1/2/4, LONG1 two's complement)", () => {
    expect(intBytes(0)).toBe("4b00");
    expect(intBytes(255)).toBe("4bff");
    expect(intBytes(256)).toBe("4d0001");
    expect(intBytes(-1)).toBe("4affffffff");
    expect(intBytes(2 ** 31)).toBe("8a050000008000");
    expect(intBytes(2 ** 40)).toBe("8a06000000000001"); // CPython: 8a 06 0000000000 01
    expect(intBytes(-(2 ** 40))).toBe("8a060000000000ff");
    expect(intBytes(1795960977164139)).toBe("8a076b0713c06a6106");
    expect(intBytes(2n ** 64n - 1n)).toBe("8a09ffffffffffffffff00");
    expect(intBytes(-(2n ** 63n))).toBe("8a080000000000000080");
    expect(intBytes(2 ** 47 - 1)).toBe("8a06ffffffffff7f");
    expect(intBytes(-(2 ** 47))).toBe("8a06000000000080");
    expect(intBytes(-(2 ** 47) - 1)).toBe("8a07ffffffffff7fff");
  });

  it("strings are memoized by content; floats are big-endian", () => {
    expect(hex(pickle(["k", "k"]))).toBe("80045d288c016b946a00000000652e");
    expect(hex(pickle(new PyFloat(1.5)))).toBe("8004473ff80000000000002e");
    expect(hex(pickle(new PyTuple([1, 2])))).toBe("80044b014b02862e");
  });

  const py = spawnSync("python3", ["-c", "import pickle"], { encoding: "utf8" });
  it.skipIf(py.status !== 0)("CPython reads what it writes", () => {
    const value = { a: [1, -1, 2 ** 40, -(2 ** 40), 1795960977164139, 2n ** 64n - 1n], b: new PyTuple([1, "x"]), c: new PyTuple([1, 2, 3, 4]), f: new PyFloat(0), g: 2.5, n: null, t: true, s: "héllo ✓", big: "x".repeat(300), many: Array.from({ length: 2500 }, (_, i) => i), d: new Map([["k", { nested: [] }]]) };
    const r = spawnSync("python3", ["-c", "import pickle,sys,json; d=pickle.loads(sys.stdin.buffer.read()); d['a'][5]=str(d['a'][5]); print(json.dumps(d))"], { input: Buffer.from(pickle(value)), encoding: "utf8" });
    expect(r.stderr).toBe("");
    expect(JSON.parse(r.stdout)).toEqual({ a: [1, -1, 2 ** 40, -(2 ** 40), 1795960977164139, "18446744073709551615"], b: [1, "x"], c: [1, 2, 3, 4], f: 0, g: 2.5, n: null, t: true, s: "héllo ✓", big: "x".repeat(300), many: Array.from({ length: 2500 }, (_, i) => i), d: { k: { nested: [] } } });
  });
});
