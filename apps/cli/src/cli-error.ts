import { GmlakeError } from "@gmlake/errors";
import { OutputError } from "@gmlake/output";
import { StitchError, type StitchErrorCode } from "@gmlake/stitch";
import { TraceFormatError } from "@gmlake/trace";
import { SnapshotError } from "@gmlake/torch-trace";
import { HOST_RESOURCE_CODES, VmmError } from "@gmlake/vmm";

/**
 * Errors the CLI reports as one line. `UsageError` and bad input exit 2 (an output path
 * that is wrong, found before the work, is bad input too); an output the system refused
 * to take (disk full, read-only, stdout closed) exits 3; a limit of this machine that
 * the host driver hit (file descriptors, mappings) exits 4; anything else that escapes a
 * command is an internal failure and exits 1.
 */
export class UsageError extends GmlakeError<"USAGE"> {
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
  return e instanceof VmmError && HOST_RESOURCE_CODES.includes(e.code);
}

/** A result that could not be written (an OutputError of kind "write"). */
export function isOutputError(e: unknown): e is Error {
  return e instanceof OutputError && e.kind === "write";
}

/** The StitchError codes that mean the user's input (a knob, a policy name, a trace, a module, an outside policy's own fault) is wrong. */
export const STITCH_INPUT_CODES: ReadonlySet<StitchErrorCode> = new Set(["BAD_OPTION", "UNKNOWN_POLICY", "DUPLICATE_POLICY", "BAD_ARGUMENT", "BAD_TRACE", "BAD_MODULE", "BAD_POLICY"]);

/** Errors that mean "your input is wrong", by class: exit 2 with one line (main.ts; the fuzz tests classify with it too). */
export function isInputError(e: unknown): e is Error {
  if (!(e instanceof Error)) return false;
  if (e instanceof UsageError || e instanceof SnapshotError || e instanceof TraceFormatError) return true;
  if (e instanceof OutputError) return e.kind === "path";
  if (e instanceof StitchError) return STITCH_INPUT_CODES.has(e.code);
  // Node's own: parseArgs on the command line, a trace path that is missing or unreadable
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" && (code.startsWith("ERR_PARSE_ARGS") || code === "ENOENT" || code === "EISDIR" || code === "EACCES");
}
