import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { cli } from "./run-cli.js";

const tmp = mkdtempSync(join(tmpdir(), "gmlake-cli-"));
const DEFAULT = join(import.meta.dirname, "../assets/default-trace.pickle.gz");

/** Exit 2 with exactly one line on stderr that mentions `what`, and nothing on stdout. */
function expectBadInput(args: string[], what: RegExp): void {
  const r = cli(args);
  expect(r.code, r.stderr).toBe(2);
  expect(r.stdout).toBe("");
  const lines = r.stderr.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^gmlake: /);
  expect(lines[0]).toMatch(what);
  expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
}

describe("usage errors exit 2 with one line", () => {
  it("no command prints the help on stderr", () => {
    const r = cli([]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/Usage: gmlake <command>/);
  });
  it("unknown command", () => expectBadInput(["frobnicate"], /unknown command 'frobnicate'/));
  it("unknown option", () => expectBadInput(["replay", "--frob"], /frob/));
  it("unknown policy", () => expectBadInput(["replay", "--policy", "nope"], /unknown policy 'nope'/));
  it("bad size", () => expectBadInput(["replay", "--capacity", "12XB"], /invalid --capacity '12XB'/));
  it("negative size", () => expectBadInput(["replay", "--capacity", "-5GiB"], /capacity/));
  it("bad driver", () => expectBadInput(["replay", "--driver", "gpu"], /invalid --driver 'gpu'/));
  it("bad knob", () => expectBadInput(["replay", "--policy", "caching", "--set", "noSuchKnob=1"], /noSuchKnob/));
  it("malformed --set", () => expectBadInput(["replay", "--set", "justakey"], /expected key=value/));
  it("bad export format", () => expectBadInput(["replay", "--export", "png", join(tmp, "x")], /export format 'png'/));
  it("--json with --markdown", () => expectBadInput(["compare", "--json", "--markdown"], /one of --json and --markdown/));
  it("replay of two traces", () => expectBadInput(["replay", DEFAULT, DEFAULT], /one trace/));
  it("doctor takes no trace", () => expectBadInput(["doctor", DEFAULT], /doctor takes no trace or other argument/));
});

describe("bad input files exit 2 naming the file", () => {
  it("missing file", () => expectBadInput(["inspect", join(tmp, "missing.pickle")], /missing\.pickle/));
  it("a directory", () => expectBadInput(["inspect", tmp], new RegExp(tmp.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))));
  it("an empty file", () => {
    const f = join(tmp, "empty.pickle");
    writeFileSync(f, "");
    expectBadInput(["inspect", f], /empty\.pickle.*empty/i);
  });
  it("not a pickle", () => {
    const f = join(tmp, "text.pickle");
    writeFileSync(f, "hello, world\n");
    expectBadInput(["inspect", f], /text\.pickle/);
  });
  it("a truncated gzip", () => {
    const f = join(tmp, "trunc.pickle.gz");
    const b = readFileSync(DEFAULT);
    writeFileSync(f, b.subarray(0, b.length >> 1));
    expectBadInput(["inspect", f], /trunc\.pickle\.gz/);
  });
  it("a truncated pickle gives the byte offset", () => {
    const f = join(tmp, "trunc.pickle");
    const plain = gunzipSync(readFileSync(DEFAULT));
    writeFileSync(f, plain.subarray(0, 5000));
    expectBadInput(["inspect", f], /trunc\.pickle.*offset|byte/i);
  });
  it("a pickle of the wrong shape", () => {
    const f = join(tmp, "list.pickle");
    writeFileSync(f, Buffer.from([0x80, 0x02, 0x5d, 0x2e])); // PROTO 2, EMPTY_LIST, STOP
    expectBadInput(["inspect", f], /list\.pickle/);
  });
  it("cuda driver without a GPU is bad input, not a crash", () => {
    const r = cli(["replay", "--driver", "cuda", "--json"]);
    if (r.code === 0) return; // a GPU host
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/cuda/);
    expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
  });
});

describe("results exit 0", () => {
  it("--help of every command has an example", () => {
    for (const c of ["compare", "inspect", "replay", "verify", "doctor"]) {
      const r = cli([c, "--help"]);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(/Example/);
      expect(r.stdout).toMatch(new RegExp(`gmlake ${c}`));
    }
  });
  it("an out-of-memory under --capacity is a result", () => {
    const r = cli(["replay", "--policy", "caching", "--capacity", "2GiB", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.oom).not.toBeNull();
    expect(j.oom.eventIndex).toBeGreaterThanOrEqual(0);
    expect(j.oom.requestBytes).toBeGreaterThan(0);
  });
  it("doctor answers without a GPU", () => {
    const r = cli(["doctor", "--json"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(typeof j.ok).toBe("boolean");
    expect(typeof j.addon.path).toBe("string");
  });
  it("doctor does not offer the host driver when the addon is missing", () => {
    const env = { GMLAKE_VMM_ADDON: "/nonexistent/gmlake_vmm.node" };
    const r = cli(["doctor"], { env });
    expect(r.code).toBe(0);
    // wrapped to the terminal: the lines joined again
    expect(r.stdout.replace(/\n  /g, " ")).toMatch(/drivers available: sim \(H200 cost model\); host and cuda need the vmm addon: GMLAKE_VMM_ADDON=\/nonexistent\/gmlake_vmm.node does not exist/);
    expect(r.stdout).not.toMatch(/host \(real stitching/);
    expect(JSON.parse(cli(["doctor", "--json"], { env }).stdout).addon.missing).toMatch(/does not exist/);
  });
});
