import { existsSync, mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { chromium } from "playwright-core";
import { cli, REPO, TRACES } from "./run-cli.js";

/**
 * The HTML report in a real browser: Debian's chromium, headless (.ci/run installs it).
 * SCREENSHOT=1 also writes docs/report.png (the screenshot committed beside the docs).
 */
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
// .ci/run installs chromium and sets GMLAKE_REQUIRE_CHROMIUM: there the test runs (and fails without it), never skips.
const haveChromium = existsSync(CHROMIUM) || process.env.GMLAKE_REQUIRE_CHROMIUM === "1";
const STACKS = join(TRACES, "gpt2_ft_stacks.pickle.gz");

describe.skipIf(!haveChromium)("the HTML report in headless Chromium", () => {
  it("opens with no console errors, no failed requests, and shows the verdicts, plots and sites", async () => {
    const dir = mkdtempSync(join(tmpdir(), "gmlake-report-"));
    // relative to the repo (the test's cwd): no machine path in the committed screenshot
    const trace = existsSync(STACKS) ? [relative(REPO, STACKS)] : [];
    const r = cli(["compare", ...trace, "--capacity", "24GiB", "--report", dir]);
    expect(r.code, r.stderr).toBe(0);
    const html = readFileSync(join(dir, "index.html"), "utf8");
    // self-contained: no external resource of any kind
    expect(html).not.toMatch(/\b(src|href)=["']?(https?:)?\/\//i);
    expect(html).not.toMatch(/<script/i);
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"] });
    try {
      const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
      const problems: string[] = [];
      page.on("console", (m) => {
        if (m.type() === "error" || m.type() === "warning") problems.push(`${m.type()}: ${m.text()}`);
      });
      page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`));
      page.on("requestfailed", (q) => problems.push(`requestfailed: ${q.url()}`));
      page.on("request", (q) => {
        if (!q.url().startsWith("file:")) problems.push(`network: ${q.url()}`);
      });
      await page.goto(pathToFileURL(join(dir, "index.html")).href, { waitUntil: "load" });
      expect(problems).toEqual([]);
      expect(await page.title()).toMatch(/gmlake report/);
      const text = await page.locator("main").innerText();
      expect(text).toMatch(/advice: /);
      expect(text).toMatch(/smallest GPU/);
      // one plot per trace, drawn (an SVG with curves) and not zero-sized
      const svg = page.locator(".plot svg").first();
      expect(await svg.locator("path").count()).toBeGreaterThan(3);
      const box = await svg.boundingBox();
      expect(box!.width).toBeGreaterThan(600);
      if (trace.length) {
        expect(text).toMatch(/transformers\/activations\.py:\d+ in forward/);
        expect(text).toMatch(/Non-releasable memory/);
      }
      if (process.env.SCREENSHOT) {
        mkdirSync(join(REPO, "docs"), { recursive: true });
        await page.screenshot({ path: join(REPO, "docs", "report.png"), fullPage: true });
      }
    } finally {
      await browser.close();
    }
  }, 120_000);
});
