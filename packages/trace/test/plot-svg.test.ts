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
    expect(svg).toContain("peak 5.00 GiB; reserved (dashed), peak 8.00 GiB");
    // balanced tags
    expect(svg.match(/<text/g)?.length).toBe(svg.match(/<\/text>/g)?.length);
  });
});
