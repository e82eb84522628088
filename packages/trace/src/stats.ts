import { accountsPhysically, reservedDelta } from "./reserved-bytes.js";
import { EVENT_KIND_NAMES, EventKind } from "./event-kind.js";
import type { EventLog } from "./event-log.js";
import { roundSize } from "./round-size.js";

export interface StatsOptions {
  /** Only this device's events (default: all). */
  device?: number;
  /**
   * roundup_power2_divisions (16 entries, see AllocatorSettings) used to round block sizes
   * for `peakAllocatedBytes`; default: plain 512-byte rounding.
   */
  roundupPower2Divisions?: readonly number[];
}

/** Memory figures of one device (a device's events are one chronological stream). */
export interface DeviceStats {
  device: number;
  events: number;
  /**
   * Peak of the requested bytes of live blocks (alloc .. free_completed): a property of the
   * trace, the same for every allocator that serves it.
   */
  peakRequestedBytes: number;
  /** Requested bytes live at the end. */
  requestedBytes: number;
  /**
   * Peak of allocated bytes as far as a trace shows them: rounded sizes (roundSize) of live
   * blocks. torch.cuda.max_memory_allocated() counts the allocator's block sizes, which
   * include remainders a trace cannot show, so this is its lower bound (equal to the traces
   * README's "peak allocated" to 2 decimals in GiB on every trace).
   */
  peakAllocatedBytes: number;
  /** Event index where peakAllocatedBytes was first reached (-1 without allocations). */
  peakAllocatedIndex: number;
  /** Allocated (rounded) bytes live at the end. */
  allocatedBytes: number;
  /** Reserved bytes at the end: segment_alloc - segment_free + segment_map - segment_unmap, or, in a log with physical-handle events, physicalCreate - physicalRelease + plain segments (see reserved-bytes.ts). */
  reservedBytes: number;
  /** Peak of the running reserved sum (= torch.cuda.max_memory_reserved() for a complete trace). */
  peakReservedBytes: number;
  peakReservedIndex: number;
  /** peakRequestedBytes / peakReservedBytes (0 when nothing was reserved). */
  utilization: number;
  /** free_completed of blocks that were not live (overflowed history or a broken log). */
  unmatchedFrees: number;
  firstTimeUs: number;
  lastTimeUs: number;
}

export interface TraceStats extends Omit<DeviceStats, "device" | "peakAllocatedIndex" | "peakReservedIndex"> {
  /**
   * With one device: that device's figures. With several: peaks are the sum of per-device
   * peaks (each device's memory is separate), end values are sums.
   */
  devices: number[];
  byDevice: DeviceStats[];
  /** Event counts by kind name (EVENT_KIND_NAMES), kinds with no events left out. */
  countsByKind: Record<string, number>;
  /** Event counts per raw stream value, in order of first appearance. */
  countsByStream: Array<{ stream: number; events: number }>;
  /** Event counts per device index. */
  countsByDevice: Record<number, number>;
}

interface DeviceAcc {
  s: DeviceStats;
  live: Map<number, number>;
  allocated: number;
  requested: number;
  reserved: number;
}

/** Statistics of any EventLog, one pass over the typed columns. */
export function computeStats(log: EventLog, options: StatsOptions = {}): TraceStats {
  const { kind, addr, size, device, timeUs, stream } = log;
  const divisions = options.roundupPower2Divisions;
  const useDivisions = divisions !== undefined && divisions.some((d) => d > 1);
  const only = options.device;
  const accs: (DeviceAcc | undefined)[] = new Array(256);
  const kindCounts = new Float64Array(256);
  const streamCounts = new Float64Array(log.streams.length);
  const physical = accountsPhysically(log);
  for (let i = 0; i < log.length; i++) {
    const d = device[i];
    if (only !== undefined && d !== only) continue;
    let a = accs[d];
    if (a === undefined) {
      a = accs[d] = {
        s: {
          device: d, events: 0, peakRequestedBytes: 0, requestedBytes: 0, peakAllocatedBytes: 0, peakAllocatedIndex: -1, allocatedBytes: 0,
          reservedBytes: 0, peakReservedBytes: 0, peakReservedIndex: -1, utilization: 0, unmatchedFrees: 0,
          firstTimeUs: timeUs[i], lastTimeUs: timeUs[i],
        },
        live: new Map(),
        allocated: 0,
        requested: 0,
        reserved: 0,
      };
    }
    const s = a.s;
    s.events++;
    s.lastTimeUs = timeUs[i];
    const k = kind[i];
    kindCounts[k]++;
    streamCounts[stream[i]]++;
    switch (k) {
      case EventKind.alloc: {
        const sz = size[i];
        const prev = a.live.get(addr[i]);
        if (prev !== undefined) {
          // The same address allocated twice without a free: the first one is gone.
          a.requested -= prev;
          a.allocated -= useDivisions ? roundSize(prev, divisions) : roundSize(prev);
        }
        a.live.set(addr[i], sz);
        a.requested += sz;
        a.allocated += useDivisions ? roundSize(sz, divisions) : roundSize(sz);
        if (a.requested > s.peakRequestedBytes) s.peakRequestedBytes = a.requested;
        if (a.allocated > s.peakAllocatedBytes) {
          s.peakAllocatedBytes = a.allocated;
          s.peakAllocatedIndex = i;
        }
        break;
      }
      case EventKind.freeCompleted: {
        const prev = a.live.get(addr[i]);
        if (prev === undefined) {
          s.unmatchedFrees++;
        } else {
          a.live.delete(addr[i]);
          a.requested -= prev;
          a.allocated -= useDivisions ? roundSize(prev, divisions) : roundSize(prev);
        }
        break;
      }
      case EventKind.segmentAlloc:
      case EventKind.segmentMap:
      case EventKind.physicalCreate:
        a.reserved += reservedDelta(k, size[i], physical);
        if (a.reserved > s.peakReservedBytes) {
          s.peakReservedBytes = a.reserved;
          s.peakReservedIndex = i;
        }
        break;
      case EventKind.segmentFree:
      case EventKind.segmentUnmap:
      case EventKind.physicalRelease:
        a.reserved += reservedDelta(k, size[i], physical);
        break;
    }
  }
  const byDevice: DeviceStats[] = [];
  for (const a of accs) {
    if (a === undefined) continue;
    const s = a.s;
    s.allocatedBytes = a.allocated;
    s.requestedBytes = a.requested;
    s.reservedBytes = a.reserved;
    s.utilization = s.peakReservedBytes > 0 ? s.peakRequestedBytes / s.peakReservedBytes : 0;
    byDevice.push(s);
  }
  const sum = (f: (s: DeviceStats) => number): number => byDevice.reduce((n, s) => n + f(s), 0);
  const countsByKind: Record<string, number> = {};
  for (let k = 0; k < EVENT_KIND_NAMES.length; k++) if (kindCounts[k] > 0) countsByKind[EVENT_KIND_NAMES[k]] = kindCounts[k];
  for (let k = EVENT_KIND_NAMES.length; k < 256; k++) if (kindCounts[k] > 0) countsByKind[`kind${k}`] = kindCounts[k];
  const countsByStream: Array<{ stream: number; events: number }> = [];
  for (let i = 0; i < streamCounts.length; i++) if (streamCounts[i] > 0) countsByStream.push({ stream: log.streams[i], events: streamCounts[i] });
  const countsByDevice: Record<number, number> = {};
  for (const s of byDevice) countsByDevice[s.device] = s.events;
  const peakRequested = sum((s) => s.peakRequestedBytes);
  const peakReserved = sum((s) => s.peakReservedBytes);
  return {
    devices: byDevice.map((s) => s.device),
    byDevice,
    events: sum((s) => s.events),
    peakRequestedBytes: peakRequested,
    requestedBytes: sum((s) => s.requestedBytes),
    peakAllocatedBytes: sum((s) => s.peakAllocatedBytes),
    allocatedBytes: sum((s) => s.allocatedBytes),
    reservedBytes: sum((s) => s.reservedBytes),
    peakReservedBytes: peakReserved,
    utilization: peakReserved > 0 ? peakRequested / peakReserved : 0,
    unmatchedFrees: sum((s) => s.unmatchedFrees),
    firstTimeUs: byDevice.length ? Math.min(...byDevice.map((s) => s.firstTimeUs)) : 0,
    lastTimeUs: byDevice.length ? Math.max(...byDevice.map((s) => s.lastTimeUs)) : 0,
    countsByKind,
    countsByStream,
    countsByDevice,
  };
}
