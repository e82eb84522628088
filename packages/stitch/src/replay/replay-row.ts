import type { ReplayResult } from "./replay.js";

/**
 * One replay as the tools print it (`gmlake replay --json`, a row of `compare --json`,
 * apps/bench's results.json): flat, JSON-stable, bytes as integers.
 */
export interface ReplayRow {
  trace: string;
  policy: string;
  driver: string;
  events: number;
  /**
   * Peak requested bytes: the requested sizes of blocks live between alloc and
   * free_completed. It depends on the trace alone, so every policy is measured against the
   * same number.
   */
  peakRequestedBytes: number;
  /**
   * Peak allocated as this policy counts it (PyTorch's max_memory_allocated: block sizes,
   * including remainders a policy does not split off or rounds up to chunks).
   */
  peakAllocatedBytes: number;
  /** Peak reserved (PyTorch's max_memory_reserved). */
  peakReservedBytes: number;
  /** peakRequestedBytes / peakReservedBytes: the same numerator for every policy, so a policy cannot look better by rounding blocks up. */
  utilization: number;
  /** The first out-of-memory under the capacity, or null. */
  oom: null | { eventIndex: number; requestBytes: number; reservedBytes: number; allocatedBytes: number };
  /** Driver calls by call name. */
  driverCalls: Record<string, number>;
  /** Driver time, microseconds: modelled (sim) or measured (host, cuda). */
  driverTimeUs: number;
  /** Driver calls made after the trace's midpoint event (0 = a steady state without driver work). */
  driverCallsSecondHalf: number;
  driverTimeUsSecondHalf: number;
  /** The trace's recorded duration (last - first time stamp). */
  traceDurationUs: number;
  wallMs: number;
  eventsPerSecond: number;
  integrityErrors: number;
  integrityChecked: number;
  /** Policy counters (stitches, GC runs ...). */
  counters: Record<string, number>;
}

export function replayRow(trace: string, traceDurationUs: number, r: ReplayResult): ReplayRow {
  let second = 0;
  for (const v of Object.values(r.driverCallsSecondHalf)) second += v;
  return {
    trace,
    policy: r.policy,
    driver: r.driver,
    events: r.events,
    peakRequestedBytes: r.peakRequestedBytes,
    peakAllocatedBytes: r.peakAllocatedBytes,
    peakReservedBytes: r.peakReservedBytes,
    utilization: r.utilization,
    oom: r.oom
      ? { eventIndex: r.oom.eventIndex, requestBytes: r.oom.requestBytes, reservedBytes: r.oom.reservedBytes, allocatedBytes: r.oom.allocatedBytes }
      : null,
    driverCalls: { ...r.driverCalls },
    driverTimeUs: r.driverTimeUs,
    driverCallsSecondHalf: second,
    driverTimeUsSecondHalf: r.driverTimeUsSecondHalf,
    traceDurationUs,
    wallMs: r.wallMs,
    eventsPerSecond: r.eventsPerSecond,
    integrityErrors: r.integrityErrors,
    integrityChecked: r.integrityChecked,
    counters: { ...r.counters },
  };
}
