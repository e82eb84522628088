import { describeKnobRange, formatKnobValue, listPolicies, type Knob } from "@gmlake/stitch";
import type { Command } from "../command.js";
import { checkPolicy, POLICY_MODULE_OPTION, usePolicyModules } from "../options.js";
import { printText } from "../outputs.js";
import { fillWords, words, wrap } from "../table.js";

export interface PoliciesJson {
  policies: {
    name: string;
    description: string;
    knobs: { name: string; type: Knob["type"]; default: unknown; shown: string; accepts: string; unit?: string; description: string }[];
  }[];
}

export const policiesCommand: Command = {
  name: "policies",
  summary: "list the allocator policies and their knobs (type, default, what each accepts)",
  positionals: "optional-many",
  options: { json: { type: "boolean" }, ...POLICY_MODULE_OPTION },
  help: `Usage: gmlake policies [name...] [--json] [--policy-module PATH|PACKAGE ...]

Lists the registered allocator policies (the built-ins and those of --policy-module) and
every knob each one takes with --set: its type, default, the values it accepts and what
it does. With names: only those policies.

Options:
  --json    {policies: [{name, description, knobs: [{name, type, default, shown (as
            --set writes it), accepts, unit, description}]}]}

Examples:
  gmlake policies
  gmlake policies gmlake vms`,
  async run(values, positionals) {
    await usePolicyModules(values["policy-module"]);
    const names = positionals.length ? positionals.map(checkPolicy) : null;
    const list = listPolicies().filter((p) => names === null || names.includes(p.name));
    const out: PoliciesJson = {
      policies: list.map((p) => ({
        name: p.name,
        description: p.description,
        knobs: Object.entries(p.knobs as Record<string, Knob>).map(([name, k]) => ({
          name,
          type: k.type,
          default: k.default,
          shown: formatKnobValue(k, k.default),
          accepts: describeKnobRange(k),
          ...(k.unit ? { unit: k.unit } : {}),
          description: k.description,
        })),
      })),
    };
    if (values.json) {
      process.stdout.write(JSON.stringify(out) + "\n");
      return;
    }
    const lines: string[] = [];
    for (const p of out.policies) {
      lines.push(wrap(`${p.name}: ${p.description}`));
      if (p.knobs.length === 0) lines.push("  (no knobs)");
      for (const k of p.knobs) {
        lines.push(`  --set ${k.name}=${k.shown}`);
        lines.push(fillWords("      ", words(k.description)));
        lines.push(fillWords("      ", words(`accepts ${k.accepts}`)));
      }
      lines.push("");
    }
    printText(lines.join("\n"));
  },
};
