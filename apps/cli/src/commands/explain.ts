import { UsageError } from "../cli-error.js";
import type { Command } from "../command.js";
import { loadTrace } from "../load-trace.js";
import { memoryAnswers, sitesText, summaryText } from "../memory-answers.js";
import { parsePolicies, parseSets } from "../options.js";
import { printJson, printText } from "../outputs.js";
import { DEFAULT_POLICIES, defaultPolicies, knobsFor } from "../policy-knobs.js";


export const explainCommand: Command = {
  name: "explain",
  summary: "what holds the memory at the peak: allocation sites, and each allocator's memory_summary there",
  positionals: "optional-many",
  options: {
    policies: { type: "string", short: "p" },
    top: { type: "string" },
    set: { type: "string", multiple: true },
    json: { type: "boolean" },
  },
  help: `Usage: gmlake explain [trace...] [--policies caching,expandable,gmlake,vms] [--top 10]
                      [--set key=value ...] [--json]

What holds the memory. First the allocation sites holding the most at the trace's peak
(the moment the requested bytes of live blocks peak; the same for every allocator): each
live block's stack is attributed to its innermost frame outside PyTorch itself (the
model's or your code), summed per site. Stacks need a trace recorded with
torch.cuda.memory._record_memory_history(context="all", stacks="python").

Then, per allocator, its memory at its own peak reserved, at the tightest moment (reserved
at its peak with the most bytes requested), in torch.cuda.memory_summary()'s names: GPU
reserved memory, allocated, active, requested, non-releasable (inactive split: free bytes
in segments or handles that also hold a live block), releasable cached bytes, large and
small pool (blocks <= 1 MiB are small, as in PyTorch), allocations, segments, allocator
retries and OOMs over the run; and the free pieces stranded there, by size (a piece: a
run of free bytes in one segment or one physical handle). Sim driver.

Options:
  --policies, -p  comma-separated policy names (default: ${DEFAULT_POLICIES.join(",")})
  --top N         sites to list (default 10)
  --set k=v       a knob passed to every policy that has it
  --json          one object per trace: {trace, hasStacks, sites: {eventIndex, timeUs,
                  peakRequestedBytes, sites: [{label, frame, bytes, blocks, stack}],
                  totalSites, bytesWithoutStack}, policies: [{policy, peakReservedBytes,
                  peakAllocatedBytes, peakActiveBytes, peakRequestedBytes, atPeak,
                  wasteAtPeakBytes, numAllocRetries, numOoms}]} (see apps/cli/README.md)

Example:
  gmlake explain ../shared/traces/gpt2_ft_stacks.pickle.gz --top 5`,
  async run(values, positionals) {
    const policies = parsePolicies(values.policies, defaultPolicies());
    const top = values.top === undefined ? 10 : Number(values.top);
    if (!Number.isInteger(top) || top < 1 || top > 1000) throw new UsageError(`invalid --top '${String(values.top)}': expected a whole number from 1 to 1000`);
    const knobs = knobsFor(policies, parseSets(values.set));
    const paths = positionals.length ? positionals : [undefined];
    for (const p of paths) {
      const t = await loadTrace(p, { frames: true });
      const a = memoryAnswers(t, policies, knobs, top);
      if (values.json) {
        printJson(a);
        continue;
      }
      printText(`${sitesText(a)}\n\n${summaryText(a)}`);
    }
  },
};
