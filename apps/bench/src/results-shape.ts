/**
 * The shape of a shard's results.json and curves.json, checked before `merge` uses a
 * field of them: a hand-edited or truncated file (null, a row with null figures, a taskId
 * given as a string) is bad input with one line naming the file and the field, never a
 * stack trace or a half-written output folder.
 */
import type { CurvesFile } from "./plots.js";
import type { ResultsFile } from "./outputs.js";

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isNum = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === "string");

/** The numeric fields of a result row (TaskResult): every one a finite number. */
const ROW_NUMBERS = [
  "events", "peakRequestedBytes", "peakAllocatedBytes", "peakReservedBytes", "utilization", "driverTimeUs", "driverCallsSecondHalf",
  "driverTimeUsSecondHalf", "traceDurationUs", "wallMs", "eventsPerSecond", "integrityErrors", "integrityChecked",
] as const;

/** Why `r` is not a gmlake-bench results.json (the first problem found), or null. */
export function resultsProblem(r: unknown): string | null {
  if (!isObj(r)) return `is ${r === null ? "null" : Array.isArray(r) ? "a list" : typeof r}, not a gmlake-bench result`;
  for (const k of ["date", "machine", "command"]) if (typeof r[k] !== "string") return `${k} is not a string`;
  const p = r.plan;
  if (!isObj(p)) return "has no plan";
  if (!isStrings(p.traces) || !isStrings(p.policies) || !isStrings(p.drivers)) return "plan.traces, plan.policies or plan.drivers is not a list of names";
  if (!isCount(p.tasks) || p.tasks === 0) return "plan.tasks is not a positive integer";
  if (!(p.capacityFactor === null || isNum(p.capacityFactor))) return "plan.capacityFactor is not a number or null";
  if (!isObj(p.identity)) return "has no plan.identity (made by a gmlake-bench older than sweep identities: run the shards again)";
  const id = p.identity;
  if (typeof id.version !== "string" || !isObj(id.traces) || !Array.isArray(id.policyModules) || !isObj(id.knobs)) return "plan.identity is malformed";
  const s = r.shard;
  if (s !== null && !(isObj(s) && isCount(s.index) && isCount(s.count) && s.count >= 1 && s.index < s.count)) return "shard is not {index, count} with 0 <= index < count";
  if (!Array.isArray(r.recorded) || !r.recorded.every((x) => isObj(x) && typeof x.trace === "string")) return "recorded is not a list of traces' figures";
  if (!Array.isArray(r.results)) return "results is not a list";
  for (const [i, row] of r.results.entries()) {
    const where = `results[${i}]`;
    if (!isObj(row)) return `${where} is not an object`;
    if (!isCount(row.taskId) || row.taskId >= p.tasks) return `${where}.taskId is ${JSON.stringify(row.taskId)}, not a task id of the sweep (0..${p.tasks - 1})`;
    if (typeof row.trace !== "string" || !p.traces.includes(row.trace)) return `${where}.trace is not one of the plan's traces`;
    if (typeof row.policy !== "string" || !p.policies.includes(row.policy)) return `${where}.policy is not one of the plan's policies`;
    if (typeof row.driver !== "string") return `${where}.driver is not a string`;
    for (const k of ROW_NUMBERS) if (!isNum(row[k])) return `${where}.${k} is ${JSON.stringify(row[k]) ?? "missing"}, not a number`;
    for (const k of ["capacityBytes", "deviceUsedAtPeakBytes"]) if (!(row[k] === null || isNum(row[k]))) return `${where}.${k} is not a number or null`;
    for (const k of ["capacityNote", "error"]) if (!(row[k] === null || typeof row[k] === "string")) return `${where}.${k} is not a string or null`;
    if (!(row.oom === null || (isObj(row.oom) && isCount(row.oom.eventIndex)))) return `${where}.oom is not null or an out-of-memory record`;
    for (const k of ["driverCalls", "counters"]) if (!isObj(row[k]) || !Object.values(row[k]).every(isNum)) return `${where}.${k} is not an object of numbers`;
  }
  return null;
}

const isCurve = (c: unknown) => isObj(c) && isNum(c.startUs) && Array.isArray(c.timeUs) && Array.isArray(c.bytes) && c.timeUs.length === c.bytes.length && c.timeUs.every(isNum) && c.bytes.every(isNum);

/** Why `c` is not a gmlake-bench curves.json, or null. */
export function curvesProblem(c: unknown): string | null {
  if (!isObj(c) || !isObj(c.recorded) || !isObj(c.runs)) return "is not {recorded, runs}";
  for (const [t, rc] of Object.entries(c.recorded)) if (!isObj(rc) || !isCurve(rc.allocated) || !isCurve(rc.reserved)) return `recorded[${JSON.stringify(t)}] is not a trace's curves`;
  for (const [id, rc] of Object.entries(c.runs)) if (!/^\d+$/.test(id) || !isCurve(rc)) return `runs[${JSON.stringify(id)}] is not a run's curve`;
  return null;
}

export type { CurvesFile, ResultsFile };
