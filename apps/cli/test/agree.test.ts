import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { cli, json, TRACES } from "./run-cli.js";

/**
 * compare's figures agree wherever they are printed: the terminal table, --json and every
 * section of --report (its table, the plot's legend, the memory_summary section), on three
 * small traces, with and without --capacity; each report section says which replays it shows.
 */
interface Row { trace: string; policy: string; peakReservedBytes: number; finished: boolean }
interface Fit { policy: string; smallestDeviceBytes: number | null; smallestCapacityBytes: number | null; gapBytes: number | null; gapPercent: number | null; peakRequestedBytes: number; fits: boolean | null }
interface Out { rows: Row[]; fit: Fit[]; recorded: { peakRequestedBytes: number; peakAllocatedBytes: number }[]; advice: { text: string }[] }

// the test's own formatting (what every output promises: GiB with two decimals)
const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;
const above = (f: Fit) => (f.gapBytes === null ? "-" : `${gib(f.gapBytes)} ${f.gapPercent!.toFixed(1)}%`);
const strip = (html: string) => html.replace(/<[^>]*>/g, "").replace(/&amp;/g, "&").replace(/&#39;|&apos;/g, "'").replace(/&quot;/g, '"').replace(/&lt;/g, "<").replace(/&gt;/g, ">");

/** A report table as {header: cell} per row, keyed by its first cell. */
function htmlTable(html: string): Map<string, Record<string, string>> {
  const heads = [...html.matchAll(/<th[^>]*>(.*?)<\/th>/g)].map((m) => strip(m[1]!));
  const rows = new Map<string, Record<string, string>>();
  for (const tr of html.matchAll(/<tr[^>]*>((?:<td.*?<\/td>)+)<\/tr>/g)) {
    const cells = [...tr[1]!.matchAll(/<td[^>]*>(.*?)<\/td>/g)].map((m) => strip(m[1]!));
    rows.set(cells[0]!, Object.fromEntries(heads.map((h, i) => [h, cells[i] ?? ""])));
  }
  return rows;
}

/** The cells appear in this order on the line. */
function inOrder(line: string, cells: string[]): boolean {
  let at = 0;
  for (const c of cells) {
    const i = line.indexOf(c, at);
    if (i < 0) return false;
    at = i + c.length;
  }
  return true;
}

const SMALL = join(TRACES, "small");
// GMLAKE_AGREE_TRACES=a.pickle.gz,b.pickle.gz runs it on those instead (the large traces, by hand)
const given = process.env.GMLAKE_AGREE_TRACES?.split(",").filter(Boolean);
const traces: { name: string; args: string[] }[] = given
  ? given.map((p) => ({ name: basename(p).replace(/\.gz$/, "").replace(/\.(pickle|pkl)$/, ""), args: [resolve(p)] }))
  : [
      { name: "train_default (embedded)", args: [] },
      ...["train_expandable", "default"].filter((n) => existsSync(join(SMALL, `${n}.pickle`))).map((n) => ({ name: n, args: [join(SMALL, `${n}.pickle`)] })),
    ];

function check(args: string[], name: string): Out {
  const j = json<Out>(cli(["compare", ...args, "--json"]));
  const dir = mkdtempSync(join(tmpdir(), "gmlake-agree-"));
  const t = cli(["compare", ...args, "--report", dir], { env: { COLUMNS: "80" } });
  expect(t.code, t.stderr).toBe(0);
  const html = readFileSync(join(dir, "index.html"), "utf8");
  const text = t.stdout;
  const capacity = args.includes("--capacity");

  // the terminal's heading names the limit, the JSON's figures
  const rec = j.recorded[0]!;
  expect(text).toContain(`${name}: the limit is ${gib(rec.peakRequestedBytes)} requested, ${gib(rec.peakAllocatedBytes)} allocated`);
  const section = html.slice(html.indexOf(`<h2>${name.replace(/&/g, "&amp;")}</h2>`));
  const table = htmlTable(section.slice(0, section.indexOf("</table>")));
  const svg = section.slice(section.indexOf("<svg"), section.indexOf("</svg>"));
  const summaryAt = section.indexOf("Each allocator at its own peak");
  const summary = htmlTable(section.slice(summaryAt, section.indexOf("</table>", summaryAt)));
  const summaryHeads = [...section.slice(summaryAt).matchAll(/<th[^>]*>(.*?)<\/th>/g)].map((m) => strip(m[1]!));
  for (const r of j.rows) {
    const f = j.fit.find((x) => x.policy === r.policy)!;
    const reserved = r.finished ? gib(r.peakReservedBytes) : "OOM";
    const smallest = f.smallestDeviceBytes === null ? "none" : gib(f.smallestDeviceBytes);
    const fits = f.fits === null ? "-" : f.fits ? "yes" : "no";
    // terminal: the policy's row
    const line = text.split("\n").find((l) => l.startsWith(`${r.policy} `));
    expect(line, `${name} ${r.policy}`).toBeDefined();
    expect(inOrder(line!, [reserved, fits, smallest, above(f)]), `${name} ${r.policy}: ${line}`).toBe(true);
    // report: its table, the same figures
    const cells = table.get(r.policy)!;
    expect(cells, `${name} ${r.policy} in the report`).toBeDefined();
    expect([cells["peak reserved"], cells["fits"], cells["smallest GPU"], cells["above limit"]]).toEqual([reserved, fits, smallest, above(f)]);
    expect(cells["smallest capacity"]).toBe(f.smallestCapacityBytes === null ? "none" : gib(f.smallestCapacityBytes));
    // the plot's legend: the same peak
    expect(svg).toMatch(new RegExp(`>${r.policy} ${gib(r.peakReservedBytes).replace(".", "\\.")}${r.finished ? "" : " \\(OOM\\)"}</text>`));
    // the plot names each line at its end
    expect(svg).toContain(`>${r.policy}</text>`);
    // memory_summary: from the same replays (the same capacity), so the same peaks
    const col = summaryHeads.findIndex((h) => h === r.policy || h.startsWith(`${r.policy} (OOM`));
    expect(col, `${name}: ${r.policy} in the summary`).toBeGreaterThan(0);
    expect(Object.values(summary.get("Peak reserved (run)")!)[col]).toBe(gib(r.peakReservedBytes));
    if (r.finished) expect(Object.values(summary.get("GPU reserved memory")!)[col]).toBe(gib(r.peakReservedBytes));
  }
  // the advice: word for word in all three
  const advice = j.advice[0]!.text;
  expect(text.replace(/\n  /g, " ")).toContain(advice);
  expect(strip(section)).toContain(advice);
  // each section says which replays it shows
  const note = capacity ? "replays under --capacity" : "replays without a capacity";
  for (const h of ["The table: ", "Memory over time", "Each allocator at its own peak"]) {
    const at = section.indexOf(h);
    expect(at, h).toBeGreaterThanOrEqual(0);
    expect(strip(section.slice(at, at + 600)), h).toContain(note);
  }
  expect(strip(section)).toContain("From the recorded trace itself (no replay)");
  // the policies' lines are told apart: a dash pattern each (and the recorded line's own)
  const dashes = new Set([...svg.matchAll(/<path d="[^"]*" fill="none" stroke="[^"]*" stroke-width="1\.6" stroke-dasharray="([^"]*)"/g)].map((m) => m[1]));
  expect(dashes.size).toBe(j.rows.length);
  return j;
}

describe("compare: the terminal, --json and --report say the same", () => {
  for (const t of traces) {
    it(`${t.name}, without and with --capacity`, () => {
      const j = check(t.args, t.name);
      // a capacity between the policies' smallest GPUs: some fit, some run out of memory
      const sizes = j.fit.map((f) => f.smallestDeviceBytes!).sort((a, b) => a - b);
      const capacity = sizes[Math.floor(sizes.length / 2)]!;
      const k = check([...t.args, "--capacity", String(capacity)], t.name);
      expect(k.rows.some((r) => r.finished)).toBe(true);
    }, 120_000);
  }
});
