import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readSnapshot } from "@gmlake/torch-trace";
import { verify } from "../src/index.js";
import { sharedDir, tracePath } from "./helpers.js";

/**
 * The acceptance that matters: the model of the allocator that recorded each trace
 * reproduces every segment event (kind, size, address), the peak reserved and every
 * alloc's block address. Peak allocated is checked against the traces README.
 */
const TRACES = [
  "gpt2_ft.pickle.gz",
  "gpt2_ft_expandable.pickle.gz",
  "gpt2_ft_ckpt.pickle.gz",
  "gpt2_ft_ckpt_expandable.pickle.gz",
  "gpt2_ft_stacks.pickle.gz",
  "llama1b_fsdp.pickle.gz",
  "llama1b_fsdp_expandable.pickle.gz",
  "llama1b_lora.pickle.gz",
  "llama1b_lora_expandable.pickle.gz",
  "opt1b_generate.pickle.gz",
  "small/default.pickle",
  "small/default_end.pickle",
  "small/expandable.pickle",
  "small/expandable_end.pickle",
  "small/train_default.pickle",
  "small/train_expandable.pickle",
];

/** README table: trace -> [peak allocated GiB, default reserved GiB, expandable reserved GiB]. */
function readmePeaks(): Map<string, number[]> {
  const out = new Map<string, number[]>();
  let text = "";
  try {
    text = readFileSync(join(sharedDir(), "traces", "README.md"), "utf8");
  } catch {
    return out;
  }
  for (const line of text.split("\n")) {
    const cells = line.split("|").map((c) => c.trim());
    if (cells.length < 10 || !/^[a-z0-9_]+$/.test(cells[1] ?? "") || !Number.isFinite(Number(cells[5]))) continue;
    out.set(cells[1]!, [Number(cells[5]), Number(cells[6]), Number(cells[8])]);
  }
  return out;
}

const peaks = readmePeaks();
const GiB = 2 ** 30;

describe("verify reproduces PyTorch on every recorded trace", () => {
  it.skipIf(tracePath("README.md") === null)("reads the README's table of measured peaks", () => {
    expect([...peaks.keys()].sort()).toEqual(["gpt2_ft", "gpt2_ft_ckpt", "llama1b_fsdp", "llama1b_lora", "opt1b_generate"]);
  });
  for (const name of TRACES) {
    const path = tracePath(name);
    it.skipIf(path === null)(name, async () => {
      const snap = await readSnapshot(path!);
      const v = verify(snap, { checkInvariants: name.startsWith("small/") ? 1 : 25_000 });
      expect(v.firstMismatch).toBeNull();
      expect(v.firstAllocMismatch).toBeNull();
      expect(v.replayedSegments).toBe(v.recordedSegments);
      expect(v.recordedSegments).toBeGreaterThan(0);
      expect(v.allocsCompared).toBeGreaterThan(0);
      expect(v.replayedPeakReservedBytes).toBe(v.recordedPeakReservedBytes);
      expect(v.match).toBe(true);
      expect(v.policy).toBe(snap.allocatorSettings.expandableSegments ? "expandable" : "caching");
      const base = name.replace(".pickle.gz", "");
      const row = peaks.get(base.replace("_expandable", ""));
      if (row && !name.includes("/")) {
        const expandable = base.endsWith("_expandable");
        // reserved as the README states it (2 decimals GiB) for this mode
        expect((v.replayedPeakReservedBytes / GiB).toFixed(2)).toBe(row[expandable ? 2 : 1]!.toFixed(2));
        // peak allocated: the README's column is the default run's
        if (!expandable) expect((v.replay.peakAllocatedBytes / GiB).toFixed(2)).toBe(row[0]!.toFixed(2));
      }
      if (name.endsWith("_end.pickle")) {
        expect(v.replay.recordedOoms.reproduced).toBe(1);
        expect(v.replay.recordedOoms.served).toBe(0);
      }
    });
  }
});
