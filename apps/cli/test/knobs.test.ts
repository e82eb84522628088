import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { checkKnob, listPolicies, type Knob } from "@gmlake/stitch";
import { cli, gmlakeInProcess, json } from "./run-cli.js";

// Every knob of every policy through `replay --set` and `compare --set`: whatever the value
// (wrong type, zero, negative, huge, an unknown name), the CLI ends in a result or in bad
// input (exit 2, one line naming the knob): never an internal error (exit 1).
const everyKnob = listPolicies().flatMap((p) => Object.entries(p.knobs as Record<string, Knob>).map(([name, knob]) => ({ policy: p.name, name, knob })));

const valueText = fc.oneof(
  fc.constantFrom("abc", "", "0", "-1", "-4096", "0.5", "1e300", "9007199254740993", "1152921504606846976", "NaN", "Infinity", "true", "false", "null", "[]", "{}", "512MiB", "3MiB", "1.5GB", "-5GiB", "1e400", "[1,2]", "hole", "size", "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]"),
  fc.integer({ min: -(2 ** 31), max: 2 ** 31 }).map(String),
  fc.integer({ min: 0, max: 52 }).map((e) => String(2 ** e)),
  fc.string({ maxLength: 6 }),
);
const knobName = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom(...everyKnob) },
  { weight: 1, arbitrary: fc.constantFrom("fragLimt", "nope", "__proto__", "constructor", "").map((name) => ({ policy: "gmlake", name, knob: null as Knob | null })) },
);

function acceptable(policy: string, name: string, knob: Knob | null, text: string): boolean {
  if (knob === null) return false;
  try {
    checkKnob(policy, name, knob, text);
    return true;
  } catch {
    return false;
  }
}

describe("--set: every knob of every policy", () => {
  it("property: replay and compare give a result or one line of bad input, in process", async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("replay", "compare"), knobName, valueText, async (command, { policy, name, knob }, text) => {
        const set = `${name}=${text}`;
        const argv = command === "replay" ? ["replay", "--policy", policy, "--set", set, "--json"] : ["compare", "--policies", `caching,${policy}`, "--set", set, "--json"];
        const seen: { message?: string } = {};
        const outcome = await gmlakeInProcess(argv, seen);
        if (outcome === "bad-input") {
          expect(seen.message).not.toContain("\n");
          if (name !== "") expect(seen.message).toContain(name);
        }
        // a value the knob refuses is always bad input; one it takes runs (the device may refuse the granularity)
        if (!acceptable(policy, name, knob, text.trim())) expect(outcome).toBe("bad-input");
      }),
      { numRuns: Number(process.env.FUZZ_RUNS ?? 250), seed: 1010 },
    );
  }, 300_000);

  it.each([
    ["replay", "--policy", "gmlake", "--set", "arenaBytes=1"],
    ["replay", "--policy", "vms", "--set", "arenaBytes=abc"],
    ["replay", "--policy", "expandable", "--set", "smallPageSize=0"],
    ["replay", "--policy", "gmlake", "--set", "chunkSize=3MiB"],
    ["compare", "--set", "fragLimt=512MiB"],
    ["compare", "--policies", "caching,vms", "--set", "handlesPerRequest=-1"],
  ])("%s %s %s %s %s: exit 2 with one line", (...args) => {
    const r = cli(args);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^gmlake: .*(arenaBytes|smallPageSize|chunkSize|fragLimt|handlesPerRequest)/);
  });

  it("gmlake's on/off knobs are booleans that take the original's 1/0 too: the same replay either way", () => {
    const run = (...set: string[]) => {
      const j = json<{ peakReservedBytes: number; driverCalls: Record<string, number>; counters: Record<string, number> }>(
        cli(["replay", "--policy", "gmlake", "--set", "fragLimit=8MiB", ...set.flatMap((s) => ["--set", s]), "--json"]),
      );
      return [j.peakReservedBytes, j.driverCalls, j.counters];
    };
    const on = run("reAlloc=true", "setAccessPerChunk=false");
    expect(run("reAlloc=1", "setAccessPerChunk=0")).toEqual(on);
    expect(run("reAlloc=false", "setAccessPerChunk=false")).not.toEqual(on);
    expect(run("vmmDefragment=0")).toEqual(run("vmmDefragment=false"));
    const bad = cli(["replay", "--policy", "gmlake", "--set", "reAlloc=2"]);
    expect([bad.code, bad.stderr.trimEnd()]).toEqual([2, "gmlake: gmlake.reAlloc accepts true or false (or 1/0), not '2'"]);
  });

  it("a size with a unit is a byte count", () => {
    const j = json<{ rows: { policy: string }[] }>(cli(["compare", "--policies", "caching,gmlake", "--set", "fragLimit=8MiB", "--set", "maxSplitSize=64MiB", "--json"]));
    expect(j.rows.map((r) => r.policy)).toEqual(["caching", "gmlake"]);
  });

  it("gmlake policies lists every knob with its default", () => {
    const j = json<{ policies: { name: string; knobs: { name: string; shown: string; accepts: string }[] }[] }>(cli(["policies", "--json"]));
    expect(j.policies.map((p) => p.name)).toEqual(expect.arrayContaining(["caching", "expandable", "gmlake", "vms"]));
    const frag = j.policies.find((p) => p.name === "gmlake")!.knobs.find((k) => k.name === "fragLimit")!;
    expect(frag).toMatchObject({ shown: "512MiB" });
    expect(frag.accepts).toMatch(/byte count/);
    const onOff = j.policies.find((p) => p.name === "gmlake")!.knobs.filter((k) => ["vmmDefragment", "reAlloc", "setAccessPerChunk"].includes(k.name));
    expect(onOff.map((k) => [k.name, k.shown, k.accepts])).toEqual([
      ["vmmDefragment", "true", "true or false (or 1/0)"],
      ["reAlloc", "false", "true or false (or 1/0)"],
      ["setAccessPerChunk", "true", "true or false (or 1/0)"],
    ]);
    const text = cli(["policies", "vms"]);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/--set donorOrder=hole\n(.*\n)+?\s+accepts one of hole, size/); // the description wrapped to the terminal
  });
});
