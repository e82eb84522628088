import { describe, expect, it } from "vitest";
import { GmlakeError } from "@gmlake/errors";
import { OutputError } from "@gmlake/output";
import { OutOfMemoryError, StitchError } from "@gmlake/stitch";
import { TraceFormatError } from "@gmlake/trace";
import { SnapshotError } from "@gmlake/torch-trace";
import { VmmError } from "@gmlake/vmm";
import { isInputError, isOutputError, UsageError } from "../src/cli-error.js";

// The CLI maps errors by class (every package's error is a GmlakeError with a typed code).
describe("exit codes by error class", () => {
  it("bad input: usage, snapshots, text traces, output paths, stitch's input codes", () => {
    for (const e of [
      new UsageError("x"),
      new SnapshotError("TRUNCATED", "t.pickle", "cut"),
      new TraceFormatError("BAD_LINE", "t.jsonl", 3, "not JSON"),
      new OutputError("path", "OUTPUT_EXISTS", "out.svg", "exists"),
      new StitchError("BAD_OPTION", "gmlake.fragLimit accepts ..."),
      new StitchError("BAD_MODULE", "no policy"),
    ]) {
      expect(e).toBeInstanceOf(GmlakeError);
      expect(isInputError(e), e.name).toBe(true);
    }
  });

  it("not bad input: a broken invariant, an out-of-memory escaping, a driver failure, a refused write", () => {
    for (const e of [new StitchError("INVARIANT", "x"), new OutOfMemoryError(1, 0, "x"), new VmmError("CUDA_ERROR_LAUNCH_FAILED", "cuMemMap", "x"), new OutputError("write", "ENOSPC", "o", "full")]) {
      expect(e).toBeInstanceOf(GmlakeError);
      expect(isInputError(e), `${e.name} ${e.code}`).toBe(false);
    }
    expect(isOutputError(new OutputError("write", "ENOSPC", "o", "full"))).toBe(true);
    expect(isOutputError(new OutputError("path", "OUTPUT_EXISTS", "o", "x"))).toBe(false);
    // a plain Error named like one of ours is not one of ours
    const fake = new Error("x");
    fake.name = "SnapshotError";
    expect(isInputError(fake)).toBe(false);
  });
});
