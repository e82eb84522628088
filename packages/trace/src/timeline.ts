import { accountsPhysically, reservedDelta } from "./reserved-bytes.js";
import { EventKind } from "./event-kind.js";
import type { EventLog } from "./event-log.js";
import { roundSize } from "./round-size.js";

/** One sampled curve: bytes over time, at most the requested number of points. */
export interface TimelineSeries {
  timeUs: Float64Array;
  bytes: Float64Array;
}

export interface Timeline {
  /** Allocated bytes (rounded sizes of blocks live between alloc and free_completed). */
  allocated: TimelineSeries;
  /** Reserved bytes (segment and physical-memory events). */
  reserved: TimelineSeries;
  peakAllocatedBytes: number;
  peakReservedBytes: number;
  startUs: number;
  endUs: number;
}

export interface TimelineOptions {
  /** Most points per series (default 2000; at least 4), plus one holding the last value to the end. */
  maxPoints?: number;
  /** Only this device (default: device of the first event). */
  device?: number;
  /** Bucket by event index instead of time (for logs without meaningful times). */
  byIndex?: boolean;
  roundupPower2Divisions?: readonly number[];
}

/**
 * Bounded min/max downsampling: the range is cut into maxPoints/2 buckets and each bucket
 * keeps its lowest and highest value in the order they occurred, so peaks survive exactly.
 */
class Sampler {
  private readonly t: Float64Array;
  private readonly v: Float64Array;
  private n = 0;
  private bucket = -1;
  private minT = 0;
  private minV = Infinity;
  private maxT = 0;
  private maxV = -Infinity;
  private lastV = 0;
  private seen = false;

  constructor(maxPoints: number) {
    this.t = new Float64Array(maxPoints + 3);
    this.v = new Float64Array(maxPoints + 3);
  }

  add(bucket: number, t: number, v: number): void {
    this.lastV = v;
    this.seen = true;
    if (bucket !== this.bucket) {
      this.flush();
      this.bucket = bucket;
      this.minV = Infinity;
      this.maxV = -Infinity;
    }
    if (v < this.minV) {
      this.minV = v;
      this.minT = t;
    }
    if (v > this.maxV) {
      this.maxV = v;
      this.maxT = t;
    }
  }

  private flush(): void {
    if (this.bucket < 0) return;
    const first = this.minT <= this.maxT ? 0 : 1;
    const pts: Array<[number, number]> = first === 0 ? [[this.minT, this.minV], [this.maxT, this.maxV]] : [[this.maxT, this.maxV], [this.minT, this.minV]];
    if (this.minV === this.maxV) pts.length = 1;
    for (const [t, v] of pts) {
      if (this.n < this.t.length) {
        this.t[this.n] = t;
        this.v[this.n++] = v;
      }
    }
  }

  /** The points; the value at the end is held until endT (memory stays reserved). */
  finish(endT?: number): TimelineSeries {
    this.flush();
    this.bucket = -1;
    if (this.seen && endT !== undefined && this.n > 0 && this.t[this.n - 1] < endT) {
      this.t[this.n] = endT;
      this.v[this.n++] = this.lastV;
    }
    return { timeUs: this.t.slice(0, this.n), bytes: this.v.slice(0, this.n) };
  }
}

/** Allocated and reserved bytes of one device over time, at most `maxPoints` points each. */
export function sampleTimeline(log: EventLog, options: TimelineOptions = {}): Timeline {
  const maxPoints = Math.max(4, options.maxPoints ?? 2000);
  const buckets = Math.max(1, Math.floor(maxPoints / 2));
  const device = options.device ?? (log.length > 0 ? log.device[0] : 0);
  const divisions = options.roundupPower2Divisions;
  const { kind, addr, size, timeUs } = log;
  let first = -1;
  let last = -1;
  let count = 0;
  for (let i = 0; i < log.length; i++) {
    if (log.device[i] !== device) continue;
    if (first < 0) first = i;
    last = i;
    count++;
  }
  const allocated = new Sampler(maxPoints);
  const reserved = new Sampler(maxPoints);
  if (first < 0) {
    return { allocated: allocated.finish(), reserved: reserved.finish(), peakAllocatedBytes: 0, peakReservedBytes: 0, startUs: 0, endUs: 0 };
  }
  const t0 = timeUs[first];
  const t1 = timeUs[last];
  const span = options.byIndex ? count : t1 - t0;
  const blocks = new Map<number, number>();
  const physical = accountsPhysically(log);
  let allocatedBytes = 0;
  let reservedBytes = 0;
  let peakAllocated = 0;
  let peakReserved = 0;
  let j = 0;
  for (let i = first; i <= last; i++) {
    if (log.device[i] !== device) continue;
    const k = kind[i];
    let changedAllocated = false;
    let changedReserved = false;
    switch (k) {
      case EventKind.alloc: {
        const r = roundSize(size[i], divisions);
        const prev = blocks.get(addr[i]);
        if (prev !== undefined) allocatedBytes -= prev;
        blocks.set(addr[i], r);
        allocatedBytes += r;
        changedAllocated = true;
        break;
      }
      case EventKind.freeCompleted: {
        const prev = blocks.get(addr[i]);
        if (prev !== undefined) {
          blocks.delete(addr[i]);
          allocatedBytes -= prev;
          changedAllocated = true;
        }
        break;
      }
      case EventKind.segmentAlloc:
      case EventKind.segmentMap:
      case EventKind.physicalCreate:
      case EventKind.segmentFree:
      case EventKind.segmentUnmap:
      case EventKind.physicalRelease: {
        const d = reservedDelta(kind[i], size[i], physical);
        if (d !== 0) {
          reservedBytes += d;
          changedReserved = true;
        }
        break;
      }
    }
    const pos = options.byIndex ? j : timeUs[i] - t0;
    const b = span > 0 ? Math.min(buckets - 1, Math.floor((pos / span) * buckets)) : 0;
    const t = options.byIndex ? j : timeUs[i];
    if (changedAllocated) {
      allocated.add(b, t, allocatedBytes);
      if (allocatedBytes > peakAllocated) peakAllocated = allocatedBytes;
    }
    if (changedReserved) {
      reserved.add(b, t, reservedBytes);
      if (reservedBytes > peakReserved) peakReserved = reservedBytes;
    }
    j++;
  }
  const end = options.byIndex ? count - 1 : t1;
  return { allocated: allocated.finish(end), reserved: reserved.finish(end), peakAllocatedBytes: peakAllocated, peakReservedBytes: peakReserved, startUs: options.byIndex ? 0 : t0, endUs: end };
}
