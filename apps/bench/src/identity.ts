/**
 * What a sweep is, beyond its plan's names: the traces' contents, the policy modules'
 * contents, the knobs, and the bench's version. Each shard records it in results.json
 * (plan.identity), so that `merge` joins only shards of one sweep: the same trace names
 * over other files, another --set, or a module in one shard only are other sweeps.
 */
import { createHash } from "node:crypto";
import { closeSync, openSync, readFileSync, readSync } from "node:fs";

export interface SweepIdentity {
  /** @gmlake/bench's version. */
  version: string;
  /** sha256 of each trace file, by trace label. */
  traces: Record<string, string>;
  /** The --policy-module files, each by its sha256 (in load order; names as given). */
  policyModules: { module: string; sha256: string }[];
  /** Each policy's knob values (--set, checked). */
  knobs: Record<string, Record<string, unknown>>;
}

/** sha256 of a file, read in chunks (a trace can be GiBs). */
export function fileSha256(path: string): string {
  const h = createHash("sha256");
  const buf = Buffer.allocUnsafe(1 << 20);
  const fd = openSync(path, "r");
  try {
    for (let n; (n = readSync(fd, buf, 0, buf.length, null)) > 0; ) h.update(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return h.digest("hex");
}

export function benchVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version?: string };
  return String(pkg.version ?? "unknown");
}

export function sweepIdentity(traces: readonly { trace: string; path: string }[], policyModules: readonly string[], knobs: ReadonlyMap<string, Record<string, unknown>>): SweepIdentity {
  return {
    version: benchVersion(),
    traces: Object.fromEntries(traces.map((t) => [t.trace, fileSha256(t.path)])),
    // Modules resolved from a package may live at other paths on other hosts: the contents decide.
    policyModules: policyModules.map((m) => ({ module: m.slice(m.lastIndexOf("/") + 1), sha256: fileSha256(m) })),
    knobs: Object.fromEntries([...knobs].map(([p, o]) => [p, { ...o }])),
  };
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/** How two identities differ, in words (null when they are one sweep). */
export function identityDifference(a: SweepIdentity, b: SweepIdentity): string | null {
  if (a.version !== b.version) return `made by gmlake-bench ${a.version}, not ${b.version}`;
  for (const t of new Set([...Object.keys(a.traces), ...Object.keys(b.traces)])) {
    if (a.traces[t] !== b.traces[t]) return `its trace ${t} is another file (sha256 ${(a.traces[t] ?? "none").slice(0, 12)} vs ${(b.traces[t] ?? "none").slice(0, 12)})`;
  }
  if (!same(a.policyModules, b.policyModules)) {
    const names = (x: SweepIdentity) => x.policyModules.map((m) => `${m.module}@${m.sha256.slice(0, 12)}`).join(", ") || "none";
    return `its policy modules differ (${names(a)} vs ${names(b)})`;
  }
  for (const p of new Set([...Object.keys(a.knobs), ...Object.keys(b.knobs)])) {
    if (!same(a.knobs[p], b.knobs[p])) return `its ${p} knobs differ (${JSON.stringify(a.knobs[p] ?? {})} vs ${JSON.stringify(b.knobs[p] ?? {})})`;
  }
  return null;
}
