import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { computeStats, EventKind } from "@gmlake/trace";
import { describe, expect, it } from "vitest";
import { readSnapshot } from "../src/index.js";
import { SKIP_MESSAGE, tracesDir } from "./shared-dir.js";

const dir = tracesDir();
if (dir === null) console.warn(SKIP_MESSAGE);
const GiB = 2 ** 30;

interface ReadmeRow {
  name: string;
  events: number;
  peakAllocated: number;
  reservedDefault: number;
  reservedExpandable: number | null;
}

/** The table of ../shared/traces/README.md (the measured figures the tests compare to). */
function readmeRows(): ReadmeRow[] {
  const text = readFileSync(join(dir as string, "README.md"), "utf8");
  const rows: ReadmeRow[] = [];
  for (const line of text.split("\n")) {
    const cells = line.split("|").map((c) => c.trim());
    if (cells.length < 11 || !/^\d+$/.test(cells[4])) continue;
    rows.push({
      name: cells[1],
      events: Number(cells[4]),
      peakAllocated: Number(cells[5]),
      reservedDefault: Number(cells[6]),
      reservedExpandable: cells[8] === "" || cells[8] === "-" ? null : Number(cells[8]),
    });
  }
  return rows;
}

/**
 * Exact figures computed by this reader + computeStats (regression anchors): peak
 * allocated (rounded sizes, alloc..free_completed), peak requested, peak reserved.
 */
const ANCHORS: Record<string, [number, number, number]> = {
  gpt2_ft: [27552921600, 27552856680, 33057406976],
  gpt2_ft_expandable: [27552921600, 27552856680, 28003270656],
  gpt2_ft_ckpt: [11481241600, 11481237736, 14659092480],
  gpt2_ft_ckpt_expandable: [11481241600, 11481237736, 12132024320],
  gpt2_ft_stacks: [21605807616, 21605768872, 22783459328],
  llama1b_fsdp: [38477846528, 38477805272, 48941236224],
  llama1b_fsdp_expandable: [38477846528, 38477805272, 43121639424],
  llama1b_lora: [11041276416, 11041272624, 19121831936],
  llama1b_lora_expandable: [11041276416, 11041272624, 11821645824],
  opt1b_generate: [5674860544, 5674860544, 5685379072],
  default: [157294080, 157292035, 186646528],
  default_end: [157294080, 157292035, 186646528],
  expandable: [157294080, 157292035, 192937984],
  expandable_end: [157294080, 157292035, 192937984],
  train_default: [4271224320, 4271222824, 10408165376],
  train_expandable: [4271224320, 4271222824, 4427087872],
};

/**
 * README "peak allocated" is torch.cuda.max_memory_allocated(): sums of block sizes, which
 * include remainders PyTorch did not split off (large-pool blocks with <= 1 MiB spare). The
 * trace alone gives rounded request sizes, a lower bound; it equals the README to 2
 * decimals except on these workloads, where the unsplit remainders show (GiB short).
 */
const ALLOCATED_SHORT_BY: Record<string, number> = { gpt2_ft: 0.01, gpt2_ft_ckpt: 0.01, llama1b_fsdp: 0.07 };

const round2 = (x: number): number => Math.round(x * 100) / 100;

describe.skipIf(dir === null)("real traces (../shared/traces)", () => {
  const rows = dir === null ? [] : readmeRows();
  const files = dir === null ? [] : readdirSync(dir).filter((f) => f.endsWith(".pickle.gz"));

  it("README lists the traces", () => {
    expect(rows.length).toBeGreaterThanOrEqual(5);
    expect(files.length).toBeGreaterThanOrEqual(10);
  });

  for (const file of files) {
    const name = file.replace(/\.pickle\.gz$/, "");
    it(`reads ${file}`, async () => {
      const snap = await readSnapshot(join(dir as string, file));
      const log = snap.events;
      expect(snap.gzip).toBe(true);
      expect(snap.protocol).toBe(4);
      expect(snap.devices).toEqual([0]);
      expect(snap.unknownActions).toEqual({});
      expect(snap.inexactIntegers).toBe(0);
      expect(snap.reconstructed.syntheticEvents).toBe(0);
      expect(snap.allocatorSettings.expandableSegments).toBe(name.includes("expandable"));
      expect(snap.allocatorSettings.maxSplitSize).toBeNull();
      expect(snap.allocatorSettings.roundupPower2Divisions).toEqual(new Array(16).fill(0));
      expect(Object.keys(snap.allocatorSettings.raw)).toContain("roundup_power2_divisions");
      // Chronological: times never go backwards within the device.
      let back = 0;
      for (let i = 1; i < log.length; i++) if (log.timeUs[i] < log.timeUs[i - 1]) back++;
      expect(back).toBe(0);
      // Segment events of the file's mode only.
      const stats = computeStats(log);
      if (name.includes("expandable")) expect(stats.countsByKind.segmentAlloc ?? 0).toBe(0);
      else expect(stats.countsByKind.segmentMap ?? 0).toBe(0);
      expect(stats.unmatchedFrees).toBe(0);
      // Dump-time segments agree with the trace: reserved at the end = sum of segment sizes.
      expect(stats.reservedBytes).toBe(snap.segments.reduce((n, s) => n + s.totalSize, 0));
      // Blocks live at dump time are the allocs not completed-freed.
      const liveAtDump = snap.segments.flatMap((s) => s.blocks).filter((b) => b.state !== "inactive").length;
      expect(stats.countsByKind.alloc - (stats.countsByKind.freeCompleted ?? 0)).toBe(liveAtDump);
      const anchor = ANCHORS[name];
      expect([stats.peakAllocatedBytes, stats.peakRequestedBytes, stats.peakReservedBytes]).toEqual(anchor);

      const base = name.replace(/_expandable$/, "");
      const row = rows.find((r) => r.name === base);
      if (row !== undefined) {
        if (!name.includes("expandable")) expect(log.length).toBe(row.events);
        const reserved = name.includes("expandable") ? row.reservedExpandable : row.reservedDefault;
        expect(round2(stats.peakReservedBytes / GiB)).toBe(reserved);
        const short = ALLOCATED_SHORT_BY[base] ?? 0;
        const ours = stats.peakAllocatedBytes / GiB;
        if (short === 0) expect(round2(ours)).toBe(row.peakAllocated);
        else {
          expect(ours).toBeLessThan(row.peakAllocated);
          expect(ours).toBeGreaterThan(row.peakAllocated - short);
        }
      }
    });
  }

  it("reads small/* (both modes, with oom and snapshot entries)", async () => {
    const small = join(dir as string, "small");
    for (const file of readdirSync(small)) {
      const snap = await readSnapshot(join(small, file));
      const name = file.replace(/\.pickle$/, "");
      const stats = computeStats(snap.events);
      expect([stats.peakAllocatedBytes, stats.peakRequestedBytes, stats.peakReservedBytes]).toEqual(ANCHORS[name]);
      expect(snap.protocol).toBe(4);
      expect(snap.gzip).toBe(false);
      if (name.endsWith("_end")) {
        expect(stats.countsByKind.oom).toBe(1);
        expect(stats.countsByKind.snapshot).toBe(2);
        const oom = Array.from(snap.events.kind).indexOf(EventKind.oom);
        expect(snap.events.aux[oom]).toBeGreaterThan(1e9); // device_free
        expect(snap.events.size[oom]).toBe(2 ** 41);
      }
      // Every event on a raw stream the trace recorded.
      expect(snap.events.streams[0]).toBe(0);
    }
    // README: train_default reserves 10.41 GB for 4.27 GB allocated, expandable 4.43 GB.
    const td = computeStats((await readSnapshot(join(small, "train_default.pickle"))).events);
    const te = computeStats((await readSnapshot(join(small, "train_expandable.pickle"))).events);
    expect([round2(td.peakReservedBytes / 1e9), round2(td.peakAllocatedBytes / 1e9), round2(te.peakReservedBytes / 1e9)]).toEqual([10.41, 4.27, 4.43]);
  });

  it("annotations and frames of gpt2_ft_stacks", async () => {
    const snap = await readSnapshot(join(dir as string, "gpt2_ft_stacks.pickle.gz"), { frames: true });
    expect(snap.annotations.length).toBe(8);
    expect(snap.annotations[0]).toMatchObject({ stage: "START", device: 0 });
    expect(snap.annotations[0].timeUs).toBeGreaterThan(1.7e15);
    const frames = snap.frames as NonNullable<typeof snap.frames>;
    expect(frames.length).toBe(snap.events.length);
    // Every entry has a frames list; Python counts 9,978 non-empty ones.
    expect(frames.every((f) => Array.isArray(f))).toBe(true);
    expect(frames.filter((f) => f !== undefined && f.length > 0).length).toBe(9978);
    expect(frames[0]?.[0]).toHaveProperty("filename");
  });

  it("segments of an fsdp trace carry the second stream", async () => {
    const snap = await readSnapshot(join(dir as string, "llama1b_fsdp.pickle.gz"));
    expect(snap.events.streams.length).toBe(2);
    const streams = new Set(snap.segments.map((s) => s.stream));
    expect(streams.size).toBe(2);
    expect(snap.annotations.length).toBe(3960);
    const s0 = snap.segments[0];
    expect(s0.blocks.reduce((n, b) => n + b.size, 0)).toBe(s0.totalSize);
    expect(["small", "large"]).toContain(s0.segmentType);
    expect(s0.poolId).toEqual([0, 0]);
  });
});
