import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SimDriver } from "@gmlake/vmm";
import { Allocator, BUILTIN_POLICIES, checkKnob, describeKnobRange, optionsForPolicies, policyDefaults, resolveOptions, StitchError, type Knob } from "../src/index.js";
import { MiB } from "./helpers.js";

const knobsOf = (p: (typeof BUILTIN_POLICIES)[number]) => Object.entries(p.knobs as Record<string, Knob>);
const everyKnob = BUILTIN_POLICIES.flatMap((p) => knobsOf(p).map(([k, knob]) => ({ policy: p.name, name: k, knob })));

/** Values a user may pass by mistake, and some right ones: wrong types, zero, negative, huge, units, command-line text. */
const anyValue = fc.oneof(
  fc.constantFrom<unknown>("abc", "", 0, -1, -4096, 0.5, 1e300, 2 ** 53, 2 ** 60, -0, NaN, Infinity, true, false, null, [], {}, "512MiB", "-5", "1e400", "null", "true", "[1,2]", "hole", "size"),
  fc.integer({ min: -(2 ** 31), max: 2 ** 31 }),
  fc.double(),
  fc.string({ maxLength: 8 }),
  fc.array(fc.integer({ min: -2, max: 20 }), { maxLength: 17 }),
  fc.integer({ min: 0, max: 40 }).map((e) => 2 ** e),
);

/** An allocator of `policy` with one knob set: it must either refuse the value (BAD_OPTION, one line naming the knob) or work. */
function tryKnob(policy: string, name: string, value: unknown): "refused" | "ran" {
  let a: Allocator;
  try {
    a = new Allocator(policy, new SimDriver(), { options: { [name]: value }, checkInvariants: 1 });
  } catch (e) {
    expect(e).toBeInstanceOf(StitchError);
    expect((e as StitchError).code).toBe("BAD_OPTION");
    const msg = (e as Error).message;
    expect(msg).not.toContain("\n");
    expect(msg).toContain(name);
    return "refused";
  }
  const live = [];
  for (const size of [100, 700 * 1024, 3 * MiB, 50 * MiB, 3 * MiB]) {
    const b = a.tryMalloc(size, 0);
    if (b) live.push(b);
  }
  for (const b of live.splice(0, 2)) a.free(b);
  a.emptyCache();
  a.close(live);
  return "ran";
}

describe("knob schemas", () => {
  it.each(BUILTIN_POLICIES.map((p) => p.name))("%s: every knob has a type, a description and a default that passes its check", (name) => {
    const p = BUILTIN_POLICIES.find((x) => x.name === name)!;
    expect(knobsOf(p).length).toBeGreaterThan(0);
    for (const [k, knob] of knobsOf(p)) {
      expect(knob.description.length, k).toBeGreaterThan(10);
      expect(checkKnob(name, k, knob, knob.default)).toEqual(knob.default);
      expect(describeKnobRange(knob).length).toBeGreaterThan(3);
    }
    expect(resolveOptions(p, {})).toEqual(policyDefaults(p));
  });

  it("an unknown knob names the policy's knobs; a bad value says what the knob accepts", () => {
    expect(() => new Allocator("gmlake", new SimDriver(), { options: { fragLimt: 1 } })).toThrow(/^policy gmlake has no knob fragLimt; its knobs: vmmDefragment, fragLimit/);
    expect(() => new Allocator("gmlake", new SimDriver(), { options: { fragLimit: "abc" } })).toThrow("gmlake.fragLimit accepts a byte count from 0 to 1PiB (units allowed: 512MiB, 1.5GB), not 'abc'");
    expect(() => new Allocator("expandable", new SimDriver(), { options: { smallPageSize: 0 } })).toThrow(/^expandable\.smallPageSize accepts a byte count from 1B? to 1TiB/);
    expect(() => new Allocator("vms", new SimDriver(), { options: { donorOrder: "big" } })).toThrow("vms.donorOrder accepts one of hole, size, not 'big'");
  });

  it("units and command-line text convert to the knob's type", () => {
    const o = resolveOptions(BUILTIN_POLICIES.find((p) => p.name === "vms")!, { maxHandleBytes: "32MiB", crossStream: "false", arenaBytes: "null", handlesPerRequest: "2" });
    expect(o).toMatchObject({ maxHandleBytes: 32 * MiB, crossStream: false, arenaBytes: null, handlesPerRequest: 2 });
    // a boolean takes 1/0 too (gmlake's on/off knobs were 0/1 integers), as a number or as text
    const b = resolveOptions(BUILTIN_POLICIES.find((p) => p.name === "gmlake")!, { reAlloc: 1, vmmDefragment: "0", setAccessPerChunk: "true" });
    expect(b).toMatchObject({ reAlloc: true, vmmDefragment: false, setAccessPerChunk: true });
    expect(resolveOptions(BUILTIN_POLICIES.find((p) => p.name === "vms")!, { crossStream: 0 })).toMatchObject({ crossStream: false });
    expect(() => resolveOptions(BUILTIN_POLICIES.find((p) => p.name === "vms")!, { crossStream: 2 })).toThrow("vms.crossStream accepts true or false (or 1/0), not 2");
  });

  it("several policies: a value goes to each that has the knob; one that none has is an error", () => {
    const m = optionsForPolicies(["caching", "gmlake", "vms"], { fragLimit: "64MiB", roundupPower2Divisions: null });
    expect(m.get("gmlake")).toEqual({ fragLimit: 64 * MiB, roundupPower2Divisions: null });
    expect(m.get("caching")).toEqual({ roundupPower2Divisions: null });
    expect(() => optionsForPolicies(["caching", "vms"], { fragLimt: "512MiB" })).toThrow(/^no policy of caching, vms has a knob fragLimt; their knobs: /);
    expect(() => optionsForPolicies(["caching", "gmlake"], { fragLimit: -1 })).toThrow(/^gmlake\.fragLimit accepts/);
  });

  it("property: any value of any knob of any policy is refused with one line or works (never another error)", () => {
    fc.assert(
      fc.property(fc.constantFrom(...everyKnob), anyValue, ({ policy, name, knob }, v) => {
        const valid = (() => {
          try {
            checkKnob(policy, name, knob, v);
            return true;
          } catch {
            return false;
          }
        })();
        const r = tryKnob(policy, name, v);
        if (!valid) expect(r).toBe("refused");
      }),
      { numRuns: 600, seed: 10 },
    );
  }, 120_000);

  it("every knob at its bounds and just outside them", () => {
    for (const { policy, name, knob } of everyKnob) {
      if (knob.type !== "bytes" && knob.type !== "integer" && knob.type !== "number") continue;
      const lo = knob.min ?? knob.greaterThan ?? 0;
      const hi = knob.max ?? 2 ** 50;
      for (const v of [lo, hi, hi + 1, lo - 1, (knob.multipleOf ?? 1) * 3]) tryKnob(policy, name, v);
    }
  }, 120_000);
});
