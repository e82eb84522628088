/**
 * Events on a driver with no device queue behind it (host, sim): nothing runs
 * asynchronously, so an event is complete as soon as it exists and every wait returns
 * at once. The book keeps which events are live, so using a destroyed event, or one from
 * another driver, is CUDA_ERROR_INVALID_HANDLE as on CUDA, and a leak can be counted.
 */
import type { EventHandle } from "./driver.js";
import { INVALID_HANDLE, checkStream, vmmError } from "./vmm-error.js";

export class EventBook {
  private readonly live = new Set<EventHandle>();
  private nextId = 1;

  /** Events created and not yet destroyed. */
  get liveEvents(): number {
    return this.live.size;
  }

  create(): EventHandle {
    const event = Object.freeze({ id: this.nextId++ });
    this.live.add(event);
    return event;
  }

  /** Throws CUDA_ERROR_INVALID_HANDLE unless `event` is live in this book. */
  check(call: string, event: EventHandle): void {
    if (!this.live.has(event)) {
      const id = typeof event === "object" && event !== null ? String((event as { id?: unknown }).id) : String(event);
      throw vmmError(INVALID_HANDLE, call, `event=${id}`, "not a live event of this driver (destroyed, or made by another driver)");
    }
  }

  record(event: EventHandle, stream: number): void {
    checkStream("cuEventRecord", stream);
    this.check("cuEventRecord", event);
  }

  destroy(event: EventHandle): void {
    this.check("cuEventDestroy", event);
    this.live.delete(event);
  }

  waitEvent(stream: number, event: EventHandle): void {
    checkStream("cuStreamWaitEvent", stream);
    this.check("cuStreamWaitEvent", event);
  }
}
