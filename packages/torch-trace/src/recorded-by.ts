import type { AllocatorSettings } from "@gmlake/trace";

/**
 * What made a snapshot: PyTorch's own allocator (in its caching or expandable-segments mode),
 * or the stitching engine as PyTorch's allocator, live in the training process
 * (@gmlake/torch-alloc writes `gmlake_policy` and `gmlake_live` into allocator_settings).
 */
export interface RecordedBy {
  readonly allocator: "pytorch" | "gmlake";
  /** pytorch: caching or expandable; gmlake: the policy's name. */
  readonly mode: string;
  /** gmlake: recorded live in a PyTorch process (not a replay's export). */
  readonly live: boolean;
  /** For output: "caching (default)", "expandable segments (PYTORCH_CUDA_ALLOC_CONF=...)", "gmlake vms, live (...)". */
  readonly label: string;
  /** Who the recorded figures are of: "PyTorch" or "gmlake vms". */
  readonly who: string;
  /** Short, for a table row or a plot legend: "PyTorch caching", "PyTorch expandable", "gmlake vms, live". */
  readonly name: string;
}

export function recordedBy(s: AllocatorSettings): RecordedBy {
  const policy = s.raw.gmlake_policy;
  if (typeof policy === "string" && policy !== "") {
    const live = s.raw.gmlake_live === true;
    const label = `gmlake ${policy}${live ? ", live (the stitching engine as PyTorch's allocator)" : ""}`;
    return { allocator: "gmlake", mode: policy, live, label, who: `gmlake ${policy}`, name: `gmlake ${policy}${live ? ", live" : ""}` };
  }
  const mode = s.expandableSegments ? "expandable" : "caching";
  const conf = s.allocConf ? ` (PYTORCH_CUDA_ALLOC_CONF=${s.allocConf})` : "";
  return { allocator: "pytorch", mode, live: true, label: `${s.expandableSegments ? "expandable segments" : "caching (default)"}${conf}`, who: "PyTorch", name: `PyTorch ${mode}` };
}
