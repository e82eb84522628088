/**
 * A large snapshot file read through a window: the pickle VM asks for the next bytes as
 * it goes (PickleVM's `more`), so that a 10 M-event file (0.7 GiB of pickle) is never
 * held whole beside the EventLog it becomes. Small files, and gzip files (Node's zlib
 * inflates synchronously only whole), are read whole, as before.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { pickleBytes } from "./input-bytes.js";
import { FIXED_READ_LIMITS, type ReadLimits } from "./read-limits.js";
import { OPEN_FLAGS, fileError, refuse, tooBig } from "./read-input.js";

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
      // gzip: inflated whole (Node's zlib has no synchronous streaming inflate).
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
