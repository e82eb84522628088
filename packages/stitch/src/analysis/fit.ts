import type { EventLog } from "@gmlake/trace";
import { replay, type ReplayOptions } from "../replay/replay.js";
import { StitchError } from "../core/errors.js";

/**
 * 2 MiB: every byte an allocator reserves is a multiple of it. PyTorch's segments are
 * 2 MiB (small pool) or rounded up to 2 MiB (kRoundLarge), and cuMemCreate handles are
 * multiples of the driver's granularity (2 MiB on every current NVIDIA GPU; the H200's,
 * measured by `gmlake doctor`). A device of C bytes therefore behaves exactly like one of
 * floor(C / 2 MiB) x 2 MiB: a search over multiples of 2 MiB is exact, not approximate.
 */
export const FIT_RESOLUTION = 2 * 1024 * 1024;

export interface FitOptions extends Omit<ReplayOptions, "capacity" | "recorder" | "onOom" | "probe" | "until" | "sources"> {
  /** Peak reserved of a replay without a capacity (the search starts there); measured when absent. */
  peakReservedBytes?: number;
  /** Peak requested bytes of the trace (no device smaller than this can run it); measured when absent. */
  peakRequestedBytes?: number;
  /** Most replays the search may make (default 40: 2 MiB over 1 TiB takes 19, plus the climb above the peak). */
  maxReplays?: number;
}

export interface FitResult {
  /**
   * The smallest device capacity (bytes available to the allocator, a multiple of
   * FIT_RESOLUTION) on which the whole trace replays without an out-of-memory; null when
   * none was found within maxReplays.
   */
  smallestCapacityBytes: number | null;
  /** The capacity one resolution step below, which was seen to fail (or is below the trace's peak requested bytes). */
  failsAtBytes: number | null;
  /** Whether failsAtBytes was replayed (false: it fails by arithmetic, below the requested bytes live at the peak). */
  failureReplayed: boolean;
  resolutionBytes: number;
  /** Replays made by the search. */
  replays: number;
  /** Event index of the first out-of-memory at failsAtBytes (-1 when not replayed). */
  oomEventAtFailure: number;
}

const down = (b: number): number => Math.floor(b / FIT_RESOLUTION) * FIT_RESOLUTION;
const up = (b: number): number => Math.ceil(b / FIT_RESOLUTION) * FIT_RESOLUTION;

/**
 * The smallest capacity on which a policy runs the whole trace, by bisection over replays
 * (each stops at its first out-of-memory, so failing probes are cheap). The bounds: below
 * the trace's peak of requested bytes nothing fits (those bytes are live at once and
 * every byte needs memory); at the policy's own unconstrained peak reserved it usually
 * fits (a policy that reads free memory, as gmlake does, may decide differently there:
 * the search then climbs). The result is checked on both sides: it fits, and one
 * resolution step below it does not. Fit is assumed to be monotone in the capacity
 * between the two bounds (a policy could fit at some smaller capacity by luck; the
 * search reports the boundary it found). With several devices: the capacity each GPU
 * needs, the largest of the devices' answers (each device searched on its own events).
 */
export function smallestCapacity(log: EventLog, o: FitOptions): FitResult {
  // Each GPU has its own memory: with several devices, the capacity every one of them
  // needs (the largest of the per-device answers), each searched on its own events.
  if (o.device === undefined) {
    const devices = [...new Set(log.device.subarray(0, log.length))].sort((a, b) => a - b);
    if (devices.length > 1) {
      const per = devices.map((device) => smallestCapacity(log, { ...o, device, peakReservedBytes: undefined, peakRequestedBytes: undefined }));
      const replays = per.reduce((n, r) => n + r.replays, 0);
      const none = per.find((r) => r.smallestCapacityBytes === null);
      if (none) return { ...none, replays };
      const worst = per.reduce((a, b) => (b.smallestCapacityBytes! > a.smallestCapacityBytes! ? b : a));
      return { ...worst, replays };
    }
  }
  const maxReplays = o.maxReplays ?? 40;
  if (!(Number.isInteger(maxReplays) && maxReplays >= 1)) throw new StitchError("BAD_ARGUMENT", `Expected maxReplays >= 1 but received ${maxReplays}`);
  let replays = 0;
  const { peakReservedBytes: givenPeak, peakRequestedBytes: givenRequested, maxReplays: _m, ...rest } = o;
  const run = (capacity: number | undefined) => {
    replays++;
    return replay(log, { ...rest, capacity, recorder: null, onOom: "stop" });
  };
  let peakReserved = givenPeak;
  let peakRequested = givenRequested;
  if (peakReserved === undefined || peakRequested === undefined) {
    const r = run(undefined);
    if (r.oom) return { smallestCapacityBytes: null, failsAtBytes: null, failureReplayed: false, resolutionBytes: FIT_RESOLUTION, replays, oomEventAtFailure: -1 };
    peakReserved ??= r.peakReservedBytes;
    peakRequested ??= r.peakRequestedBytes;
  }
  // lo: a capacity known to fail; hi: one known to fit.
  let lo = peakRequested > 0 ? down(peakRequested - 1) : -FIT_RESOLUTION;
  let loReplayed = false;
  let loOom = -1;
  let hi = Math.max(up(peakReserved), lo + FIT_RESOLUTION);
  let found = false;
  // Climb until a capacity fits (usually the first try).
  let step = FIT_RESOLUTION;
  while (replays < maxReplays) {
    const r = run(hi);
    if (!r.oom) {
      found = true;
      break;
    }
    lo = hi;
    loReplayed = true;
    loOom = r.oom.eventIndex;
    hi += step;
    step *= 2;
  }
  if (!found) return { smallestCapacityBytes: null, failsAtBytes: lo, failureReplayed: loReplayed, resolutionBytes: FIT_RESOLUTION, replays, oomEventAtFailure: loOom };
  while (hi - lo > FIT_RESOLUTION && replays < maxReplays) {
    const mid = down(lo + (hi - lo) / 2);
    const r = run(mid);
    if (r.oom) {
      lo = mid;
      loReplayed = true;
      loOom = r.oom.eventIndex;
    } else hi = mid;
  }
  if (hi - lo > FIT_RESOLUTION) {
    // out of replays: hi fits, but the boundary is not pinned down to the resolution
    return { smallestCapacityBytes: hi, failsAtBytes: lo, failureReplayed: loReplayed, resolutionBytes: hi - lo, replays, oomEventAtFailure: loOom };
  }
  return { smallestCapacityBytes: Math.max(hi, 0), failsAtBytes: lo >= 0 ? lo : null, failureReplayed: loReplayed, resolutionBytes: FIT_RESOLUTION, replays, oomEventAtFailure: loOom };
}
