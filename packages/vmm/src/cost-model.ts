/**
 * What each driver call costs on an H200 (driver 580.159, CUDA 13.0). Two tables:
 * H200_COSTS, medians measured one call at a time (../shared/reference/vmm-costs.md), and
 * H200_REPLAY_COSTS, means of every call made while replaying real traces on the cuda
 * driver (benchmarks/h200-2026-12-01/driver-time.md), 1.5-5x the isolated figures. The sim
 * driver charges H200_REPLAY_COSTS by default, so a replay's modelled driver time predicts
 * what the same replay measures on the H200. Override any entry through
 * `new SimDriver({ costs: { ... } })` or `createDriver("sim", { costs })`
 * (`costs: H200_COSTS` for the microbenchmark's figures).
 */

/** Cost by size: microseconds at each measured size, bytes ascending. */
export type SizeCurve = ReadonlyArray<readonly [bytes: number, us: number]>;

export interface CostTable {
  /** cuMemCreate, by handle size. */
  readonly memCreate: SizeCurve;
  /** cuMemRelease, by handle size. */
  readonly memRelease: SizeCurve;
  /** cuMemMap, by mapped bytes. */
  readonly memMap: SizeCurve;
  /** cuMemUnmap, per mapping in the range, by that mapping's size. */
  readonly memUnmap: SizeCurve;
  /** cuMemSetAccess, per mapping in the range, by that mapping's size. */
  readonly memSetAccess: SizeCurve;
  /** cuMemAlloc (cudaMalloc), by size. */
  readonly memAlloc: SizeCurve;
  /** cuMemFree (cudaFree), by size. */
  readonly memFree: SizeCurve;
  /**
   * Extra cost of a cuMemCreate that takes the driver past the most physical memory it has
   * held (memory new to the process: the driver finds fresh pages), flat per call.
   */
  readonly memCreateFirstTouch: number;
  /** The same for cuMemAlloc (cudaMalloc). */
  readonly memAllocFirstTouch: number;
  /** cuMemAddressReserve, flat. */
  readonly memAddressReserve: number;
  /** cuMemAddressFree, flat. */
  readonly memAddressFree: number;
  /** cuMemGetInfo, flat (not measured: an assumed 1 us). */
  readonly memGetInfo: number;
  /**
   * Streams and events, flat, on an idle device (events complete at once in the sim).
   * Not measured on the H200 yet: assumed figures of the usual order of these calls.
   */
  readonly eventCreate: number;
  readonly eventRecord: number;
  readonly eventQuery: number;
  readonly eventSynchronize: number;
  readonly eventDestroy: number;
  readonly streamWaitEvent: number;
  readonly streamSynchronize: number;
  readonly ctxSynchronize: number;
}

const MiB = 1024 * 1024;
const at = (us2: number, us20: number, us64: number, us512: number): SizeCurve =>
  Object.freeze([
    [2 * MiB, us2],
    [20 * MiB, us20],
    [64 * MiB, us64],
    [512 * MiB, us512],
  ] as const);

/** The H200 figures of vmm-costs.md (reserve/free: mean of the four measured runs). */
export const H200_COSTS: CostTable = Object.freeze({
  memCreate: at(12.83, 9.17, 9.75, 15.25),
  memRelease: at(10.43, 15.34, 27.84, 171.39),
  memMap: at(1.12, 0.6, 0.54, 0.65),
  memUnmap: at(16.91, 16.37, 16.45, 23.44),
  memSetAccess: at(34.17, 24.82, 25.5, 46.16),
  memAlloc: at(38.35, 48.08, 51.04, 81.09),
  memFree: at(33.52, 45.1, 61.02, 205.81),
  // the microbenchmark did not separate memory new to the process
  memCreateFirstTouch: 0,
  memAllocFirstTouch: 0,
  memAddressReserve: (40.57 + 21.76 + 18.77 + 17.69) / 4,
  memAddressFree: (47.21 + 19.34 + 22.35 + 15.14) / 4,
  memGetInfo: 1,
  eventCreate: 1,
  eventRecord: 2,
  eventQuery: 0.5,
  eventSynchronize: 1,
  eventDestroy: 1,
  streamWaitEvent: 1.5,
  streamSynchronize: 2,
  ctxSynchronize: 3,
});

/**
 * Per-call means measured inside replays on the H200 (cuda driver, every trace of
 * ../shared/traces and corpus/ under vms, caching, expandable and gmlake, two rounds;
 * benchmarks/h200-2026-12-01/driver-time.md). Where the policies' means differ, vms's own
 * (the policy whose decisions this model steers) within the range of the others:
 * - memCreate: flat in size, 22 us (vms 21-23 at every size, first half; expandable 18-27,
 *   gmlake's 2 MiB handles 17).
 * - First touch (a create / alloc that takes the driver past the most physical memory it
 *   has held, so a replay on a fresh driver pays it for all its growth, as a training
 *   process's first step does, and as `replay` and `compare` replay): fitted to every trace
 *   replayed in its own process (scripts/gpu/driver-time-fresh.sh, two runs on two days'
 *   hosts: benchmarks/h200-2026-12-01/driver-time-fresh-run1.md, -run2.md and -runs-run2.md).
 *   cudaMalloc +9.8 us: caching's fresh allocs took 80.0 us on the mean of the two runs
 *   (86.8 and 73.1) where this table's curve gives 70.2 for the same allocs; the 54.5 fitted
 *   before, from one process replaying every trace (120.8 vs 66.3 us medians there), charged
 *   caching +56% in fresh processes. cuMemCreate +2.7 us: vms's fresh creates 24.7 us
 *   (expandable's 19.6); the 8.8 of that one-process run (vms's 702 such creates 30.5 us)
 *   did not recur. That run's first-touch cudaMallocs also held one of 57 ms and a few of
 *   2-17 ms (not modelled; the fresh runs' largest took 3.1 ms).
 * - memSetAccess: 39 us per mapping in the range whatever its size (vms 37-41 per mapping
 *   for 1 to > 64 mappings; expandable 33, gmlake 34).
 * - memUnmap: per mapping, 36 us during the workload (vms's moves of free handles: 36.7;
 *   at teardown every policy's unmaps take 24-28).
 * - memMap: 3.3 us (2.8-3.4 across policies), flat.
 * - memRelease: 20-28 us up to 20 MiB, 48 at 64 MiB (vms, expandable); 512 MiB not seen
 *   in replays (the microbenchmark's figure kept).
 * - memAlloc / memFree: caching's, by size (the > 512 MiB means carry first-touch outliers
 *   of up to 57 ms and are left out: the curve extends the 66-512 MiB slope).
 * - memAddressReserve 45 (vms 50, gmlake 33, expandable 26), memAddressFree at teardown
 *   only (kept at the microbenchmark's mean).
 */
export const H200_REPLAY_COSTS: CostTable = Object.freeze({
  ...H200_COSTS,
  memCreate: at(22, 22, 22, 22),
  memRelease: at(20, 27.5, 48, 171.39),
  memMap: at(3.3, 3.3, 3.3, 3.3),
  memUnmap: at(36, 36, 36, 36),
  memSetAccess: at(39, 39, 39, 39),
  memAlloc: at(71.8, 61.5, 74.8, 84.6),
  memFree: at(66.7, 68.7, 86.7, 132.2),
  memCreateFirstTouch: 2.7,
  memAllocFirstTouch: 9.8,
  memAddressReserve: 45,
});

/**
 * Piecewise-linear in bytes between measured sizes; below the first size its cost, past
 * the last the last segment's slope when it rises (release of a 4 GiB handle costs more
 * than of 512 MiB), else flat.
 */
export function curveUs(curve: SizeCurve, bytes: number): number {
  const n = curve.length;
  if (n === 0) return 0;
  const first = curve[0]!;
  if (n === 1 || bytes <= first[0]) return first[1];
  for (let i = 1; i < n; i++) {
    const [b1, u1] = curve[i]!;
    if (bytes <= b1) {
      const [b0, u0] = curve[i - 1]!;
      return u0 + ((u1 - u0) * (bytes - b0)) / (b1 - b0);
    }
  }
  const [b0, u0] = curve[n - 2]!;
  const [b1, u1] = curve[n - 1]!;
  const slope = (u1 - u0) / (b1 - b0);
  return slope > 0 ? u1 + slope * (bytes - b1) : u1;
}

export function withCosts(overrides: Partial<CostTable> | undefined): CostTable {
  return overrides ? { ...H200_REPLAY_COSTS, ...overrides } : H200_REPLAY_COSTS;
}
