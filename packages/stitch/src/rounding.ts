/** PyTorch's CUDACachingAllocator constants (c10/cuda/CUDACachingAllocator.cpp). */
export const kMinBlockSize = 512;
export const kSmallSize = 1 << 20;
export const kSmallBuffer = 2 << 20;
export const kMinLargeAlloc = 10 << 20;
export const kRoundLarge = 2 << 20;
export const kLargeBuffer = 20 << 20;

function floorLog2(x: number): number {
  // exact for x < 2^53
  return Math.floor(Math.log2(x)) - (2 ** Math.floor(Math.log2(x)) > x ? 1 : 0);
}

/** roundup_power2_divisions(size): the table index is log2(size) - 20, clamped to [0, 15]. */
export function divisionsFor(size: number, table: readonly number[]): number {
  if (table.length === 0) return 0;
  let index = floorLog2(size) - 20;
  if (index < 0) index = 0;
  if (index > table.length - 1) index = table.length - 1;
  return table[index] ?? 0;
}

/** roundup_power2_next_division: the next of `divisions` equal steps between powers of two. */
export function roundupPower2NextDivision(size: number, divisions: number): number {
  const floor = 2 ** floorLog2(size);
  if (floor === size) return size;
  // power2_floor >> floor(log2(divisions))
  const step = Math.floor(floor / 2 ** floorLog2(divisions));
  if (step === 0) return floor * 2;
  const roundedFloor = Math.floor(size / step) * step;
  return roundedFloor === size ? size : roundedFloor + step;
}

/** round_size: what a request of `size` bytes is charged (allocated bytes). */
export function roundSize(size: number, roundupPower2Divisions: readonly number[] | null): number {
  if (size < kMinBlockSize) return kMinBlockSize;
  if (roundupPower2Divisions !== null) {
    const d = divisionsFor(size, roundupPower2Divisions);
    if (d > 1 && size > kMinBlockSize * d) return roundupPower2NextDivision(size, d);
  }
  return Math.ceil(size / kMinBlockSize) * kMinBlockSize;
}

/** get_allocation_size: the cudaMalloc size of a new segment for a rounded request. */
export function allocationSize(rounded: number): number {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return Math.ceil(rounded / kRoundLarge) * kRoundLarge;
}
