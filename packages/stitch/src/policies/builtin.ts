import type { Policy } from "../core/policy.js";
import { cachingPolicy } from "./caching.js";
import { expandablePolicy } from "./expandable.js";
import { gmlakePolicy } from "./gmlake.js";
import { vmsPolicy } from "./vms.js";

/**
 * The policies this package ships: the registry starts with these (the package's entry
 * points hand them over, register-builtins.ts). A new built-in policy adds one entry here;
 * a policy in another package calls registerPolicy(itsPolicy) instead.
 */
export const BUILTIN_POLICIES: readonly Policy[] = [cachingPolicy as unknown as Policy, expandablePolicy as unknown as Policy, vmsPolicy as unknown as Policy, gmlakePolicy as unknown as Policy];
