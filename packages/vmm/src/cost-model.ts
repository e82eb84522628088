/**
 * What each driver call costs on an H200 (driver 580.159, CUDA 13.0; medians measured one
 * call at a time, ../shared/reference/vmm-costs.md). The sim driver charges these so
 * every replay reports a modelled driver time. Override any entry through
 * `new SimDriver({ costs: { ... } })` or `createDriver("sim", { costs })`.
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
  return overrides ? { ...H200_COSTS, ...overrides } : H200_COSTS;
}
