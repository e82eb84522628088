import { privatePoolTags, replay, replayRow, type ReplayResult, type ReplayRow } from "@gmlake/stitch";
import type { LoadedTrace } from "./load-trace.js";
import { asUsage, openDriver, type DriverChoice } from "./options.js";

export interface RunOptions {
  policy: string;
  driver: DriverChoice;
  capacity?: number;
  options?: Record<string, unknown>;
  integrity?: boolean | "full";
  checkInvariants?: boolean;
  /** Keep the allocator's event log (for plots and exports). */
  record?: boolean;
  /** With record: map each row of the log to the trace event that caused it (stacks in exports). */
  sources?: boolean;
}

export function runReplay(t: LoadedTrace, o: RunOptions): { row: ReplayRow; result: ReplayResult } {
  const driver = openDriver(o.driver, o.capacity, o.integrity);
  try {
    const s = t.snapshot;
    const result = asUsage(() =>
      replay(s.events, {
        policy: o.policy,
        driver,
        options: o.options,
        capacity: o.capacity,
        settings: s.allocatorSettings,
        integrity: o.integrity ?? (driver.name !== "sim"),
        checkInvariants: o.checkInvariants ?? false,
        recorder: o.record ? undefined : null,
        sources: o.record === true && o.sources === true,
        onOom: "stop",
        pools: privatePoolTags(s.events, s.segments),
      }),
    );
    const ev = s.events;
    const durationUs = ev.length > 0 ? ev.timeUs[ev.length - 1] - ev.timeUs[0] : 0;
    return { row: replayRow(t.name, durationUs, result), result };
  } finally {
    driver.close();
  }
}

export type { ReplayRow };
