import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { watchPolicyCalls } from "./policy-guard.js";

/**
 * Work that runs an outside policy module, in a worker thread the calling thread watches:
 * the one design that gives every guarantee at the policy boundary at once. A thread, not a
 * child process: it shares the process's stdout, stderr and file descriptors (a command's
 * output and exit code stay as they are), and only a thread (V8's TerminateExecution) can
 * be stopped inside a synchronous loop, and survives its heap limit (ERR_WORKER_OUT_OF_MEMORY,
 * where the main thread would abort). What each case becomes, in one line naming the module:
 * - a policy call (or the module's import) that does not return within the budget: stopped;
 * - process.exit inside the module: it ends the thread only, before its answer;
 * - a top-level await that never settles: its import does not end within the budget (or,
 *   when nothing keeps the thread alive, the thread ends with code 13 before its answer);
 * - an uncaught error or unhandled rejection (a timer's, a stray promise's): the thread's error;
 * - the heap blown: ERR_WORKER_OUT_OF_MEMORY;
 * - timers left running after the answer: the thread is ended (process.exit there, then terminate).
 * The budget is per call: every guarded call and import says in shared memory when it begins
 * and ends (two stores a call), and the watcher stops a call that has not ended in time.
 */

/** The per-call budget: GMLAKE_POLICY_BUDGET_S seconds (default 10). */
export function policyCallBudgetMs(): number {
  const s = Number(process.env.GMLAKE_POLICY_BUDGET_S ?? "10");
  return Number.isFinite(s) && s > 0 ? s * 1000 : 10_000;
}

const SEQ = 0;
const DEPTH = 1;
const LEN = 2;
const TEXT = 1024;

/** What a policy thread gets in its workerData. */
interface ThreadData {
  gmlakePolicyThread: { watch: SharedArrayBuffer; data: unknown };
}

/** Shared-memory watch of one thread's policy calls: the thread writes, the watcher reads. */
class CallWatch {
  readonly ints: Int32Array;
  readonly text: Uint8Array;
  private label = "";
  private call = "";

  constructor(readonly buffer: SharedArrayBuffer) {
    this.ints = new Int32Array(buffer, 0, 4);
    this.text = new Uint8Array(buffer, 16, TEXT);
  }

  enter(label: string, call: string): void {
    if (label !== this.label || call !== this.call) {
      this.label = label;
      this.call = call;
      const n = new TextEncoder().encodeInto(`${label}\u0000${call}`, this.text).written;
      Atomics.store(this.ints, LEN, n);
    }
    this.ints[SEQ]!++;
    Atomics.add(this.ints, DEPTH, 1);
  }

  leave(): void {
    Atomics.sub(this.ints, DEPTH, 1);
  }

  /** [who, call] of the innermost call under way, or null when none is. */
  now(): [string, string] | null {
    if (Atomics.load(this.ints, DEPTH) <= 0) return null;
    const t = new TextDecoder().decode(this.text.slice(0, Atomics.load(this.ints, LEN)));
    const i = t.indexOf("\u0000");
    return [t.slice(0, i), t.slice(i + 1)];
  }
}

/** In a policy thread: the data its starter gave (null for none), with the watch installed; undefined elsewhere. */
export function policyThreadData(): unknown {
  if (isMainThread) return undefined;
  const d = (workerData as Partial<ThreadData> | null)?.gmlakePolicyThread;
  if (d === undefined) return undefined;
  const w = new CallWatch(d.watch);
  watchPolicyCalls(w);
  return d.data ?? null;
}

/** In a policy thread: answer `ask` requests with `f` (one at a time); an `exit` request ends the thread. */
export function servePolicyThread(f: (request: unknown) => Promise<unknown> | unknown): void {
  // A module's stray rejection (at import, or later) fails the run: reported, then the thread ends.
  process.on("unhandledRejection", (e) => {
    parentPort!.postMessage({ failure: `an unhandled rejection: ${e instanceof Error ? `${e.name}: ${String(e.message).split("\n")[0]}` : String(e)}` });
    process.exit(1);
  });
  parentPort!.on("message", async (m: { ask?: unknown; exit?: true }) => {
    if (m.exit) process.exit(0); // here: ends this thread, and the timers a module left
    const answer = await f(m.ask);
    // a turn of the event loop first (timers due now included): rejections left unhandled
    // so far, and errors of a module's timer set to run at once, are reported in it
    await new Promise((r) => setTimeout(r, 1));
    await new Promise((r) => setImmediate(r));
    parentPort!.postMessage({ answer });
  });
}

export type ThreadAnswer = { ok: true; value: unknown } | { ok: false; message: string };

/**
 * A worker thread running `entry` (a module that calls policyThreadData() and
 * servePolicyThread()), watched: ask() resolves with the thread's answer, or with one line
 * saying what went wrong and which module or policy did it (the thread is then gone: the
 * next ask() starts a fresh one).
 */
export class PolicyThread {
  private worker: Worker | null = null;
  private watch: CallWatch | null = null;
  private pending: ((a: ThreadAnswer) => void) | null = null;
  private failure: string | null = null;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly entry: URL,
    private readonly opts: {
      /** The modules the thread loads, named when a failure happens outside any call. */
      modules: readonly string[];
      data?: unknown;
      budgetMs?: number;
      /** Pipe this process's stdin to the thread's (a command reading '-'). */
      stdin?: boolean;
    },
  ) {}

  private who(): string {
    const m = this.opts.modules;
    return m.length === 1 ? `policy module ${m[0]}` : `policy modules ${m.join(", ")}`;
  }

  private start(): Worker {
    const buffer = new SharedArrayBuffer(16 + TEXT);
    this.watch = new CallWatch(buffer);
    this.failure = null;
    const w = new Worker(this.entry, { workerData: { gmlakePolicyThread: { watch: buffer, data: this.opts.data } } satisfies ThreadData, stdin: this.opts.stdin === true });
    if (this.opts.stdin) process.stdin.pipe(w.stdin!);
    w.on("message", (m: { answer?: unknown; failure?: string }) => {
      if (m.failure === undefined) return this.answer({ ok: true, value: m.answer });
      const at = this.watch!.now();
      this.failure = `${at === null ? this.who() : at[0]}: ${m.failure}`;
      void w.terminate(); // the exit answers with the failure
    });
    w.on("error", (e: Error & { code?: string }) => {
      const at = this.watch!.now();
      const who = at === null ? this.who() : at[0];
      const during = at === null ? "" : ` (in ${at[1]})`;
      if (e.code === "ERR_WORKER_OUT_OF_MEMORY") this.failure = `${who}: ran out of JavaScript heap${during}`;
      else {
        const what = e instanceof Error ? `${e.name}: ${String(e.message).split("\n")[0]}` : String(e);
        this.failure = `${who}: an uncaught error or unhandled rejection${during}: ${what}`;
      }
    });
    w.on("exit", (code) => {
      const at = this.watch!.now();
      this.stopTimer();
      this.worker = null;
      if (this.failure === null) {
        if (at !== null && at[1] === "import" && code === 13) this.failure = `${at[0]}: its import never finished (a top-level await that never settles)`;
        else if (at !== null) this.failure = `${at[0]}: ended the thread (process.exit(${code})?) in ${at[1]}`;
        else this.failure = `${this.who()}: ended the run (process.exit(${code})?) before it was done`;
      }
      this.answer({ ok: false, message: this.failure });
    });
    this.worker = w;
    return w;
  }

  private answer(a: ThreadAnswer): void {
    const p = this.pending;
    this.pending = null;
    this.stopTimer();
    p?.(a);
  }

  private stopTimer(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** The thread answers `request`, or fails in one line. */
  ask(request: unknown): Promise<ThreadAnswer> {
    const w = this.worker ?? this.start();
    const budget = this.opts.budgetMs ?? policyCallBudgetMs();
    return new Promise((resolve) => {
      this.pending = resolve;
      let seq = -1;
      let since = Date.now();
      this.timer = setInterval(() => {
        const watch = this.watch!;
        const s = Atomics.load(watch.ints, SEQ);
        if (s !== seq) {
          seq = s;
          since = Date.now();
          return;
        }
        const at = watch.now();
        if (at === null || Date.now() - since < budget) return;
        const what = at[1] === "import" ? "its import did not finish" : `${at[1]} did not return`;
        const why = at[1] === "import" ? "an endless loop, or a top-level await that never settles? " : "";
        this.failure = `${at[0]}: ${what} within ${budget / 1000} s (${why}stopped; GMLAKE_POLICY_BUDGET_S sets the budget per call)`;
        void w.terminate();
      }, Math.min(100, budget / 4));
      w.postMessage({ ask: request });
    });
  }

  /** End the thread (its module's timers too): asked to exit, then terminated if it has not within a second. */
  async close(): Promise<void> {
    const w = this.worker;
    if (w === null) return;
    this.pending = null;
    const gone = new Promise<void>((r) => w.once("exit", () => r()));
    w.postMessage({ exit: true });
    const t = setTimeout(() => void w.terminate(), 1000);
    await gone;
    clearTimeout(t);
    if (this.opts.stdin) process.stdin.unpipe(w.stdin!);
  }
}
