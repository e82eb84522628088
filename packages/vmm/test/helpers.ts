import { VmmError } from "../src/index.js";

/** The VmmError code `f` throws, or "no error" (other errors propagate). */
export function codeOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    if (e instanceof VmmError) return e.code;
    throw e;
  }
  return "no error";
}
