import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { SimDriver } from "@gmlake/vmm";
import { privatePoolTags, replay } from "@gmlake/stitch";
import { plotSvg, sampleTimeline, type PlotSeries } from "@gmlake/trace";
import type { Recorded } from "./recorded.js";
import { loadSnapshot } from "./task.js";

/**
 * One SVG per trace: the trace's live bytes, PyTorch's recorded reserved, and each
 * policy's reserved over the replay. Replays on the sim driver with a recorder (the
 * decisions do not depend on the driver; the worker runs keep no logs).
 */
export async function writeTracePlots(out: string, traces: { trace: string; path: string }[], policies: string[], recorded: Recorded[]): Promise<void> {
  for (const t of traces) {
    const s = await loadSnapshot(t.path);
    const rec = sampleTimeline(s.events);
    const mode = recorded.find((r) => r.trace === t.trace)?.mode ?? "caching";
    const series: PlotSeries[] = [
      { label: "live (trace)", live: rec.live, startUs: rec.startUs },
      { label: `PyTorch ${mode} (recorded)`, reserved: rec.reserved, startUs: rec.startUs },
    ];
    for (const policy of policies) {
      const r = replay(s.events, {
        policy,
        driver: new SimDriver(),
        settings: s.allocatorSettings,
        onOom: "stop",
        pools: privatePoolTags(s.events, s.segments),
      });
      if (!r.log) continue;
      const tl = sampleTimeline(r.log);
      series.push({ label: policy, reserved: tl.reserved, startUs: tl.startUs });
    }
    const file = join(out, `${t.trace.replace(/[^A-Za-z0-9._-]+/g, "_")}.svg`);
    writeFileSync(file, plotSvg(series, { title: `${t.trace}: live vs reserved`, subtitle: "each allocator replayed on the same requests (sim driver)" }));
  }
}
