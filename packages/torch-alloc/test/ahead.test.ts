// Answers made ahead and undone leave the engine's decisions as they were (GMLAKE_AHEAD,
// native/free_queue.h's chain, src/bridge.ts OP_MAKE_AHEAD): real traces replayed through the
// bridge twice, once plainly and once with the JS thread's side played at random points (a
// peek, then up to three answers after it made ahead), callers taking answers as the native
// queue lets them (in order, no free queued since) and the rest undone; every address handed
// out, every peak and count of the books and every driver call must be the same.
import { existsSync } from "node:fs";
import { join } from "node:path";

import { planTrace } from "@gmlake/stitch";
import { EventKind } from "@gmlake/trace";
import { readSnapshot } from "@gmlake/torch-trace";
import { describe, expect, it } from "vitest";

import { createBridge, FREE_QUEUE_HEADER, FREE_QUEUE_LENGTH, FREE_QUEUE_SLOTS, OP_ALLOC, OP_FLUSH, OP_MAKE_AHEAD, OP_PEEK, QUEUE_FREES, TEXT_RESET_PEAKS, TEXT_STATS } from "../src/bridge.js";

const traces = join(__dirname, "..", "..", "..", "..", "shared", "traces");
const TRACES = ["gpt2_ft", "llama1b_lora"].filter((t) => existsSync(join(traces, `${t}.pickle.gz`)));

interface Op {
  alloc: boolean;
  size: number;
  stream: number;
  slot: number; // alloc: its slot; free: its alloc's
}

async function ops(trace: string): Promise<Op[]> {
  const log = (await readSnapshot(join(traces, `${trace}.pickle.gz`))).events;
  const { ref } = planTrace(log);
  const out: Op[] = [];
  const slotOf = new Int32Array(log.length).fill(-1);
  const freed = new Uint8Array(log.length);
  let n = 0;
  for (let i = 0; i < log.length; i++) {
    const k = log.kind[i];
    if (log.device[i] !== log.device[0]) continue;
    if (k === EventKind.alloc) {
      slotOf[i] = n;
      out.push({ alloc: true, size: log.size[i]!, stream: log.streams[log.stream[i]!]!, slot: n++ });
    } else if (k === EventKind.freeRequested || k === EventKind.freeCompleted) {
      const a = ref[i]!;
      if (a < 0 || freed[a] === 1) continue;
      freed[a] = 1;
      out.push({ alloc: false, size: 0, stream: 0, slot: slotOf[a]! });
    }
  }
  return out;
}

/** The replay: `ahead` 0 plainly, else the JS thread's side at random, up to `ahead` answers. */
async function replay(policy: string, list: Op[], ahead: number, seed: number) {
  const bridge = await createBridge({ policy, driver: "sim", record: false });
  const q = new Float64Array(FREE_QUEUE_LENGTH);
  bridge.attachFreeQueue(q);
  const addr = new Float64Array(list.length);
  const sizeOf = new Float64Array(list.length);
  const handed: number[] = [];
  const samples: string[] = [];
  let queued = 0;
  let x = seed;
  const rand = (): number => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
  const enqueue = (a: number, s: number, st: number): void => {
    if (queued === FREE_QUEUE_SLOTS) {
      bridge.call(OP_FLUSH, 0, 0, 0);
      queued = 0;
    }
    const at = FREE_QUEUE_HEADER + 3 * queued++;
    q[at] = a;
    q[at + 1] = s;
    q[at + 2] = st;
    q[QUEUE_FREES] = queued;
  };
  const call = (op: number, a: number, b: number, c: number): number => {
    queued = 0; // the bridge takes the queue first
    return bridge.call(op, a, b, c);
  };
  // the native side's chain: answers taken in order while nothing but takes is queued
  let chain: { size: number; stream: number; addr: number }[] = [];
  let head = 0;
  let clean = true;
  let takes = 0;
  let made = 0;
  for (let i = 0; i < list.length; i++) {
    const o = list[i]!;
    if (!o.alloc) {
      enqueue(addr[o.slot]!, sizeOf[o.slot]!, 0);
      clean = false;
      continue;
    }
    if (ahead > 0 && rand() < 0.3) {
      // the JS thread: a peek for this allocation (the queue handed over), then answers after
      // it for the next allocations of the trace, frees in between or not
      chain = [];
      head = 0;
      clean = true;
      const p = call(OP_PEEK, o.size, 0, o.stream);
      if (p > 0) {
        chain.push({ size: o.size, stream: o.stream, addr: p });
        const want = 1 + Math.floor(rand() * ahead);
        for (let j = i + 1; j < list.length && chain.length < want; j++) {
          const n = list[j]!;
          if (!n.alloc) continue;
          const a = call(OP_MAKE_AHEAD, n.size, 0, n.stream);
          if (a <= 0) break;
          chain.push({ size: n.size, stream: n.stream, addr: a });
          made++;
        }
      }
    }
    const c = chain[head];
    let got: number;
    if (c !== undefined && clean && c.size === o.size && c.stream === o.stream) {
      head++;
      takes++;
      enqueue(c.addr, -o.size, o.stream);
      got = c.addr;
    } else {
      chain = [];
      got = call(OP_ALLOC, o.size, 0, o.stream);
    }
    expect(got).toBeGreaterThan(0);
    addr[o.slot] = got;
    sizeOf[o.slot] = o.size;
    handed.push(got);
    if (handed.length % 256 === 0) {
      // the books as a caller reads them (a text op: what stands ahead is undone first), and the
      // peaks reset, so that an allocation made ahead that raised one and was not undone shows
      queued = 0;
      samples.push(bridge.text(TEXT_STATS, ""));
      bridge.text(TEXT_RESET_PEAKS, "");
      chain = [];
    }
  }
  const stats = JSON.parse(bridge.text(TEXT_STATS, "")) as Record<string, unknown>;
  const calls = bridge.live.driver.stats().totalCalls;
  bridge.live.close();
  return { handed, stats, calls, takes, made, samples };
}

describe.skipIf(TRACES.length === 0)("answers made ahead and undone (GMLAKE_AHEAD)", () => {
  for (const trace of TRACES) {
    for (const policy of ["caching", "expandable", "vms", "gmlake"]) {
      it(`${trace} through ${policy}: the same addresses, peaks and driver calls`, { timeout: 60_000 }, async () => {
        const list = await ops(trace);
        const plain = await replay(policy, list, 0, 1);
        const ahead = await replay(policy, list, 4, 0x2545f491);
        // the run made and took answers ahead, many of them
        expect(ahead.made).toBeGreaterThan(1000);
        expect(ahead.takes).toBeGreaterThan(1000);
        expect(ahead.handed).toEqual(plain.handed);
        expect(ahead.calls).toBe(plain.calls);
        expect(ahead.samples.length).toBeGreaterThan(50);
        for (let k = 0; k < plain.samples.length; k++) {
          // the policy's counters and the making ahead's own left out (see below)
          const { counters: _x, num_made_ahead: m, num_undone_ahead: _u, ...a } = JSON.parse(ahead.samples[k]!) as Record<string, unknown>;
          const { counters: _y, num_made_ahead: _m, num_undone_ahead: _v, ...p } = JSON.parse(plain.samples[k]!) as Record<string, unknown>;
          if (k === plain.samples.length - 1) expect(m).toBeGreaterThan(1000);
          expect(a, `the books after ${256 * (k + 1)} allocations`).toEqual(p);
        }
        // the policy's counters count its work, which an undone allocation adds to (vms carves a
        // small segment again where the undo gave it back): not a decision
        const { counters: _a, num_made_ahead: _m, num_undone_ahead: _u, ...rest } = ahead.stats;
        const { counters: _p, num_made_ahead: _n, num_undone_ahead: _v, ...plainRest } = plain.stats;
        expect(rest).toEqual(plainRest);
      });
    }
  }
});
