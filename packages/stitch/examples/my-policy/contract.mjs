import { runPolicyContract } from "@gmlake/stitch/testing";
import policy from "./my-policy.js";

const report = runPolicyContract(policy, { drivers: ["sim", "host"] }); // throws on a violation
console.log(`${report.policy}: ${report.checks.length} contract checks passed`);
