import { getPolicy, listPolicies, optionsForPolicies } from "@gmlake/stitch";
import { UsageError } from "./cli-error.js";
import { asUsage } from "./options.js";
import { didYouMean } from "./suggest.js";

/**
 * --set for the policies a command runs (replay, compare, explain): each knob goes to every
 * one of them that has it, checked once against its schema before any trace is read; a
 * knob none of them has, or a value it does not accept, is bad input (exit 2, one line).
 */
export function knobsFor(policies: readonly string[], sets: Record<string, string>): (policy: string) => Record<string, unknown> {
  const known = [...new Set(policies.flatMap((p) => Object.keys(getPolicy(p).knobs)))];
  for (const k of Object.keys(sets)) {
    const near = known.includes(k) ? "" : didYouMean(k, known);
    if (near) throw new UsageError(`no policy of ${policies.join(", ")} has a knob ${k}${near}`);
  }
  const checked = asUsage(() => optionsForPolicies(policies, sets));
  return (policy) => checked.get(policy) ?? {};
}

/** The policies compare and explain run by default: PyTorch's two allocators, GMLake and ours (those registered). */
export const DEFAULT_POLICIES = ["caching", "expandable", "gmlake", "vms"];

export function defaultPolicies(): string[] {
  const registered = new Set(listPolicies().map((p) => p.name));
  return DEFAULT_POLICIES.filter((p) => registered.has(p));
}
