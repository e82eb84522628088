import { H200_BYTES, createDriver, warmUpDriver, type VmmDriver } from "@gmlake/vmm";
import { loadPolicyModules, privatePoolTags, replay, replayRow, type ReplayRow } from "@gmlake/stitch";
import { readSnapshot, type Snapshot } from "@gmlake/torch-trace";
import { sampleTimeline } from "@gmlake/trace";
import { DeviceAccounting } from "./device-accounting.js";

export interface Task {
  id: number;
  trace: string;
  path: string;
  policy: string;
  /** Policy modules to load first (absolute paths; a worker loads each once). */
  policyModules?: string[];
  /** The policy's knob values (checked by the parent: optionsForPolicies). */
  options?: Record<string, unknown>;
  driver: "cuda" | "sim" | "host";
  capacity?: number;
  /** Why the capacity is set (e.g. "1.02x peak requested"). */
  capacityNote?: string;
  integrity: boolean | "full";
  /** Keep the allocator's reserved bytes over time (for the per-trace plot). */
  timeline?: boolean;
  /** cuda: make untimed driver calls once per process before the first task (default true). */
  warmUp?: boolean;
}

/** A sampled curve, as plain arrays so that it crosses process boundaries. */
export interface Curve {
  startUs: number;
  timeUs: number[];
  bytes: number[];
}

export interface TaskResult extends ReplayRow {
  taskId: number;
  capacityBytes: number | null;
  capacityNote: string | null;
  /** cuda: device memory gone (cuMemGetInfo) when the allocator's held bytes peaked. */
  deviceUsedAtPeakBytes: number | null;
  error: string | null;
  /** The GPU ordinal (of this host, as --gpus names them) its worker ran on; null on a CPU worker or in the bench's own process. */
  gpu?: number | null;
  /** Reserved over time, when the task asked for it (not written to results.json). */
  reservedCurve?: Curve;
}

const cache = new Map<string, Promise<Snapshot>>();
let warmedUp = false;

/** Before its first cuda task a worker warms the driver up, untimed (warmUpDriver says why). */
function warmUp(): void {
  if (warmedUp) return;
  warmedUp = true;
  const d = createDriver("cuda");
  try {
    warmUpDriver(d);
  } finally {
    d.close();
  }
}

/** Traces are read once per process (a worker runs several policies on one trace). */
export function loadSnapshot(path: string): Promise<Snapshot> {
  let p = cache.get(path);
  if (!p) {
    if (cache.size > 2) cache.clear();
    p = readSnapshot(path);
    cache.set(path, p);
  }
  return p;
}

export async function runTask(task: Task): Promise<TaskResult> {
  if (task.policyModules?.length) await loadPolicyModules(task.policyModules); // registered once per process
  const s = await loadSnapshot(task.path);
  const ev = s.events;
  const durationUs = ev.length ? ev.timeUs[ev.length - 1] - ev.timeUs[0] : 0;
  let driver: VmmDriver | undefined;
  let accounting: DeviceAccounting | undefined;
  try {
    if (task.driver === "cuda" && task.warmUp !== false) warmUp();
    // host: an H200-sized device, as on sim (pages are used only where stamped), unless
    // --integrity full writes every byte: then the host driver's safe default
    const hostDevice = task.driver === "host" && task.integrity !== "full" ? { capacityBytes: H200_BYTES } : {};
    driver = createDriver(task.driver, hostDevice);
    if (task.driver === "cuda") driver = accounting = new DeviceAccounting(driver);
    const r = replay(ev, {
      policy: task.policy,
      options: task.options,
      driver,
      capacity: task.capacity,
      settings: s.allocatorSettings,
      integrity: task.driver === "sim" ? false : task.integrity,
      recorder: task.timeline ? undefined : null,
      onOom: "stop",
      pools: privatePoolTags(ev, s.segments),
    });
    return {
      ...replayRow(task.trace, durationUs, r),
      taskId: task.id,
      capacityBytes: task.capacity ?? null,
      capacityNote: task.capacityNote ?? null,
      deviceUsedAtPeakBytes: accounting ? accounting.deviceUsedAtPeakBytes : null,
      error: null,
      reservedCurve: task.timeline && r.log ? curveOf(r.log) : undefined,
    };
  } catch (e) {
    return failed(task, durationUs, e);
  } finally {
    driver?.close();
  }
}

/** The result row of a task that failed: its error in one line (code: message). */
export function failed(task: Task, durationUs: number, e: unknown): TaskResult {
  const message = e instanceof Error ? `${(e as { code?: string }).code ?? e.name}: ${e.message.split("\n")[0]}` : String(e);
  return {
    trace: task.trace,
    policy: task.policy,
    driver: task.driver,
    events: 0,
    peakRequestedBytes: 0,
    peakAllocatedBytes: 0,
    peakReservedBytes: 0,
    utilization: 0,
    oom: null,
    driverCalls: {},
    driverTimeUs: 0,
    driverCallsSecondHalf: 0,
    driverTimeUsSecondHalf: 0,
    traceDurationUs: durationUs,
    wallMs: 0,
    eventsPerSecond: 0,
    integrityErrors: 0,
    integrityChecked: 0,
    counters: {},
    taskId: task.id,
    capacityBytes: task.capacity ?? null,
    capacityNote: task.capacityNote ?? null,
    deviceUsedAtPeakBytes: null,
    error: message,
  };
}

function curveOf(log: NonNullable<ReturnType<typeof replay>["log"]>): Curve {
  const tl = sampleTimeline(log);
  return { startUs: tl.startUs, timeUs: Array.from(tl.reserved.timeUs), bytes: Array.from(tl.reserved.bytes) };
}
