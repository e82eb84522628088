/**
 * The GPUs of one host a sweep spreads its cuda runs over (--gpus): one worker process per
 * GPU, pinned with CUDA_VISIBLE_DEVICES, each on its share of the tasks, dealt round-robin as
 * --shard deals them across hosts; the parent merges the shares in-process. A worker that
 * dies stops the sweep with one line naming its GPU, before any output is written.
 */
import { fork, type ChildProcess } from "node:child_process";
import type { CudaProbe } from "@gmlake/vmm";
import type { Task, TaskResult } from "./task.js";

/** NVLink multicast off in every process the bench starts (the lent hosts' rule; harmless elsewhere). */
export const NO_MULTICAST = { NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1" } as const;

/** Simulated devices (tests on a CPU host): every task of the sweep then runs on them, as cuda tasks would. */
export const FAKE_GPUS_VAR = "GMLAKE_BENCH_FAKE_GPUS";

export interface Devices {
  /** Devices this process sees (ordinals 0..count-1). */
  count: number;
  /** Simulated (GMLAKE_BENCH_FAKE_GPUS), not real. */
  fake: boolean;
  /** Why there are none, when count is 0. */
  why?: string;
}

/** This host's devices: GMLAKE_BENCH_FAKE_GPUS=N, else the vmm cuda driver's count. A string is a bad value. */
export function hostDevices(cuda: CudaProbe, env: NodeJS.ProcessEnv = process.env): Devices | string {
  const fake = env[FAKE_GPUS_VAR];
  if (fake !== undefined && fake !== "") {
    const n = Number(fake);
    if (!Number.isInteger(n) || n < 1 || n > 1024) return `${FAKE_GPUS_VAR} must be a number of simulated devices (1..1024), not '${fake}'`;
    return { count: n, fake: true };
  }
  if (cuda.ok) return { count: cuda.devices.length, fake: false };
  return { count: 0, fake: false, why: cuda.crashed ?? cuda.driver.error?.message ?? cuda.addon.error ?? "no device" };
}

/** --gpus all | N (the first N) | a,b,c (those ordinals): the ordinals, or why not. */
export function parseGpus(spec: string, count: number): number[] | string {
  const s = spec.trim();
  const have = `this host has ${count} (0..${count - 1})`;
  if (s === "all") return Array.from({ length: count }, (_, i) => i);
  if (/^\d+$/.test(s)) {
    const n = Number(s);
    if (n < 1) return `--gpus ${s}: at least 1`;
    if (n > count) return `--gpus ${s}: ${have}`;
    return Array.from({ length: n }, (_, i) => i);
  }
  if (!/^\d+(\s*,\s*\d+)+$/.test(s)) return `invalid --gpus '${spec}': all, a count (2) or ordinals (0,1,3)`;
  const list = s.split(",").map((x) => Number(x.trim()));
  const out = list.find((g) => g >= count);
  if (out !== undefined) return `--gpus ${s}: no GPU ${out}, ${have}`;
  if (new Set(list).size !== list.length) return `--gpus ${s}: a GPU named twice`;
  return list;
}

/**
 * The CUDA_VISIBLE_DEVICES value that pins a worker to ordinal g: g itself, or, where this
 * process was started with CUDA_VISIBLE_DEVICES, its g-th entry (ordinals are relative to it).
 */
export function visibleDevice(g: number, env: NodeJS.ProcessEnv = process.env): string {
  const parent = (env.CUDA_VISIBLE_DEVICES ?? "").split(",").map((x) => x.trim()).filter(Boolean);
  return parent.length > g ? parent[g]! : String(g);
}

/** Round-robin shares: share k holds tasks k, k+n, k+2n ... of the list (large and small traces alike). */
export function dealShares<T>(tasks: readonly T[], n: number): T[][] {
  const shares: T[][] = Array.from({ length: n }, () => []);
  tasks.forEach((t, i) => shares[i % n]!.push(t));
  return shares;
}

/** One worker process: its name in messages, its environment, and where its next task comes from. */
export interface WorkerSpec {
  label: string;
  env: NodeJS.ProcessEnv;
  next: () => Task | undefined;
  /** The GPU ordinal its rows ran on (results.json's `gpu`), null on a CPU worker. */
  gpu: number | null;
  /** Its own share's size (GPU workers), for the message if it dies. */
  share?: number;
}

/** A worker process died (or broke the protocol): the sweep's result would be incomplete. */
export class WorkerDied extends Error {}

/**
 * Runs each spec in a worker process (`script --worker`) until its source is drained. On the
 * first worker that dies the others are killed (they are this process's children) and it
 * rejects with WorkerDied; the caller writes nothing.
 */
export async function runWorkers(script: string, specs: readonly WorkerSpec[], onDone: (r: TaskResult) => void): Promise<void> {
  const children: ChildProcess[] = [];
  try {
    await Promise.all(
      specs.map(
        (s) =>
          new Promise<void>((resolve, reject) => {
            const child = fork(script, ["--worker"], { env: { ...s.env, ...NO_MULTICAST }, stdio: ["ignore", "inherit", "inherit", "ipc"] });
            children.push(child);
            let current: Task | undefined;
            let done = 0;
            let drained = false;
            const next = () => {
              current = s.next();
              if (current) child.send(current);
              else {
                drained = true;
                child.disconnect();
              }
            };
            const died = (how: string) => {
              const of = s.share === undefined ? "" : ` of its ${s.share}`;
              const during = current ? ` (running ${current.trace} ${current.policy} ${current.driver})` : "";
              reject(new WorkerDied(`${s.label} ${how} after ${done}${of} tasks${during}: nothing written`));
            };
            child.on("message", (r: TaskResult) => {
              if (!current || r?.taskId !== current.id) return died(`answered task ${String(r?.taskId)}, not ${current?.id ?? "none"}`);
              done++;
              onDone({ ...r, gpu: s.gpu });
              next();
            });
            child.on("error", (e) => died(`failed (${e.message})`));
            child.on("exit", (code, signal) => {
              if (code === 0 && drained) resolve();
              else died(signal ? `was killed by ${signal}` : `exited with ${code}`);
            });
            next();
          }),
      ),
    );
  } catch (e) {
    // the others go too, and are reaped before the caller exits (none left running)
    const running = children.filter((c) => c.exitCode === null && c.signalCode === null);
    await Promise.all(running.map((c) => new Promise((r) => (c.once("exit", r), c.kill("SIGKILL")))));
    throw e;
  }
}
