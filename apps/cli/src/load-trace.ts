import { basename } from "node:path";
import { envReadLimits, parseReadLimits, readSnapshot, readSnapshotStream, type ReadLimits, type Snapshot } from "@gmlake/torch-trace";
import { UsageError } from "./cli-error.js";
import { DEFAULT_TRACE } from "./default-trace.js";
import { noteUnknownActions } from "./unknown-actions.js";

export interface LoadedTrace {
  /** The path given, or the embedded default's. */
  path: string;
  /** A short name for tables and file names: the file name without .pickle(.gz). */
  name: string;
  snapshot: Snapshot;
}

export function traceName(path: string): string {
  if (path === "-") return "stdin";
  return basename(path).replace(/\.gz$/, "").replace(/\.(pickle|pkl)$/, "");
}

/** The name a trace argument gets in tables and file names (no argument: the embedded default). */
export function nameOf(path: string | undefined): string {
  return path === undefined ? "train_default (embedded)" : traceName(path);
}

let limits: Partial<ReadLimits> = {};

/**
 * The reader's resource limits for this run: GMLAKE_READ_LIMITS, then every `--limit
 * name=value` (a later one wins). A bad name or value is a usage error.
 */
export function setReadLimits(flags: unknown): void {
  const list = flags === undefined ? [] : Array.isArray(flags) ? flags : [flags];
  try {
    limits = envReadLimits();
  } catch (e) {
    throw new UsageError(`GMLAKE_READ_LIMITS: ${(e as Error).message}`);
  }
  for (const f of list) {
    try {
      Object.assign(limits, parseReadLimits(String(f)));
    } catch (e) {
      throw new UsageError(`--limit: ${(e as Error).message}`);
    }
  }
}

/** Reads a snapshot ('-' is stdin; SnapshotError on bad input, which the CLI reports as exit 2); `frames`: keep the stacks. */
export async function loadTrace(path: string | undefined, options: { frames?: boolean } = {}): Promise<LoadedTrace> {
  const p = path ?? DEFAULT_TRACE;
  const frames = options.frames === true;
  const snapshot = p === "-" ? await readSnapshotStream(process.stdin, { name: "<stdin>", limits, frames }) : await readSnapshot(p, { limits, frames });
  noteUnknownActions(nameOf(path), snapshot.unknownActions);
  return { path: p, name: nameOf(path), snapshot };
}
