import { listPolicies } from "@gmlake/stitch";

/** --set applies to each policy that has the knob (compare and explain run policies with different knobs). */
export function knobsFor(policy: string, sets: Record<string, unknown>): Record<string, unknown> {
  const p = listPolicies().find((x) => x.name === policy);
  if (!p) return {};
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(sets)) if (k in p.defaults) out[k] = v;
  return out;
}

/** The policies compare and explain run by default: PyTorch's two allocators, GMLake and ours (those registered). */
export const DEFAULT_POLICIES = ["caching", "expandable", "gmlake", "vms"];

export function defaultPolicies(): string[] {
  const registered = new Set(listPolicies().map((p) => p.name));
  return DEFAULT_POLICIES.filter((p) => registered.has(p));
}
