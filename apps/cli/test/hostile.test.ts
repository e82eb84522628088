import { spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI, REPO } from "./run-cli.js";

/**
 * The hostile corpus (packages/torch-trace/scripts/hostile-corpus.mjs: one or more files
 * per class of attack that once crashed, hung or fooled the reader) through the real CLI,
 * `gmlake inspect` and `gmlake replay` each: every file ends as its manifest says (bad
 * input: exit 2 with one clean line on stderr), in under 10 s and under 1 GiB RSS. So do
 * a device (/dev/zero), a FIFO that nobody writes and an endless stdin.
 */
const MAX_S = 10;
const MAX_RSS_KIB = 1024 * 1024;
// GMLAKE_RSS_BY_PROC=1 tests the /proc fallback where /usr/bin/time exists.
const TIME = existsSync("/usr/bin/time") && !process.env.GMLAKE_RSS_BY_PROC ? "/usr/bin/time" : null;

interface Case {
  file: string;
  class: string;
  exit: number;
  stderr?: string;
  limits?: string;
  events?: number;
  noControl?: boolean;
}

interface Run {
  code: number;
  stdout: string;
  stderr: string;
  seconds: number;
  rssKiB: number;
}

type Stdin = { file: string } | { producer: string[] } | null;

/**
 * Runs the CLI with `args`, measuring its peak RSS with /usr/bin/time -v when it exists,
 * else by polling /proc/PID/status (VmHWM). stdin: nothing, a file, or the stdout of a
 * producer process (an endless one: it is killed when the CLI is done).
 */
function measure(args: string[], stdin: Stdin = null): Promise<Run> {
  const dir = mkdtempSync(join(tmpdir(), "gmlake-hostile-run-"));
  const timeFile = join(dir, "time");
  const cmd = TIME === null ? [process.execPath, CLI, ...args] : [TIME, "-v", "-o", timeFile, process.execPath, CLI, ...args];
  const producer = stdin !== null && "producer" in stdin ? spawn(stdin.producer[0]!, stdin.producer.slice(1), { stdio: ["ignore", "pipe", "ignore"] }) : null;
  const fd = stdin !== null && "file" in stdin ? openSync(stdin.file, "r") : null;
  return new Promise((resolve) => {
    const t0 = performance.now();
    const child = spawn(cmd[0]!, cmd.slice(1), { cwd: REPO, stdio: [producer ? "pipe" : fd ?? "ignore", "pipe", "pipe"] });
    if (producer && child.stdin) {
      producer.stdout!.pipe(child.stdin);
      child.stdin.on("error", () => {}); // EPIPE once the CLI stops reading
    }
    let stdout = "";
    let stderr = "";
    child.stdout!.setEncoding("utf8").on("data", (d: string) => (stdout += d));
    child.stderr!.setEncoding("utf8").on("data", (d: string) => (stderr += d));
    let polled = 0;
    const poll =
      TIME === null
        ? setInterval(() => {
            try {
              const m = /VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, "utf8"));
              if (m) polled = Math.max(polled, Number(m[1]));
            } catch {
              // exited between two polls
            }
          }, 10)
        : null;
    // A hang must fail the test, not the whole run.
    const kill = setTimeout(() => child.kill("SIGKILL"), (MAX_S + 20) * 1000);
    child.on("close", (code) => {
      const seconds = (performance.now() - t0) / 1000;
      clearTimeout(kill);
      if (poll) clearInterval(poll);
      producer?.kill("SIGKILL");
      if (fd !== null) closeSync(fd);
      let rssKiB = polled;
      if (TIME !== null && existsSync(timeFile)) {
        const m = /Maximum resident set size \(kbytes\): (\d+)/.exec(readFileSync(timeFile, "utf8"));
        if (m) rssKiB = Number(m[1]);
      }
      rmSync(dir, { recursive: true, force: true });
      resolve({ code: code ?? -1, stdout, stderr, seconds, rssKiB });
    });
  });
}

/** Bad input: exit 2, one line on stderr naming it, nothing a terminal would act on. */
function expectOneCleanLine(r: Run, pattern?: string): void {
  const lines = r.stderr.replace(/\n$/, "").split("\n");
  expect(lines, r.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^gmlake: /);
  // eslint-disable-next-line no-control-regex
  expect(lines[0]).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
  if (pattern !== undefined) expect(lines[0]).toMatch(new RegExp(pattern));
}

function expectBounded(r: Run): void {
  expect(r.seconds, "seconds").toBeLessThan(MAX_S);
  expect(r.rssKiB, "peak RSS (KiB)").toBeGreaterThan(0);
  expect(r.rssKiB, "peak RSS (KiB)").toBeLessThan(MAX_RSS_KIB);
}

const corpus = mkdtempSync(join(tmpdir(), "gmlake-hostile-"));
let cases: Case[] = [];

beforeAll(() => {
  const r = spawnSync(process.execPath, [join(REPO, "packages/torch-trace/scripts/hostile-corpus.mjs"), corpus], { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`hostile-corpus.mjs failed: ${r.stderr}`);
  cases = JSON.parse(readFileSync(join(corpus, "manifest.json"), "utf8")) as Case[];
}, 120_000);

afterAll(() => rmSync(corpus, { recursive: true, force: true }));

describe("hostile corpus through the CLI: exit 2 and one clean line, < 10 s, < 1 GiB RSS", () => {
  it("covers every class of the reliability issue", () => {
    const classes = new Set(cases.map((c) => c.class));
    for (const k of ["stack", "memo", "objects", "decoded", "parser", "gzip", "reconstruct", "pools", "semantics", "values", "terminal"]) expect(classes).toContain(k);
    for (const c of cases) expect(readFileSync(join(corpus, c.file)).length).toBeLessThan(1 << 20);
  });

  for (const command of ["inspect --json", "replay"]) {
    it(`gmlake ${command} on every file`, async () => {
      const failures: string[] = [];
      for (const c of cases) {
        const r = await measure([...command.split(" "), join(corpus, c.file), ...(c.limits ? ["--limit", c.limits] : [])]);
        try {
          expect(r.code, `${c.file}: ${r.stderr}`).toBe(c.exit);
          if (c.exit === 2) expectOneCleanLine(r, c.stderr);
          if (c.events !== undefined && command.startsWith("inspect")) expect((JSON.parse(r.stdout) as { events: number }).events).toBe(c.events);
          expectBounded(r);
        } catch (e) {
          failures.push(`${c.file} (${r.code}, ${r.seconds.toFixed(1)} s, ${(r.rssKiB / 1024).toFixed(0)} MiB): ${(e as Error).message.split("\n")[0]}`);
        }
      }
      expect(failures).toEqual([]);
    }, 600_000);
  }
});

describe("inputs that are not files: exit 2 and one line within 10 s", () => {
  it("a device: /dev/zero", async () => {
    const r = await measure(["inspect", "/dev/zero"]);
    expect(r.code).toBe(2);
    expectOneCleanLine(r, "is a device");
    expectBounded(r);
  });

  it("a FIFO that nobody writes to", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gmlake-fifo-"));
    const fifo = join(dir, "trace.pickle");
    expect(spawnSync("mkfifo", [fifo]).status).toBe(0);
    const r = await measure(["replay", fifo]);
    rmSync(dir, { recursive: true, force: true });
    expect(r.code).toBe(2);
    expectOneCleanLine(r, "is a FIFO");
    expectBounded(r);
  });

  it("an endless stdin of zeros (refused at its first byte)", async () => {
    const r = await measure(["inspect", "-"], { producer: ["cat", "/dev/zero"] });
    expect(r.code).toBe(2);
    expectOneCleanLine(r, "not a gzip file or a pickle");
    expectBounded(r);
  });

  it("an endless stdin that starts like a pickle (bounded read)", async () => {
    const r = await measure(["inspect", "-"], { producer: ["yes", "("] });
    expect(r.code).toBe(2);
    expectOneCleanLine(r, "limit maxInputBytes=");
    expectBounded(r);
  });

  it("stdin holding a real snapshot reads like the file", async () => {
    const file = join(REPO, "apps/cli/assets/default-trace.pickle.gz");
    const r = await measure(["inspect", "--json", "-"], { file });
    expect(r.code, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as { events: number }).events).toBeGreaterThan(0);
  });
});
