import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { readSnapshot } from "@gmlake/torch-trace";
import { cli, haveTraces, json, TRACES } from "./run-cli.js";

const tmp = mkdtempSync(join(tmpdir(), "gmlake-answers-"));
const MiB = 2 ** 20;
const STACKS = join(TRACES, "gpt2_ft_stacks.pickle.gz");
const haveStacks = existsSync(STACKS);

interface Fit {
  trace: string;
  policy: string;
  smallestCapacityBytes: number;
  smallestDeviceBytes: number;
  reserveBytes: number;
  fits: boolean | null;
  headroomBytes: number | null;
}
interface CompareOut {
  rows: { policy: string; finished: boolean; oom: unknown; peakReservedBytes: number }[];
  fit: Fit[];
  budget: { capacityBytes: number | null; reserveBytes: number; allocatorBytes: number | null };
  advice: { trace: string; text: string }[];
}

describe("compare: will it fit", () => {
  it("the default table fits 80 columns, with and without --capacity and --verbose's notes", () => {
    for (const args of [["compare"], ["compare", "--capacity", "6GiB"], ["compare", "--capacity", "2GiB", "--reserve", "0"]]) {
      const r = cli(args, { env: { COLUMNS: "80" } });
      expect(r.code, r.stderr).toBe(0);
      const long = r.stdout.split("\n").filter((l) => [...l].length > 80);
      expect(long, args.join(" ")).toEqual([]);
      expect(r.stdout).toMatch(/^train_default \(embedded\): the limit is 3\.98 GiB requested/m);
      expect(r.stdout).toMatch(/^allocator +peak reserved +waste +fits +smallest GPU +above limit$/m);
      expect(r.stdout).toMatch(/^advice: /m);
    }
    const v = cli(["compare", "--verbose"]);
    expect(v.stdout).toMatch(/driver calls/);
    expect(v.stdout).toMatch(/M events\/s/);
    // the modelled driver time says what it predicts, with --verbose (its column) only
    expect(v.stdout).toMatch(/^driver ms on sim: modelled with the H200's per-call costs/m);
    expect(cli(["compare"]).stdout).not.toMatch(/driver ms on sim/);
  });

  it("the smallest GPU of each policy runs the trace, 2 MiB less does not (replay --capacity, --reserve)", () => {
    const j = json<CompareOut & { alternatives: Fit[] }>(cli(["compare", "--json", "--reserve", "512MiB"]));
    expect(j.fit.map((f) => f.policy)).toEqual(["caching", "expandable", "gmlake", "vms"]);
    expect(j.alternatives.map((f) => f.policy)).toEqual(["caching max_split_size_mb:64", "caching max_split_size_mb:256", "caching max_split_size_mb:1024"]);
    for (const f of j.alternatives) {
      const m = /max_split_size_mb:(\d+)/.exec(f.policy)!;
      const at = json<{ oom: unknown }>(cli(["replay", "--policy", "caching", "--set", `maxSplitSize=${m[1]}MiB`, "--capacity", String(f.smallestDeviceBytes), "--reserve", "512MiB", "--json"]));
      expect(at.oom, f.policy).toBeNull();
    }
    for (const f of j.fit) {
      expect(f.reserveBytes).toBe(512 * MiB);
      expect(f.smallestDeviceBytes).toBe(f.smallestCapacityBytes + 512 * MiB);
      expect(f.fits).toBeNull();
      const at = json<{ oom: unknown; capacityBytes: number; reserveBytes: number }>(
        cli(["replay", "--policy", f.policy, "--capacity", String(f.smallestDeviceBytes), "--reserve", "512MiB", "--json"]),
      );
      expect(at.oom, f.policy).toBeNull();
      expect(at.capacityBytes).toBe(f.smallestDeviceBytes);
      const below = json<{ oom: unknown }>(cli(["replay", "--policy", f.policy, "--capacity", String(f.smallestDeviceBytes - 2 * MiB), "--reserve", "512MiB", "--json"]));
      expect(below.oom, f.policy).not.toBeNull();
    }
  });

  it("under --capacity: fits and headroom agree with the smallest GPU; an OOM run is marked and not compared", () => {
    const j = json<CompareOut>(cli(["compare", "--json", "--capacity", "5GiB", "--reserve", "0"]));
    expect(j.budget).toEqual({ capacityBytes: 5 * 2 ** 30, reserveBytes: 0, allocatorBytes: 5 * 2 ** 30 });
    for (const f of j.fit) {
      const row = j.rows.find((r) => r.policy === f.policy)!;
      expect(f.fits).toBe(row.finished);
      expect(row.finished).toBe(row.oom === null);
      expect(f.headroomBytes).toBe(5 * 2 ** 30 - f.smallestCapacityBytes);
      expect(f.fits).toBe(f.headroomBytes! >= 0);
    }
    const t = cli(["compare", "--capacity", "3GiB", "--reserve", "0"]);
    const lines = t.stdout.split("\n").filter((l) => /^(caching|expandable|gmlake|vms) /.test(l));
    expect(lines).toHaveLength(4);
    for (const l of lines) {
      // the figures of a run that stopped at an out-of-memory are not shown as if it had finished
      expect(l).toMatch(/ OOM +- +no /);
    }
    expect(t.stdout).toMatch(/advice: nothing fits the 3\.00 GiB device/);
  });
});

describe("sizes say GiB or GB", () => {
  it("80GB is decimal and echoed in GiB, 80GiB binary, a bare 80G refused", () => {
    const gb = json<CompareOut>(cli(["compare", "--json", "--no-fit", "--capacity", "80GB"]));
    expect(gb.budget.capacityBytes).toBe(80e9);
    const gib = json<CompareOut>(cli(["compare", "--json", "--no-fit", "--capacity", "80GiB"]));
    expect(gib.budget.capacityBytes).toBe(80 * 2 ** 30);
    expect(gib.budget.reserveBytes).toBe(2 ** 30);
    const t = cli(["compare", "--no-fit", "--capacity", "80GB"]);
    expect(t.stdout.replace(/\n  /g, " ")).toMatch(/--capacity 80GB = 74\.51 GiB, --reserve 1\.00 GiB \(default\): 73\.51 GiB for the allocator/);
    const bare = cli(["compare", "--capacity", "80G"]);
    expect(bare.code).toBe(2);
    expect(bare.stderr).toMatch(/ambiguous --capacity '80G': write 80GiB .* or 80GB/);
    const over = cli(["replay", "--capacity", "1GiB", "--reserve", "2GiB"]);
    expect(over.code).toBe(2);
    expect(over.stderr).toMatch(/leaves nothing/);
  });
});

describe("verify gates a CI job", () => {
  it("exits 0 on a match and 1 on a mismatch", () => {
    const ok = cli(["verify"]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/MATCH/);
    // The embedded trace was recorded with the default allocator: the expandable model decides otherwise.
    const bad = cli(["verify", "--policy", "expandable"]);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/MISMATCH/);
    expect(bad.stderr).toBe("");
    const j = cli(["verify", "--policy", "expandable", "--json"]);
    expect(j.code).toBe(1);
    expect(JSON.parse(j.stdout).match).toBe(false);
  });
});

describe.skipIf(!haveStacks)("memory-viz export keeps what holds the memory", () => {
  it("gpt2_ft_stacks: every entry that had frames keeps them; annotations survive", async () => {
    const out = join(tmp, "stacks.pickle");
    const r = cli(["replay", STACKS, "--policy", "caching", "--export", "memory-viz", out]);
    expect(r.code, r.stderr).toBe(0);
    const a = await readSnapshot(STACKS, { frames: true });
    const b = await readSnapshot(out, { frames: true });
    expect(b.annotations).toEqual(a.annotations);
    expect(a.annotations.length).toBeGreaterThan(0);
    // Match entries by action and size, in order: the replay makes the trace's requests in
    // its order, and the caching model makes PyTorch's segment decisions (gmlake verify),
    // so the n-th entry of an action and size in the input has its twin in the export.
    const key = (e: typeof a.events, i: number) => `${e.kind[i]}:${e.size[i]}`;
    const pending = new Map<string, string[]>();
    for (let i = 0; i < b.events.length; i++) {
      const k = key(b.events, i);
      const list = pending.get(k) ?? [];
      list.push(JSON.stringify(b.frames![i] ?? []));
      pending.set(k, list);
    }
    let withFrames = 0;
    let kept = 0;
    for (let i = 0; i < a.events.length; i++) {
      const twin = pending.get(key(a.events, i))?.shift();
      const f = a.frames![i];
      if (!f || f.length === 0) continue;
      withFrames++;
      if (twin === JSON.stringify(f)) kept++;
    }
    expect(withFrames).toBe(9978);
    expect(kept).toBe(withFrames);
  });
});

describe.skipIf(!haveTraces)("fit search cost", () => {
  it("compare on a medium trace stays cheap", () => {
    const r = cli(["compare", STACKS, "--json"]);
    const j = json<CompareOut & { fit: (Fit & { searchReplays: number })[] }>(r);
    for (const f of j.fit) expect(f.searchReplays).toBeLessThanOrEqual(20);
  });
});

describe.skipIf(!haveStacks)("explain: what holds the memory", () => {
  it("gpt2_ft_stacks: the top sites at the peak are the frames in the file", async () => {
    const r = cli(["explain", STACKS, "--json", "--top", "5", "--policies", "caching,vms"]);
    const j = json<{
      hasStacks: boolean;
      sites: { eventIndex: number; peakRequestedBytes: number; totalSites: number; bytesWithoutStack: number; sites: { label: string; bytes: number; blocks: number }[] };
      policies: { policy: string; peakReservedBytes: number; atPeak: { all: { reservedBytes: number; requestedBytes: number } }; wasteAtPeakBytes: number }[];
    }>(r);
    expect(j.hasStacks).toBe(true);
    // From the file itself: the live blocks at the peak of requested bytes, each block's
    // stack named after its innermost frame that is not in site-packages/torch/.
    const s = await readSnapshot(STACKS, { frames: true });
    const e = s.events;
    const live = new Map<number, number>();
    let req = 0;
    let peak = -1;
    let best = 0;
    for (let i = 0; i < e.length; i++) {
      if (e.kind[i] === 0) {
        live.set(e.addr[i]!, i);
        req += e.size[i]!;
        if (req > best) [best, peak] = [req, i];
      } else if (e.kind[i] === 2 && live.has(e.addr[i]!)) {
        req -= e.size[live.get(e.addr[i]!)!]!;
        live.delete(e.addr[i]!);
      }
    }
    expect(j.sites.eventIndex).toBe(peak);
    expect(j.sites.peakRequestedBytes).toBe(best);
    const at = new Map<number, number>();
    for (let i = 0; i <= peak; i++) {
      if (e.kind[i] === 0) at.set(e.addr[i]!, i);
      else if (e.kind[i] === 2) at.delete(e.addr[i]!);
    }
    const bySite = new Map<string, { bytes: number; blocks: number }>();
    for (const row of at.values()) {
      const f = (s.frames![row] ?? []).find((x) => !x.filename.includes("site-packages/torch/"));
      const label = f ? `${f.filename}:${f.line} in ${f.name}` : "(no stack recorded)";
      const v = bySite.get(label) ?? { bytes: 0, blocks: 0 };
      v.bytes += e.size[row]!;
      v.blocks++;
      bySite.set(label, v);
    }
    const expected = [...bySite.entries()].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, 5);
    expect(j.sites.sites.map((x) => [x.label, { bytes: x.bytes, blocks: x.blocks }])).toEqual(expected);
    expect(j.sites.totalSites).toBe(bySite.size);
    // GPT-2's GELU activations hold the most at its peak
    expect(j.sites.sites[0]!.label).toMatch(/transformers\/activations\.py:\d+ in forward/);
    for (const p of j.policies) {
      expect(p.atPeak.all.reservedBytes).toBe(p.peakReservedBytes);
      expect(p.wasteAtPeakBytes).toBe(p.atPeak.all.reservedBytes - p.atPeak.all.requestedBytes);
    }
    const t = cli(["explain", STACKS, "--top", "5"]);
    expect(t.code, t.stderr).toBe(0);
    expect(t.stdout).toMatch(/Non-releasable memory/);
    expect(t.stdout).toMatch(/GPU reserved memory/);
    expect(t.stdout.split("\n").filter((l) => l.length > 100)).toEqual([]);
  });
});

describe("--report is an output like the others", () => {
  it("an existing index.html is kept without --force, replaced with it; the help names it", () => {
    const dir = mkdtempSync(join(tmp, "report-"));
    const first = cli(["compare", "--no-fit", "--policies", "caching", "--report", dir]);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toMatch(/report: .*index\.html/);
    const again = cli(["compare", "--no-fit", "--policies", "caching", "--report", dir]);
    expect(again.code).toBe(2);
    expect(again.stdout).toBe("");
    expect(again.stderr.trim().split("\n")).toHaveLength(1);
    const forced = cli(["compare", "--no-fit", "--policies", "caching", "--report", dir, "--force"]);
    expect(forced.code, forced.stderr).toBe(0);
    expect(cli(["compare", "--help"]).stdout).toMatch(/--report DIR/);
    expect(cli(["explain", "--help"]).stdout).toMatch(/gmlake explain/);
  });
});
