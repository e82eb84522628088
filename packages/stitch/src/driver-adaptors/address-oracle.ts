import { DriverAdaptor, type VmmDriver } from "@gmlake/vmm";
import { EventKind, type EventLog } from "@gmlake/trace";

/**
 * A driver adaptor whose memAlloc returns the addresses a recorded run got from
 * cudaMalloc: the Nth memAlloc of size S returns the Nth recorded segment address of
 * size S (then the inner driver's own). Addresses are inputs from the driver, not
 * allocator decisions, but PyTorch breaks best-fit ties by address, so a faithful replay
 * needs them. Calls on an oracle address are translated to the inner allocation.
 */
export class AddressOracleDriver extends DriverAdaptor {
  private readonly queues = new Map<number, number[]>();
  private readonly heads = new Map<number, number>();
  /** oracle address -> inner address */
  private readonly toInner = new Map<number, number>();
  /** Sorted oracle starts with sizes, for data access translation. */
  private readonly live = new Map<number, number>();
  /** memAllocs served from the recording. */
  served = 0;
  /** memAllocs beyond the recording (their inner address is returned). */
  beyond = 0;

  constructor(inner: VmmDriver, recorded: Iterable<{ size: number; addr: number }>) {
    super(inner);
    for (const { size, addr } of recorded) {
      let q = this.queues.get(size);
      if (!q) this.queues.set(size, (q = []));
      q.push(addr);
    }
  }

  /** The oracle for a trace: its recorded segment_alloc addresses (of `device`, default all). */
  static fromLog(inner: VmmDriver, log: EventLog, device?: number): AddressOracleDriver {
    const rec: { size: number; addr: number }[] = [];
    for (let i = 0; i < log.length; i++) {
      if (log.kind[i] === EventKind.segmentAlloc && (device === undefined || log.device[i] === device)) {
        rec.push({ size: log.size[i]!, addr: log.addr[i]! });
      }
    }
    return new AddressOracleDriver(inner, rec);
  }

  override memAlloc(size: number): number {
    const inner = this.inner.memAlloc(size);
    const q = this.queues.get(size);
    const h = this.heads.get(size) ?? 0;
    let a = inner;
    if (q !== undefined && h < q.length && !this.toInner.has(q[h]!)) {
      a = q[h]!;
      this.heads.set(size, h + 1);
      this.served++;
    } else {
      this.beyond++;
    }
    this.toInner.set(a, inner);
    this.live.set(a, size);
    return a;
  }

  override memFree(address: number): void {
    const inner = this.toInner.get(address);
    this.inner.memFree(inner ?? address);
    this.toInner.delete(address);
    this.live.delete(address);
  }

  private translate(address: number): number {
    for (const [start, size] of this.live) {
      if (address >= start && address < start + size) return this.toInner.get(start)! + (address - start);
    }
    return address;
  }

  override memset(address: number, value: number, size: number): void {
    this.inner.memset(this.translate(address), value, size);
  }
  override write(address: number, data: Uint8Array): void {
    this.inner.write(this.translate(address), data);
  }
  override read(address: number, size: number): Uint8Array {
    return this.inner.read(this.translate(address), size);
  }
}
