import { GmlakeError } from "@gmlake/errors";
import { terminalSafe } from "@gmlake/output";

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
export class SnapshotError extends GmlakeError<SnapshotErrorCode> {
  override readonly name = "SnapshotError";
  constructor(
    readonly code: SnapshotErrorCode,
    readonly source: string,
    detail: string,
    readonly offset?: number,
  ) {
    // text from the file (names, keys) made one inert line: the one sanitizer the CLI uses too
    super(`${terminalSafe(source)}: ${terminalSafe(detail)}${offset === undefined ? "" : ` (at byte ${offset})`}`);
  }
}
