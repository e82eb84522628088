import type { PhysicalHandle } from "@gmlake/vmm";

/**
 * One physical allocation (one cuMemCreate handle) and every virtual address it is mapped
 * at. More than one address at once is stitching: the same bytes seen through two ranges.
 */
export interface Chunk {
  /** Unique within its pool, dense from 0: usable as an array index. */
  readonly id: number;
  readonly handle: PhysicalHandle;
  readonly size: number;
  /** Virtual start addresses where the whole chunk is mapped (usually 0 or 1 entries). */
  readonly mappings: number[];
  /** False once released. */
  live: boolean;
  /** Free for the owner's use (e.g. a policy's block or used flag); the pool never reads it. */
  tag: unknown;
}
