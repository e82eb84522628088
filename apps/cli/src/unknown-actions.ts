/**
 * Trace entries whose action the reader does not know (a newer PyTorch's renamed or new
 * actions) are skipped by every command: each says so, not only `inspect`. One warning
 * line per trace on stderr, and every JSON document about traces counts them in
 * `unknownActions` (action -> entries, summed over the traces it covers).
 */
import { terminalSafe } from "@gmlake/output";

let since: Record<string, number> | null = null;

/** A trace was read: warn about its skipped entries and count them for the next JSON document. */
export function noteUnknownActions(name: string, unknownActions: Readonly<Record<string, number>>): void {
  since ??= {};
  const entries = Object.entries(unknownActions);
  for (const [a, n] of entries) since[a] = (since[a] ?? 0) + n;
  if (entries.length === 0) return;
  const total = entries.reduce((s, [, n]) => s + n, 0);
  const list = entries.map(([a, n]) => `${a} x${n}`).join(", ");
  process.stderr.write(terminalSafe(`gmlake: warning: ${name}: ${total} trace entries of actions this reader does not know were skipped (${list}): a newer PyTorch's? the figures leave them out`) + "\n");
}

/** `value` with `unknownActions` of the traces read since the last document (unchanged when none was read, or it has the field). */
export function withUnknownActions(value: unknown): unknown {
  const counts = since;
  since = null;
  if (counts === null || typeof value !== "object" || value === null || Array.isArray(value) || "unknownActions" in value) return value;
  return { ...value, unknownActions: counts };
}
