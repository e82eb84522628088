import type { Block } from "./block.js";
import type { PolicyContext } from "./policy-context.js";
import { StitchError } from "./errors.js";
import { BUILTIN_POLICIES } from "./policies/builtin.js";

/** A policy's knobs: plain JSON-like values (numbers, booleans, strings, arrays of numbers, null). */
export type PolicyOptions = Record<string, unknown>;

/**
 * One running allocator of a policy: it decides, the engine keeps the books. Blocks it
 * returns must lie in memory obtained through its PolicyContext (segmentAlloc, or
 * createChunk + mapChunks), must not overlap any other live block, and carry `size` = the
 * bytes charged as allocated (the rounded size, or more when a block is not split).
 */
export interface PolicyInstance {
  /**
   * Serve `size` bytes (the program's request, not rounded) on `stream`, including the
   * policy's own release-and-retry. Returns a block (the engine marks it allocated and
   * counts it), or null when out of memory.
   */
  malloc(size: number, stream: number): Block | null;
  /** The block's free completed (free_completed): take it back (merge, pool, maybe release). */
  free(block: Block): void;
  /** torch.cuda.empty_cache(): release cached memory that no live block uses. */
  emptyCache(): void;
  /** Release every driver resource left (after all blocks are freed): no handle, mapping or reservation may remain. */
  teardown(): void;
  /** Optional structure checks for the invariant checker: return a message on violation. */
  check?(): string | null;
  /** Optional: policy-specific counters for reports (e.g. stitches made, GC runs). */
  counters?(): Record<string, number>;
}

/** A policy: a plain object registered by name. */
export interface Policy<O extends PolicyOptions = PolicyOptions> {
  readonly name: string;
  readonly description: string;
  /** Every knob with its default value; create() receives defaults overlaid with the user's options. */
  readonly defaults: Readonly<O>;
  create(context: PolicyContext, options: O): PolicyInstance;
}

const registry = new Map<string, Policy>(BUILTIN_POLICIES.map((p) => [p.name, p]));

/** Add a policy to the registry (a user's own policy in its own package calls this once). */
export function registerPolicy<O extends PolicyOptions>(policy: Policy<O>, options: { replace?: boolean } = {}): void {
  if (typeof policy?.name !== "string" || !/^[a-z][a-z0-9_-]*$/.test(policy.name)) {
    throw new StitchError("BAD_ARGUMENT", `Expected a policy name of lowercase letters, digits, - or _ but received ${String(policy?.name)}`);
  }
  if (typeof policy.create !== "function") throw new StitchError("BAD_ARGUMENT", `policy ${policy.name} has no create()`);
  if (registry.has(policy.name) && !options.replace) {
    throw new StitchError("DUPLICATE_POLICY", `a policy named ${policy.name} is already registered`);
  }
  registry.set(policy.name, policy as unknown as Policy);
}

/** Remove a policy (tests, or a user replacing a built-in); returns whether it was there. */
export function unregisterPolicy(name: string): boolean {
  return registry.delete(name);
}

export function getPolicy(name: string): Policy {
  const p = registry.get(name);
  if (!p) throw new StitchError("UNKNOWN_POLICY", `unknown policy ${name}; registered: ${[...registry.keys()].join(", ")}`);
  return p;
}

export function listPolicies(): Policy[] {
  return [...registry.values()];
}

/** Defaults overlaid with options; unknown keys and type mismatches are errors. */
export function resolveOptions<O extends PolicyOptions>(policy: Policy<O>, options: Partial<O> | undefined): O {
  const out = { ...policy.defaults } as O;
  if (!options) return out;
  for (const [k, v] of Object.entries(options)) {
    if (v === undefined) continue;
    if (!(k in policy.defaults)) {
      throw new StitchError("BAD_OPTION", `policy ${policy.name} has no option ${k}; it has: ${Object.keys(policy.defaults).join(", ")}`);
    }
    const d = (policy.defaults as PolicyOptions)[k];
    if (d !== null && v !== null && typeof d !== typeof v) {
      throw new StitchError("BAD_OPTION", `Expected a ${typeof d} for ${policy.name}.${k} but received ${JSON.stringify(v)}`);
    }
    (out as PolicyOptions)[k] = v;
  }
  return out;
}
