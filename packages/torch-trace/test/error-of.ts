import { SnapshotError } from "../src/index.js";

/** The SnapshotError that f throws (anything else, or nothing, fails the test). */
export function errorOf(f: () => unknown): SnapshotError {
  try {
    f();
  } catch (e) {
    if (e instanceof SnapshotError) return e;
    throw new Error(`not a SnapshotError: ${String(e)}`);
  }
  throw new Error("no error");
}

/** The SnapshotError that p rejects with. */
export async function asyncErrorOf(p: Promise<unknown>): Promise<SnapshotError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof SnapshotError) return e;
    throw new Error(`not a SnapshotError: ${String(e)}`);
  }
  throw new Error("no error");
}
