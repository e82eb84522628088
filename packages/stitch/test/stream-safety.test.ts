import { describe, expect, it } from "vitest";
import { DriverAdaptor, SimDriver, withCapacity, type EventHandle, type VmmDriver } from "@gmlake/vmm";
import { computeStats } from "@gmlake/trace";
import { readSnapshot } from "@gmlake/torch-trace";
import { Allocator, BUILTIN_POLICIES, LaggingGpu, replay, type Block, type Policy, type PolicyContext } from "../src/index.js";
import { MiB, tracePath } from "./helpers.js";

/**
 * Stream safety, kept by the engine for every policy: reuse across streams only after the
 * new stream waits on the old one, frees of blocks used on other streams deferred until
 * their events complete, and no unmap or free before the device is synchronized.
 */

/** Logs the calls that matter here, in order; events complete only when `complete` says so. */
class StreamLog extends DriverAdaptor {
  readonly log: string[] = [];
  complete = true;
  override memUnmap(a: number, s: number): void {
    this.log.push("memUnmap");
    super.memUnmap(a, s);
  }
  override memFree(a: number): void {
    this.log.push("memFree");
    super.memFree(a);
  }
  override ctxSynchronize(): void {
    this.log.push("ctxSynchronize");
    super.ctxSynchronize();
  }
  override eventRecord(e: EventHandle, stream: number): void {
    this.log.push(`eventRecord(${stream})`);
    super.eventRecord(e, stream);
  }
  override streamWaitEvent(stream: number, e: EventHandle): void {
    this.log.push(`streamWaitEvent(${stream})`);
    super.streamWaitEvent(stream, e);
  }
  queries = 0;
  override eventQuery(e: EventHandle): boolean {
    this.queries++;
    return this.complete && super.eventQuery(e);
  }
  override eventSynchronize(e: EventHandle): void {
    this.log.push("eventSynchronize");
    this.complete = true;
    super.eventSynchronize(e);
  }
}

describe("stream safety", () => {
  it.each(BUILTIN_POLICIES.map((p) => p.name))("%s: the device is synchronized once before the first unmap or free of a call", (name) => {
    const d = new StreamLog(new SimDriver());
    const a = new Allocator(name, d, { checkInvariants: 1 });
    const blocks: Block[] = [];
    for (const size of [3 * MiB, 30 * MiB, 700 * 1024, 90 * MiB]) blocks.push(a.malloc(size, 0));
    for (const b of blocks) a.free(b);
    d.log.length = 0;
    a.emptyCache();
    const first = d.log.findIndex((c) => c === "memUnmap" || c === "memFree");
    expect(first, d.log.join(" ")).toBeGreaterThan(0);
    expect(d.log.slice(0, first)).toEqual(["ctxSynchronize"]);
    expect(d.log.filter((c) => c === "ctxSynchronize")).toHaveLength(1); // once per call
    expect(a.stats.numSyncs).toBeGreaterThanOrEqual(1);
    expect(a.stats.toTorch().num_sync_all_streams).toBe(a.stats.numSyncs);
    a.close();
  });

  it("a block of another stream is served only after the new stream waits on the old", () => {
    const d = new StreamLog(new SimDriver());
    const a = new Allocator("vms", d, { checkInvariants: 1 });
    expect(a.crossStreamReuse).toBe(true);
    a.free(a.malloc(64 * MiB, 1));
    d.log.length = 0;
    const c = a.malloc(32 * MiB, 2);
    expect(d.log).toEqual(["eventRecord(1)", "streamWaitEvent(2)"]);
    expect(a.stats.numCrossStreamReuses).toBe(1);
    a.close([c]);
    expect(new Allocator("vms", new SimDriver(), { options: { crossStream: false } }).crossStreamReuse).toBe(false);
  });

  it("a block served to another stream goes back to its own stream only once the work queued on the other is done", () => {
    const d = new StreamLog(new SimDriver());
    const a = new Allocator("vms", d, { checkInvariants: 1 });
    a.free(a.malloc(64 * MiB, 1));
    const c = a.malloc(32 * MiB, 2); // stream 1's block, now used by kernels on stream 2
    expect(c.stream).toBe(1); // it belongs to stream 1's pool: reused there without a wait
    d.log.length = 0;
    d.complete = false; // stream 2's kernels still run
    a.free(c);
    expect(d.log).toEqual(["eventRecord(2)"]);
    expect(a.deferredFrees).toBe(1);
    expect(a.stats.activeBytes).toBe(c.size); // not back on stream 1 yet
    d.complete = true;
    const again = a.malloc(32 * MiB, 1); // the poll completes it: stream 1 reuses it in stream order
    expect(a.deferredFrees).toBe(0);
    expect(again.addr).toBe(c.addr);
    a.free(again);
    expect(a.stats.numDeferredFrees).toBe(1);
    // events complete at once (host, sim): freed at once, nothing deferred
    const e = a.malloc(32 * MiB, 2);
    a.free(e);
    expect(a.deferredFrees).toBe(0);
    expect(a.stats.numDeferredFrees).toBe(1);
    expect(a.close().liveBlocks).toBe(0);
  });

  it("the context's waitForStream: for a policy that declares cross-stream reuse, counted; refused otherwise", () => {
    const views: PolicyContext[] = [];
    const spy = (p: Policy): Policy => ({ ...p, name: `${p.name}-view`, create: (ctx, o) => (views.push(ctx), p.create(ctx, o)) });
    const d = new StreamLog(new SimDriver());
    const vms = new Allocator(spy(BUILTIN_POLICIES.find((p) => p.name === "vms")!), d);
    views[0]!.waitForStream(3, 4);
    views[0]!.waitForStream(4, 4); // the same stream: nothing to wait for
    expect(d.log).toEqual(["eventRecord(3)", "streamWaitEvent(4)"]);
    expect(vms.stats.numCrossStreamReuses).toBe(1);
    // marks: only the engine's own are accepted (a made-up one cannot skip the device sync)
    const m = views[0]!.markStream(3);
    expect(views[0]!.markDone(m)).toBe(true);
    for (const bad of [m + 1, 0.5, -1, Number.NaN]) expect(() => views[0]!.markDone(bad)).toThrow(/Expected a mark from markStream/);
    vms.close();
    const caching = new Allocator(spy(BUILTIN_POLICIES.find((p) => p.name === "caching")!), new SimDriver());
    expect(() => views[1]!.waitForStream(3, 4)).toThrow(/does not declare streams\.crossStreamReuse/);
    caching.close();
  });

  it("a policy that serves another stream's block without declaring it is refused", () => {
    const caching = BUILTIN_POLICIES.find((p) => p.name === "caching")!;
    const sneaky: Policy = {
      ...caching,
      name: "sneaky",
      create: (ctx, o) => {
        const i = caching.create(ctx, o);
        return { ...i, malloc: (size, stream) => i.malloc(size, stream === 2 ? 1 : stream), free: (b) => i.free(b), emptyCache: () => i.emptyCache(), teardown: () => i.teardown() };
      },
    };
    const a = new Allocator(sneaky, new SimDriver());
    expect(() => a.malloc(MiB, 2)).toThrow(/policy sneaky \(not a built-in\) served a block of stream 1 to a malloc on stream 2 without declaring streams\.crossStreamReuse/);
  });

  it("recordStream: the free waits for the other stream's event; malloc polls it; out of memory waits for it", () => {
    const d = new StreamLog(withCapacity(new SimDriver(), 64 * MiB) as unknown as VmmDriver);
    const a = new Allocator("caching", d, { checkInvariants: 1 });
    const b = a.malloc(40 * MiB, 0);
    a.recordStream(b, 7);
    a.recordStream(b, 7);
    a.recordStream(b, 0); // its own stream: nothing to wait for
    d.complete = false; // the kernels on stream 7 are still running
    a.free(b);
    expect(d.log).toContain("eventRecord(7)");
    expect(a.deferredFrees).toBe(1);
    expect(a.stats.activeBytes).toBe(40 * MiB); // still in use: not reusable
    const small = a.malloc(MiB, 0); // polls: not complete yet
    expect(a.deferredFrees).toBe(1);
    // 40 MiB more does not fit beside it: the engine waits for the event, completes the free, retries
    const again = a.malloc(40 * MiB, 0);
    expect(d.log).toContain("eventSynchronize");
    expect(a.deferredFrees).toBe(0);
    expect(a.stats.numDeferredFrees).toBe(1);
    a.free(again);
    a.free(small);
    // completed by a poll once the event is done
    const c = a.malloc(20 * MiB, 0);
    a.recordStream(c, 9);
    d.complete = false;
    a.free(c);
    d.complete = true;
    a.free(a.malloc(512, 0));
    expect(a.deferredFrees).toBe(0);
    expect(() => a.recordStream(c, 3)).toThrow(expect.objectContaining({ code: "BAD_ARGUMENT" }));
    const report = a.close();
    expect(report.liveBlocks).toBe(0);
  });

  it("a poll queries one event per busy stream: the later ones on it wait in stream order", () => {
    const sim = new SimDriver();
    const d = new StreamLog(sim);
    const a = new Allocator("caching", d);
    const bs = [a.malloc(MiB, 0), a.malloc(MiB, 0), a.malloc(MiB, 0)];
    for (const b of bs) a.recordStream(b, 7);
    d.complete = false;
    for (const b of bs) a.free(b); // three frees waiting for stream 7 (each queried once at its free)
    expect(a.deferredFrees).toBe(3);
    const before = d.queries;
    a.free(a.malloc(MiB, 0)); // one poll
    expect(d.queries - before).toBe(1);
    expect(a.deferredFrees).toBe(3);
    d.complete = true;
    a.free(a.malloc(MiB, 0));
    expect(a.deferredFrees).toBe(0);
    expect(a.close().liveBlocks).toBe(0);
  });

  it("close waits for deferred frees and leaves nothing", () => {
    const sim = new SimDriver();
    const d = new StreamLog(sim);
    const a = new Allocator("expandable", d);
    const b = a.malloc(30 * MiB, 0);
    a.recordStream(b, 5);
    d.complete = false;
    a.free(b);
    expect(a.close().liveBlocks).toBe(0);
    expect(sim.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
    expect(sim.events.liveEvents).toBe(0);
  });
});

describe("vms moves a handle without a device sync: its old mapping goes once a mark of its stream is done", () => {
  /** x and z free around a live y: a 40 MiB malloc takes z and the tail, filled with x's handle (one move). */
  function moved(g: LaggingGpu): { a: Allocator; w: Block; y: Block } {
    const a = new Allocator("vms", g, { checkInvariants: 1 });
    const x = a.malloc(20 * MiB, 0);
    const y = a.malloc(20 * MiB, 0);
    const z = a.malloc(20 * MiB, 0);
    a.free(x);
    a.free(z);
    g.nowUs = 100;
    const w = a.malloc(40 * MiB, 0);
    expect(a.instance.counters!().moved).toBe(1);
    return { a, w, y };
  }
  const calls = (g: LaggingGpu) => ({ ...g.stats().calls });

  it("events done at once (sim): unmapped at once, with no sync", () => {
    const g = new LaggingGpu(new SimDriver(), 0);
    const { a } = moved(g);
    expect(calls(g)).toMatchObject({ ctxSynchronize: 0, memUnmap: 1, eventRecord: 1, eventQuery: 1 });
    expect(a.stats.toTorch()).toMatchObject({ num_sync_all_streams: 0, num_stream_marks: 1, num_late_stream_marks: 0, num_unfenced_unmaps: 1 });
    expect(a.close().liveBlocks).toBe(2);
  });

  it("kernels still running: the handle serves at once, the old range is unmapped at a later call once the mark is done", () => {
    const sim = new SimDriver();
    const g = new LaggingGpu(sim, 1000);
    const { a, w, y } = moved(g);
    expect(calls(g)).toMatchObject({ ctxSynchronize: 0, memUnmap: 0 }); // x's old range still mapped on the device
    expect(a.stats.numLateMarks).toBe(1);
    g.nowUs = 2000; // the GPU got past the free
    const v = a.malloc(30 * MiB, 0); // a grow: it settles the old mapping first (no sync)
    expect(calls(g)).toMatchObject({ ctxSynchronize: 0, memUnmap: 1 });
    expect(a.stats.numUnfencedUnmaps).toBe(1);
    for (const b of [v, w, y]) a.free(b);
    expect(a.close().liveBlocks).toBe(0);
    expect(sim.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
    expect(sim.events.liveEvents).toBe(0);
  });

  it("a map into the old range before the mark is done unmaps it first, after waiting for that mark only", () => {
    const g = new LaggingGpu(new SimDriver(), 1000);
    const { a } = moved(g);
    g.nowUs = 200; // the GPU has not got past the free yet
    a.malloc(20 * MiB, 0); // the lowest window needing 20 MiB: x's old range
    expect(calls(g)).toMatchObject({ ctxSynchronize: 0, eventSynchronize: 1, memUnmap: 1 });
    expect(g.eventSyncStallUs).toBe(900); // until the GPU reaches the mark (recorded at 100), not until it is idle (200)
    expect(a.stats.toTorch()).toMatchObject({ num_sync_all_streams: 0, num_stream_mark_waits: 1, num_unfenced_unmaps: 1 });
    a.close();
  });

  it("a handle moved from another stream's arena: the new stream waits for the old one's work (no host wait)", () => {
    const g = new LaggingGpu(new SimDriver(), 1000);
    const a = new Allocator("vms", g, { checkInvariants: 1 });
    a.free(a.malloc(20 * MiB, 1)); // stream 1's handle, free; its kernels may still run
    g.nowUs = 10;
    const before = calls(g);
    const b = a.malloc(40 * MiB, 2); // no free block of 40 MiB anywhere: stream 2's arena grows, with stream 1's handle
    const d = calls(g);
    expect(a.instance.counters!().moved).toBe(1);
    expect(d.ctxSynchronize - before.ctxSynchronize).toBe(0);
    expect(d.memUnmap - before.memUnmap).toBe(0);
    expect(d.streamWaitEvent - before.streamWaitEvent).toBe(1);
    expect(a.stats.numCrossStreamReuses).toBe(1);
    a.free(b);
    expect(a.close().liveBlocks).toBe(0);
  });

  it("a handle moved into a private pool's arena (no stream to make wait): the unmap waits for the mark there", () => {
    const g = new LaggingGpu(new SimDriver(), 1000);
    const a = new Allocator("vms", g, { checkInvariants: 1 });
    a.free(a.malloc(20 * MiB, 0));
    g.nowUs = 10;
    const b = a.malloc(40 * MiB, -3); // a private pool's key (replays of CUDA-graph pools)
    expect(a.instance.counters!().moved).toBe(1);
    expect(calls(g)).toMatchObject({ ctxSynchronize: 0, eventSynchronize: 1, memUnmap: 1, streamWaitEvent: 0 });
    a.free(b);
    expect(a.close().liveBlocks).toBe(0);
  });

  it("empty_cache releases a moved handle only after its old mapping is gone", () => {
    const sim = new SimDriver();
    const g = new LaggingGpu(sim, 1000);
    const { a, w, y } = moved(g);
    a.free(w);
    a.emptyCache();
    expect(calls(g)).toMatchObject({ memRelease: 2, ctxSynchronize: 1 }); // z's handle and x's (its old mapping unmapped first)
    a.free(y);
    a.emptyCache();
    expect(calls(g).memRelease).toBe(3);
    expect(a.stats.reservedBytes).toBe(0);
    a.close();
    expect(sim.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
  });
});

describe("stream safety in a replay (counted; bookkeeping on the sim)", () => {
  const fsdp = tracePath("llama1b_fsdp.pickle.gz");
  it.skipIf(!fsdp)("llama1b_fsdp (two streams): every cross-stream hit waited, every sync in the driver calls", async () => {
    const snap = await readSnapshot(fsdp!);
    for (const policy of ["vms", "gmlake", "expandable"]) {
      const r = replay(snap.events, { policy, driver: new SimDriver(), settings: snap.allocatorSettings, recorder: null, capacity: Math.floor(1.02 * computeStats(snap.events).peakRequestedBytes) });
      expect(r.streamSafety.syncs, policy).toBe(r.driverCalls.ctxSynchronize);
      expect(r.streamSafety.crossStreamReuses, policy).toBe(r.driverCalls.streamWaitEvent);
      // one event per cross-stream reuse, one more at the free of each block served that way
      // (complete at once on the sim: nothing deferred), one per stream mark (vms's moves)
      const { crossStreamReuses, streamMarks, syncs, unfencedUnmaps } = r.streamSafety;
      expect(r.driverCalls.eventRecord, policy).toBeGreaterThanOrEqual(crossStreamReuses + streamMarks);
      expect(r.driverCalls.eventRecord, policy).toBeLessThanOrEqual(2 * crossStreamReuses + streamMarks);
      expect(r.driverCalls.eventQuery, policy).toBe(r.driverCalls.eventRecord - crossStreamReuses);
      if (policy === "vms") {
        expect(crossStreamReuses).toBe(r.counters.crossStreamHits);
        // every move's mark is done at once on the sim: no move needs a sync
        expect(streamMarks).toBeGreaterThan(0);
        expect(unfencedUnmaps).toBe(r.counters.moved);
        expect(syncs).toBe(0);
      } else {
        expect(crossStreamReuses).toBe(0);
        expect(streamMarks + unfencedUnmaps).toBe(0);
      }
      // unmaps and frees happen only in calls that synchronized first (one sync per call at most) or after a done mark
      if (r.driverCalls.memUnmap + r.driverCalls.memFree > unfencedUnmaps) expect(syncs).toBeGreaterThan(0);
      expect(syncs).toBeLessThanOrEqual(r.driverCalls.memUnmap + r.driverCalls.memFree - unfencedUnmaps);
    }
  }, 120_000);
});

describe("a replay on the cuda driver", () => {
  const fsdp = tracePath("llama1b_fsdp.pickle.gz");
  it.skipIf(!fsdp)("hands the driver's stream calls the default stream, never a recorded stream handle", async () => {
    const snap = await readSnapshot(fsdp!);
    // A sim that calls itself cuda and notes every stream it is handed (the real one
    // dereferences them: a recorded handle of another process segfaulted on the H200).
    const seen = new Set<number>();
    class NamedCuda extends DriverAdaptor {
      override get name() {
        return "cuda" as const;
      }
      override eventRecord(event: EventHandle, stream: number) {
        seen.add(stream);
        super.eventRecord(event, stream);
      }
      override streamWaitEvent(stream: number, event: EventHandle) {
        seen.add(stream);
        super.streamWaitEvent(stream, event);
      }
      override streamSynchronize(stream: number) {
        seen.add(stream);
        super.streamSynchronize(stream);
      }
    }
    const r = replay(snap.events, { policy: "vms", driver: new NamedCuda(new SimDriver()), settings: snap.allocatorSettings, recorder: null });
    expect(r.streamSafety.crossStreamReuses).toBeGreaterThan(0);
    expect([...seen]).toEqual([0]);
    // the same replay on the sim (named sim) keeps the trace's streams: the policy's view is unchanged
    const plain = replay(snap.events, { policy: "vms", driver: new SimDriver(), settings: snap.allocatorSettings, recorder: null });
    expect(plain.peakReservedBytes).toBe(r.peakReservedBytes);
    expect(plain.driverCalls).toEqual(r.driverCalls);
  }, 120_000);
});
