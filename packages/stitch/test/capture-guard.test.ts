import { describe, expect, it } from "vitest";
import { SimDriver, VmmError } from "@gmlake/vmm";
import { Allocator, CAPTURE_REFUSED, CaptureGuard, getPolicy } from "../src/index.js";

const MiB = 2 ** 20;

describe("CaptureGuard", () => {
  it("lets mapping calls through during capture and refuses synchronizing, unmapping and releasing ones", () => {
    const g = new CaptureGuard(new SimDriver({ capacityBytes: 1024 * MiB }));
    const ev = g.eventCreate();
    g.eventRecord(ev, 0);
    g.capturing = true;
    const h = g.memCreate(2 * MiB);
    const va = g.memAddressReserve(2 * MiB);
    g.memMap(va, 2 * MiB, 0, h);
    g.memSetAccess(va, 2 * MiB);
    expect(g.eventQuery(ev)).toBe(false); // no call: "not done" while capturing
    const refused = (fn: () => void): string => {
      try {
        fn();
      } catch (e) {
        expect(e).toBeInstanceOf(VmmError);
        expect((e as VmmError).code).toBe(CAPTURE_REFUSED);
        return (e as VmmError).call;
      }
      return "passed";
    };
    expect(refused(() => g.ctxSynchronize())).toBe("ctxSynchronize");
    expect(refused(() => g.streamSynchronize(0))).toBe("streamSynchronize");
    expect(refused(() => g.eventRecord(ev, 0))).toBe("eventRecord");
    expect(refused(() => g.eventSynchronize(ev))).toBe("eventSynchronize");
    expect(refused(() => g.memUnmap(va, 2 * MiB))).toBe("memUnmap");
    expect(refused(() => g.memRelease(h))).toBe("memRelease");
    expect(refused(() => g.memAddressFree(va, 2 * MiB))).toBe("memAddressFree");
    g.capturing = false;
    expect(g.eventQuery(ev)).toBe(true);
    g.memUnmap(va, 2 * MiB);
    g.memRelease(h);
    g.memAddressFree(va, 2 * MiB);
    g.eventDestroy(ev);
  });

  it("an engine growing during capture maps memory and makes no refused call (vms, caching)", () => {
    for (const name of ["vms", "caching", "expandable", "gmlake"]) {
      const g = new CaptureGuard(new SimDriver({ capacityBytes: 8192 * MiB }));
      const a = new Allocator(getPolicy(name), g, {});
      const warm = a.tryMalloc(64 * MiB, 0)!;
      a.free(warm);
      g.capturing = true;
      const b = a.tryMallocMapOnly(256 * MiB, -(2 ** 32 + 1)); // a pool's own stream key: new memory
      g.capturing = false;
      expect(b, name).not.toBeNull();
      a.free(b!);
      a.emptyCache();
    }
  });
});
