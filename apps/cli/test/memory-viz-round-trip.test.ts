/**
 * Every public trace exported to memory-viz reads back equal: the recorded trace itself,
 * and a replay's history (private pools included: a replay keys a pool's blocks by a
 * stream key of its own, which the export must turn back into the stream and pool id).
 * CI time: the small traces, the corpus' smallest and one of ../shared/traces.
 */
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { poolStreamsOf, privatePoolTags, replay } from "@gmlake/stitch";
import { readSnapshot, readSnapshotBytes, type Snapshot } from "@gmlake/torch-trace";
import { TORCH_ACTIONS, exportMemoryViz, type EventLog, type StreamOf } from "@gmlake/trace";
import { SimDriver } from "@gmlake/vmm";
import { REPO, TRACES } from "./run-cli.js";

const SMALL = join(TRACES, "small");
const files = [
  ...(existsSync(SMALL) ? readdirSync(SMALL).filter((f) => f.endsWith(".pickle")).map((f) => join(SMALL, f)) : []),
  join(REPO, "corpus", "moe_ft.pickle.gz"),
  join(TRACES, "gpt2_ft_stacks.pickle.gz"),
].filter((f) => existsSync(f));

const exported = new Set(Object.values(TORCH_ACTIONS) as number[]);

/** The rows an export writes, as the reader gives them back: per device in log order, streams as written. */
function rowsOf(log: EventLog, streamOf?: StreamOf): string[] {
  const out: string[] = [];
  const order = Array.from({ length: log.length }, (_, i) => i).filter((i) => exported.has(log.kind[i]!));
  order.sort((a, b) => log.device[a]! - log.device[b]! || a - b);
  for (const i of order) {
    const raw = log.streams[log.stream[i]!]!;
    out.push(`${log.kind[i]} ${log.device[i]} ${log.addr[i]} ${log.size[i]} ${streamOf?.(raw)?.stream ?? raw} ${log.timeUs[i]} ${log.kind[i] === 8 ? log.aux[i] : 0}`);
  }
  return out;
}

function readBack(bytes: Uint8Array): Snapshot {
  return readSnapshotBytes(bytes, { name: "<export>" });
}

describe.skipIf(files.length === 0)("memory-viz round trips", () => {
  it.each(files.map((f) => [f.slice(f.lastIndexOf("/", f.lastIndexOf("/") - 1) + 1), f]))("%s: the trace and its replays read back equal", async (_name, file) => {
    const s = await readSnapshot(file, { reconstruct: false });
    // The recorded trace, with its own dump-time segments.
    const own = readBack(exportMemoryViz(s.events, s.segments, { allocatorSettings: s.allocatorSettings }).bytes);
    expect(rowsOf(own.events)).toEqual(rowsOf(s.events));
    const pools = privatePoolTags(s.events, s.segments);
    for (const policy of ["caching", "vms"]) {
      // teardown off: what is live at the end stays in the export's segments, with its pool ids
      // (trace entries carry no pool id: a reader finds a pool from the dump-time segments).
      const r = replay(s.events, { policy, driver: new SimDriver(), settings: s.allocatorSettings, pools, onOom: "stop", teardown: false });
      const streamOf = poolStreamsOf(s.events, s.segments);
      const back = readBack(exportMemoryViz(r.log!, undefined, { allocatorSettings: s.allocatorSettings, streamOf }).bytes);
      expect(back.reconstructed.syntheticEvents, policy).toBe(0);
      expect(rowsOf(back.events), policy).toEqual(rowsOf(r.log!, streamOf));
      // A private pool's blocks are still in their pool when the export is read back.
      const again = privatePoolTags(back.events, back.segments);
      const count = (t: Uint32Array | null) => (t === null ? 0 : t.reduce((n, x) => n + (x > 0 ? 1 : 0), 0));
      if (pools !== null) expect(count(again), policy).toBeGreaterThan(0);
    }
  });
});
