import { DriverAdaptor, VmmError, type EventHandle, type PhysicalHandle } from "@gmlake/vmm";

/** The code of the error a call refused during capture raises. */
export const CAPTURE_REFUSED = "CUDA_GRAPH_CAPTURE_REFUSED";

/**
 * The driver while a CUDA graph is being captured (`capturing` set by the caller around the
 * engine calls a capture makes). A capture is invalidated by a synchronization and must not
 * lose an address it replays into, so: eventQuery answers "not done" without a call (frees
 * waiting on events stay waiting, as PyTorch's allocator processes no events during capture);
 * synchronizations, event records, unmaps and releases throw a VmmError CAPTURE_REFUSED, so an
 * engine call that would need them fails instead of breaking the capture. Mapping memory passes
 * (memCreate, memAddressReserve, memMap, memSetAccess): PyTorch's pools grow during capture too.
 * The engine call under it is Allocator.tryMallocMapOnly, so that the policy asks for none of
 * what is refused; the guard catches what it still would.
 */
export class CaptureGuard extends DriverAdaptor {
  capturing = false;

  private refuse(call: string): void {
    if (this.capturing) {
      throw new VmmError(CAPTURE_REFUSED, call, `${call} during CUDA-graph capture (it would synchronize or unmap memory the graph may use)`);
    }
  }

  override eventQuery(event: EventHandle): boolean {
    return this.capturing ? false : super.eventQuery(event);
  }
  override eventRecord(event: EventHandle, stream: number): void {
    this.refuse("eventRecord");
    super.eventRecord(event, stream);
  }
  override eventSynchronize(event: EventHandle): void {
    this.refuse("eventSynchronize");
    super.eventSynchronize(event);
  }
  override streamWaitEvent(stream: number, event: EventHandle): void {
    this.refuse("streamWaitEvent");
    super.streamWaitEvent(stream, event);
  }
  override streamSynchronize(stream: number): void {
    this.refuse("streamSynchronize");
    super.streamSynchronize(stream);
  }
  override ctxSynchronize(): void {
    this.refuse("ctxSynchronize");
    super.ctxSynchronize();
  }
  override memUnmap(address: number, size: number): void {
    this.refuse("memUnmap");
    super.memUnmap(address, size);
  }
  override memRelease(handle: PhysicalHandle): void {
    this.refuse("memRelease");
    super.memRelease(handle);
  }
  override memAddressFree(address: number, size: number): void {
    this.refuse("memAddressFree");
    super.memAddressFree(address, size);
  }
  override memFree(address: number): void {
    this.refuse("memFree");
    super.memFree(address);
  }
}
