import { SimDriver, type VmmDriver } from "@gmlake/vmm";
import { EventKind, EVENT_KIND_NAMES, type AllocatorSettings, type EventLog, type SegmentState } from "@gmlake/trace";
import { AddressOracleDriver } from "../driver-adaptors/address-oracle.js";
import { StitchError } from "../core/errors.js";
import { privatePoolTags } from "../replay/private-pools.js";
import { replay, type ReplayResult } from "../replay/replay.js";

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
  /**
   * Give memAlloc the recorded segment addresses (default true). Without it the model runs
   * free, on the driver's own placement (the sim models cudaMalloc's), and caching's
   * addresses are compared as (segment ordinal, offset).
   */
  addressOracle?: boolean;
  checkInvariants?: boolean | number;
}

export interface SegmentEvent {
  kind: string;
  addr: number;
  size: number;
  /** Expandable: the segment's ordinal (by first map) and the offset in it; caching: 0 and addr, or (free-running) the segment's ordinal and 0. */
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
  /** The segment decisions and the peak reserved equal the recording's (what a free-running model can promise). */
  decisionsMatch: boolean;
  /** decisionsMatch, and every alloc at the recorded place too. */
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

/**
 * Names cudaMalloc'd addresses by (segment ordinal, offset), the ordinal counting
 * segment_allocs: two runs whose driver placed segments at different addresses compare
 * equal when they made the same decisions (a free-running replay has no recorded
 * addresses to give back).
 */
class CachingNamer {
  private readonly starts: number[] = [];
  private readonly ends: number[] = [];
  private readonly ordinals: number[] = [];
  private next = 0;
  private pos(addr: number): number {
    const s = this.starts;
    let lo = 0;
    let hi = s.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (s[mid]! <= addr) lo = mid + 1;
      else hi = mid;
    }
    return lo - 1; // last start <= addr
  }
  open(addr: number, size: number): [number, number] {
    const i = this.pos(addr) + 1;
    this.starts.splice(i, 0, addr);
    this.ends.splice(i, 0, addr + size);
    this.ordinals.splice(i, 0, this.next);
    return [this.next++, 0];
  }
  close(addr: number): [number, number] {
    const i = this.pos(addr);
    if (i < 0 || this.starts[i] !== addr) return [-1, addr];
    const o = this.ordinals[i]!;
    this.starts.splice(i, 1);
    this.ends.splice(i, 1);
    this.ordinals.splice(i, 1);
    return [o, 0];
  }
  name(addr: number): [number, number] {
    const i = this.pos(addr);
    if (i < 0 || addr >= this.ends[i]!) return [-1, addr];
    return [this.ordinals[i]!, addr - this.starts[i]!];
  }
}

interface Extracted {
  seg: SegmentEvent[];
  allocs: number[];
  allocEvents: number[];
  peak: number;
}

/** How a run's addresses are named for comparison: raw, by reserved range (VMM policies), or by cudaMalloc'd segment. */
type Naming = "raw" | "range" | "segment";

function extract(log: EventLog, device: number, naming: Naming, span: number): Extracted {
  const namer = new SegmentNamer(span);
  const cnamer = new CachingNamer();
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
      const [sg, off] =
        naming === "range"
          ? namer.name(a, k === EventKind.segmentMap)
          : naming === "segment"
            ? k === EventKind.segmentAlloc
              ? cnamer.open(a, s)
              : cnamer.close(a)
            : [0, a];
      seg.push({ kind: EVENT_KIND_NAMES[k]!, addr: a, size: s, segment: sg, offset: off });
    } else if (k === EventKind.alloc) {
      // by range: the map before it has opened it
      allocs.push(naming === "range" ? encode(namer.name(a, false)) : naming === "segment" ? encode(cnamer.name(a)) : a);
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
  // Policies on the VMM API (expandable; vms, gmlake: a live recording of ours) are compared by
  // offset inside each reserved range, which no two drivers place alike; caching by raw
  // addresses under the address oracle, or by (segment, offset) free-running.
  const onVmm = policy !== "caching";
  let driver: VmmDriver = o.driver ?? new SimDriver();
  const span = driver.device.totalBytes;
  const oracle = !onVmm && (o.addressOracle ?? true);
  if (oracle) driver = AddressOracleDriver.fromLog(driver, log);
  const naming: Naming = onVmm ? "range" : oracle ? "raw" : "segment";
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
    const a = extract(log, d, naming, span);
    const b = extract(out, d, naming, span);
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
    decisionsMatch: firstMismatch === null && recPeak === r.peakReservedBytes,
    match: firstMismatch === null && firstAllocMismatch === null && recPeak === r.peakReservedBytes,
    replay: r,
  };
}
