import type { Policy } from "../src/index.js";

/** examples/my-policy (the README's "Writing a policy"), imported as a user's package would be. */
const path: string = "../examples/my-policy/my-policy.js";
export const freshChunks = ((await import(path)) as { default: Policy }).default;
