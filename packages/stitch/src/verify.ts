import { SimDriver, type VmmDriver } from "@gmlake/vmm";
import { EventKind, EVENT_KIND_NAMES, type AllocatorSettings, type EventLog, type SegmentState } from "@gmlake/trace";
import { AddressOracleDriver } from "./address-oracle.js";
import { StitchError } from "./errors.js";
import { privatePoolTags } from "./private-pools.js";
import { replay, type ReplayResult } from "./replay.js";

export interface SnapshotLike {
  events: EventLog;
  allocatorSettings: AllocatorSettings;
  /** Dump-time segment state: tells which allocations went to private memory pools. */
  segments?: readonly SegmentState[];
}

export interface VerifyOptions {
  /** Default: `expandable` when the trace was recorded with expandable segments, else `caching`. */
  policy?: string;
  /** Default: a fresh SimDriver (an H200's capacity). */
  driver?: VmmDriver;
  /** Give memAlloc the recorded segment addresses (default true). */
  addressOracle?: boolean;
  checkInvariants?: boolean | number;
}

export interface SegmentEvent {
  kind: string;
  addr: number;
  size: number;
  /** Expandable: the segment's ordinal (by first map) and the offset in it; caching: 0 and addr. */
  segment: number;
  offset: number;
}

export interface VerifyResult {
  policy: string;
  recordedSegments: number;
  replayedSegments: number;
  firstMismatch: { index: number; device: number; recorded: SegmentEvent | null; replayed: SegmentEvent | null } | null;
  /** First alloc whose replayed block address differs from the recorded one (null = all equal). */
  firstAllocMismatch: { eventIndex: number; allocIndex: number; recorded: number; replayed: number } | null;
  allocsCompared: number;
  recordedPeakReservedBytes: number;
  replayedPeakReservedBytes: number;
  match: boolean;
  replay: ReplayResult;
}

const SEG = (k: number) => k >= EventKind.segmentAlloc && k <= EventKind.segmentUnmap;

/**
 * Names addresses by (segment ordinal, offset) so that two runs with different reserved
 * ranges compare equal: an address belongs to the known segment with the greatest base
 * <= it when within `span` bytes of it, else it opens a new segment (first maps of an
 * expandable segment are at its base).
 */
class SegmentNamer {
  private readonly bases: number[] = [];
  constructor(private readonly span: number) {}
  name(addr: number, open: boolean): [number, number] {
    let best = -1;
    for (let i = 0; i < this.bases.length; i++) {
      const b = this.bases[i]!;
      if (b <= addr && addr - b < this.span && (best < 0 || b > this.bases[best]!)) best = i;
    }
    if (best < 0) {
      if (!open) return [-1, addr];
      this.bases.push(addr);
      best = this.bases.length - 1;
    }
    return [best, addr - this.bases[best]!];
  }
}

interface Extracted {
  seg: SegmentEvent[];
  allocs: number[];
  allocEvents: number[];
  peak: number;
}

function extract(log: EventLog, device: number, expandable: boolean, span: number): Extracted {
  const namer = new SegmentNamer(span);
  const seg: SegmentEvent[] = [];
  const allocs: number[] = [];
  const allocEvents: number[] = [];
  let cur = 0;
  let peak = 0;
  for (let i = 0; i < log.length; i++) {
    if (log.device[i] !== device) continue;
    const k = log.kind[i]!;
    const a = log.addr[i]!;
    if (SEG(k)) {
      const s = log.size[i]!;
      cur += k === EventKind.segmentAlloc || k === EventKind.segmentMap ? s : -s;
      if (cur > peak) peak = cur;
      const [sg, off] = expandable ? namer.name(a, k === EventKind.segmentMap) : [0, a];
      seg.push({ kind: EVENT_KIND_NAMES[k]!, addr: a, size: s, segment: sg, offset: off });
    } else if (k === EventKind.alloc) {
      // expandable: name by segment, which the map before it has opened
      allocs.push(expandable ? encode(namer.name(a, false)) : a);
      allocEvents.push(i);
    }
  }
  return { seg, allocs, allocEvents, peak };
}

const encode = ([s, off]: [number, number]) => (s < 0 ? -1 : s * 2 ** 47 + off);

/**
 * Replay a trace with the model of the allocator that recorded it and compare the
 * segment decisions event for event (sizes, order, and addresses: raw ones under the
 * address oracle, segment offsets for expandable), the peak reserved, and every alloc's
 * block address.
 */
export function verify(snapshot: SnapshotLike, o: VerifyOptions = {}): VerifyResult {
  if (!snapshot || !snapshot.events) throw new StitchError("BAD_ARGUMENT", "verify needs { events, allocatorSettings }");
  const log = snapshot.events;
  const settings = snapshot.allocatorSettings;
  const policy = o.policy ?? (settings.expandableSegments ? "expandable" : "caching");
  const expandable = policy === "expandable";
  let driver: VmmDriver = o.driver ?? new SimDriver();
  const span = driver.device.totalBytes;
  if (!expandable && (o.addressOracle ?? true)) driver = AddressOracleDriver.fromLog(driver, log);
  const r = replay(log, { policy, driver, settings, checkInvariants: o.checkInvariants, onOom: "continue", teardown: false, pools: privatePoolTags(log, snapshot.segments) });
  const out = r.log!;
  const devices = new Set<number>();
  for (let i = 0; i < log.length; i++) devices.add(log.device[i]!);
  let firstMismatch: VerifyResult["firstMismatch"] = null;
  let firstAllocMismatch: VerifyResult["firstAllocMismatch"] = null;
  let recordedSegments = 0;
  let replayedSegments = 0;
  let recPeak = 0;
  let allocsCompared = 0;
  for (const d of [...devices].sort((a, b) => a - b)) {
    const a = extract(log, d, expandable, span);
    const b = extract(out, d, expandable, span);
    recordedSegments += a.seg.length;
    replayedSegments += b.seg.length;
    recPeak = Math.max(recPeak, a.peak);
    const n = Math.max(a.seg.length, b.seg.length);
    for (let i = 0; i < n && firstMismatch === null; i++) {
      const x = a.seg[i] ?? null;
      const y = b.seg[i] ?? null;
      if (x === null || y === null || x.kind !== y.kind || x.size !== y.size || x.segment !== y.segment || x.offset !== y.offset) {
        firstMismatch = { index: i, device: d, recorded: x, replayed: y };
      }
    }
    const m = Math.min(a.allocs.length, b.allocs.length);
    allocsCompared += m;
    for (let i = 0; i < m && firstAllocMismatch === null; i++) {
      if (a.allocs[i] !== b.allocs[i]) {
        firstAllocMismatch = { eventIndex: a.allocEvents[i]!, allocIndex: i, recorded: a.allocs[i]!, replayed: b.allocs[i]! };
      }
    }
  }
  return {
    policy,
    recordedSegments,
    replayedSegments,
    firstMismatch,
    firstAllocMismatch,
    allocsCompared,
    recordedPeakReservedBytes: recPeak,
    replayedPeakReservedBytes: r.peakReservedBytes,
    match: firstMismatch === null && firstAllocMismatch === null && recPeak === r.peakReservedBytes,
    replay: r,
  };
}
