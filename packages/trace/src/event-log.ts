import type { EventKind } from "./event-kind.js";

/**
 * A columnar, growable stream of events: one typed array per field. This is both what a
 * reader yields and what an allocator records into (it is the Recorder).
 *
 * `stream` is an index into `streams` (the raw cudaStream_t values, 0 = default stream),
 * so that per-stream structures can be arrays.
 */
export class EventLog {
  length = 0;
  kind: Uint8Array;
  addr: Float64Array;
  size: Float64Array;
  stream: Uint32Array;
  device: Uint8Array;
  timeUs: Float64Array;
  /** Kind-specific extra value (see EventKind); 0 when unused. */
  aux: Float64Array;
  /** Raw stream values; `stream[i]` indexes this. */
  readonly streams: number[] = [];
  private readonly streamIndex = new Map<number, number>();

  constructor(capacity = 1024) {
    const n = Math.max(16, capacity);
    this.kind = new Uint8Array(n);
    this.addr = new Float64Array(n);
    this.size = new Float64Array(n);
    this.stream = new Uint32Array(n);
    this.device = new Uint8Array(n);
    this.timeUs = new Float64Array(n);
    this.aux = new Float64Array(n);
  }

  /** The index of a raw stream value, adding it on first sight. */
  streamId(raw: number): number {
    let id = this.streamIndex.get(raw);
    if (id === undefined) {
      id = this.streams.length;
      this.streams.push(raw);
      this.streamIndex.set(raw, id);
    }
    return id;
  }

  push(kind: EventKind, addr: number, size: number, stream: number, device: number, timeUs: number, aux = 0): number {
    const i = this.length;
    if (i === this.kind.length) this.grow(i * 2);
    this.kind[i] = kind;
    this.addr[i] = addr;
    this.size[i] = size;
    this.stream[i] = stream;
    this.device[i] = device;
    this.timeUs[i] = timeUs;
    this.aux[i] = aux;
    this.length = i + 1;
    return i;
  }

  /** Room for `capacity` rows without growing (a reader that can project its final count). */
  reserve(capacity: number): void {
    if (capacity > this.kind.length) this.grow(capacity);
  }

  private grow(n: number): void {
    const grow = <T extends Uint8Array | Uint32Array | Float64Array>(a: T): T => {
      const b = new (a.constructor as new (n: number) => T)(n);
      b.set(a);
      return b;
    };
    this.kind = grow(this.kind);
    this.addr = grow(this.addr);
    this.size = grow(this.size);
    this.stream = grow(this.stream);
    this.device = grow(this.device);
    this.timeUs = grow(this.timeUs);
    this.aux = grow(this.aux);
  }
}
