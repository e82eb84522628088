import { describe, expect, it } from "vitest";
import { niceStep, plotSvg, sampleTimeline, timelineSeries } from "../src/index.js";
import { K, logOf } from "./helpers.js";

describe("plotSvg", () => {
  it("nice tick steps", () => {
    expect(niceStep(30.79, 5)).toBe(10);
    expect(niceStep(5.3, 5)).toBe(2);
    expect(niceStep(11, 5)).toBe(2.5);
    expect(niceStep(0.9, 5)).toBe(0.2);
    expect(niceStep(0)).toBe(1);
  });

  it("draws allocated (solid) and reserved (dashed) per run, with axes, legend and title", () => {
    const G = 2 ** 30;
    const a = logOf([[K.segmentAlloc, 0, 8 * G, 0], [K.alloc, 1, 5 * G, 1e6], [K.freeCompleted, 1, 5 * G, 3e6]]);
    const b = logOf([[K.segmentMap, 0, 6 * G, 100], [K.alloc, 1, 5.5 * G, 2e6]]);
    const svg = plotSvg([timelineSeries("default", sampleTimeline(a)), timelineSeries("expandable <x>", sampleTimeline(b))], { title: "gpt2 & co" });
    expect(svg.startsWith("<svg")).toBe(true);
    expect(svg.trimEnd().endsWith("</svg>")).toBe(true);
    expect(svg).toContain("gpt2 &amp; co");
    expect(svg).toContain("expandable &lt;x&gt;");
    expect(svg).toContain("memory (GiB)");
    expect(svg).toContain("time (s)");
    expect(svg.match(/<path /g)?.length).toBe(4);
    expect(svg.match(/stroke-dasharray="7 4"/g)?.length).toBe(2 + 2); // 2 curves + 2 legend swatches
    // y axis: 0..8 GiB in steps of 2 (peak 8 GiB reserved)
    for (const t of ["0", "2", "4", "6", "8"]) expect(svg).toMatch(new RegExp(`>${t}</text>`));
    expect(svg).toContain("default reserved 8.00 / allocated 5.00 GiB");
    // balanced tags
    expect(svg.match(/<text/g)?.length).toBe(svg.match(/<\/text>/g)?.length);
  });

  it("the recorded run on top in its own style, a capacity line, OOM markers, a legend of one row", () => {
    const G = 2 ** 30;
    const rec = logOf([[K.segmentAlloc, 0, 8 * G, 0], [K.alloc, 1, 5 * G, 1e6], [K.freeCompleted, 1, 5 * G, 3e6]]);
    const run = logOf([[K.segmentAlloc, 0, 6 * G, 0], [K.alloc, 1, 5 * G, 1e6]]);
    const tl = sampleTimeline(run);
    const r = sampleTimeline(rec);
    const svg = plotSvg(
      [
        { label: "PyTorch (recorded)", reserved: r.reserved, startUs: r.startUs, emphasis: "recorded" },
        { label: "a", reserved: tl.reserved, startUs: tl.startUs },
        { label: "b", reserved: tl.reserved, startUs: tl.startUs, oomAtUs: 1e6 },
        { label: "allocated", allocated: r.allocated, startUs: r.startUs },
      ],
      { capacityBytes: 7 * G, capacityLabel: "capacity 7 GiB" },
    );
    const paths = [...svg.matchAll(/<path d="[^"]*" fill="none" ([^/]*)\/>/g)].map((m) => m[1]);
    // the recorded run is drawn after every model line: on top
    expect(paths[paths.length - 1]).toMatch(/stroke="#111111" stroke-width="2.2" stroke-dasharray="2 3"/);
    expect(svg).toContain('stroke-dasharray="10 3 2 3"');
    expect(svg).toContain(">capacity 7 GiB</text>");
    expect(svg).toContain(">OOM b</text>");
    expect(svg).toContain("b 6.00 GiB (OOM)");
    // four entries in one legend row: the plot starts right below it
    const ys = [...svg.matchAll(/<text x="[\d.]+" y="([\d.]+)" dy="4" font-size="12" fill="#222">/g)].map((m) => Number(m[1]));
    expect(new Set(ys).size).toBe(1);
    expect(svg).toContain("memory (GiB)");
  });
});
