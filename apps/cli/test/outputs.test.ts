import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CLI, cli } from "./run-cli.js";

const tmp = mkdtempSync(join(tmpdir(), "gmlake-outputs-"));
const DEFAULT = join(import.meta.dirname, "../assets/default-trace.pickle.gz");
const sha = (f: string) => createHash("sha256").update(readFileSync(f)).digest("hex");

/** Exit `code`, one line on stderr matching `what`, no stack trace. */
function expectOneLine(r: { code: number; stderr: string }, code: number, what: RegExp): void {
  expect(r.code, r.stderr).toBe(code);
  const lines = r.stderr.trimEnd().split("\n");
  expect(lines, r.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^gmlake: /);
  expect(lines[0]).toMatch(what);
}

describe("an output never replaces an input, nor a file without --force", () => {
  it("--export onto the input trace is refused, the trace untouched", () => {
    const input = join(tmp, "in.pickle.gz");
    copyFileSync(DEFAULT, input);
    const before = sha(input);
    for (const format of ["perfetto", "memory-viz", "rmm-csv"]) {
      expectOneLine(cli(["replay", input, "--export", format, input, "--force"]), 2, /never replaces an input/);
    }
    expectOneLine(cli(["replay", input, "--plot", input, "--force"]), 2, /never replaces an input/);
    expect(sha(input)).toBe(before);
  });
  it("--plot over an existing file needs --force", () => {
    const f = join(tmp, "p.svg");
    writeFileSync(f, "mine");
    const r = cli(["replay", "--plot", f]);
    expectOneLine(r, 2, /p\.svg: exists \(pass --force to replace it\)/);
    expect(r.stdout).toBe(""); // refused before the replay ran
    expect(readFileSync(f, "utf8")).toBe("mine");
    expect(cli(["replay", "--plot", f, "--force"]).code).toBe(0);
    expect(readFileSync(f, "utf8")).toMatch(/^<svg/);
  });
  it("compare --plot DIR: every SVG checked before the first replay", () => {
    const dir = join(tmp, "plots");
    expect(cli(["compare", "--policies", "caching", "--plot", dir]).code).toBe(0);
    const svg = readdirSync(dir);
    expect(svg).toHaveLength(1);
    const r = cli(["compare", "--policies", "caching", "--plot", dir]);
    expectOneLine(r, 2, /exists \(pass --force/);
    expect(r.stdout).toBe("");
    expect(cli(["compare", "--policies", "caching", "--plot", dir, "--force"]).code).toBe(0);
  });
  it("a missing directory, a directory, the same file twice", () => {
    expectOneLine(cli(["replay", "--export", "perfetto", join(tmp, "no", "such", "x.json")]), 2, /does not exist/);
    expectOneLine(cli(["replay", "--export", "perfetto", tmp]), 2, /is a directory/);
    const f = join(tmp, "twice.json");
    expectOneLine(cli(["replay", "--plot", f, "--export", "perfetto", f]), 2, /given twice/);
    expect(existsSync(f)).toBe(false);
  });
});

describe("a write error is a non-zero exit and one line, never a partial file", () => {
  it("stdout on a full device (/dev/full)", () => {
    const r = spawnSync("sh", ["-c", `"${process.execPath}" "${CLI}" replay --json > /dev/full`], { encoding: "utf8" });
    expectOneLine({ code: r.status ?? -1, stderr: r.stderr }, 3, /cannot write to stdout: no space left on device \(ENOSPC\)/);
  });
  it("an export onto a full device", () => {
    expectOneLine(cli(["replay", "--export", "perfetto", "/dev/full"]), 3, /cannot write to \/dev\/full: no space left on device \(ENOSPC\)/);
  });
  it("stdout closed by its reader (EPIPE)", async () => {
    const child = spawn(process.execPath, [CLI, "compare", "--policies", "caching"], { stdio: ["ignore", "pipe", "pipe"] });
    child.stdout.destroy(); // the reader goes away before the first byte
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number>((res) => child.on("close", (c) => res(c ?? -1)));
    expectOneLine({ code, stderr }, 3, /stdout was closed before the output was written: .*\(EPIPE\)/);
  });
  it("a full file system (8 KiB tmpfs): exit 3, nothing under the final name", () => {
    const probe = spawnSync("unshare", ["-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], { encoding: "utf8" });
    if (probe.status !== 0) return; // no mount namespaces here: /dev/full covers ENOSPC
    const r = spawnSync(
      "unshare",
      ["-rm", "sh", "-c", `mount -t tmpfs -o size=8k tmpfs /mnt && "${process.execPath}" "${CLI}" replay --export perfetto /mnt/t.json >/dev/null; echo "rc=$?"; ls -A /mnt`],
      { encoding: "utf8" },
    );
    expect(r.stdout).toMatch(/^rc=3\n$/); // exit 3, and ls shows no file at all (no temp either)
    expect(r.stderr).toMatch(/^gmlake: cannot write to \/mnt\/t\.json: no space left on device \(ENOSPC\)\n$/);
  });
  it("a read-only file system is refused before the work", () => {
    const probe = spawnSync("unshare", ["-rm", "sh", "-c", "mount -t tmpfs -o ro tmpfs /mnt"], { encoding: "utf8" });
    if (probe.status !== 0) return;
    const r = spawnSync("unshare", ["-rm", "sh", "-c", `mount -t tmpfs -o ro tmpfs /mnt && "${process.execPath}" "${CLI}" replay --plot /mnt/p.svg`], { encoding: "utf8" });
    expectOneLine({ code: r.status ?? -1, stderr: r.stderr }, 2, /read-only file system \(EROFS\)/);
    expect(r.stdout).toBe("");
  });
});

describe("terminal escapes from user data never reach the terminal", () => {
  it("a file name with escapes in an error message", () => {
    const r = cli(["inspect", join(tmp, "evil\x1b]0;owned\x07\x1b[2K\r.pickle")]);
    expect(r.code).toBe(2);
    expect(r.stderr).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f]/);
    expect(r.stderr).toContain("evil\\x1b]0;owned\\x07\\x1b[2K\\r.pickle");
  });
  it("a trace name with escapes in a text report", () => {
    const f = join(tmp, "t\x1b[31mred.pickle.gz");
    copyFileSync(DEFAULT, f);
    for (const cmd of ["inspect", "replay", "verify", "compare"]) {
      const r = cli([cmd, f]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout, cmd).not.toMatch(/\x1b/);
      expect(r.stdout, cmd).toContain("t\\x1b[31mred");
    }
  });
  it("--json: C1 controls and bidi overrides escaped too, the value intact", () => {
    const f = join(tmp, "c1\u009b2J\u202egz.pickle.gz");
    copyFileSync(DEFAULT, f);
    for (const cmd of ["inspect", "replay", "verify"]) {
      const r = cli([cmd, f, "--json"]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout, cmd).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]/);
      expect(JSON.parse(r.stdout).trace).toBe("c1\u009b2J\u202egz");
    }
  });
});
