// Imported by each entry point (index, policy-kit, testing) for its effect: the registry
// (core/policy.ts) starts with the built-in policies without importing them, so the engine
// and the registry load without the policies, and no import runs in a circle.
import { installBuiltinPolicies } from "./core/policy.js";
import { BUILTIN_POLICIES } from "./policies/builtin.js";

installBuiltinPolicies(BUILTIN_POLICIES);
