import { describe, expect, it } from "vitest";
import { DRIVER_CALLS, HostDriver, SimDriver, withFaults, type DriverCall } from "@gmlake/vmm";
import { EventKind, EventLog } from "@gmlake/trace";
import { Allocator, StitchError, getPolicy, listPolicies, replay, type Block, type Policy } from "../src/index.js";
import { MiB } from "./helpers.js";

const POLICIES = listPolicies().map((p) => p.name);

/** The StitchError code `f` throws, or "no error". */
function codeOf(f: () => unknown): string {
  try {
    f();
    return "no error";
  } catch (e) {
    if (e instanceof StitchError) return e.code;
    throw e;
  }
}

/** Everything a rejected call must leave as it was. */
function books(a: Allocator): string {
  return JSON.stringify({ stats: a.stats, events: a.recorder?.length ?? 0, live: a.liveBlocks });
}

describe.each(POLICIES)("%s: the Allocator's lifecycle", (policy) => {
  it("a rejected free changes nothing (double free, free_completed first, another allocator's block)", () => {
    const a = new Allocator(policy, new SimDriver());
    const other = new Allocator(policy, new SimDriver());
    const b = a.malloc(3 * MiB);
    const c = a.malloc(MiB);
    const foreign = other.malloc(3 * MiB);
    a.free(c);
    const before = books(a);
    expect(codeOf(() => a.free(c))).toBe("BAD_ARGUMENT"); // double free
    expect(codeOf(() => a.freeRequested(c))).toBe("BAD_ARGUMENT");
    expect(codeOf(() => a.freeCompleted(b))).toBe("BAD_ARGUMENT"); // no free_requested yet
    expect(codeOf(() => a.free(foreign))).toBe("BAD_ARGUMENT"); // allocated, but not here
    expect(codeOf(() => a.freeRequested(foreign))).toBe("BAD_ARGUMENT");
    expect(codeOf(() => a.malloc(-1))).toBe("BAD_ARGUMENT");
    expect(codeOf(() => a.malloc(MiB, Number.NaN))).toBe("BAD_ARGUMENT");
    expect(codeOf(() => a.malloc(MiB, 1.5))).toBe("BAD_ARGUMENT");
    expect(books(a)).toBe(before);
    a.freeRequested(b);
    const pending = books(a);
    expect(codeOf(() => a.free(b))).toBe("BAD_ARGUMENT"); // already requested
    expect(books(a)).toBe(pending);
    a.freeCompleted(b);
    a.close();
    other.close();
  });

  it("close() with live blocks frees and reports them, leaves the driver empty, and refuses later calls", () => {
    const d = new SimDriver();
    const a = new Allocator(policy, d);
    const blocks: Block[] = [];
    for (let i = 0; i < 12; i++) blocks.push(a.malloc((1 + (i % 5)) * MiB + 512 * i));
    a.free(blocks[0]!);
    a.free(blocks[1]!);
    a.freeRequested(blocks[2]!); // pending at close
    const liveBytes = blocks.slice(2).reduce((s, b) => s + b.requested, 0);
    const report = a.close();
    expect(report).toEqual({ liveBlocks: 10, liveRequestedBytes: liveBytes });
    expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
    expect(a.stats.allocatedBytes).toBe(0);
    expect(codeOf(() => a.malloc(MiB))).toBe("CLOSED");
    expect(codeOf(() => a.tryMalloc(MiB))).toBe("CLOSED");
    expect(codeOf(() => a.free(blocks[3]!))).toBe("CLOSED");
    expect(a.close()).toEqual({ liveBlocks: 0, liveRequestedBytes: 0 });
  });
});

/** The host driver's memfd mappings and fds, as the kernel sees them (bench/fault-sweep.mjs). */
const sweepPath = "../bench/fault-sweep.mjs";
const { hostDriverHeld } = (await import(sweepPath)) as { hostDriverHeld(): { maps: number; fds: number } | null };
const held = (): { maps: number; fds: number } => hostDriverHeld() ?? { maps: -1, fds: -1 };

/** A small mix: 1-24 MiB blocks on two streams, every other one freed, larger ones after (stitching paths run). */
function mix(): EventLog {
  const log = new EventLog(512);
  const s0 = log.streamId(0);
  const s1 = log.streamId(7);
  let t = 0;
  let addr = 0x100000;
  const live: [number, number, number][] = [];
  const alloc = (size: number, s: number) => {
    log.push(EventKind.alloc, addr, size, s, 0, t++);
    live.push([addr, size, s]);
    addr += size + 512;
  };
  const free = (k: number) => {
    const [a, size, s] = live.splice(k, 1)[0]!;
    log.push(EventKind.freeCompleted, a, size, s, 0, t++);
  };
  for (let i = 0; i < 40; i++) alloc((1 + ((i * 7) % 24)) * MiB + 4096 * i, i % 3 === 0 ? s1 : s0);
  for (let k = live.length - 1; k >= 0; k -= 2) free(k);
  for (let i = 0; i < 20; i++) alloc((8 + ((i * 5) % 40)) * MiB, s0);
  while (live.length > 0) free(live.length - 1);
  return log;
}

/** The policy, failing with an invariant error at its `at`-th free (as a policy bug would). */
function breaksAt(name: string, at: number): Policy {
  const inner = getPolicy(name);
  return {
    ...inner,
    name: `${name}-broken`,
    create(ctx, options) {
      const inst = inner.create(ctx, options);
      let frees = 0;
      return {
        ...inst,
        malloc: (size, stream) => inst.malloc(size, stream),
        free: (b) => {
          if (++frees === at) throw new StitchError("INVARIANT", "injected: a broken invariant");
          inst.free(b);
        },
        emptyCache: () => inst.emptyCache(),
        teardown: () => inst.teardown(),
      };
    },
  };
}

describe("host driver: after any fault or thrown error, close() leaves 0 mappings and 0 fds", () => {
  const log = mix();
  it.each(POLICIES)("%s: a fault at every call site (1st, 2nd and a middle use of each call)", (policy) => {
    const base = held();
    // the baseline: how often each call is used
    const counted = withFaults(new HostDriver({ capacityBytes: 4096 * MiB }), {});
    replay(log, { policy, driver: counted, recorder: null, integrity: true, options: policy === "gmlake" ? { fragLimit: 2 * MiB } : undefined });
    counted.close();
    let cases = 0;
    for (const call of DRIVER_CALLS as readonly DriverCall[]) {
      const n = counted.ordinals[call];
      for (const ordinal of [...new Set([1, 2, Math.ceil(n / 2)])].filter((k) => k >= 1 && k <= n)) {
        const inner = new HostDriver({ capacityBytes: 4096 * MiB });
        const fd = withFaults(inner, { at: [{ call, ordinal }] });
        try {
          replay(log, { policy, driver: fd, recorder: null, integrity: true, onOom: "continue", checkInvariants: 64, options: policy === "gmlake" ? { fragLimit: 2 * MiB } : undefined });
        } catch {
          // a release-side fault stops the replay with its error: what is left is close()'s job
        }
        inner.close();
        expect(held(), `${policy} ${call}#${ordinal}`).toEqual(base);
        expect(inner.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
        cases++;
      }
    }
    expect(cases).toBeGreaterThanOrEqual(4);
  });
  it.each(POLICIES)("%s: an invariant error mid-replay", (policy) => {
    const base = held();
    for (const at of [1, 7, 25]) {
      const d = new HostDriver({ capacityBytes: 4096 * MiB });
      expect(() => replay(log, { policy: breaksAt(policy, at), driver: d, recorder: null, integrity: true })).toThrow(/injected/);
      expect(d.leaks().reservations).toBeGreaterThan(0); // the failed run did leave memory behind...
      d.close();
      expect(held()).toEqual(base); // ...and close() gave it all back
    }
  });
});
