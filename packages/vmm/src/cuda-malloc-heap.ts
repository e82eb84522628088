import { lowerBoundOf } from "./lower-bound.js";
/**
 * Where cudaMalloc places a large allocation: a model of the CUDA driver's device heap,
 * inferred from the segment addresses PyTorch recorded on an H200 (driver 580, CUDA 13;
 * ../shared/traces, packages/stitch/docs/placement.md has the measurements).
 *
 * - The heap grows downward: an allocation that fits no free range takes a new region
 *   of its size rounded up to 32 MiB directly below the lowest region, at the region's
 *   start; the region's tail (the rounding) stays free.
 * - An allocation that fits a free range takes the lowest-addressed one, at its start.
 * - A freed allocation's range is free again (merged with free neighbours); a heap whose
 *   last allocation is freed starts over (so replays on one driver place alike).
 *
 * PyTorch breaks best-fit ties by address, so a model of its caching allocator needs the
 * order of the segments cudaMalloc returns, which this reproduces. What it cannot know
 * is memory the process takes outside PyTorch's allocator (CUDA module code loaded
 * lazily, library handles, pinned host buffers, which share the unified address space):
 * those ranges are absent from a trace, so the model's free ranges can differ from the
 * recording's.
 */
const MiB = 1024 * 1024;

/** Region rounding of the driver's heap (measured: 32 MiB on an H200). */
export const CUDA_HEAP_REGION = 32 * MiB;

export class CudaMallocHeap {
  /** Free ranges inside the heap's regions, sorted by start, never adjacent. */
  private readonly freeStart: number[] = [];
  private readonly freeEnd: number[] = [];
  /** Lowest address of the heap's regions (the heap grows down from `top`). */
  private low: number;
  /** Allocations placed and not released. */
  private live = 0;

  constructor(
    /** Highest address (exclusive) of the heap. */
    readonly top: number,
    /** Lowest address the heap may grow to. */
    public floor: number,
    readonly region = CUDA_HEAP_REGION,
  ) {
    this.low = top;
  }

  /** The lowest address the heap holds (top when empty). */
  get lowest(): number {
    return this.low;
  }

  /** Address for `size` bytes, or -1 when the heap cannot grow that far. */
  place(size: number): number {
    const fs = this.freeStart;
    const fe = this.freeEnd;
    for (let i = 0; i < fs.length; i++) {
      const start = fs[i]!;
      if (fe[i]! - start < size) continue;
      if (fe[i]! - start === size) {
        fs.splice(i, 1);
        fe.splice(i, 1);
      } else fs[i] = start + size;
      this.live++;
      return start;
    }
    const start = this.low - Math.ceil(size / this.region) * this.region;
    if (start < this.floor) return -1;
    const end = start + size;
    if (end < this.low) {
      // the region's tail: below every free range (the heap grows down)
      fs.unshift(end);
      fe.unshift(this.low);
    }
    this.low = start;
    this.live++;
    return start;
  }

  /** The range [address, address+size) is free again. */
  release(address: number, size: number): void {
    const fs = this.freeStart;
    const fe = this.freeEnd;
    if (--this.live === 0) {
      fs.length = 0;
      fe.length = 0;
      this.low = this.top;
      return;
    }
    const lo = lowerBoundOf(fs, address);
    let start = address;
    let end = address + size;
    let at = lo;
    let n = 0;
    if (at > 0 && fe[at - 1] === start) {
      at--;
      start = fs[at]!;
      n++;
    }
    if (lo < fs.length && fs[lo] === end) {
      end = fe[lo]!;
      n++;
    }
    fs.splice(at, n, start);
    fe.splice(at, n, end);
  }
}
