import { describe, expect, it } from "vitest";
import { SimDriver } from "@gmlake/vmm";
import { Allocator, checkKnob, getPolicy, listPolicies, PYTORCH_KNOBS, registerPolicy, type Knob } from "../src/index.js";
import { checkKnobDeclaration } from "../src/core/knobs.js";

const instance = { malloc: () => null, free: () => {}, emptyCache: () => {}, teardown: () => {} };
const withKnob = (k: unknown) => ({ name: "bad-knob", description: "d", knobs: { x: k as Knob }, create: () => instance });

describe("a knob's declaration is checked when its policy registers", () => {
  it("an unknown type, bounds that are not numbers, a choice without choices: refused, naming the knob", () => {
    const cases: [unknown, RegExp][] = [
      [{ type: "size", default: 1, description: "d" }, /knob x has type "size", not one of bytes, integer, number, boolean, choice, divisions/],
      [{ type: "integer", default: 1, min: "0", description: "d" }, /knob x has min 0, not a finite number/],
      [{ type: "integer", default: 1, min: 5, max: 2, description: "d" }, /min 5 above max 2/],
      [{ type: "bytes", default: 0, multipleOf: 0, description: "d" }, /multipleOf 0: it must be positive/],
      [{ type: "choice", default: "a", description: "d" }, /a choice with no choices/],
    ];
    for (const [k, message] of cases) {
      expect(() => registerPolicy(withKnob(k))).toThrow(expect.objectContaining({ code: "BAD_ARGUMENT", message: expect.stringMatching(message) }));
      expect(() => getPolicy("bad-knob")).toThrow(); // not registered
    }
  });

  it("every built-in knob passes, and a good declaration still registers", () => {
    for (const p of listPolicies()) for (const [name, k] of Object.entries(p.knobs as Record<string, Knob>)) checkKnobDeclaration(p.name, name, k);
    const p = registerPolicy(withKnob({ type: "choice", choices: ["a", "b"], default: "a", description: "d" }));
    expect(getPolicy("bad-knob")).toBe(p);
  });
});

describe("-1 where a knob's help promises it", () => {
  it("maxSplitSize=-1 (unlimited) is accepted as text and as a number; -1 elsewhere is not", () => {
    expect(PYTORCH_KNOBS.maxSplitSize.description).toMatch(/-1 = unlimited/);
    expect(checkKnob("caching", "maxSplitSize", PYTORCH_KNOBS.maxSplitSize, "-1")).toBe(-1);
    expect(checkKnob("caching", "maxSplitSize", PYTORCH_KNOBS.maxSplitSize, -1)).toBe(-1);
    expect(() => checkKnob("caching", "maxSplitSize", PYTORCH_KNOBS.maxSplitSize, "-2")).toThrow(/accepts a byte count from -1/);
    expect(() => checkKnob("caching", "maxNonSplitRounding", PYTORCH_KNOBS.maxNonSplitRounding, "-1")).toThrow(/accepts a byte count from 0/);
    const a = new Allocator("caching", new SimDriver(), { options: { maxSplitSize: "-1" } });
    a.free(a.malloc(1 << 20));
    a.close();
  });
});
