import { computeStats } from "@gmlake/trace";
import { loadSnapshot } from "./task.js";

/** What PyTorch itself measured in a trace: its mode, peak requested bytes and peak reserved. */
export interface Recorded {
  trace: string;
  mode: "caching" | "expandable";
  events: number;
  durationUs: number;
  peakRequestedBytes: number;
  peakReservedBytes: number;
  utilization: number;
  /** Entries of actions the reader does not know, skipped (a newer PyTorch's?): action -> count. */
  unknownActions: Record<string, number>;
}

export async function recordedFigures(trace: string, path: string): Promise<Recorded> {
  const s = await loadSnapshot(path);
  const st = computeStats(s.events, { roundupPower2Divisions: s.allocatorSettings.roundupPower2Divisions });
  return {
    trace,
    mode: s.allocatorSettings.expandableSegments ? "expandable" : "caching",
    events: s.events.length,
    durationUs: st.lastTimeUs - st.firstTimeUs,
    peakRequestedBytes: st.peakRequestedBytes,
    peakReservedBytes: st.peakReservedBytes,
    utilization: st.peakReservedBytes > 0 ? st.peakRequestedBytes / st.peakReservedBytes : 1,
    unknownActions: { ...s.unknownActions },
  };
}

/** "gpt2_ft_expandable" and "gpt2_ft" are one workload recorded in PyTorch's two modes. */
export function workloadOf(trace: string): string {
  // gpt2_ft ~ gpt2_ft_expandable; small/train_default ~ small/train_expandable; small/default_end ~ small/expandable_end
  const slash = trace.lastIndexOf("/");
  const words = trace.slice(slash + 1).split("_").filter((w) => w !== "default" && w !== "expandable");
  return trace.slice(0, slash + 1) + words.join("_");
}
