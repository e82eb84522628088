import { describe, expect, it } from "vitest";

import { FAULT_CODES, HostDriver, SimDriver, VmmError, withCapacity, withFaults, type VmmDriver } from "../src/index.js";
import { codeOf } from "./helpers.js";

const MiB = 1024 * 1024;
const g = 2 * MiB;

describe("withCapacity", () => {
  it("refuses memCreate past the capacity with CUDA_ERROR_OUT_OF_MEMORY, counting live bytes", () => {
    const sim = new SimDriver();
    const d = withCapacity(sim, 3 * g);
    const a = d.memCreate(g);
    const b = d.memCreate(g);
    expect(d.liveBytes).toBe(2 * g);
    expect(codeOf(() => d.memCreate(2 * g))).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    expect(d.rejected).toBe(1);
    expect(sim.stats().calls.memCreate).toBe(2); // the refused call never reached the driver
    expect(d.memGetInfo()).toEqual({ freeBytes: g, totalBytes: 3 * g });
    d.memRelease(a);
    const c = d.memCreate(2 * g);
    expect(d.liveBytes).toBe(3 * g);
    expect(d.peakBytes).toBe(3 * g);
    d.memRelease(b);
    d.memRelease(c);
    expect(d.liveBytes).toBe(0);
    expect(sim.leaks().liveBytes).toBe(0);
  });

  it("counts plain allocations too, and is still a VmmDriver", () => {
    const d: VmmDriver = withCapacity(new SimDriver(), 4 * g);
    const p = d.memAlloc(3 * g);
    expect(codeOf(() => d.memAlloc(2 * g))).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    d.memFree(p);
    d.memFree(d.memAlloc(4 * g));
    expect(d.name).toBe("sim");
    expect(d.stats().calls.memAlloc).toBe(2);
  });

  it("wraps the host driver the same way", () => {
    const host = new HostDriver();
    const d = withCapacity(host, g);
    const h = d.memCreate(g);
    expect(codeOf(() => d.memCreate(g))).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    d.memRelease(h);
    expect(host.leaks().liveBytes).toBe(0);
  });
});

describe("withFaults", () => {
  it("fails the chosen call by name and ordinal, with the driver's error, and has no effect", () => {
    const sim = new SimDriver();
    const d = withFaults(sim, { at: [{ call: "memCreate", ordinal: 2 }, { call: "memMap", ordinal: 1, code: "CUDA_ERROR_INVALID_VALUE" }] });
    const a = d.memCreate(g);
    expect(codeOf(() => d.memCreate(g))).toBe(FAULT_CODES.memCreate);
    expect(FAULT_CODES.memCreate).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    const b = d.memCreate(g);
    const va = d.memAddressReserve(g);
    expect(codeOf(() => d.memMap(va, g, 0, a))).toBe("CUDA_ERROR_INVALID_VALUE");
    d.memMap(va, g, 0, a); // the failed map left nothing mapped
    expect(d.injected).toEqual([
      { call: "memCreate", ordinal: 2, code: "CUDA_ERROR_OUT_OF_MEMORY" },
      { call: "memMap", ordinal: 1, code: "CUDA_ERROR_INVALID_VALUE" },
    ]);
    expect(d.ordinals.memCreate).toBe(3);
    expect(sim.stats().calls.memCreate).toBe(2);
    d.memUnmap(va, g);
    d.memAddressFree(va, g);
    d.memRelease(a);
    d.memRelease(b);
    expect(sim.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
  });

  it("fails at random, reproducibly for a seed", () => {
    const run = (seed: number) => {
      const d = withFaults(new SimDriver(), { random: { seed, probability: 0.3 } });
      const outcome: string[] = [];
      for (let i = 0; i < 200; i++) {
        try {
          d.memRelease(d.memCreate(g));
          outcome.push("ok");
        } catch (e) {
          outcome.push((e as VmmError).code);
        }
      }
      return { outcome, injected: d.injected.length };
    };
    const a = run(42);
    expect(run(42)).toEqual(a);
    expect(run(7).outcome).not.toEqual(a.outcome);
    expect(a.injected).toBeGreaterThan(30);
    expect(a.injected).toBeLessThan(90);
    expect(a.outcome.filter((x) => x !== "ok").every((x) => x === "CUDA_ERROR_OUT_OF_MEMORY")).toBe(true);
  });

  it("never fails at probability 0, always at 1, only for the eligible calls", () => {
    const never = withFaults(new SimDriver(), { random: { seed: 1, probability: 0 } });
    for (let i = 0; i < 50; i++) never.memRelease(never.memCreate(g));
    const always = withFaults(new SimDriver(), { random: { seed: 1, probability: 1, calls: ["memAddressReserve"] } });
    expect(codeOf(() => always.memAddressReserve(g))).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    always.memRelease(always.memCreate(g)); // not eligible
  });

  it("rejects a bad plan with a clear error", () => {
    expect(codeOf(() => withFaults(new SimDriver(), { at: [{ call: "memCreate", ordinal: 0 }] }))).toBe("CUDA_ERROR_INVALID_VALUE");
    expect(codeOf(() => withFaults(new SimDriver(), { random: { seed: 1, probability: 2 } }))).toBe("CUDA_ERROR_INVALID_VALUE");
  });

  it("stacks with withCapacity", () => {
    const d = withFaults(withCapacity(new SimDriver(), 2 * g), { at: [{ call: "memCreate", ordinal: 1 }] });
    expect(codeOf(() => d.memCreate(g))).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    const h = d.memCreate(2 * g);
    expect(codeOf(() => d.memCreate(g))).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    d.memRelease(h);
  });
});

describe("streams and events through the adaptors", () => {
  it("withCapacity passes them through to the driver, which counts them", () => {
    const sim = new SimDriver();
    const d = withCapacity(sim, g);
    const e = d.eventCreate();
    d.eventRecord(e, 7);
    expect(d.eventQuery(e)).toBe(true);
    d.streamWaitEvent(0, e);
    d.eventSynchronize(e);
    d.streamSynchronize(7);
    d.ctxSynchronize();
    d.eventDestroy(e);
    const s = sim.stats();
    expect(s.calls.eventCreate + s.calls.eventRecord + s.calls.eventQuery + s.calls.eventDestroy).toBe(4);
    expect(s.calls.streamWaitEvent + s.calls.eventSynchronize + s.calls.streamSynchronize + s.calls.ctxSynchronize).toBe(4);
    expect(d.stats()).toEqual(s);
    expect(sim.events.liveEvents).toBe(0);
  });

  it("withFaults fails a chosen stream or event call with the driver's error, with no effect", () => {
    const sim = new SimDriver();
    const d = withFaults(sim, {
      at: [
        { call: "eventCreate", ordinal: 1 },
        { call: "eventRecord", ordinal: 1 },
        { call: "eventSynchronize", ordinal: 1 },
        { call: "streamSynchronize", ordinal: 1 },
        { call: "ctxSynchronize", ordinal: 1, code: "CUDA_ERROR_ILLEGAL_ADDRESS" },
      ],
    });
    expect(codeOf(() => d.eventCreate())).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    expect(sim.events.liveEvents).toBe(0); // the failed create made nothing
    const e = d.eventCreate();
    expect(codeOf(() => d.eventRecord(e, 0))).toBe("CUDA_ERROR_INVALID_HANDLE");
    d.eventRecord(e, 0);
    expect(codeOf(() => d.eventSynchronize(e))).toBe("CUDA_ERROR_LAUNCH_FAILED");
    expect(codeOf(() => d.streamSynchronize(0))).toBe("CUDA_ERROR_LAUNCH_FAILED");
    expect(codeOf(() => d.ctxSynchronize())).toBe("CUDA_ERROR_ILLEGAL_ADDRESS");
    d.eventDestroy(e);
    expect(d.injected.map((f) => f.call)).toEqual(["eventCreate", "eventRecord", "eventSynchronize", "streamSynchronize", "ctxSynchronize"]);
    expect(sim.stats().calls.eventRecord).toBe(1); // the failed call never reached the driver
    expect(FAULT_CODES.eventQuery).toBe("CUDA_ERROR_LAUNCH_FAILED");
  });

  it("the sim charges each stream and event call its modelled cost", () => {
    const sim = new SimDriver({ costs: { eventRecord: 5 } });
    const e = sim.eventCreate();
    sim.eventRecord(e, 0);
    sim.eventRecord(e, 1);
    sim.ctxSynchronize();
    sim.eventDestroy(e);
    const t = sim.stats().timeUs;
    expect(t.eventRecord).toBe(10);
    expect(t.eventCreate).toBe(sim.costs.eventCreate);
    expect(t.ctxSynchronize).toBe(sim.costs.ctxSynchronize);
    expect(sim.stats().totalTimeUs).toBeCloseTo(10 + sim.costs.eventCreate + sim.costs.ctxSynchronize + sim.costs.eventDestroy);
  });
});
