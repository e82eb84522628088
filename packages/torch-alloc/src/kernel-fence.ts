/**
 * A driver adaptor for live use: memory a kernel may still be using is never unmapped or
 * freed under it. cuMemUnmap and cuMemFree do not wait for the kernels that used the
 * memory (PyTorch synchronizes before it unmaps, CUDACachingAllocator.cpp), and a free
 * reaches the allocator while the block's kernels may still run. So before the first
 * unmap or free of each allocator call the device is synchronized (cuCtxSynchronize):
 * once per call, since nothing new can be queued while the engine runs.
 */
import { DriverAdaptor } from "@gmlake/vmm";

export class KernelFence extends DriverAdaptor {
  /** cuCtxSynchronize calls made here (PyTorch's num_sync_all_streams). */
  syncs = 0;
  private fenced = false;

  /** A new allocator call begins: kernels may have been queued since the last one. */
  open(): void {
    this.fenced = false;
  }

  /** Synchronizes now unless this call already did. */
  fence(): void {
    if (this.fenced) return;
    this.inner.ctxSynchronize();
    this.syncs++;
    this.fenced = true;
  }

  override memUnmap(address: number, size: number): void {
    this.fence();
    this.inner.memUnmap(address, size);
  }
  override memFree(address: number): void {
    this.fence();
    this.inner.memFree(address);
  }
}
