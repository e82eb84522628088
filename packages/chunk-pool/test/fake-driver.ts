import { DRIVER_CALLS, EventBook, type DriverCall, type DriverStats, type PhysicalHandle, type VmmDriver } from "@gmlake/vmm";

/** A minimal in-memory VmmDriver for tests: checks the calls' preconditions, keeps no bytes. */
export function fakeDriver(granularity = 2 << 20, totalBytes = 80 * 2 ** 30): VmmDriver & { mapped: Map<number, PhysicalHandle> } {
  const calls = Object.fromEntries(DRIVER_CALLS.map((c) => [c, 0])) as Record<DriverCall, number>;
  const timeUs = Object.fromEntries(DRIVER_CALLS.map((c) => [c, 0])) as Record<DriverCall, number>;
  const handles = new Map<number, PhysicalHandle>();
  const mapped = new Map<number, PhysicalHandle>();
  const reservations = new Map<number, number>();
  const allocs = new Map<number, number>();
  let nextId = 1;
  let nextVa = 0x7f0000000000;
  let used = 0;
  const events = new EventBook();
  const fail = (m: string): never => {
    throw Object.assign(new Error(m), { code: "CUDA_ERROR_INVALID_VALUE" });
  };
  const c = (k: DriverCall) => {
    calls[k]++;
    timeUs[k] += 1;
  };
  return {
    name: "sim",
    mapped,
    device: { ordinal: 0, name: "fake", totalBytes, vmmSupported: true, granularity: { minimum: granularity, recommended: granularity } },
    memCreate(size) {
      c("memCreate");
      if (size <= 0 || size % granularity) fail(`bad size ${size}`);
      if (used + size > totalBytes) throw Object.assign(new Error("oom"), { code: "CUDA_ERROR_OUT_OF_MEMORY" });
      used += size;
      const h = { id: nextId++, size };
      handles.set(h.id, h);
      return h;
    },
    memRelease(h) {
      c("memRelease");
      if (!handles.delete(h.id)) fail("double release");
      used -= h.size;
    },
    memAddressReserve(size) {
      c("memAddressReserve");
      const a = nextVa;
      nextVa += Math.ceil(size / granularity) * granularity + granularity;
      reservations.set(a, size);
      return a;
    },
    memAddressFree(a) {
      c("memAddressFree");
      if (!reservations.delete(a)) fail("not reserved");
    },
    memMap(a, size, _off, h) {
      c("memMap");
      if (mapped.has(a)) fail("already mapped");
      if (!handles.has(h.id) || size !== h.size) fail("bad handle");
      mapped.set(a, h);
    },
    memUnmap(a) {
      c("memUnmap");
      if (!mapped.delete(a)) fail("not mapped");
    },
    memSetAccess() {
      c("memSetAccess");
    },
    memGetInfo() {
      c("memGetInfo");
      return { freeBytes: totalBytes - used, totalBytes };
    },
    memAlloc(size) {
      c("memAlloc");
      if (used + size > totalBytes) throw Object.assign(new Error("oom"), { code: "CUDA_ERROR_OUT_OF_MEMORY" });
      used += size;
      const a = nextVa;
      nextVa += Math.ceil(size / granularity) * granularity;
      allocs.set(a, size);
      return a;
    },
    memFree(a) {
      c("memFree");
      const s = allocs.get(a);
      if (s === undefined) fail("not allocated");
      allocs.delete(a);
      used -= s!;
    },
    eventCreate() {
      c("eventCreate");
      return events.create();
    },
    eventRecord(e, stream) {
      c("eventRecord");
      events.record(e, stream);
    },
    eventQuery(e) {
      c("eventQuery");
      events.check("cuEventQuery", e);
      return true;
    },
    eventSynchronize(e) {
      c("eventSynchronize");
      events.check("cuEventSynchronize", e);
    },
    eventDestroy(e) {
      c("eventDestroy");
      events.destroy(e);
    },
    streamWaitEvent(stream, e) {
      c("streamWaitEvent");
      events.waitEvent(stream, e);
    },
    streamSynchronize() {
      c("streamSynchronize");
    },
    ctxSynchronize() {
      c("ctxSynchronize");
    },
    memset() {},
    write() {},
    read(_a, size) {
      return new Uint8Array(size);
    },
    stats(): DriverStats {
      let totalCalls = 0;
      let totalTimeUs = 0;
      for (const k of DRIVER_CALLS) {
        totalCalls += calls[k];
        totalTimeUs += timeUs[k];
      }
      return { calls: { ...calls }, timeUs: { ...timeUs }, totalCalls, totalTimeUs };
    },
    resetStats() {
      for (const k of DRIVER_CALLS) calls[k] = timeUs[k] = 0;
    },
    close() {},
  };
}
