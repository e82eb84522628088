import { loadPolicyModules, PolicyThread, policyThreadData, servePolicyThread } from "@gmlake/stitch";
import { failed, runTask, type Task, type TaskResult } from "./task.js";

/**
 * Tasks of a sweep with --policy-module run in a worker thread their process watches
 * (@gmlake/stitch PolicyThread says why a thread): a module that hangs a call past the
 * budget (GMLAKE_POLICY_BUDGET_S), calls process.exit, never finishes its import, leaves an
 * unhandled rejection or blows its heap fails that task with one line naming it, and the
 * next task gets a fresh thread; the sweep goes on. Before anything, the modules are
 * imported once in such a thread (probe), so that the bench itself never runs an import
 * that would not end.
 */

/** What a policy thread of the bench is asked: a task, or (probe) to import the modules. */
type Request = { task: Task } | { probe: string[] };

/** In a policy thread: serve requests and return true; elsewhere false. */
export function servedAsPolicyThread(): boolean {
  if (policyThreadData() === undefined) return false;
  servePolicyThread((r) => {
    const q = r as Request;
    return "probe" in q ? loadPolicyModules(q.probe) : runTask(q.task);
  });
  return true;
}

const threads = new Map<string, PolicyThread>();

function threadFor(modules: readonly string[]): PolicyThread {
  const key = modules.join("\0");
  let t = threads.get(key);
  if (t === undefined) {
    t = new PolicyThread(new URL("./main.js", import.meta.url), { modules });
    threads.set(key, t);
  }
  return t;
}

/** The bench imported policy modules itself (after the probe): their timers must not keep it alive. */
let loadedHere = false;

/**
 * Import the modules here, after a watched thread imported them first: null when they load,
 * else the one-line reason (nothing imported here then).
 */
export async function loadProbedPolicyModules(modules: readonly string[]): Promise<string | null> {
  if (modules.length === 0) return null;
  const t = new PolicyThread(new URL("./main.js", import.meta.url), { modules });
  const a = await t.ask({ probe: [...modules] } satisfies Request);
  await t.close();
  if (!a.ok) return a.message;
  await loadPolicyModules(modules);
  loadedHere = true;
  return null;
}

/** The sweep is done: end the process even if a module imported here left a timer running (stdout and stderr are written synchronously). */
export function exitPastModuleTimers(): void {
  if (loadedHere) process.exit();
}

/** A task's result: run here, or in a watched thread when it loads policy modules. */
export async function runWatchedTask(task: Task): Promise<TaskResult> {
  if (!task.policyModules?.length) return runTask(task);
  const a = await threadFor(task.policyModules).ask({ task } satisfies Request);
  return a.ok ? (a.value as TaskResult) : failed(task, 0, new ModuleFailure(a.message));
}

/** The threads' timers end with them: call once the tasks are done. */
export async function closePolicyThreads(): Promise<void> {
  await Promise.all([...threads.values()].map((t) => t.close()));
  threads.clear();
}

/** A policy module stopped a task (not an error of the task itself). */
class ModuleFailure extends Error {
  readonly code = "BAD_POLICY";
}
