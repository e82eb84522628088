/** PyTorch's kMinBlockSize: every block is a multiple of 512 bytes. */
export const MIN_BLOCK_SIZE = 512;

/**
 * c10's round_size: < 512 -> 512; with roundup_power2_divisions d > 1 set for the size's
 * interval (index log2(size) - 20, clamped to 0..15) and size > 512 * d, up to the next of
 * d equal steps between the surrounding powers of two; else up to a multiple of 512.
 * The one round_size of the project: the trace statistics and every allocator policy
 * (@gmlake/stitch) use this function.
 */
export function roundSize(size: number, divisions?: readonly number[] | null): number {
  if (size < MIN_BLOCK_SIZE) return MIN_BLOCK_SIZE;
  if (divisions != null) {
    const log = floorLog2(size);
    const d = divisions[Math.min(15, Math.max(0, log - 20))] ?? 0;
    if (d > 1 && size > MIN_BLOCK_SIZE * d) return roundupPower2NextDivision(size, d);
  }
  return Math.ceil(size / MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE;
}

/** roundup_power2_next_division: the next of `divisions` equal steps between the powers of two around size. */
export function roundupPower2NextDivision(size: number, divisions: number): number {
  const floor = 2 ** floorLog2(size);
  if (floor === size) return size;
  const step = floor / 2 ** floorLog2(divisions);
  if (step < 1) return floor * 2;
  const down = Math.floor(size / step) * step;
  return down === size ? size : down + step;
}

/** floor(log2(x)) for integers 1 <= x < 2^53, exact (Math.log2 can round up near powers of two). */
export function floorLog2(x: number): number {
  if (x < 4294967296) return 31 - Math.clz32(x);
  return 63 - Math.clz32(Math.floor(x / 4294967296));
}
