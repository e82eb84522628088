import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { checkKnob, parseKnobText, PYTORCH_KNOBS, splitKnobAssignment, StitchError } from "../src/index.js";

/** Knob text (GMLAKE_KNOBS): the one reader the live library and the CLI's --set go through. */
describe("parseKnobText", () => {
  it("reads name=value lists, trimming, skipping empty parts, the last of a name winning", () => {
    expect(parseKnobText(" maxHandleBytes=1048576, crossStream=false,,donorOrder = size ")).toEqual({ maxHandleBytes: "1048576", crossStream: "false", donorOrder: "size" });
    expect(parseKnobText("a=1,a=2")).toEqual({ a: "2" });
    expect(parseKnobText("a=")).toEqual({ a: "" });
    expect(parseKnobText("a=x=y")).toEqual({ a: "x=y" });
    expect(parseKnobText("")).toEqual({});
    expect(parseKnobText("  ")).toEqual({});
    expect(Object.keys(parseKnobText("__proto__=1"))).toEqual(["__proto__"]);
  });

  it("keeps a list's commas in its value: divisions, as checkKnob takes them", () => {
    const divisions = `[${Array.from({ length: 16 }, (_, i) => i % 3).join(", ")}]`;
    const knobs = parseKnobText(`roundupPower2Divisions=${divisions},maxSplitSize=512MiB`);
    expect(knobs).toEqual({ roundupPower2Divisions: divisions, maxSplitSize: "512MiB" });
    expect(checkKnob("caching", "roundupPower2Divisions", PYTORCH_KNOBS.roundupPower2Divisions, knobs.roundupPower2Divisions)).toHaveLength(16);
  });

  it("reads a JSON object as it is", () => {
    expect(parseKnobText('{"a":1,"b":[1,2],"c":true}')).toEqual({ a: 1, b: [1, 2], c: true });
  });

  it.each([
    ["novalue", "GMLAKE_KNOBS: expected name=value, got 'novalue'"],
    ["a=1, =2", "GMLAKE_KNOBS: expected name=value, got '=2'"],
    ["{not json", "GMLAKE_KNOBS: not JSON ("],
    ["{}x", "GMLAKE_KNOBS: not JSON ("],
  ])("refuses %j in one line naming where it came from", (text, says) => {
    let err: unknown;
    try {
      parseKnobText(text, "GMLAKE_KNOBS");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(StitchError);
    expect((err as StitchError).code).toBe("BAD_OPTION");
    expect((err as Error).message).toContain(says);
    expect((err as Error).message).not.toContain("\n");
  });

  it("gives back what a name=value list of plain names and values says", () => {
    const word = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_]{0,8}$/);
    const value = fc.stringMatching(/^[A-Za-z0-9_.\-]{0,8}$/);
    fc.assert(
      fc.property(fc.dictionary(word, value, { maxKeys: 6 }), (knobs) => {
        const text = Object.entries(knobs).map(([k, v]) => `${k}=${v}`).join(",");
        expect({ ...parseKnobText(text) }).toEqual(knobs);
      }),
    );
  });
});

describe("splitKnobAssignment", () => {
  it("splits at the first '=', or says there is no name", () => {
    expect(splitKnobAssignment(" fragLimit = 512MiB ")).toEqual(["fragLimit", "512MiB"]);
    expect(splitKnobAssignment("justakey")).toBeNull();
    expect(splitKnobAssignment("=1")).toBeNull();
  });
});
