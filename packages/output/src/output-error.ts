import { GmlakeError } from "@gmlake/errors";
import { terminalSafe } from "./terminal-text.js";

/**
 * The error every output function throws. `kind` says whose fault it is: "path" (the
 * output path itself is wrong: exists, is the input, is a directory, cannot be created;
 * found before any work) or "write" (the system refused the bytes: disk full, read-only,
 * stdout closed). `code` is the errno name (ENOSPC, EROFS, EPIPE, ...) or one of ours.
 */
export type OutputErrorKind = "path" | "write";

/** Codes of our own, besides errno names. */
export const OUTPUT_EXISTS = "OUTPUT_EXISTS";
export const OUTPUT_IS_INPUT = "OUTPUT_IS_INPUT";
export const OUTPUT_TWICE = "OUTPUT_TWICE";
export const OUTPUT_NOT_A_FILE = "OUTPUT_NOT_A_FILE";
export const OUTPUT_NOT_A_DIRECTORY = "OUTPUT_NOT_A_DIRECTORY";

export class OutputError extends GmlakeError<string> {
  override readonly name = "OutputError";
  constructor(
    readonly kind: OutputErrorKind,
    readonly code: string,
    /** The path as the user gave it ("stdout" for standard output). */
    readonly path: string,
    message: string,
  ) {
    super(message);
  }
}

const WHY: Readonly<Record<string, string>> = {
  ENOSPC: "no space left on device",
  EDQUOT: "disk quota exceeded",
  EROFS: "read-only file system",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EEXIST: "file exists",
  ENOENT: "no such file or directory",
  ENOTDIR: "a component of the path is not a directory",
  EISDIR: "is a directory",
  EFBIG: "file too large",
  EIO: "input/output error",
  EPIPE: "the reader closed the pipe",
  EBADF: "not open for writing",
  ENAMETOOLONG: "file name too long",
  ELOOP: "too many symbolic links",
  EXDEV: "cross-device rename",
};

/** The errno name of a Node system error, or "EIO" when it has none. */
export function errnoCode(e: unknown): string {
  const c = (e as { code?: unknown } | null)?.code;
  return typeof c === "string" && /^E[A-Z0-9]+$/.test(c) ? c : "EIO";
}

/** "no space left on device (ENOSPC)". */
export function describeErrno(code: string): string {
  return `${WHY[code] ?? "write failed"} (${code})`;
}

/** A write failure: `cannot write PATH: no space left on device (ENOSPC)`. */
export function writeError(path: string, e: unknown): OutputError {
  if (e instanceof OutputError) return e;
  const code = errnoCode(e);
  return new OutputError("write", code, path, `cannot write ${terminalSafe(path)}: ${describeErrno(code)}`);
}
