import { spawnSync } from "node:child_process";
import { existsSync, linkSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { OutputError, checkOutputDir, checkOutputFile, checkOutputs, terminalSafe, terminalSafeJson, writeOutputFile, writeOutputFiles } from "../src/index.js";

const tmp = mkdtempSync(join(tmpdir(), "gmlake-output-"));

function caught(f: () => unknown): OutputError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(OutputError);
    return e as OutputError;
  }
  throw new Error("expected an OutputError");
}

describe("checkOutputFile refuses before the work", () => {
  it("the input itself, also through a hard link and a symbolic link", () => {
    const input = join(tmp, "trace.pickle");
    writeFileSync(input, "input bytes");
    linkSync(input, join(tmp, "hard.pickle"));
    symlinkSync(input, join(tmp, "soft.pickle"));
    for (const p of [input, join(tmp, "hard.pickle"), join(tmp, "soft.pickle")]) {
      const e = caught(() => checkOutputFile(p, { inputs: [input], force: true, option: "--export" }));
      expect(e.kind).toBe("path");
      expect(e.code).toBe("OUTPUT_IS_INPUT");
      expect(e.message).toMatch(/^--export .*never replaces an input/);
    }
    expect(readFileSync(input, "utf8")).toBe("input bytes");
  });
  it("an existing file without force, and accepts it with force", () => {
    const f = join(tmp, "exists.svg");
    writeFileSync(f, "old");
    expect(caught(() => checkOutputFile(f)).code).toBe("OUTPUT_EXISTS");
    const t = checkOutputFile(f, { force: true });
    writeOutputFile(t, "new");
    expect(readFileSync(f, "utf8")).toBe("new");
  });
  it("a directory, a missing directory, a parent that is a file, an empty name", () => {
    expect(caught(() => checkOutputFile(tmp)).code).toBe("OUTPUT_NOT_A_FILE");
    expect(caught(() => checkOutputFile(join(tmp, "nope", "x.svg"))).code).toBe("ENOENT");
    writeFileSync(join(tmp, "afile"), "");
    expect(caught(() => checkOutputFile(join(tmp, "afile", "x.svg"))).kind).toBe("path");
    expect(caught(() => checkOutputFile("")).kind).toBe("path");
  });
  it("the same output twice", () => {
    const e = caught(() => checkOutputs([{ path: join(tmp, "twice.svg"), option: "--plot" }, { path: join(tmp, ".", "twice.svg"), option: "--export" }]));
    expect(e.code).toBe("OUTPUT_TWICE");
  });
  it("checkOutputDir creates a directory and refuses a file", () => {
    const d = join(tmp, "made", "deep");
    expect(checkOutputDir(d)).toBe(d);
    expect(existsSync(d)).toBe(true);
    writeFileSync(join(tmp, "plainfile"), "");
    expect(caught(() => checkOutputDir(join(tmp, "plainfile"))).code).toBe("OUTPUT_NOT_A_DIRECTORY");
  });
});

describe("writeOutputFile", () => {
  it("writes atomically and leaves no temporary file", () => {
    const d = join(tmp, "atomic");
    mkdirSync(d);
    const t = checkOutputFile(join(d, "out.json"));
    writeOutputFile(t, new Uint8Array([1, 2, 3]));
    expect([...readFileSync(join(d, "out.json"))]).toEqual([1, 2, 3]);
    expect(readdirSync(d)).toEqual(["out.json"]);
  });
  it("does not clobber a file that appeared after the check", () => {
    const f = join(tmp, "race.txt");
    const t = checkOutputFile(f);
    writeFileSync(f, "theirs");
    expect(caught(() => writeOutputFile(t, "ours")).code).toBe("OUTPUT_EXISTS");
    expect(readFileSync(f, "utf8")).toBe("theirs");
    expect(readdirSync(tmp).filter((n) => n.includes("race.txt.") && n.endsWith(".tmp"))).toEqual([]);
  });
  it("a full device (/dev/full) is a write error naming ENOSPC", () => {
    const t = checkOutputFile("/dev/full");
    expect(t.inPlace).toBe(true);
    const e = caught(() => writeOutputFile(t, "x".repeat(10000)));
    expect(e.kind).toBe("write");
    expect(e.code).toBe("ENOSPC");
    expect(e.message).toBe("cannot write to /dev/full: no space left on device (ENOSPC)");
  });
});

/** A private mount namespace where a small tmpfs can be mounted (root or user namespaces); null if not possible here. */
function inTmpfs(script: string): { status: number | null; stdout: string; stderr: string } | null {
  const probe = spawnSync("unshare", ["-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || exit 99"], { encoding: "utf8" });
  if (probe.status !== 0) return null;
  return spawnSync("unshare", ["-rm", "sh", "-c", script], { encoding: "utf8" });
}

describe("a full or read-only file system (a 64 KiB tmpfs in a private mount namespace)", () => {
  const mod = join(import.meta.dirname, "../dist/index.js");
  const node = process.execPath;
  const writer = (file: string, bytes: number) =>
    `${node} --input-type=module -e "import {checkOutputFile,writeOutputFile} from '${mod}'; try { writeOutputFile(checkOutputFile('${file}'), Buffer.alloc(${bytes}, 97)); console.log('ok') } catch (e) { console.log(e.kind, e.code, e.message) }"`;
  it.skipIf(!existsSync(mod))("ENOSPC: a clear error and no file under the final name", () => {
    const r = inTmpfs(`mount -t tmpfs -o size=64k tmpfs /mnt && ${writer("/mnt/big.json", 1 << 20)} && ls -A /mnt`);
    if (r === null) return; // no mount namespaces here: /dev/full above covers ENOSPC
    expect(r.stdout).toContain("write ENOSPC cannot write to /mnt/big.json: no space left on device (ENOSPC)");
    expect(r.stdout.trim().split("\n").slice(1)).toEqual([]); // ls: nothing left behind
  });
  it.skipIf(!existsSync(mod))("EROFS: refused at the check, before the work", () => {
    const r = inTmpfs(`mount -t tmpfs -o size=64k,ro tmpfs /mnt && ${writer("/mnt/x.json", 10)}`);
    if (r === null) return;
    expect(r.stdout).toMatch(/^path EROFS .*read-only file system \(EROFS\)/);
  });
});

describe("terminalSafe", () => {
  it("escapes terminal controls and bidi overrides, keeps text", () => {
    expect(terminalSafe("title\x1b]0;pwned\x07 erase\x1b[2K")).toBe("title\\x1b]0;pwned\\x07 erase\\x1b[2K");
    expect(terminalSafe("a\rb\nc\u009b\u202ed")).toBe("a\\rb\\nc\\x9b\\u202ed");
    expect(terminalSafe("line 1\nline 2\r", { multiline: true })).toBe("line 1\nline 2\\r");
    expect(terminalSafe("tab\tok, ünïcödé, 日本")).toBe("tab\tok, ünïcödé, 日本");
  });
  it("terminalSafeJson: the same JSON value, nothing a terminal acts on", () => {
    const v = { name: "a\x1b[2Kb\u009bc\u202ed", n: 1 };
    const text = terminalSafeJson(v);
    expect(text).not.toMatch(/[\x00-\x1f\x7f-\x9f\u202e]/);
    expect(JSON.parse(text)).toEqual(v);
  });
});

describe("issue 33: outputs in odd places", () => {
  const mod = new URL("../dist/index.js", import.meta.url).pathname;
  const inChild = (code: string, stdin?: string) =>
    spawnSync(process.execPath, ["--input-type=module", "-e", `import * as o from '${mod}'; ${code}`], { encoding: "utf8", timeout: 20_000, stdio: [stdin === undefined ? "ignore" : openSync(stdin, "r"), "pipe", "pipe"] });

  it.skipIf(!existsSync(mod) || !existsSync("/proc/self"))("a directory under /proc is refused at once (Node's recursive mkdir retries there forever)", () => {
    const r = inChild(`try { o.checkOutputDir('/proc/gmlake-no/sub', { option: '--report' }) } catch (e) { console.log(e.kind, e.code, e.message) }`);
    expect(r.error).toBeUndefined(); // not killed by the timeout
    expect(r.stdout).toMatch(/^path E[A-Z]+ --report \/proc\/gmlake-no\/sub: cannot create the directory/);
  });
  it.skipIf(!existsSync("/proc/self"))("a file in /proc itself is refused at the check (root may write there, yet no file can be made)", () => {
    const e = caught(() => checkOutputFile("/proc/gmlake-x.svg", { option: "--plot" }));
    expect([e.kind, e.message]).toEqual(["path", "--plot /proc/gmlake-x.svg: /proc is on procfs, which holds no files of ours"]);
  });
  it("a directory below an existing file: a path error naming ENOTDIR, not a raw system error", () => {
    writeFileSync(join(tmp, "plain"), "");
    const e = caught(() => checkOutputDir(join(tmp, "plain", "sub"), { option: "--report" }));
    expect([e.kind, e.code]).toEqual(["path", "ENOTDIR"]);
    expect(e.message).toMatch(/--report .*plain\/sub: cannot create the directory: a component of the path is not a directory \(ENOTDIR\)$/);
  });
  it.skipIf(!existsSync(mod))("the input read through stdin ('-') is an input: never replaced, even with force", () => {
    const f = join(tmp, "stdin.pickle");
    writeFileSync(f, "trace");
    const r = inChild(`try { o.checkOutputFile('${f}', { inputs: ['-'], force: true }); console.log('accepted') } catch (e) { console.log(e.code, e.message) }`, f);
    expect(r.stdout).toMatch(/^OUTPUT_IS_INPUT .*read from standard input/);
  });
  it("a path with a newline or ESC is shown escaped in every message", () => {
    const e = caught(() => checkOutputFile(join(tmp, "no\ndir\x1b[31m", "x.svg"), { option: "--plot" }));
    expect(e.message).not.toMatch(/[\n\x1b]/);
    expect(e.message).toContain("no\\ndir\\x1b[31m");
    writeFileSync(join(tmp, "n\nl"), "");
    expect(caught(() => checkOutputFile(join(tmp, "n\nl"))).message).toContain("n\\nl: exists");
  });
  it.skipIf(!existsSync(mod))("a writer killed mid-write leaves a temporary file that the next write there removes", () => {
    const d = join(tmp, "killed");
    mkdirSync(d);
    const f = join(d, "out.pickle");
    // byteLength is read once the temporary file is open: the writer dies there, as under SIGKILL.
    const r = inChild(`o.writeOutputFile(o.checkOutputFile('${f}'), { get byteLength() { process.kill(process.pid, 'SIGKILL') } })`);
    expect(r.signal).toBe("SIGKILL");
    const left = readdirSync(d);
    expect(left).toHaveLength(1);
    expect(left[0]).toMatch(/^\.out\.pickle\..*\.tmp$/);
    const host = /\.gmlake-([0-9a-f]{8})-/.exec(left[0]!)![1];
    writeFileSync(join(d, `.other.gmlake-${host === "00000000" ? "11111111" : "00000000"}-1-1.tmp`), ""); // another host's: kept
    writeFileSync(join(d, `.x.gmlake-${host}-${process.pid}-99.tmp`), ""); // a live writer's (this process): kept
    writeOutputFile(checkOutputFile(join(d, "another.svg")), "done"); // a write of any file there cleans up
    expect(readdirSync(d).filter((x) => x.startsWith(".out.pickle."))).toEqual([]);
    expect(readdirSync(d).filter((x) => x.endsWith(".tmp"))).toHaveLength(2);
  });
});

describe("writeOutputFiles: all or nothing", () => {
  it("a file that cannot be written leaves none of the others", () => {
    const d = join(tmp, "all-or-nothing");
    mkdirSync(join(d, "sub"), { recursive: true });
    const a = checkOutputFile(join(d, "a.json"));
    const b = checkOutputFile(join(d, "sub", "b.json"));
    rmSync(join(d, "sub"), { recursive: true }); // b's folder went after the check
    expect(caught(() => writeOutputFiles([{ target: a, data: "a" }, { target: b, data: "b" }])).kind).toBe("write");
    expect(readdirSync(d)).toEqual([]); // neither a.json nor a temporary file
    writeOutputFiles([{ target: a, data: "a" }]);
    expect(readFileSync(join(d, "a.json"), "utf8")).toBe("a");
  });
});
