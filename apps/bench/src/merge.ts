import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { terminalSafe } from "@gmlake/output";
import { OutputError, checkSweepOutputs, writeOutputs, type ResultsFile, type SweepTargets } from "./outputs.js";
import { identityDifference } from "./identity.js";
import type { CurvesFile } from "./plots.js";
import { curvesProblem, resultsProblem } from "./results-shape.js";
import type { Recorded } from "./recorded.js";
import type { TaskResult } from "./task.js";

function fail(msg: string, code = 2): never {
  process.stderr.write(`gmlake-bench merge: ${terminalSafe(msg)}\n`);
  process.exit(code);
}

function readJson<T>(file: string): T {
  if (!existsSync(file)) fail(`no ${file} (is it a gmlake-bench --shard result folder?)`);
  try {
    return JSON.parse(readFileSync(file, "utf8")) as T;
  } catch (e) {
    fail(`${file}: not JSON (${(e as Error).message.split("\n")[0]})`);
  }
}

const planKey = (r: ResultsFile): string => JSON.stringify(r.plan);

/**
 * Joins the result folders of every shard of one sweep into one folder, as if the sweep
 * had run whole: the same results.json rows (by task id), summary.md, curves.json and the
 * per-trace plots. Refuses folders of different sweeps, a shard given twice or missing.
 */
export function mergeShards(dirs: readonly string[]): { results: ResultsFile; curves: CurvesFile } {
  if (dirs.length === 0) fail("needs the result folders of the shards (gmlake-bench merge DIR... --out DIR)");
  const parts = dirs.map((d) => {
    const r = readJson<ResultsFile>(join(d, "results.json"));
    const rp = resultsProblem(r);
    if (rp !== null) fail(`${join(d, "results.json")}: ${rp}`);
    const c = readJson<CurvesFile>(join(d, "curves.json"));
    const cp = curvesProblem(c);
    if (cp !== null) fail(`${join(d, "curves.json")}: ${cp}`);
    return { dir: d, r, c };
  });
  const first = parts[0]!;
  for (const p of parts) {
    if (!p.r.shard) fail(`${p.dir} is a whole sweep, not a shard`);
    const why = identityDifference(p.r.plan.identity, first.r.plan.identity);
    if (why !== null) fail(`${p.dir} is a shard of another sweep than ${first.dir}: ${why}`);
    if (planKey(p.r) !== planKey(first.r)) fail(`${p.dir} is a shard of another sweep (its traces, policies, drivers or capacity factor differ from ${first.dir})`);
    if (p.r.shard.count !== first.r.shard!.count) fail(`${p.dir} is shard ${p.r.shard.index}/${p.r.shard.count}, ${first.dir} is of ${first.r.shard!.count}`);
  }
  const n = first.r.shard!.count;
  const seen = new Map<number, string>();
  for (const p of parts) {
    const other = seen.get(p.r.shard!.index);
    if (other !== undefined) fail(`shard ${p.r.shard!.index}/${n} given twice: ${other} and ${p.dir}`);
    seen.set(p.r.shard!.index, p.dir);
  }
  const missing = Array.from({ length: n }, (_, i) => i).filter((i) => !seen.has(i));
  if (missing.length) fail(`missing shard(s) ${missing.map((i) => `${i}/${n}`).join(", ")}`);
  const results: TaskResult[] = [];
  const ids = new Set<number>();
  for (const p of parts) {
    for (const row of p.r.results) {
      if (ids.has(row.taskId)) fail(`task ${row.taskId} appears in two shards (${p.dir})`);
      if (row.taskId % n !== p.r.shard!.index) fail(`${p.dir}: task ${row.taskId} does not belong to shard ${p.r.shard!.index}/${n}`);
      ids.add(row.taskId);
      results.push(row);
    }
  }
  if (results.length !== first.r.plan.tasks) fail(`the shards hold ${results.length} of the sweep's ${first.r.plan.tasks} tasks (a shard stopped early?)`);
  results.sort((a, b) => a.taskId - b.taskId);
  const recorded: Recorded[] = [];
  for (const t of first.r.plan.traces) {
    const rec = parts.map((p) => p.r.recorded.find((x) => x.trace === t)).find((x) => x !== undefined);
    if (rec) recorded.push(rec);
  }
  const curves: CurvesFile = { recorded: {}, runs: {} };
  for (const p of parts) {
    Object.assign(curves.recorded, p.c.recorded);
    Object.assign(curves.runs, p.c.runs);
  }
  const machines = [...new Set(parts.map((p) => p.r.machine))];
  const dates = parts.map((p) => p.r.date).sort();
  return {
    results: {
      date: dates[dates.length - 1]!,
      machine: machines.join("; "),
      command: `${first.r.command.replace(/\s*--shard\s+\S+/, "").replace(/\s*--out\s+\S+/, "")} (merged from ${n} shards)`,
      plan: first.r.plan,
      shard: null,
      recorded,
      results,
    },
    curves,
  };
}

export function mergeCommand(argv: string[]): void {
  let v;
  try {
    v = parseArgs({ args: argv, options: { out: { type: "string" }, force: { type: "boolean", short: "f" } }, allowPositionals: true });
  } catch (e) {
    fail((e as Error).message);
  }
  if (!v.values.out) fail("needs --out DIR for the merged results");
  const out = String(v.values.out);
  const { results, curves } = mergeShards(v.positionals);
  // the shards' files are inputs: never replaced, even with --force
  const inputs = v.positionals.flatMap((d) => [join(d, "results.json"), join(d, "curves.json")]);
  let targets: SweepTargets;
  try {
    targets = checkSweepOutputs(out, results.plan.traces, true, { inputs, force: Boolean(v.values.force) });
  } catch (e) {
    fail((e as Error).message);
  }
  try {
    writeOutputs(targets, results, curves);
  } catch (e) {
    if (e instanceof OutputError) fail(e.message, 3);
    throw e;
  }
  process.stderr.write(terminalSafe(`merged ${v.positionals.length} shards (${results.results.length} tasks) into ${join(out, "results.json")}, summary.md and ${results.plan.traces.length} plots`) + "\n");
}
