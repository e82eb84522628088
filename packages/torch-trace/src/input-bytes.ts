import { gunzipSync } from "node:zlib";
import { SnapshotError } from "./snapshot-error.js";
import { inflateLimit, limitHint, type ReadLimits } from "./read-limits.js";

export interface PickleBytes {
  bytes: Uint8Array;
  gzip: boolean;
}

/**
 * Finds the pickle inside the input, by content: gzip (1f 8b) is inflated in one go into
 * one buffer; a pickle must start with PROTO (0x80) or, for protocol 0/1, with MARK or
 * EMPTY_DICT. Anything else is NOT_A_PICKLE, naming what it looks like when we can tell.
 */
export function pickleBytes(input: Uint8Array, source: string, limits: Partial<ReadLimits> = {}): PickleBytes {
  if (input.length === 0) throw new SnapshotError("EMPTY", source, "empty file");
  let bytes = input;
  let gzip = false;
  if (input[0] === 0x1f && input.length >= 2 && input[1] === 0x8b) {
    gzip = true;
    bytes = gunzip(input, source, inflateLimit(input.length, limits));
    if (bytes.length === 0) throw new SnapshotError("EMPTY", source, "gzip holds no data");
  }
  checkPickleStart(bytes, source, gzip);
  return { bytes, gzip };
}

/** A pickle must start with PROTO (0x80) or, for protocol 0/1, with MARK or EMPTY_DICT; else NOT_A_PICKLE. */
export function checkPickleStart(bytes: Uint8Array, source: string, gzip: boolean): void {
  const b0 = bytes[0];
  if (b0 === 0x80) {
    if (bytes.length < 2) throw new SnapshotError("TRUNCATED", source, "truncated pickle: PROTO without its version", 0);
    if (bytes[1] > 5) throw new SnapshotError("NOT_A_PICKLE", source, `not a pickle, or an unsupported protocol ${bytes[1]}`, 0);
    return;
  }
  if (b0 === 0x7d /* EMPTY_DICT */ || b0 === 0x28 /* MARK */) return;
  throw new SnapshotError("NOT_A_PICKLE", source, `not a pickle${gzip ? " inside the gzip" : ""} (${sniff(bytes)})`);
}

function gunzip(input: Uint8Array, source: string, max: number): Uint8Array {
  // ISIZE (last 4 bytes) is the size mod 2^32 of the last member: used only as a hint for
  // the output chunk so that zlib writes one buffer instead of concatenating many.
  const n = input.length;
  const isize = n >= 18 ? (input[n - 4] | (input[n - 3] << 8) | (input[n - 2] << 16) | (input[n - 1] << 24)) >>> 0 : 0;
  // (40x the input covers every real snapshot, which inflate 10-16x; more just takes a second chunk.)
  const chunkSize = Math.max(64 * 1024, Math.min(isize + 1, n * 40, max + 1, 1 << 30));
  try {
    // maxOutputLength stops a gzip bomb after `max` bytes instead of filling the memory.
    return gunzipSync(input, { chunkSize, maxOutputLength: max });
  } catch (e) {
    throw gzipError(e, source, max);
  }
}

/** zlib's error as the reader reports it: TRUNCATED, LIMIT (maxInflatedBytes) or BAD_GZIP. */
export function gzipError(e: unknown, source: string, max: number): SnapshotError {
  if (e instanceof SnapshotError) return e;
  const err = e as NodeJS.ErrnoException;
  const msg = err.message ?? String(e);
  if (err.code === "Z_BUF_ERROR" || /unexpected end/i.test(msg)) return new SnapshotError("TRUNCATED", source, `truncated gzip (${msg})`);
  if (err.code === "ERR_BUFFER_TOO_LARGE" || /too large|larger than/i.test(msg)) return inflatedTooLarge(source, max);
  return new SnapshotError("BAD_GZIP", source, `bad gzip data (${msg})`);
}

export function inflatedTooLarge(source: string, max: number): SnapshotError {
  return new SnapshotError("LIMIT", source, `the gzip data inflates to more than the reader's limit maxInflatedBytes=${max} (${limitHint("maxInflatedBytes")})`);
}

function sniff(b: Uint8Array): string {
  const head = (s: string): boolean => s.split("").every((c, i) => b[i] === c.charCodeAt(0));
  if (head("PK\x03\x04")) return "a zip archive, e.g. torch.save output";
  if (head("{") || head("[")) return "looks like JSON";
  if (head("\x89HDF")) return "an HDF5 file";
  const hex = Array.from(b.subarray(0, 4), (x) => x.toString(16).padStart(2, "0")).join(" ");
  return `starts with ${hex}`;
}
