import { DriverAdaptor, type EventHandle, type VmmDriver } from "@gmlake/vmm";

/**
 * A model of a GPU that runs behind the CPU, over a driver whose events complete at once
 * (sim, host): for replays that study stream safety the way a live run meets it.
 *
 * The clock is the caller's (`nowUs`, e.g. the trace's time stamps). Work queued at CPU
 * time t is done at t + `lagUs` (the CPU runs ahead by that much, as a training loop does
 * when the GPU is the bottleneck), or once a synchronization caught up with it. An event
 * recorded at t is complete when the GPU got past t. A ctxSynchronize at `nowUs` stalls the
 * CPU until the GPU is idle: the stall is what the GPU still had queued, min(lagUs, time
 * since the last sync caught it up); counted in `stallUs` (the sync's real cost live, which
 * the sim's flat call cost does not show). eventSynchronize stalls until that event.
 * One queue for all streams (a simplification: a stream's work is done when the GPU's is).
 */
export class LaggingGpu extends DriverAdaptor {
  /** CPU time now, microseconds (set by the caller before each engine call). */
  nowUs = 0;
  /** CPU time the GPU is known to have caught up to (a synchronization). */
  private caughtUpUs = -Infinity;
  private readonly recordedAt = new Map<EventHandle, number>();
  /** Modelled CPU time spent waiting in ctxSynchronize / eventSynchronize. */
  stallUs = 0;
  ctxSyncStallUs = 0;
  eventSyncStallUs = 0;

  constructor(
    inner: VmmDriver,
    readonly lagUs: number,
  ) {
    super(inner);
  }

  /** The CPU time up to which queued work is done now. */
  get doneUpToUs(): number {
    return Math.max(this.nowUs - this.lagUs, this.caughtUpUs);
  }

  override eventRecord(event: EventHandle, stream: number): void {
    super.eventRecord(event, stream);
    this.recordedAt.set(event, this.nowUs);
  }
  override eventQuery(event: EventHandle): boolean {
    const inner = super.eventQuery(event); // checks the handle
    return inner && (this.recordedAt.get(event) ?? -Infinity) <= this.doneUpToUs;
  }
  override eventSynchronize(event: EventHandle): void {
    super.eventSynchronize(event);
    const t = this.recordedAt.get(event) ?? -Infinity;
    const wait = Math.max(0, t - this.doneUpToUs);
    this.stallUs += wait;
    this.eventSyncStallUs += wait;
    if (t > this.caughtUpUs) this.caughtUpUs = t;
  }
  override eventDestroy(event: EventHandle): void {
    super.eventDestroy(event);
    this.recordedAt.delete(event);
  }
  override streamSynchronize(stream: number): void {
    super.streamSynchronize(stream);
    this.catchUp();
  }
  override ctxSynchronize(): void {
    super.ctxSynchronize();
    this.ctxSyncStallUs += this.catchUp();
  }

  private catchUp(): number {
    const wait = Math.max(0, this.nowUs - this.doneUpToUs);
    this.stallUs += wait;
    this.caughtUpUs = this.nowUs;
    return wait;
  }
}
