/** What went wrong, as a stable code that callers and tests can switch on. */
export type SnapshotErrorCode =
  | "NOT_FOUND"
  | "IS_DIRECTORY"
  | "NOT_REGULAR"
  | "IO_ERROR"
  | "EMPTY"
  | "BAD_GZIP"
  | "NOT_A_PICKLE"
  | "TRUNCATED"
  | "BAD_OPCODE"
  | "BAD_PICKLE"
  | "BAD_SHAPE"
  | "BAD_VALUE"
  | "LIMIT";

/**
 * The one error type the reader throws for bad input. `message` is one line naming the
 * file and the problem; `offset` is the byte offset in the (decompressed) pickle stream
 * for pickle errors, else undefined.
 */
export class SnapshotError extends Error {
  override readonly name = "SnapshotError";
  constructor(
    readonly code: SnapshotErrorCode,
    readonly source: string,
    detail: string,
    readonly offset?: number,
  ) {
    super(`${terminalSafe(source)}: ${terminalSafe(detail)}${offset === undefined ? "" : ` (at byte ${offset})`}`);
  }
}

/**
 * Text from a file (names, keys) made safe to print: control characters (C0, DEL, C1,
 * which can move the cursor, set a window title or break the message onto two lines)
 * become \xNN / \u{NNNN} escapes, so that every message is one inert line.
 */
export function terminalSafe(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => {
    const n = c.charCodeAt(0);
    return n < 0x100 ? `\\x${n.toString(16).padStart(2, "0")}` : `\\u{${n.toString(16)}}`;
  });
}
