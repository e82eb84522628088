// A trace driven the way the live library drives the engine (packages/torch-alloc's
// LiveAllocator): the program's free at the trace's free_requested (Allocator.free: the engine
// itself defers a block used on another stream until an event there completed), one
// empty_cache-and-retry before an out of memory, on the sim behind a model of a GPU running
// `lagUs` behind the CPU on the trace's own clock (LaggingGpu), so that events complete late as
// they do live. Shared by sync-steps.mjs and fit-lag.mjs.
import { CapacityDriver, SimDriver } from "@gmlake/vmm";
import { EventKind } from "@gmlake/trace";
import { Allocator, LaggingGpu, planTrace } from "../dist/index.js";

/**
 * Drives `snap` through `policy`. capacityBytes: the device's budget (undefined: the sim's
 * whole device). onEvent(i, gpu, engine) after each event. Returns { oom: the event index of
 * the first allocation not served, or -1; peak: peak reserved bytes; gpu; engine } (the engine
 * closed unless keepOpen).
 */
export function driveLive(snap, { policy, options, lagUs, capacityBytes, onEvent, keepOpen = false, plan = planTrace(snap.events) }) {
  const L = snap.events;
  const sim = new SimDriver();
  const gpu = new LaggingGpu(capacityBytes === undefined ? sim : new CapacityDriver(sim, capacityBytes), lagUs);
  const e = new Allocator(policy, gpu, { options, settings: snap.allocatorSettings, recorder: null });
  const blocks = new Array(L.length).fill(null);
  let oom = -1;
  for (let i = 0; i < L.length; i++) {
    gpu.nowUs = L.timeUs[i];
    e.ctx.nowUs = L.timeUs[i];
    const k = L.kind[i];
    if (k === EventKind.alloc) {
      const stream = L.streams[L.stream[i]];
      let b = e.tryMalloc(L.size[i], stream);
      if (b === null) {
        e.emptyCache(); // what LiveAllocator.alloc does before it reports out of memory
        b = e.tryMalloc(L.size[i], stream);
      }
      if (b === null) {
        oom = i;
        break;
      }
      blocks[i] = b;
    } else if (k === EventKind.freeRequested || k === EventKind.freeCompleted) {
      const r = plan.ref[i];
      const b = r >= 0 ? blocks[r] : null;
      if (b !== null) {
        e.free(b); // the program's free: the engine's own two phases
        blocks[r] = null;
      }
    } else if (plan.emptyCache[i] === 1) e.emptyCache();
    if (onEvent) onEvent(i, gpu, e);
  }
  const peak = e.stats.peakReservedBytes;
  if (!keepOpen) e.close();
  return { oom, peak, gpu, engine: e };
}
