import { readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readSnapshot } from "@gmlake/torch-trace";
import { privatePoolTags, replay } from "@gmlake/stitch";
import { SimDriver } from "@gmlake/vmm";
import { cli, haveTraces, json, TRACES } from "./run-cli.js";

// One name for one quantity: peakRequestedBytes (requested bytes of live blocks) is a
// property of the trace, so `inspect --json` (from the trace's events), `replay --json`
// (one policy's replay) and the library's replay() (another policy) must agree on it.
const traces = haveTraces
  ? [
      ...readdirSync(TRACES).filter((f) => f.endsWith(".pickle.gz")).map((f) => join(TRACES, f)),
      ...readdirSync(join(TRACES, "small")).map((f) => join(TRACES, "small", f)),
    ]
  : [];

describe("peakRequestedBytes: one figure in inspect, replay and the library", () => {
  it.skipIf(!haveTraces).each(traces.map((p) => [p.slice(TRACES.length + 1), p]))("%s", async (_name, path) => {
    const ins = json<Record<string, number>>(cli(["inspect", path, "--json"]));
    const rep = json<Record<string, number>>(cli(["replay", path, "--policy", "vms", "--json"]));
    const snap = await readSnapshot(path);
    const lib = replay(snap.events, {
      policy: "expandable",
      driver: new SimDriver(),
      settings: snap.allocatorSettings,
      recorder: null,
      pools: privatePoolTags(snap.events, snap.segments),
    });
    expect(ins.peakRequestedBytes).toBeGreaterThan(0);
    expect(rep.peakRequestedBytes).toBe(ins.peakRequestedBytes);
    expect(lib.peakRequestedBytes).toBe(ins.peakRequestedBytes);
    // one utilization everywhere: requested / reserved
    expect(rep.utilization).toBe(rep.peakRequestedBytes / rep.peakReservedBytes);
    expect(lib.utilization).toBe(lib.peakRequestedBytes / lib.peakReservedBytes);
    expect(ins.recordedUtilization).toBe(ins.peakRequestedBytes / ins.recordedPeakReservedBytes);
  }, 240_000);
});
