import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { closest, editDistance } from "../src/suggest.js";
import { cli, json } from "./run-cli.js";

/** One line on stderr, exit 2, matching `message`. */
function refused(args: string[], message: RegExp): void {
  const r = cli(args);
  expect(r.code, `${args.join(" ")}: ${r.stdout}`).toBe(2);
  expect(r.stderr.trimEnd().split("\n"), args.join(" ")).toHaveLength(1);
  expect(r.stderr.trimEnd()).toMatch(message);
}

describe("a misspelling gets one line with a suggestion", () => {
  it("an unknown option: the nearest of the command's own", () => {
    refused(["compare", "--capcity", "40GiB"], /^gmlake: unknown option --capcity for compare \(did you mean --capacity\?\)$/);
    refused(["replay", "--polcy", "vms"], /unknown option --polcy for replay \(did you mean --policy\?\)/);
    refused(["compare", "--capcity=40GiB"], /unknown option --capcity for compare \(did you mean --capacity\?\)/);
    refused(["inspect", "--zzzzzz"], /^gmlake: unknown option --zzzzzz for inspect \(see 'gmlake inspect --help'\)$/);
  });

  it("an unknown policy, command, knob or read limit", () => {
    refused(["replay", "--policy", "vmz"], /^gmlake: unknown policy 'vmz': did you mean vms\? \(policies: caching, /);
    refused(["compare", "--policies", "caching,expandible"], /unknown policy 'expandible': did you mean expandable\?/);
    refused(["compre"], /^gmlake: unknown command 'compre' \(did you mean compare\?\)$/);
    refused(["compare", "--set", "fragLimt=512MiB"], /has a knob fragLimt \(did you mean fragLimit\?\)/);
    refused(["inspect", "--limit", "maxStakDepth=4e6"], /unknown read limit 'maxStakDepth' \(did you mean maxStackDepth\?\)/);
  });

  it("nothing near: no guess", () => {
    expect(closest("zzzz", ["caching", "vms"])).toBeUndefined();
    expect(closest("-x", ["-c", "-d", "--capacity"])).toBeUndefined(); // too short to guess from
    expect(closest("cach", ["caching", "vms"])).toBe("caching");
    expect(editDistance("capcity", "capacity")).toBe(1);
    expect(editDistance("vsm", "vms")).toBe(1); // a swap is one edit
  });
});

describe("values as the help promises them", () => {
  it("--capacity -1 and a missing value: one line saying what is wrong", () => {
    refused(["compare", "--capacity", "-1"], /^gmlake: invalid --capacity '-1': must be a positive size$/);
    refused(["replay", "--reserve", "-1GiB"], /invalid --reserve '-1GiB': must be a non-negative size/);
    refused(["compare", "--capacity"], /^gmlake: --capacity needs a value/);
    refused(["compare", "--capacity", "--json"], /--capacity needs a value, not the option '--json'/);
  });

  it("--set maxSplitSize=-1 (the help: -1 = unlimited) replays as no limit", () => {
    const unlimited = json<{ peakReservedBytes: number }>(cli(["replay", "--set", "maxSplitSize=-1", "--json"]));
    const dflt = json<{ peakReservedBytes: number }>(cli(["replay", "--json"]));
    expect(unlimited.peakReservedBytes).toBe(dflt.peakReservedBytes); // the trace records no max_split_size: unlimited either way
    refused(["replay", "--set", "maxSplitSize=-2"], /caching\.maxSplitSize accepts a byte count from -1/);
  });

  it("one unit grammar for every size: --limit takes 1MiB and 1MB, refuses a bare 1M as --capacity does", () => {
    expect(cli(["inspect", "--limit", "maxDecodedBytes=64MiB"]).code).toBe(0);
    expect(cli(["inspect", "--limit", "maxDecodedBytes=64MB"]).code).toBe(0);
    refused(["inspect", "--limit", "maxDecodedBytes=1M"], /ambiguous --limit maxDecodedBytes '1M': write 1MiB .* or 1MB/);
    refused(["compare", "--capacity", "80G"], /ambiguous --capacity '80G'/);
    // as knob sizes take it: 8e10 bytes is 80GB
    const e = json<{ budget: { capacityBytes: number } }>(cli(["compare", "--no-fit", "--json", "--capacity", "8e10"]));
    expect(e.budget.capacityBytes).toBe(80e9);
    refused(["inspect", "--limit", "maxStackDepth=1MiB"], /maxStackDepth counts, and needs a positive integer/);
    expect(cli(["inspect", "--limit", "maxStackDepth=4e6"]).code).toBe(0);
    const env = cli(["inspect"], { env: { GMLAKE_READ_LIMITS: "maxDecodedBytes=1M" } });
    expect(env.code).toBe(2);
    expect(env.stderr).toMatch(/GMLAKE_READ_LIMITS maxDecodedBytes '1M'/);
    // a limit that binds still binds: 1 KiB of decoded strings is too little for any trace
    expect(cli(["inspect", "--limit", "maxInputBytes=1KiB"]).code).toBe(2);
  });
});

describe("an option given twice is refused, not silently the last", () => {
  it("--capacity, --policy, the same --set knob, the same --limit", () => {
    refused(["compare", "--capacity", "40GiB", "--capacity", "80GiB"], /^gmlake: --capacity given twice \('40GiB', then '80GiB'\): give it once$/);
    refused(["replay", "-p", "vms", "--policy", "caching"], /--policy given twice \('vms', then 'caching'\)/);
    refused(["compare", "--set", "maxSplitSize=1MiB", "--set", "maxSplitSize=2MiB"], /--set maxSplitSize given twice \('1MiB', then '2MiB'\)/);
    refused(["inspect", "--limit", "maxStackDepth=4e6", "--limit", "maxStackDepth=5e6"], /--limit maxStackDepth given twice/);
  });

  it("the same value twice, and different knobs, are fine", () => {
    expect(cli(["compare", "--no-fit", "--capacity", "40GiB", "--capacity", "40GiB"]).code).toBe(0);
    expect(cli(["replay", "--policy", "vms", "--set", "handlesPerRequest=2", "--set", "handlesPerRequest=2"]).code).toBe(0);
  });
});

describe("a knob's declaration is checked when its module registers it", () => {
  it("an unknown knob type is bad input naming the knob, not a knob that refuses every value", () => {
    const dir = mkdtempSync(join(tmpdir(), "gmlake-knob-"));
    const stitch = new URL("../../../packages/stitch/dist/policy-kit.js", import.meta.url).href;
    writeFileSync(
      join(dir, "bad-knob.mjs"),
      `import { registerPolicy } from ${JSON.stringify(stitch)};
export default registerPolicy({ name: "bad-knob", description: "d", knobs: { size: { type: "size", default: 1, description: "d" } },
  create: () => ({ malloc: () => null, free() {}, emptyCache() {}, teardown() {} }) });\n`,
    );
    const r = cli(["replay", "--policy-module", join(dir, "bad-knob.mjs")]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/knob size has type "size", not one of bytes, integer, number, boolean, choice, divisions/);
  });
});
