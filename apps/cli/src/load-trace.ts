import { basename } from "node:path";
import { READ_LIMIT_NAMES, readSnapshot, readSnapshotStream, type ReadLimitName, type ReadLimits, type Snapshot } from "@gmlake/torch-trace";
import { UsageError } from "./cli-error.js";
import { parseSize } from "./sizes.js";
import { didYouMean } from "./suggest.js";
import { DEFAULT_TRACE } from "./default-trace.js";
import { noteUnknownActions } from "./unknown-actions.js";
import { terminalSafe } from "@gmlake/output";

export interface LoadedTrace {
  /** The path given, or the embedded default's. */
  path: string;
  /** A short name for tables and file names: the file name without .pickle(.gz). */
  name: string;
  snapshot: Snapshot;
  /** Segments but no allocation history (dumped without _record_memory_history): no peak or utilization to give. */
  noHistory: boolean;
}

/** The snapshot holds segments but no history: every event was made up from the segments' state. */
export function hasNoHistory(s: Snapshot): boolean {
  return s.segments.length > 0 && s.events.length === s.reconstructed.syntheticEvents;
}

export function traceName(path: string): string {
  if (path === "-") return "stdin";
  return basename(path).replace(/\.gz$/, "").replace(/\.(pickle|pkl)$/, "");
}

/** The name a trace argument gets in tables and file names (no argument: the embedded default). */
export function nameOf(path: string | undefined): string {
  return path === undefined ? "train_default (embedded)" : traceName(path);
}

/** The read limits that count bytes (the others count frames, entries). */
const BYTE_LIMITS = new Set<string>(READ_LIMIT_NAMES.filter((n) => n.endsWith("Bytes")));

/**
 * `NAME=VALUE,NAME=VALUE` read limits, with one grammar for sizes: a byte limit takes what
 * --capacity takes (1MiB, 1MB, 1048576; a bare 1M is refused as ambiguous), a count a
 * plain number (4e6).
 */
export function parseLimits(text: string, what: string): Partial<ReadLimits> {
  const out: Partial<ReadLimits> = {};
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const eq = part.indexOf("=");
    const name = (eq < 0 ? part : part.slice(0, eq)).trim();
    const value = eq < 0 ? "" : part.slice(eq + 1).trim();
    if (!(READ_LIMIT_NAMES as readonly string[]).includes(name)) {
      throw new UsageError(`${what}: unknown read limit '${name.slice(0, 40)}'${didYouMean(name, READ_LIMIT_NAMES)} (known: ${READ_LIMIT_NAMES.join(", ")})`);
    }
    let n: number;
    if (BYTE_LIMITS.has(name)) n = parseSize(value, `${what} ${name}`);
    else {
      n = /^\d+(\.\d+)?(e\d{1,2})?$/.test(value) ? Number(value) : NaN;
      if (!Number.isSafeInteger(n) || n <= 0) throw new UsageError(`${what}: read limit ${name} counts, and needs a positive integer (e.g. 4e6), not '${value.slice(0, 40)}'`);
    }
    out[name as ReadLimitName] = n;
  }
  return out;
}

let limits: Partial<ReadLimits> = {};

/**
 * The reader's resource limits for this run: GMLAKE_READ_LIMITS, then every `--limit
 * name=value` (a later one wins). A bad name or value is a usage error.
 */
export function setReadLimits(flags: unknown): void {
  const list = flags === undefined ? [] : Array.isArray(flags) ? flags : [flags];
  const env = process.env.GMLAKE_READ_LIMITS;
  limits = env === undefined ? {} : parseLimits(env, "GMLAKE_READ_LIMITS");
  const given = new Map<string, number>();
  for (const f of list) {
    for (const [name, n] of Object.entries(parseLimits(String(f), "--limit"))) {
      if (given.has(name) && given.get(name) !== n) throw new UsageError(`--limit ${name} given twice: give it once`);
      given.set(name, n);
      Object.assign(limits, { [name]: n });
    }
  }
}

/** Reads a snapshot ('-' is stdin; SnapshotError on bad input, which the CLI reports as exit 2); `frames`: keep the stacks. */
export async function loadTrace(path: string | undefined, options: { frames?: boolean } = {}): Promise<LoadedTrace> {
  const p = path ?? DEFAULT_TRACE;
  const frames = options.frames === true;
  const snapshot = p === "-" ? await readSnapshotStream(process.stdin, { name: "<stdin>", limits, frames }) : await readSnapshot(p, { limits, frames });
  noteUnknownActions(nameOf(path), snapshot.unknownActions);
  const noHistory = hasNoHistory(snapshot);
  if (noHistory) {
    process.stderr.write(
      terminalSafe(`gmlake: warning: ${nameOf(path)}: segments but no allocation history (dumped without torch.cuda.memory._record_memory_history): no utilization or peak to give, only the segments held at the dump`) + "\n",
    );
  }
  return { path: p, name: nameOf(path), snapshot, noHistory };
}
