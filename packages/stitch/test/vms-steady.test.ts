import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { SimDriver } from "@gmlake/vmm";
import { EventKind, type EventLog } from "@gmlake/trace";
import { readSnapshot } from "@gmlake/torch-trace";
import { privatePoolTags, replay } from "../src/index.js";
import { sharedDir } from "./helpers.js";
import { LARGE_VOCAB_LORA, WORKLOAD_SEQS, varlenLoraTrace } from "./varlen-workload.js";

/**
 * vms in steady state: wherever the second half of a trace needs no more memory than its
 * first half did (the requested bytes' peak after the midpoint event is not above the
 * peak before it), vms makes no memory driver call after the midpoint (only the stream waits
 * its cross-stream reuse needs); and it reserves no more
 * than expandable segments on every trace. Over ../shared/traces, the project's corpus/
 * (workloads whose largest buffers change size every step) and a synthetic LoRA with a
 * 128k vocabulary whose GiB-sized logits follow the sequence length.
 */
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

function files(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .sort()
    .filter((n) => n.endsWith(".pickle.gz") && statSync(join(dir, n)).isFile())
    .map((n) => join(dir, n));
}

/** Peak requested bytes before and after replay's midpoint event (n >> 1). */
function halves(log: EventLog): [number, number] {
  const live = new Map<number, number>();
  const mid = log.length >> 1;
  let cur = 0;
  const peak = [0, 0];
  for (let i = 0; i < log.length; i++) {
    const k = log.kind[i]!;
    if (k === EventKind.alloc) {
      live.set(log.addr[i]!, log.size[i]!);
      cur += log.size[i]!;
    } else if (k === EventKind.freeCompleted) {
      const s = live.get(log.addr[i]!);
      if (s !== undefined) {
        cur -= s;
        live.delete(log.addr[i]!);
      }
    }
    const h = i < mid ? 0 : 1;
    if (cur > peak[h]!) peak[h] = cur;
  }
  return [peak[0]!, peak[1]!];
}

function check(log: EventLog, settings: Parameters<typeof replay>[1]["settings"], pools: Parameters<typeof replay>[1]["pools"]): void {
  const run = (policy: string) => replay(log, { policy, driver: new SimDriver(), settings, pools, recorder: null, recordAllocations: false });
  const vms = run("vms");
  const expandable = run("expandable");
  expect(vms.oom).toBeNull();
  expect(vms.peakReservedBytes).toBeLessThanOrEqual(expandable.peakReservedBytes);
  const [first, second] = halves(log);
  if (second <= first) {
    // memory calls; a block served across streams still costs the new stream's wait on an
    // event of the old one (eventRecord + streamWaitEvent: the engine's stream safety)
    const calls = Object.entries(vms.driverCallsSecondHalf).filter(([k, v]) => v > 0 && !/^(event|stream|ctx)/.test(k));
    expect(Object.fromEntries(calls)).toEqual({});
    expect(vms.driverCallsSecondHalf.streamWaitEvent).toBe(vms.driverCallsSecondHalf.eventRecord);
    expect(vms.driverCallsSecondHalf.streamWaitEvent).toBeLessThanOrEqual(vms.streamSafety.crossStreamReuses);
  }
}

describe("vms: no driver call in a steady second half, never more reserved than expandable", () => {
  const all = [...files(join(sharedDir(), "traces")), ...files(join(repoRoot, "corpus"))];
  for (const path of all) {
    it(relative(repoRoot, path).replace(/^(\.\.\/)+/, ""), { timeout: 120_000 }, async () => {
      const snap = await readSnapshot(path);
      check(snap.events, snap.allocatorSettings, privatePoolTags(snap.events, snap.segments));
    });
  }
  it("a LoRA with a 128k vocabulary whose logits follow the sequence length (workloads.py's lengths)", () => {
    const log = varlenLoraTrace({ ...LARGE_VOCAB_LORA, steps: 12, seqs: WORKLOAD_SEQS });
    const [first, second] = halves(log);
    expect(second).toBeLessThan(first); // the longest step is the sixth: a steady second half
    check(log, undefined, null);
  });
});
