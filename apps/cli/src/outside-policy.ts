import { PolicyThread, policyThreadData, servePolicyThread } from "@gmlake/stitch";

/**
 * A command line that loads an outside policy (--policy-module) runs in a worker thread
 * this one watches (@gmlake/stitch PolicyThread says why a thread): a module's hang (a time
 * budget per call, GMLAKE_POLICY_BUDGET_S), process.exit, unsettled import, uncaught error,
 * unhandled rejection or heap blow-up ends in one line naming it, exit 2; timers it leaves
 * running end with the thread. Its errors inside a call are the engine's PolicyFault (exit 2
 * too, as bad input). Every other command line runs here, as before.
 */

/** The --policy-module values of a command line. */
export function policyModulesIn(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--") break;
    if (a === "--policy-module" && argv[i + 1] !== undefined) out.push(argv[++i]!);
    else if (a.startsWith("--policy-module=")) out.push(a.slice("--policy-module=".length));
  }
  return out;
}

interface Tty {
  stdout: { isTTY: boolean; columns: number | undefined };
  stderr: { isTTY: boolean; columns: number | undefined };
}

const ttyOf = (s: NodeJS.WriteStream) => ({ isTTY: Boolean(s.isTTY), columns: s.isTTY ? s.columns : undefined });

/** The thread's stdout and stderr say what the process's are (a terminal, its width): tables and progress read them. */
function takeTty(t: Tty): void {
  for (const [s, f] of [[process.stdout, t.stdout], [process.stderr, t.stderr]] as const) {
    if (!f.isTTY) continue;
    Object.defineProperty(s, "isTTY", { value: true, configurable: true });
    Object.defineProperty(s, "columns", { value: f.columns, configurable: true });
  }
}

/**
 * The CLI's exit code for `argv`: `main` run here, or in a watched thread (`entry`: the CLI's
 * own module, which calls this again there) when it loads a policy module; `fail` reports a
 * thread's failure line and gives its exit code. In the thread itself: null (it serves).
 */
export async function runCli(main: (argv: string[]) => Promise<number>, argv: string[], entry: URL, fail: (line: string) => number): Promise<number | null> {
  const inThread = policyThreadData() as { argv: string[]; tty: Tty } | undefined;
  if (inThread !== undefined) {
    takeTty(inThread.tty);
    servePolicyThread(() => main(inThread.argv));
    return null;
  }
  const modules = policyModulesIn(argv);
  if (modules.length === 0) return main(argv);
  const thread = new PolicyThread(entry, {
    modules,
    data: { argv, tty: { stdout: ttyOf(process.stdout), stderr: ttyOf(process.stderr) } },
    stdin: argv.includes("-"),
  });
  const a = await thread.ask(null);
  await thread.close();
  return a.ok ? (a.value as number) : fail(a.message);
}
