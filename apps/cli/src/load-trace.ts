import { basename } from "node:path";
import { readSnapshot, type Snapshot } from "@gmlake/torch-trace";
import { DEFAULT_TRACE } from "./default-trace.js";

export interface LoadedTrace {
  /** The path given, or the embedded default's. */
  path: string;
  /** A short name for tables and file names: the file name without .pickle(.gz). */
  name: string;
  snapshot: Snapshot;
}

export function traceName(path: string): string {
  return basename(path).replace(/\.gz$/, "").replace(/\.(pickle|pkl)$/, "");
}

/** The name a trace argument gets in tables and file names (no argument: the embedded default). */
export function nameOf(path: string | undefined): string {
  return path === undefined ? "train_default (embedded)" : traceName(path);
}

/** Reads a snapshot (SnapshotError on bad input, which the CLI reports as exit 2). */
export async function loadTrace(path: string | undefined): Promise<LoadedTrace> {
  const p = path ?? DEFAULT_TRACE;
  const snapshot = await readSnapshot(p);
  return { path: p, name: nameOf(path), snapshot };
}
