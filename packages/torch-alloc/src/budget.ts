/**
 * The live allocator's memory budget: a CapacityDriver (the limit the policies read through
 * capacityOf, and past which memCreate / memAlloc fail with CUDA_ERROR_OUT_OF_MEMORY) whose
 * limit can change while the process runs, as torch.cuda.set_per_process_memory_fraction
 * changes PyTorch's own. Memory held past a lowered limit stays; later requests fail until
 * enough is given back (PyTorch's caching allocator does the same).
 */
import { CapacityDriver, type VmmDriver } from "@gmlake/vmm";

export class MemoryBudget extends CapacityDriver {
  /** The device's memory: what a fraction is a fraction of. */
  readonly deviceBytes: number;

  constructor(inner: VmmDriver, bytes?: number) {
    const device = inner.device.totalBytes;
    super(inner, bytes ?? device);
    this.deviceBytes = device;
  }

  /** A new limit in bytes, from the next request on. */
  setBytes(bytes: number): void {
    if (!Number.isSafeInteger(bytes) || bytes < 0) throw new Error(`a memory budget is a whole number of bytes >= 0, not ${String(bytes)}`);
    // CapacityDriver fixes its limit at construction; the budget is the one that moves
    (this as { capacityBytes: number }).capacityBytes = bytes;
  }

  /** fraction x the device's memory (set_per_process_memory_fraction's meaning); returns the bytes. */
  setFraction(fraction: number): number {
    if (!(fraction >= 0 && fraction <= 1)) throw new Error(`a memory fraction is a number from 0 to 1, not ${String(fraction)}`);
    const bytes = Math.floor(fraction * this.deviceBytes);
    this.setBytes(bytes);
    return bytes;
  }
}
