/** Where the bench tests find the built bench and the shared traces (GMLAKE_SHARED, else ../shared beside the repository). */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll } from "vitest";

export const TEST_DIR = dirname(fileURLToPath(import.meta.url));
export const MAIN = resolve(TEST_DIR, "../dist/main.js");
export const SMALL = join(process.env.GMLAKE_SHARED ?? resolve(TEST_DIR, "../../../../shared"), "traces", "small");
export const haveTraces = existsSync(join(SMALL, "train_default.pickle"));

/** A scratch folder under test/ (module imports there resolve the workspace's packages), removed after the file's tests. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(TEST_DIR, prefix));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}
