import type { AllocatorSettings } from "@gmlake/trace";
import { StitchError } from "./errors.js";

/** PyTorch's own knobs as a policy resolves them: option, else the trace's recorded setting. */
export interface PytorchKnobs {
  /** Infinity when unlimited. */
  maxSplit: number;
  maxNonSplitRounding: number;
  /** roundup_power2_divisions, or null when none is set (plain 512-byte rounding). */
  rp2: number[] | null;
}

export interface PytorchOptions {
  maxSplitSize: number | null;
  maxNonSplitRounding: number | null;
  roundupPower2Divisions: number[] | null;
}

/** Checks the PyTorch knobs of a policy's options and resolves them against the recorded settings. */
export function pytorchKnobs(settings: AllocatorSettings, o: PytorchOptions): PytorchKnobs {
  checkPytorchOptions(o);
  const ms = o.maxSplitSize ?? settings.maxSplitSize;
  const rp2 = o.roundupPower2Divisions ?? settings.roundupPower2Divisions;
  return {
    maxSplit: ms === null || ms < 0 ? Infinity : ms,
    maxNonSplitRounding: o.maxNonSplitRounding ?? settings.maxNonSplitRounding,
    rp2: rp2.some((d) => d > 1) ? rp2 : null,
  };
}

/** The knobs shared with PyTorch's configuration: null (= from the trace's settings) or a valid value. */
function checkPytorchOptions(o: { maxSplitSize: unknown; maxNonSplitRounding: unknown; roundupPower2Divisions: unknown }): void {
  const bytes = (k: string, v: unknown) => {
    if (v !== null && !(typeof v === "number" && Number.isSafeInteger(v) && v >= -1)) {
      throw new StitchError("BAD_OPTION", `Expected null or a byte count for ${k} but received ${JSON.stringify(v)}`);
    }
  };
  bytes("maxSplitSize", o.maxSplitSize);
  bytes("maxNonSplitRounding", o.maxNonSplitRounding);
  const d = o.roundupPower2Divisions;
  if (d !== null && !(Array.isArray(d) && d.length === 16 && d.every((x) => Number.isInteger(x) && x >= 0))) {
    throw new StitchError("BAD_OPTION", `Expected null or 16 non-negative integers for roundupPower2Divisions but received ${JSON.stringify(d)}`);
  }
}
