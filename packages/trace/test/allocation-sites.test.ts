import { describe, expect, it } from "vitest";
import { deriveSegments, exportMemoryViz, siteFrame, sitesAtPeak, type StackFrame } from "../src/index.js";
import { K, logOf, MiB } from "./helpers.js";

const TORCH = "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/linear.py";
const HF = "/opt/torch/.venv/lib/python3.12/site-packages/transformers/models/gpt2/modeling_gpt2.py";
const f = (filename: string, line: number, name = "forward"): StackFrame => ({ filename, line, name });

describe("siteFrame", () => {
  it("skips PyTorch's own frames, not any path that contains torch/", () => {
    expect(siteFrame([f(TORCH, 125), f(HF, 300), f("train.py", 9, "main")])).toEqual(f(HF, 300));
    expect(siteFrame([f("<frozen runpy>", 1), f("train.py", 9, "main")])).toEqual(f("train.py", 9, "main"));
    expect(siteFrame([f(TORCH, 125)])).toEqual(f(TORCH, 125)); // only PyTorch: its innermost frame
    expect(siteFrame([])).toBeNull();
    expect(siteFrame(undefined)).toBeNull();
  });
});

describe("sitesAtPeak", () => {
  it("sums the blocks live at the peak of requested bytes by site", () => {
    // rows: 0 alloc A (HF:300) 4 MiB, 1 alloc B (HF:300) 2 MiB, 2 alloc C (train.py) 8 MiB,
    // 3 free A, 4 alloc D (no stack) 1 MiB, 5 free C: the peak (14 MiB) is after row 2.
    const log = logOf([
      [K.alloc, 0x1000, 4 * MiB, 1], [K.alloc, 0x9000, 2 * MiB, 2], [K.alloc, 0x20000, 8 * MiB, 3],
      [K.freeCompleted, 0x1000, 4 * MiB, 4], [K.alloc, 0x30000, MiB, 5], [K.freeCompleted, 0x20000, 8 * MiB, 6],
    ]);
    const frames = [[f(TORCH, 1), f(HF, 300)], [f(HF, 300)], [f("train.py", 9, "main")], undefined, undefined, undefined];
    const s = sitesAtPeak(log, frames, 10);
    expect(s.eventIndex).toBe(2);
    expect(s.peakRequestedBytes).toBe(14 * MiB);
    expect(s.sites.map((x) => [x.label, x.bytes, x.blocks])).toEqual([
      ["train.py:9 in main", 8 * MiB, 1],
      [`${HF}:300 in forward`, 6 * MiB, 2],
    ]);
    expect(s.sites[1]!.stack).toEqual(frames[0]); // the stack of the site's largest block
    expect(s.totalSites).toBe(2);
    expect(sitesAtPeak(log, frames, 1).sites).toHaveLength(1);
    expect(sitesAtPeak(log, [], 5).bytesWithoutStack).toBe(14 * MiB);
  });
});

describe("memory-viz frames", () => {
  it("framesOf gives entries, blocks and segments their stacks", () => {
    const log = logOf([[K.segmentAlloc, 0x100000, 20 * MiB, 1], [K.alloc, 0x100000, 3 * MiB, 1]]);
    const frames = [[f(HF, 300)], [f(HF, 301)]];
    const segs = deriveSegments(log, (row) => frames[row]);
    expect(segs[0]!.frames).toEqual([f(HF, 300)]);
    expect(segs[0]!.blocks[0]!.frames).toEqual([f(HF, 301)]);
    const a = exportMemoryViz(log, undefined, { framesOf: (row) => frames[row] }).bytes;
    const b = exportMemoryViz(log).bytes;
    const text = (u: Uint8Array) => Buffer.from(u).toString("latin1");
    expect(text(a)).toContain("modeling_gpt2.py");
    expect(text(b)).not.toContain("modeling_gpt2.py");
  });
});
