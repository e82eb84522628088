/**
 * A driver adaptor that runs every stream operation on the default stream (0). For
 * replays on a real driver: a recorded trace's stream values are cudaStream_t handles of
 * the process that recorded it, which the cuda driver would dereference. There are no
 * kernels in a replay, so the order the events and waits impose is the same; the calls
 * and their cost stay.
 */
import { DriverAdaptor } from "./driver-adaptor.js";
import type { EventHandle } from "./driver.js";

export class DefaultStreamDriver extends DriverAdaptor {
  override eventRecord(event: EventHandle, _stream: number): void {
    this.inner.eventRecord(event, 0);
  }
  override streamWaitEvent(_stream: number, event: EventHandle): void {
    this.inner.streamWaitEvent(0, event);
  }
  override streamSynchronize(_stream: number): void {
    this.inner.streamSynchronize(0);
  }
}
