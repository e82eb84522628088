/**
 * A large snapshot file read through a window: the pickle VM asks for the next bytes as
 * it goes (PickleVM's `more`), so that a 10 M-event file (0.7 GiB of pickle) is never
 * held whole beside the EventLog it becomes; a gzip file is inflated a step at a time the
 * same way. Small files are read whole, as before (one read, one buffer).
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { constants as Z, createGunzip } from "node:zlib";
import { checkPickleStart, gzipError, inflatedTooLarge, pickleBytes } from "./input-bytes.js";
import { FIXED_READ_LIMITS, inflateLimit, type ReadLimits } from "./read-limits.js";
import { OPEN_FLAGS, fileError, refuse, tooBig } from "./read-input.js";
import { SnapshotError } from "./snapshot-error.js";

/** Bytes read from the file per step (ReadOptions.windowBytes); files up to 16 steps are read whole. */
export const WINDOW_BYTES = 4 * 2 ** 20;

export interface PickleWindow {
  /** The pickle's first bytes (all of it when `more` is undefined). */
  first: Uint8Array;
  /** The next bytes of the pickle, null at its end. */
  more?: () => Uint8Array | null;
  gzip: boolean;
  /** The pickle's size, or an estimate (gzip's ISIZE): what the read limits and the log's size scale with. */
  pickleBytes: number;
}

/** Opens `path` as a pickle window; `close()` when done (the file stays open while `more` is used). */
export function openPickleWindow(path: string, limits: Partial<ReadLimits> = {}, step = WINDOW_BYTES): { window: PickleWindow; close: () => void } {
  const max = limits.maxInputBytes ?? FIXED_READ_LIMITS.maxInputBytes;
  let fd: number;
  try {
    fd = openSync(path, OPEN_FLAGS);
  } catch (e) {
    throw fileError(e, path);
  }
  const close = () => closeSync(fd);
  try {
    const st = fstatSync(fd);
    refuse(path, st, max);
    let read = 0;
    /** The next bytes of the file (at most n), null at its end. */
    const next = (n: number): Uint8Array | null => {
      const buf = new Uint8Array(Math.max(1, Math.min(n, max + 1 - read)));
      let got: number;
      try {
        got = readSync(fd, buf, 0, buf.length, null);
      } catch (e) {
        throw fileError(e, path);
      }
      if (got === 0) return null;
      read += got;
      if (read > max) throw tooBig(path, `more than ${max} bytes of input`, max);
      return got === buf.length ? buf : buf.subarray(0, got);
    };
    if (st.size <= 16 * step) {
      // One read past the size fstat gave, to see a file that grew.
      const parts: Uint8Array[] = [];
      for (let c = next(st.size + 1); c !== null; c = next(step)) parts.push(c);
      const whole = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
      const { bytes, gzip } = pickleBytes(whole, path, limits);
      return { window: { first: bytes, gzip, pickleBytes: bytes.length }, close };
    }
    const head = next(Math.max(step, 64))!; // enough to tell gzip from a pickle
    if (head[0] === 0x1f && head[1] === 0x8b) {
      const inflate = syncInflater();
      if (inflate !== null) return { window: gzipWindow(path, head, () => next(Math.max(1, step >> 2)), inflate, st.size, isize(fd, st.size), limits), close };
      // This Node's zlib has no handle to step: inflated whole.
      const parts = [head];
      for (let c = next(step); c !== null; c = next(step)) parts.push(c);
      const { bytes } = pickleBytes(Buffer.concat(parts), path, limits);
      return { window: { first: bytes, gzip: true, pickleBytes: bytes.length }, close };
    }
    pickleBytes(head, path, limits); // checks the start
    return { window: { first: head, more: () => next(step), gzip: false, pickleBytes: st.size }, close };
  } catch (e) {
    close();
    throw e;
  }
}

/** gzip's ISIZE (the last member's size mod 2^32): the estimate of the pickle's size. */
function isize(fd: number, size: number): number {
  const b = new Uint8Array(4);
  readSync(fd, b, 0, 4, size - 4);
  return (b[0]! | (b[1]! << 8) | (b[2]! << 16) | (b[3]! << 24)) >>> 0;
}

type Inflate = (input: Uint8Array | null) => Uint8Array[];

/**
 * Synchronous step-by-step inflate: the zlib handle's writeSync, as zlib's own gunzipSync
 * drives it, without closing the handle after one buffer (gunzipSync inflates only whole).
 * null when this Node's zlib does not have that handle (the caller inflates whole).
 */
function syncInflater(): Inflate | null {
  const z = createGunzip() as unknown as {
    _handle?: { writeSync?(flush: number, input: Uint8Array, inOff: number, inLen: number, out: Uint8Array, outOff: number, outLen: number): void };
    _writeState?: unknown;
    errored?: Error | null;
    on(event: "error", f: () => void): void;
  };
  const h = z._handle;
  const state = z._writeState;
  if (typeof h?.writeSync !== "function" || !(state instanceof Uint32Array)) return null;
  z.on("error", () => {}); // reported through z.errored, synchronously
  const OUT = 1 << 20;
  const empty = new Uint8Array(0);
  return (input) => {
    const flush = input === null ? Z.Z_FINISH : Z.Z_NO_FLUSH;
    const inBuf = input ?? empty;
    let inOff = 0;
    let availIn = inBuf.length;
    const outs: Uint8Array[] = [];
    for (;;) {
      const out = new Uint8Array(OUT);
      h.writeSync!(flush, inBuf, inOff, availIn, out, 0, OUT);
      if (z.errored) throw z.errored;
      const availOut = state[0]!;
      const left = state[1]!;
      if (OUT - availOut > 0) outs.push(out.subarray(0, OUT - availOut));
      inOff += availIn - left;
      availIn = left;
      if (availOut !== 0) return outs; // room left in the output: the input is used up
    }
  };
}

function gzipWindow(path: string, head: Uint8Array, next: () => Uint8Array | null, inflate: Inflate, compressed: number, size: number, limits: Partial<ReadLimits>): PickleWindow {
  const max = inflateLimit(compressed, limits);
  let out = 0;
  let done = false;
  const pending: Uint8Array[] = [];
  const step = (c: Uint8Array | null): void => {
    let r: Uint8Array[];
    try {
      r = inflate(c);
    } catch (e) {
      throw gzipError(e, path, max);
    }
    for (const x of r) {
      if ((out += x.length) > max) throw inflatedTooLarge(path, max);
      pending.push(x);
    }
  };
  const more = (): Uint8Array | null => {
    while (pending.length === 0 && !done) {
      const c = next();
      if (c === null) done = true;
      step(c);
    }
    return pending.shift() ?? null;
  };
  step(head);
  let first = more() ?? new Uint8Array(0);
  while (first.length < 2) {
    const r = more();
    if (r === null) break;
    first = Buffer.concat([first, r]);
  }
  if (first.length === 0) throw new SnapshotError("EMPTY", path, "gzip holds no data");
  checkPickleStart(first, path, true);
  return { first, more, gzip: true, pickleBytes: Math.max(size, compressed) };
}
