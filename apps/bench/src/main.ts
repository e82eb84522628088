#!/usr/bin/env node
/**
 * gmlake-bench: every trace in a folder x every policy x the chosen drivers, on the
 * machine it runs on. Writes results.json, summary.md and one SVG per trace to --out.
 * On a host with several GPUs it runs one worker process per GPU (CUDA_VISIBLE_DEVICES, --gpus).
 */
import { cpus, hostname } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { OutputError, terminalSafe, writeStdout } from "@gmlake/output";
import { listPolicies, optionsForPolicies, resolvePolicyModule } from "@gmlake/stitch";
import { probeCuda } from "@gmlake/vmm";
import { defaultTraceDir, findTraces, traceLabel } from "./find-traces.js";
import { recordedFigures, type Recorded } from "./recorded.js";
import { sweepIdentity } from "./identity.js";
import { mergeCommand } from "./merge.js";
import { checkSweepOutputs, writeOutputs, type Plan, type SweepTargets } from "./outputs.js";
import { recordedCurves, type CurvesFile } from "./plots.js";
import { inShard, parseShard, type Shard } from "./shard.js";
import { dealShares, FAKE_GPUS_VAR, hostDevices, parseGpus, runWorkers, visibleDevice, WorkerDied, type Devices, type WorkerSpec } from "./gpus.js";
import { closePolicyThreads, exitPastModuleTimers, loadProbedPolicyModules, runWatchedTask, servedAsPolicyThread } from "./outside-policy.js";
import type { Task, TaskResult } from "./task.js";

const HELP = `Usage: gmlake-bench [--traces DIR] [--policies a,b] [--drivers auto|sim,cuda,host]
                    [--capacity-factor 1.02] [--integrity on|full|off] [--gpus all|N|0,1,3] [--cpu-workers N]
                    [--only NAME,...] [--set KNOB=VALUE ...] [--policy-module PATH|PACKAGE ...]
                    [--no-warmup] [--shard I/N] [--out DIR] [--force]
       gmlake-bench merge DIR... --out DIR [--force]

Replays every trace in DIR (default ../shared/traces, sub-folders included) with every
policy on each driver, and writes DIR_OUT/results.json, summary.md and <trace>.svg.
--drivers auto = cuda and sim on a GPU host, sim elsewhere. --capacity-factor F adds a
sim run per trace x policy under a capacity of F x the trace's peak requested bytes.
--gpus spreads the cuda runs over this host's GPUs (default all): one worker process per
GPU (CUDA_VISIBLE_DEVICES), each on its share, dealt round-robin as --shard deals across
hosts, merged here; a worker that dies stops the sweep with one line naming its GPU, exit 1,
nothing written. GMLAKE_BENCH_FAKE_GPUS=N simulates N GPUs (tests): every run goes to them.
Every process it starts has NVLink multicast off (NCCL_NVLS_ENABLE=0 ...).
Before its first cuda task a worker makes a few driver calls of each kind, untimed, so
that the driver's lazy first-use cost does not land on the first trace (--no-warmup).
--policy-module loads a module whose default export is a policy or a list of them (a
file or an installed package; repeatable): its policies run beside the built-ins, in a
watched thread (a call past GMLAKE_POLICY_BUDGET_S seconds, default 10, fails its task).
--set KNOB=VALUE goes to every policy that has the knob (checked before any run: a knob
none of them has, or a bad value, exits 2; 'gmlake policies' lists the knobs).
--shard I/N runs only tasks I, I+N, I+2N ... of the sweep (0-based I: a Slurm array
task's SLURM_ARRAY_TASK_ID, a Kubernetes indexed Job's JOB_COMPLETION_INDEX); 'merge'
joins the result folders of all N shards into one, as if the sweep had run whole;
it refuses shards of another sweep (each records its traces' and modules' sha256,
knobs and version) and malformed ones.
The output files are checked before the first run: existing ones are replaced only
with --force; each is written whole (temporary file + rename) or not at all.
Example: gmlake-bench --drivers auto --capacity-factor 1.02 --out bench-results`;

interface Args {
  traceDir: string;
  policies: string[];
  drivers: ("cuda" | "sim" | "host")[];
  capacityFactor: number | null;
  integrity: boolean | "full";
  /** The GPU ordinals the GPU-bound tasks are spread over (empty: none). */
  gpus: number[];
  devices: Devices;
  /** Worker processes for sim/host runs (default: cores - 2, at most 8). */
  cpuWorkers?: number;
  only: string[] | null;
  out: string;
  warmUp: boolean;
  shard: Shard | null;
  force: boolean;
  /** Absolute paths of --policy-module (each worker loads them too). */
  policyModules: string[];
  /** Each policy's checked knob values (--set). */
  options: Map<string, Record<string, unknown>>;
}

function fail(msg: string, code = 2): never {
  process.stderr.write(`gmlake-bench: ${terminalSafe(msg)}\n`);
  process.exit(code);
}

async function parse(argv: string[]): Promise<Args> {
  let v;
  try {
    v = parseArgs({
      args: argv,
      options: {
        traces: { type: "string" },
        policies: { type: "string" },
        drivers: { type: "string" },
        "capacity-factor": { type: "string" },
        integrity: { type: "string" },
        gpus: { type: "string" },
        workers: { type: "string" },
        "cpu-workers": { type: "string" },
        "no-warmup": { type: "boolean" },
        only: { type: "string" },
        out: { type: "string" },
        set: { type: "string", multiple: true },
        "policy-module": { type: "string", multiple: true },
        shard: { type: "string" },
        force: { type: "boolean", short: "f" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (e) {
    fail((e as Error).message);
  }
  if (v.help) {
    writeStdout(HELP + "\n");
    process.exit(0);
  }
  let policyModules: string[] = [];
  try {
    policyModules = (v["policy-module"] ?? []).map((m) => resolvePolicyModule(m));
    // imported in a watched thread first: a module that hangs, exits or blows up at import is one line
    const probe = await loadProbedPolicyModules(policyModules);
    if (probe !== null) fail(probe);
  } catch (e) {
    fail(`--policy-module: ${(e as Error).message.split("\n")[0]}`);
  }
  const registered = listPolicies().map((p) => p.name);
  const policies = v.policies ? v.policies.split(",").map((s) => s.trim()) : registered;
  for (const p of policies) if (!registered.includes(p)) fail(`unknown policy '${p}' (policies: ${registered.join(", ")})`);
  const sets: Record<string, string> = Object.create(null); // "__proto__=x" is a knob name like any other
  for (const item of v.set ?? []) {
    const eq = item.indexOf("=");
    if (eq <= 0) fail(`invalid --set '${item}': expected knob=value`);
    sets[item.slice(0, eq).trim()] = item.slice(eq + 1).trim();
  }
  let options: Args["options"];
  try {
    options = optionsForPolicies(policies, sets);
  } catch (e) {
    fail((e as Error).message);
  }
  const cuda = probeCuda({ memInfo: false });
  let drivers: Args["drivers"];
  if (!v.drivers || v.drivers === "auto") drivers = cuda.ok ? ["cuda", "sim"] : ["sim"];
  else {
    drivers = v.drivers.split(",").map((s) => s.trim()) as Args["drivers"];
    for (const d of drivers) if (!["cuda", "sim", "host"].includes(d)) fail(`unknown driver '${d}' (sim, host, cuda or auto)`);
    if (drivers.includes("cuda") && !cuda.ok) fail(`--drivers cuda: no usable GPU here (${cuda.driver.error?.message ?? "no device"})`);
  }
  const factor = v["capacity-factor"] === undefined ? null : Number(v["capacity-factor"]);
  if (factor !== null && !(factor > 0)) fail(`invalid --capacity-factor '${v["capacity-factor"]}'`);
  const integ = v.integrity ?? "on";
  if (!["on", "off", "full"].includes(integ)) fail(`invalid --integrity '${integ}': on, full or off`);
  const devices = hostDevices(cuda);
  if (typeof devices === "string") fail(devices);
  // --workers N, the older spelling of --gpus N
  if (v.gpus !== undefined && v.workers !== undefined) fail("--gpus and --workers name the same thing: give one");
  const gpuSpec = v.gpus ?? v.workers;
  let gpus: number[] = [];
  if (devices.fake || drivers.includes("cuda")) {
    if (devices.count === 0) fail(`--gpus: no GPU here (${devices.why})`);
    const g = parseGpus(gpuSpec ?? "all", devices.count);
    if (typeof g === "string") fail(g);
    gpus = g;
  } else if (gpuSpec !== undefined) fail(`--gpus spreads the cuda runs, and --drivers ${drivers.join(",")} has none (or set ${FAKE_GPUS_VAR} to simulate GPUs)`);
  const cpuWorkers = v["cpu-workers"] === undefined ? undefined : Number(v["cpu-workers"]);
  if (cpuWorkers !== undefined && (!Number.isInteger(cpuWorkers) || cpuWorkers < 1)) fail(`invalid --cpu-workers '${v["cpu-workers"]}'`);
  const shard = v.shard === undefined ? null : parseShard(v.shard);
  if (v.shard !== undefined && shard === null) fail(`invalid --shard '${v.shard}': expected I/N with 0 <= I < N (e.g. --shard 0/4)`);
  return {
    shard,
    traceDir: v.traces ?? defaultTraceDir(),
    policies,
    drivers,
    capacityFactor: factor,
    integrity: integ === "full" ? "full" : integ === "on",
    gpus,
    devices,
    cpuWorkers,
    only: v.only ? v.only.split(",") : null,
    out: v.out ?? "bench-results",
    warmUp: !v["no-warmup"],
    force: Boolean(v.force),
    policyModules,
    options,
  };
}

const SCRIPT = new URL(import.meta.url).pathname;

/** One worker per GPU, each on its own share (pinned with CUDA_VISIBLE_DEVICES). */
function gpuWorkers(tasks: Task[], gpus: readonly number[], fake: boolean): WorkerSpec[] {
  return dealShares(tasks, gpus.length).flatMap((share, k) => {
    const g = gpus[k]!;
    const visible = visibleDevice(g);
    const queue = [...share];
    const label = `the worker on ${fake ? "simulated " : ""}GPU ${g} (CUDA_VISIBLE_DEVICES=${visible})`;
    return share.length ? [{ label, env: { ...process.env, CUDA_VISIBLE_DEVICES: visible }, next: () => queue.shift(), gpu: g, share: share.length }] : [];
  });
}

/** sim and host tasks on CPU workers sharing one queue, no GPU visible to them: their speed figures do not wait for or compete with the GPU runs. */
function cpuWorkerSpecs(tasks: Task[], n: number): WorkerSpec[] {
  const queue = [...tasks];
  return Array.from({ length: n }, (_, w) => ({ label: `CPU worker ${w}`, env: { ...process.env, CUDA_VISIBLE_DEVICES: "" }, next: () => queue.shift(), gpu: null }));
}

function worker(): void {
  process.on("message", async (t: Task) => {
    const r = await runWatchedTask(t);
    process.send?.(r);
  });
  process.on("disconnect", () => void closePolicyThreads().then(() => process.exit(0)));
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (servedAsPolicyThread()) return;
  if (argv[0] === "--worker") return worker();
  if (argv[0] === "merge") return mergeCommand(argv.slice(1));
  const a = await parse(argv);
  let files: string[];
  try {
    files = findTraces(a.traceDir);
  } catch (e) {
    fail((e as Error).message);
  }
  let traces = files.map((path) => ({ path, trace: traceLabel(a.traceDir, path) }));
  if (a.only) traces = traces.filter((t) => a.only!.some((o) => t.trace === o || t.trace.startsWith(o)));
  if (traces.length === 0) fail(`no traces (*.pickle, *.pickle.gz) in ${a.traceDir}`);
  let targets: SweepTargets;
  try {
    targets = checkSweepOutputs(a.out, traces.map((t) => t.trace), a.shard === null, { inputs: traces.map((t) => t.path), force: a.force });
  } catch (e) {
    fail((e as Error).message);
  }

  const recorded: Recorded[] = [];
  for (const t of traces) {
    const rec = await recordedFigures(t.trace, t.path);
    const skipped = Object.entries(rec.unknownActions);
    if (skipped.length) process.stderr.write(terminalSafe(`gmlake-bench: warning: ${t.trace}: trace entries of actions this reader does not know were skipped (${skipped.map(([a, n]) => `${a} x${n}`).join(", ")}): a newer PyTorch's? every run leaves them out`) + "\n");
    recorded.push(rec);
  }
  const tasks: Task[] = [];
  for (const t of traces) {
    const rec = recorded.find((r) => r.trace === t.trace)!;
    for (const driver of a.drivers)
      for (const policy of a.policies)
        tasks.push({ id: tasks.length, ...t, policy, policyModules: a.policyModules, options: a.options.get(policy), driver, integrity: a.integrity, timeline: driver === "sim", warmUp: a.warmUp });
    if (a.capacityFactor !== null) {
      const capacity = Math.ceil(rec.peakRequestedBytes * a.capacityFactor);
      for (const policy of a.policies)
        tasks.push({ id: tasks.length, ...t, policy, policyModules: a.policyModules, options: a.options.get(policy), driver: "sim", capacity, capacityNote: `${a.capacityFactor}x peak requested`, integrity: false });
    }
  }

  const identity = sweepIdentity(traces, a.policyModules, a.options);
  const plan: Plan = { traces: traces.map((t) => t.trace), policies: a.policies, drivers: a.drivers, capacityFactor: a.capacityFactor, integrity: a.integrity, tasks: tasks.length, identity };
  const mine = tasks.filter((t) => inShard(t.id, a.shard));
  const results: TaskResult[] = [];
  const t0 = Date.now();
  const onDone = (r: TaskResult) => {
    results.push(r);
    const status = r.error ? `ERROR ${r.error}` : `util ${r.utilization.toFixed(3)}${r.oom ? " OOM" : ""}, ${(r.eventsPerSecond / 1e6).toFixed(2)} M ev/s`;
    process.stderr.write(terminalSafe(`[${results.length}/${mine.length}] ${((Date.now() - t0) / 1000).toFixed(0)}s ${r.trace} ${r.policy} ${r.driver}${r.gpu == null ? "" : ` (GPU ${r.gpu})`}${r.capacityNote ? ` @${r.capacityNote}` : ""}: ${status}`) + "\n");
  };
  // simulated GPUs stand in for real ones: every task goes to them
  const onGpu = (t: Task) => a.devices.fake || t.driver === "cuda";
  const gpuTasks = mine.filter(onGpu);
  const cpuTasks = mine.filter((t) => !onGpu(t));
  // Leave a core for the GPU worker and the parent; on a 2-core box this is one worker.
  const cpuWorkers = Math.max(1, Math.min(a.cpuWorkers ?? cpus().length - 2, cpuTasks.length, 8));
  if (gpuTasks.length === 0 && cpuWorkers === 1) {
    for (const t of mine) onDone(await runWatchedTask(t));
    await closePolicyThreads();
  } else {
    const specs = [...gpuWorkers(gpuTasks, a.gpus, a.devices.fake), ...(cpuTasks.length ? cpuWorkerSpecs(cpuTasks, cpuWorkers) : [])];
    try {
      await runWorkers(SCRIPT, specs, onDone);
    } catch (e) {
      if (e instanceof WorkerDied) fail(e.message, 1);
      throw e;
    }
  }
  // the shares merged: every task of this run once (a worker answers only the task it was sent)
  if (results.length !== mine.length || new Set(results.map((r) => r.taskId)).size !== mine.length) fail(`${results.length} results for ${mine.length} tasks: nothing written`, 1);
  for (const r of results) r.gpu ??= null;
  results.sort((x, y) => x.taskId - y.taskId);

  const cuda = probeCuda({ memInfo: false });
  const used = gpuTasks.length ? `, GPUs used ${a.gpus.join(",")}` : "";
  const machine = a.devices.fake
    ? `${cpus()[0]?.model ?? "CPU"} x${cpus().length}, ${a.devices.count} simulated GPUs${used}, host ${hostname()}`
    : cuda.ok
      ? `${cuda.devices.map((d) => d.name).join(", ")} (driver ${cuda.driver.version ?? "?"})${used}, ${cpus().length} CPU cores, host ${hostname()}`
      : `${cpus()[0]?.model ?? "CPU"} x${cpus().length}, no GPU, host ${hostname()}`;
  const command = `gmlake-bench ${argv.join(" ")}`.trim();
  const date = new Date().toISOString();
  const curves: CurvesFile = { recorded: {}, runs: {} };
  for (const t of traces) curves.recorded[t.trace] = await recordedCurves(t.path);
  for (const r of results) if (r.reservedCurve) curves.runs[String(r.taskId)] = r.reservedCurve;
  try {
    writeOutputs(targets, { date, machine, command, plan, shard: a.shard, recorded, results }, curves);
  } catch (e) {
    if (e instanceof OutputError) fail(e.message, 3);
    throw e;
  }
  const what = a.shard ? `shard ${a.shard.index}/${a.shard.count} (${mine.length} of ${tasks.length} tasks; merge the shards for the plots)` : `${traces.length} plots`;
  process.stderr.write(terminalSafe(`wrote ${join(a.out, "results.json")}, summary.md and ${what} in ${((Date.now() - t0) / 1000).toFixed(0)} s`) + "\n");
  const bad = results.filter((r) => r.error || r.integrityErrors > 0);
  if (bad.length) {
    process.stderr.write(`${bad.length} runs failed or found integrity errors\n`);
    // an outside policy's fault is bad input (exit 2, as the CLI), not the bench's failure
    process.exitCode = bad.some((r) => r.error?.startsWith("BAD_POLICY:")) ? 2 : 1;
  }
}

await main();
exitPastModuleTimers();
