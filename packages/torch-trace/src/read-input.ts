import { constants, type Stats } from "node:fs";
import { SnapshotError } from "./snapshot-error.js";
import { limitHint, type ReadLimits } from "./read-limits.js";

/** The default cap on what is read from a stream (stdin), whose size nobody knows in advance. */
export const STREAM_INPUT_LIMIT = 256 * 2 ** 20;

// O_NONBLOCK: opening a FIFO that has no writer returns at once (fstat then refuses it)
// instead of blocking forever; it changes nothing for a regular file.
export const OPEN_FLAGS = constants.O_RDONLY | (constants.O_NONBLOCK ?? 0);

/** Why a path that is not a regular file cannot be a snapshot, or null when it is one. */
function notRegular(st: Stats): string | null {
  if (st.isFile()) return null;
  if (st.isDirectory()) return "is a directory, not a snapshot file";
  if (st.isFIFO()) return "is a FIFO (named pipe), not a regular file (to read a stream, pass '-' and redirect it to stdin)";
  if (st.isCharacterDevice() || st.isBlockDevice()) return "is a device, not a regular file";
  if (st.isSocket()) return "is a socket, not a regular file";
  return "is not a regular file";
}

export function refuse(path: string, st: Stats, max: number): void {
  const why = notRegular(st);
  if (why !== null) throw new SnapshotError(st.isDirectory() ? "IS_DIRECTORY" : "NOT_REGULAR", path, why);
  if (st.size > max) throw tooBig(path, `a file of ${st.size} bytes`, max);
}

export function tooBig(path: string, what: string, max: number): SnapshotError {
  return new SnapshotError("LIMIT", path, `${what} exceeds the reader's limit maxInputBytes=${max} (${limitHint("maxInputBytes")})`);
}

export function fileError(e: unknown, path: string): SnapshotError {
  if (e instanceof SnapshotError) return e;
  const err = e as NodeJS.ErrnoException;
  if (err.code === "ENOENT") return new SnapshotError("NOT_FOUND", path, "no such file");
  if (err.code === "EISDIR") return new SnapshotError("IS_DIRECTORY", path, "is a directory, not a snapshot file");
  if (err.code === "EACCES" || err.code === "EPERM") return new SnapshotError("IO_ERROR", path, "permission denied");
  return new SnapshotError("IO_ERROR", path, `cannot read (${err.code ?? err.message})`);
}

/**
 * Collects chunks until EOF, failing as soon as more than `max` bytes came: used for files
 * whose size fstat does not tell (/proc files say 0) and for streams.
 */
class Collector {
  private chunks: Uint8Array[] = [];
  total = 0;
  constructor(
    private readonly path: string,
    private readonly max: number,
  ) {}
  add(c: Uint8Array): void {
    this.total += c.length;
    if (this.total > this.max) throw tooBig(this.path, `more than ${this.max} bytes of input`, this.max);
    this.chunks.push(c);
  }
  bytes(): Uint8Array {
    if (this.chunks.length === 1) return this.chunks[0];
    const out = new Uint8Array(this.total);
    let o = 0;
    for (const c of this.chunks) {
      out.set(c, o);
      o += c.length;
    }
    this.chunks = [];
    return out;
  }
}

/** The first bytes of a snapshot: gzip, or a pickle's PROTO / MARK / EMPTY_DICT. */
function plausibleStart(b: number): boolean {
  return b === 0x1f || b === 0x80 || b === 0x28 || b === 0x7d;
}

/**
 * Reads a stream (stdin) to its end, at most maxInputBytes (default STREAM_INPUT_LIMIT):
 * an endless stream ends in a LIMIT error, and one that does not start like a snapshot
 * (e.g. /dev/zero) is refused at its first byte.
 */
export async function readInputStream(stream: AsyncIterable<Uint8Array | string>, name: string, limits: Partial<ReadLimits> = {}): Promise<Uint8Array> {
  const col = new Collector(name, limits.maxInputBytes ?? STREAM_INPUT_LIMIT);
  try {
    for await (const c of stream) {
      const chunk = typeof c === "string" ? new TextEncoder().encode(c) : c;
      if (col.total === 0 && chunk.length > 0 && !plausibleStart(chunk[0])) {
        throw new SnapshotError("NOT_A_PICKLE", name, `not a gzip file or a pickle (starts with byte ${chunk[0].toString(16).padStart(2, "0")})`);
      }
      col.add(chunk);
    }
  } catch (e) {
    throw fileError(e, name);
  }
  return col.bytes();
}
