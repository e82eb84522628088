/** PyTorch's CUDACachingAllocator constants (c10/cuda/CUDACachingAllocator.cpp). */
export const kMinBlockSize = 512;
export const kSmallSize = 1 << 20;
export const kSmallBuffer = 2 << 20;
export const kMinLargeAlloc = 10 << 20;
export const kRoundLarge = 2 << 20;
export const kLargeBuffer = 20 << 20;

/** round_size: what a request is charged (allocated bytes); one function for the whole project, in @gmlake/trace. */
export { roundSize, roundupPower2NextDivision } from "@gmlake/trace";

/** get_allocation_size: the cudaMalloc size of a new segment for a rounded request. */
export function allocationSize(rounded: number): number {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return Math.ceil(rounded / kRoundLarge) * kRoundLarge;
}
