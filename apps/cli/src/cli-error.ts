/**
 * Errors the CLI reports as one line. `UsageError` and bad input exit 2 (an output path
 * that is wrong, found before the work, is bad input too); an output the system refused
 * to take (disk full, read-only, stdout closed) exits 3; a limit of this machine that
 * the host driver hit (file descriptors, mappings) exits 4; anything else that escapes a
 * command is an internal failure and exits 1.
 */
import { HOST_RESOURCE_CODES } from "@gmlake/vmm";

export class UsageError extends Error {
  readonly code = "USAGE";
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

export const EXIT_OK = 0;
export const EXIT_INTERNAL = 1;
export const EXIT_BAD_INPUT = 2;
/** verify: the model's decisions differ from the recorded ones (as diff's 1). */
export const EXIT_MISMATCH = 1;
export const EXIT_OUTPUT = 3;
export const EXIT_RESOURCE = 4;

/** The host driver hit a limit of this machine (fd limit, mapping count): not the device's OOM, not a bug. */
export function isResourceError(e: unknown): e is Error {
  const code = (e as { code?: unknown } | null)?.code;
  return e instanceof Error && typeof code === "string" && HOST_RESOURCE_CODES.includes(code);
}

/** A result that could not be written (an OutputError of kind "write"). */
export function isOutputError(e: unknown): e is Error {
  return e instanceof Error && e.name === "OutputError" && (e as { kind?: unknown }).kind === "write";
}

/** Errors that mean "your input is wrong": exit 2 with one line (main.ts; the fuzz tests classify with it too). */
export function isInputError(e: unknown): e is Error {
  if (!(e instanceof Error)) return false;
  const code = (e as { code?: unknown }).code;
  return (
    e instanceof UsageError ||
    e.name === "SnapshotError" ||
    e.name === "TraceInputError" ||
    (e.name === "OutputError" && (e as { kind?: unknown }).kind === "path") ||
    (typeof code === "string" && (code.startsWith("ERR_PARSE_ARGS") || code === "ENOENT" || code === "EISDIR" || code === "EACCES"))
  );
}
