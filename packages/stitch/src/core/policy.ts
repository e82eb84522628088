import type { Block } from "./block.js";
import type { PolicyContext } from "./policy-context.js";
import { StitchError } from "./errors.js";
import { checkKnob, checkKnobDeclaration, knobDefaults, type Knob, type KnobSchema } from "./knobs.js";

/** A policy's knob values: plain JSON-like values (numbers, booleans, strings, arrays of numbers, null). */
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
  /**
   * Optional: serve `size` on `stream` from memory the policy already holds, with no driver
   * call that creates, maps, unmaps or frees memory (no grow, no release-and-retry); null
   * when it cannot, with the policy's state unchanged. Policies with it can sit behind a
   * front cache of freed blocks (@gmlake/torch-alloc's frontCacheEntries): the cache asks
   * mallocCached first and gives its blocks back before the engine calls malloc.
   */
  mallocCached?(size: number, stream: number): Block | null;
  /**
   * Optional: serve `size` on `stream` from memory the policy holds now, with no byte more
   * reserved: a fit, or (a policy that moves memory) free memory remapped into place; no
   * handle or segment is created. Null when it cannot. The engine falls back to mallocCached
   * without it. @gmlake/torch-alloc takes a CUDA-graph pool's reserve this way, so that memory
   * taken ahead of a capture never raises the peak.
   */
  mallocHeld?(size: number, stream: number): Block | null;
  /**
   * Optional: the address malloc(size, stream) would hand out now, when it would serve it from
   * this stream's free memory with no driver call and no wait on another stream; null when it
   * would do anything else. Changes nothing: the same malloc right after returns a block at
   * that address. @gmlake/torch-alloc's JS thread asks it ahead of the request it expects, so a
   * caller whose request was foreseen takes the answer without waiting (speculate).
   */
  peekCached?(size: number, stream: number): number | null;
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
export interface Policy<O extends object = PolicyOptions> {
  readonly name: string;
  readonly description: string;
  /**
   * Every knob: type, unit, range, default, one-line description. create() receives the
   * defaults overlaid with the user's values, each checked against its knob.
   */
  readonly knobs: KnobSchema<O>;
  /**
   * What the policy needs of stream safety. crossStreamReuse: it may hand a block freed on
   * one stream to a malloc on another (the block keeps its own stream): the engine then
   * makes the new stream wait on the old one first (an event recorded there, waited on).
   * Undeclared, a block of another stream is refused (StitchError INVARIANT).
   */
  readonly streams?: { readonly crossStreamReuse?: boolean | ((options: O) => boolean) };
  create(context: PolicyContext, options: O): PolicyInstance;
}

/**
 * One registry per process, even when two copies of this package are installed (a policy
 * package that resolved its own @gmlake/stitch beside the CLI's): the map lives on
 * globalThis under a Symbol.for key that every copy computes alike, with a version of its
 * shape. The first copy loaded creates it with its built-in policies; later copies use it,
 * or refuse (StitchError BAD_ARGUMENT, naming both versions) when their version differs.
 */
const REGISTRY_KEY = Symbol.for("@gmlake/stitch/policy-registry");
/** The registry's shape (the Policy interface as the engine calls it); bumped when that changes. */
export const POLICY_REGISTRY_VERSION = 2;

interface SharedRegistry {
  readonly version: number;
  readonly policies: Map<string, Policy>;
}

/** This copy's built-in policies, handed over by the package's entry points (register-builtins.ts): the registry imports no policy. */
let builtins: readonly Policy[] = [];

/**
 * @internal The package entry's call: `list` are this copy's built-in policies. A registry
 * this copy's version already made gets those it lacks; otherwise the first use makes it
 * with them (lazily, so that a copy of another version fails at its first use, not at import).
 */
export function installBuiltinPolicies(list: readonly Policy[]): void {
  builtins = list;
  const r = (globalThis as { [REGISTRY_KEY]?: SharedRegistry })[REGISTRY_KEY];
  if (r?.version === POLICY_REGISTRY_VERSION) for (const p of list) if (!r.policies.has(p.name)) r.policies.set(p.name, p);
}

function theRegistry(): Map<string, Policy> {
  const g = globalThis as { [REGISTRY_KEY]?: SharedRegistry };
  let r = g[REGISTRY_KEY];
  if (r === undefined) {
    r = { version: POLICY_REGISTRY_VERSION, policies: new Map(builtins.map((p) => [p.name, p])) };
    Object.defineProperty(globalThis, REGISTRY_KEY, { value: r, enumerable: false });
  } else if (r.version !== POLICY_REGISTRY_VERSION) {
    throw new StitchError(
      "BAD_ARGUMENT",
      `two copies of @gmlake/stitch with different policy registries (version ${r.version} and ${POLICY_REGISTRY_VERSION}) are loaded in this process; install one version (e.g. pnpm dedupe)`,
    );
  }
  return r.policies;
}

/** The built-in policy of that name, if there is one. */
function builtinNamed(name: string): Policy | undefined {
  return builtins.find((p) => p.name === name);
}

/** One of this package's own policies (its object, not a copy or look-alike): the engine trusts these, the builtin baseline proves them. */
export function isBuiltinPolicy(p: Policy): boolean {
  return builtinNamed(p.name) === p;
}

/** Where each outside policy was loaded from (loadPolicyModule notes it): errors name the module. */
const modules = new WeakMap<Policy, string>();

/** The --policy-module a policy came from, when it was loaded through loadPolicyModule. */
export function policyModuleOf(p: Policy): string | undefined {
  return modules.get(p);
}

/** @internal loadPolicyModule: `p` came from module `spec`. */
export function notePolicyModule(p: Policy, spec: string): void {
  if (!modules.has(p)) modules.set(p, spec);
}

/**
 * Add a policy to the registry (a user's own policy in its own package calls this once, at
 * import); returns the policy (`export default registerPolicy({...})`). The same object
 * again changes nothing; another policy of a registered name needs `replace`. A built-in's
 * name is never taken, replace or not: every result, table and report says "caching" only
 * for PyTorch's model (StitchError DUPLICATE_POLICY; name yours otherwise).
 */
export function registerPolicy<O extends object>(policy: Policy<O>, options: { replace?: boolean } = {}): Policy<O> {
  if (typeof policy?.name !== "string" || !/^[a-z][a-z0-9_-]*$/.test(policy.name)) {
    throw new StitchError("BAD_ARGUMENT", `Expected a policy name of lowercase letters, digits, - or _ but received ${String(policy?.name)}`);
  }
  if (typeof policy.create !== "function") throw new StitchError("BAD_ARGUMENT", `policy ${policy.name} has no create()`);
  checkSchema(policy as unknown as Policy);
  const registry = theRegistry();
  const builtin = builtinNamed(policy.name);
  if (builtin !== undefined && builtin !== (policy as unknown as Policy) && registry.get(policy.name) !== (policy as unknown as Policy)) {
    throw new StitchError("DUPLICATE_POLICY", `${policy.name} is a built-in policy: a policy of another module cannot take its name (call yours something else)`);
  }
  if (registry.has(policy.name) && registry.get(policy.name) !== (policy as unknown as Policy) && !options.replace) {
    throw new StitchError("DUPLICATE_POLICY", `a policy named ${policy.name} is already registered`);
  }
  registry.set(policy.name, policy as unknown as Policy);
  return policy;
}

/** Remove a policy (tests); returns whether it was there. A built-in stays (StitchError BAD_ARGUMENT): nothing may stand in for it. */
export function unregisterPolicy(name: string): boolean {
  if (builtinNamed(name) !== undefined) throw new StitchError("BAD_ARGUMENT", `${name} is a built-in policy and cannot be unregistered`);
  return theRegistry().delete(name);
}

export function getPolicy(name: string): Policy {
  const registry = theRegistry();
  const p = registry.get(name);
  if (!p) throw new StitchError("UNKNOWN_POLICY", `unknown policy ${name}; registered: ${[...registry.keys()].join(", ")}`);
  return p;
}

export function listPolicies(): Policy[] {
  return [...theRegistry().values()];
}

/** A policy's knobs are well declared: each has a type and a description, and its default passes its own check. */
function checkSchema(policy: Policy): void {
  const knobs = policy.knobs as Record<string, Knob> | undefined;
  if (typeof knobs !== "object" || knobs === null) throw new StitchError("BAD_ARGUMENT", `policy ${policy.name} declares no knobs (knobs: {} when it has none)`);
  for (const [name, k] of Object.entries(knobs)) {
    if (typeof k?.description !== "string" || typeof k.type !== "string") {
      throw new StitchError("BAD_ARGUMENT", `policy ${policy.name}: knob ${name} needs a type and a description`);
    }
    checkKnobDeclaration(policy.name, name, k);
    try {
      checkKnob(policy.name, name, k, k.default);
    } catch (e) {
      throw new StitchError("BAD_ARGUMENT", `policy ${policy.name}: the default of knob ${name} fails its own check (${(e as Error).message})`);
    }
  }
}

/** Every knob's default value. */
export function policyDefaults<O extends PolicyOptions>(policy: Policy<O>): O {
  return knobDefaults(policy.knobs);
}

/**
 * The knob values create() gets: defaults overlaid with `options`, each checked against
 * its knob (strings in command-line form are converted: "512MiB", "true"). An unknown knob
 * or a bad value is a StitchError BAD_OPTION naming the knob and what it accepts.
 */
export function resolveOptions<O extends PolicyOptions>(policy: Policy<O>, options: Partial<O> | Record<string, unknown> | undefined): O {
  const out = knobDefaults(policy.knobs) as PolicyOptions;
  if (!options) return out as O;
  const knobs = policy.knobs as Record<string, Knob>;
  for (const [k, v] of Object.entries(options)) {
    if (v === undefined) continue;
    const knob = Object.hasOwn(knobs, k) ? knobs[k] : undefined;
    if (knob === undefined) {
      const names = Object.keys(knobs);
      throw new StitchError("BAD_OPTION", `policy ${policy.name} has no knob ${k}; ${names.length ? `its knobs: ${names.join(", ")}` : "it has none"}`);
    }
    out[k] = checkKnob(policy.name, k, knob, v);
  }
  return out as O;
}

/**
 * Knob values for several policies at once (compare, the benchmarks): each value goes to
 * every policy that has a knob of that name, checked against it; a name none of them has
 * is an error (BAD_OPTION), as is a bad value. Returns each policy's checked values (only
 * the knobs that were set).
 */
export function optionsForPolicies(policies: readonly (string | Policy)[], values: Record<string, unknown>): Map<string, PolicyOptions> {
  const list = policies.map((p) => (typeof p === "string" ? getPolicy(p) : p));
  const out = new Map<string, PolicyOptions>(list.map((p) => [p.name, {}]));
  for (const [k, v] of Object.entries(values)) {
    const takers = list.filter((p) => Object.hasOwn(p.knobs, k));
    if (takers.length === 0) {
      if (list.length === 1) resolveOptions(list[0]!, { [k]: v }); // "policy x has no knob k; its knobs: ..."
      const all = [...new Set(list.flatMap((p) => Object.keys(p.knobs)))];
      throw new StitchError("BAD_OPTION", `no policy of ${list.map((p) => p.name).join(", ")} has a knob ${k}; their knobs: ${all.join(", ") || "none"}`);
    }
    for (const p of takers) out.get(p.name)![k] = checkKnob(p.name, k, (p.knobs as Record<string, Knob>)[k]!, v);
  }
  return out;
}
