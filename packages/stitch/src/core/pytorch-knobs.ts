import type { AllocatorSettings } from "@gmlake/trace";
import type { KnobSchema } from "./knobs.js";

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

/** PyTorch's knobs as a policy declares them (PYTORCH_CUDA_ALLOC_CONF's names in camelCase). */
export const PYTORCH_KNOBS: KnobSchema<PytorchOptions> = {
  maxSplitSize: {
    type: "bytes",
    min: -1,
    default: null,
    nullMeans: "the trace's recorded setting",
    description: "max_split_size: blocks this large or larger are not split (-1 = unlimited)",
  },
  maxNonSplitRounding: {
    type: "bytes",
    default: null,
    nullMeans: "the trace's recorded setting",
    description: "max_non_split_rounding: how much larger than the request an unsplit block may be",
  },
  roundupPower2Divisions: {
    type: "divisions",
    default: null,
    nullMeans: "the trace's recorded setting",
    description: "roundup_power2_divisions: steps between powers of two that requests round up to, per size interval",
  },
};

/** Resolves a policy's (schema-checked) PyTorch knobs against the recorded settings. */
export function pytorchKnobs(settings: AllocatorSettings, o: PytorchOptions): PytorchKnobs {
  const ms = o.maxSplitSize ?? settings.maxSplitSize;
  const rp2 = o.roundupPower2Divisions ?? settings.roundupPower2Divisions;
  return {
    maxSplit: ms === null || ms < 0 ? Infinity : ms,
    maxNonSplitRounding: o.maxNonSplitRounding ?? settings.maxNonSplitRounding,
    rp2: rp2.some((d) => d > 1) ? rp2 : null,
  };
}
