import type { StackFrame } from "./stack-frame.js";

/** A block of a segment at dump time (PyTorch snapshot `segments[].blocks[]`). */
export interface BlockState {
  address: number;
  /** Rounded block size in bytes. */
  size: number;
  /** Requested bytes (stale for inactive blocks). */
  requestedSize: number;
  state: "active_allocated" | "active_pending_free" | "inactive" | string;
  /** The stack of the block's allocation, when known. */
  frames?: readonly StackFrame[];
}

/**
 * A segment (or, for expandable segments, one contiguous mapped range) at dump time, as a
 * PyTorch snapshot's `segments` records it: what readers yield and memory-viz export writes.
 */
export interface SegmentState {
  device: number;
  address: number;
  totalSize: number;
  allocatedSize: number;
  activeSize: number;
  requestedSize: number;
  /** Raw cudaStream_t value (0 = default stream). */
  stream: number;
  segmentType: "small" | "large" | string;
  isExpandable: boolean;
  /** segment_pool_id as recorded, e.g. [0, 0]; null when absent. */
  poolId: [number, number] | null;
  blocks: BlockState[];
  /** The stack of the allocation that made the segment, when known. */
  frames?: readonly StackFrame[];
}
