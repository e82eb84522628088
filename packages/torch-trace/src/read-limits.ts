/**
 * Bounds on what reading one snapshot may cost, so that a hostile file ends in a
 * SnapshotError (code LIMIT) instead of a hang or a fatal out-of-memory of Node.
 *
 * The defaults sit far above what a real snapshot needs (see the package README for the
 * figures measured on the public traces) and most grow with the input: a bigger file may
 * hold more. Every one can be overridden: `ReadOptions.limits`, the CLI's `--limit
 * name=value` or the environment variable GMLAKE_READ_LIMITS="name=value,name=value".
 */
export interface ReadLimits {
  /** Bytes of the file itself (default 4 GiB - 1) or of stdin (default 256 MiB: an endless pipe stops here). */
  maxInputBytes: number;
  /** Bytes of the pickle after gzip (a gzip bomb stops here). Default: 32x the gzip input (the public traces inflate 10-16x), at least 32 MiB. */
  maxInflatedBytes: number;
  /** Values on the pickle VM's stack plus open MARKs. CPython's pickler never needs more than ~1,000 plus the nesting depth. */
  maxStackDepth: number;
  /** Memo entries (and the largest memo index). Default: one per 4 bytes of pickle, at least 1 M. */
  maxMemoEntries: number;
  /**
   * Estimated heap bytes of the dicts, lists, tuples and sets built and the items stored in
   * them (VALUE_COST in pickle-vm.ts: a dict 192, a list 40, an item 8-24); trace entries,
   * which become EventLog rows, are not counted. This is the object count weighted by what
   * each object costs: a file of millions of empty dicts ends here. Default: 16x the pickle
   * (the public traces need at most 0.8x), at least 64 MiB.
   */
  maxValueBytes: number;
  /** Bytes of str / bytes / int payloads decoded into values. Default: 2x the pickle, at least 64 MiB. */
  maxDecodedBytes: number;
  /** Bytes of one LONG1/LONG4 integer, and (x 3) digits of one text INT/LONG/FLOAT. */
  maxIntBytes: number;
}

export const READ_LIMIT_NAMES = ["maxInputBytes", "maxInflatedBytes", "maxStackDepth", "maxMemoEntries", "maxValueBytes", "maxDecodedBytes", "maxIntBytes"] as const;
export type ReadLimitName = (typeof READ_LIMIT_NAMES)[number];

const MiB = 2 ** 20;

/** Limits that do not depend on the input's size. */
export const FIXED_READ_LIMITS = Object.freeze({
  maxInputBytes: 4 * 2 ** 30 - 1, // the largest Buffer Node 20 makes
  maxStackDepth: 1_000_000,
  maxIntBytes: 1024,
});

/** The limits for a gzip input of `compressed` bytes (0 when it is not gzip). */
export function inflateLimit(compressed: number, over?: Partial<ReadLimits>): number {
  return over?.maxInflatedBytes ?? Math.min(FIXED_READ_LIMITS.maxInputBytes, Math.max(32 * MiB, 32 * compressed));
}

/** The limits for a pickle of `pickleBytes` bytes, with overrides applied. */
export function readLimits(pickleBytes: number, over: Partial<ReadLimits> = {}): ReadLimits {
  return {
    maxInputBytes: over.maxInputBytes ?? FIXED_READ_LIMITS.maxInputBytes,
    maxInflatedBytes: over.maxInflatedBytes ?? inflateLimit(0),
    maxStackDepth: over.maxStackDepth ?? FIXED_READ_LIMITS.maxStackDepth,
    maxMemoEntries: over.maxMemoEntries ?? Math.max(1 << 20, Math.ceil(pickleBytes / 4)),
    maxValueBytes: over.maxValueBytes ?? Math.max(64 * MiB, 16 * pickleBytes),
    maxDecodedBytes: over.maxDecodedBytes ?? Math.max(64 * MiB, 2 * pickleBytes),
    maxIntBytes: over.maxIntBytes ?? FIXED_READ_LIMITS.maxIntBytes,
  };
}

/** Which option / flag / variable raises a limit (for messages). */
export function limitHint(name: ReadLimitName): string {
  return `raise it with --limit ${name}=N or GMLAKE_READ_LIMITS=${name}=N`;
}

/**
 * Parses "name=value,name=value" (values: integers, with an optional k/M/G binary suffix
 * or an exponent like 1e8). Throws a RangeError naming the bad part.
 */
export function parseReadLimits(text: string): Partial<ReadLimits> {
  const out: Partial<ReadLimits> = {};
  for (const part of text.split(",")) {
    const p = part.trim();
    if (p === "") continue;
    const eq = p.indexOf("=");
    const name = (eq < 0 ? p : p.slice(0, eq)).trim();
    if (!(READ_LIMIT_NAMES as readonly string[]).includes(name)) {
      throw new RangeError(`unknown read limit '${name.slice(0, 40)}' (known: ${READ_LIMIT_NAMES.join(", ")})`);
    }
    const raw = eq < 0 ? "" : p.slice(eq + 1).trim();
    const m = /^(\d+(?:\.\d+)?(?:e\d{1,2})?)([kMG]?)$/.exec(raw);
    const v = m === null ? NaN : Number(m[1]) * (m[2] === "k" ? 1024 : m[2] === "M" ? MiB : m[2] === "G" ? 2 ** 30 : 1);
    if (!Number.isSafeInteger(v) || v <= 0) throw new RangeError(`read limit ${name} needs a positive integer, got '${raw.slice(0, 40)}'`);
    out[name as ReadLimitName] = v;
  }
  return out;
}

/** Overrides from GMLAKE_READ_LIMITS (empty when unset). */
export function envReadLimits(env: Record<string, string | undefined> = process.env): Partial<ReadLimits> {
  const t = env.GMLAKE_READ_LIMITS;
  return t === undefined ? {} : parseReadLimits(t);
}
