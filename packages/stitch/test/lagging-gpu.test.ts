import { describe, expect, it } from "vitest";
import { SimDriver } from "@gmlake/vmm";
import { LaggingGpu } from "../src/index.js";

describe("LaggingGpu: a GPU running behind the CPU on the caller's clock", () => {
  it("an event completes once the GPU got past its record time; a sync stalls for what is queued", () => {
    const g = new LaggingGpu(new SimDriver(), 1000);
    const e = g.eventCreate();
    g.nowUs = 5000;
    g.eventRecord(e, 0);
    g.nowUs = 5999;
    expect(g.eventQuery(e)).toBe(false);
    g.nowUs = 6000;
    expect(g.eventQuery(e)).toBe(true);
    g.nowUs = 6400;
    g.ctxSynchronize(); // 1 ms queued: the CPU waits for all of it
    expect(g.ctxSyncStallUs).toBe(1000);
    g.nowUs = 6700; // only 300 us queued since the GPU caught up
    g.ctxSynchronize();
    expect(g.ctxSyncStallUs).toBe(1300);
    const f = g.eventCreate();
    g.eventRecord(f, 1);
    expect(g.eventQuery(f)).toBe(true); // nothing queued since the sync: done at once
    g.nowUs = 6800;
    g.eventRecord(f, 1);
    expect(g.eventQuery(f)).toBe(false); // 100 us queued since the sync
    g.eventSynchronize(f);
    expect(g.eventSyncStallUs).toBe(100);
    g.nowUs = 9000;
    const h = g.eventCreate();
    g.eventRecord(h, 1);
    g.eventSynchronize(h); // the GPU is at 8000: 1 ms to wait
    expect(g.eventSyncStallUs).toBe(1100);
    expect(g.stallUs).toBe(2400);
    expect(g.eventQuery(h)).toBe(true);
    for (const x of [e, f, h]) g.eventDestroy(x);
    expect(() => g.eventQuery(e)).toThrow(/not a live event/);
  });

  it("lag 0 is the sim's own behaviour: every event done at once, no stall", () => {
    const g = new LaggingGpu(new SimDriver(), 0);
    const e = g.eventCreate();
    g.nowUs = 123;
    g.eventRecord(e, 0);
    expect(g.eventQuery(e)).toBe(true);
    g.ctxSynchronize();
    expect(g.stallUs).toBe(0);
    g.eventDestroy(e);
  });
});
