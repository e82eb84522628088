import { recordedBy } from "@gmlake/torch-trace";
import { wrap } from "../table.js";
import { verify, type VerifyResult } from "@gmlake/stitch";
import { EXIT_MISMATCH } from "../cli-error.js";
import type { Command } from "../command.js";
import { loadTrace } from "../load-trace.js";
import { asUsage, checkPolicy, POLICY_MODULE_OPTION, usePolicyModules } from "../options.js";
import { formatBytes } from "../sizes.js";
import { printJson, printText } from "../outputs.js";

export interface VerifyJson {
  trace: string;
  /** What made the trace: "PyTorch caching", "PyTorch expandable", "gmlake vms, live". */
  recordedBy: string;
  policy: string;
  recordedSegments: number;
  replayedSegments: number;
  firstMismatch: VerifyResult["firstMismatch"];
  allocsCompared: number;
  firstAllocMismatch: VerifyResult["firstAllocMismatch"];
  recordedPeakReservedBytes: number;
  replayedPeakReservedBytes: number;
  /** Segment decisions and peak reserved equal the recording's. */
  decisionsMatch: boolean;
  /** decisionsMatch and every allocation at the recorded place (with --free: the verdict is decisionsMatch). */
  match: boolean;
}

export const verifyCommand: Command = {
  name: "verify",
  summary: "check that our model of PyTorch's allocator makes the decisions PyTorch recorded",
  positionals: "optional-many",
  options: { json: { type: "boolean" }, policy: { type: "string", short: "p" }, free: { type: "boolean" }, ...POLICY_MODULE_OPTION },
  help: `Usage: gmlake verify [trace...] [--json] [--policy caching|expandable] [--free]

Replays each trace with the model of the allocator that recorded it (expandable when
its allocator_settings say expandable_segments, else caching) and compares the model's
segment decisions (cudaMalloc/cudaFree sizes, or expandable map/unmap ranges) with the
segment events PyTorch recorded, event for event, and the peak reserved. Every replayed
allocation is also checked to land at the address PyTorch gave it.

Options:
  --json     one JSON object per trace: trace, policy, recordedSegments,
             replayedSegments, firstMismatch (null or {index, recorded, replayed}),
             allocsCompared, firstAllocMismatch, recordedPeakReservedBytes,
             replayedPeakReservedBytes, decisionsMatch, match
  --policy   force the model (default: from the trace's settings)
  --free     free-running, as replay and compare run: caching gets the sim's model of
             cudaMalloc's placement instead of the recorded addresses, addresses are
             compared as (segment, offset), and the verdict is the segment decisions
             and peak reserved (decisionsMatch); allocations whose place differs are
             reported
  --policy-module PATH|PACKAGE  load a policy module first (a model of your own to verify)

Exit status: 0 when every trace matches, 1 when one does not (as diff: a CI job can
gate on it), 2 on bad input.

Example:
  gmlake verify ../shared/traces/gpt2_ft*.pickle.gz   # every gpt2_ft recording`,
  async run(values, positionals) {
    const paths = positionals.length ? positionals : [undefined];
    await usePolicyModules(values["policy-module"]);
    const policy = values.policy === undefined ? undefined : checkPolicy(String(values.policy));
    let mismatches = 0;
    for (const p of paths) {
      const t = await loadTrace(p);
      // A snapshot our engine wrote live is checked against the policy that made it, not PyTorch's models.
      const by = recordedBy(t.snapshot.allocatorSettings);
      const model = policy ?? (by.allocator === "gmlake" ? checkPolicy(by.mode) : undefined);
      const r = asUsage(() => verify(t.snapshot, { policy: model, addressOracle: values.free !== true }));
      const out: VerifyJson = {
        trace: t.name,
        recordedBy: by.name,
        policy: r.policy,
        recordedSegments: r.recordedSegments,
        replayedSegments: r.replayedSegments,
        firstMismatch: r.firstMismatch,
        allocsCompared: r.allocsCompared,
        firstAllocMismatch: r.firstAllocMismatch,
        recordedPeakReservedBytes: r.recordedPeakReservedBytes,
        replayedPeakReservedBytes: r.replayedPeakReservedBytes,
        decisionsMatch: r.decisionsMatch,
        match: r.match,
      };
      // Free-running, the verdict is the decisions: where best-fit ties break otherwise is reported, not failed.
      const ok = values.free ? r.decisionsMatch : r.match;
      if (!ok) mismatches++;
      if (values.json) {
        printJson(out);
        continue;
      }
      const lines = [
        wrap(`${t.name} (recorded by ${by.name}; ${r.policy} model${values.free ? ", free-running" : ""}): ${ok ? "MATCH" : "MISMATCH"}`),
        `  segment events  recorded ${r.recordedSegments}, replayed ${r.replayedSegments}`,
        `  peak reserved   recorded ${formatBytes(r.recordedPeakReservedBytes)}, replayed ${formatBytes(r.replayedPeakReservedBytes)}`,
        `  block addresses ${r.firstAllocMismatch ? `first differs at event ${r.firstAllocMismatch.eventIndex}` : `all ${r.allocsCompared} allocations at the recorded ${values.free ? "(segment, offset)" : "address"}`}`,
      ];
      if (r.firstMismatch) {
        const f = r.firstMismatch;
        const show = (e: typeof f.recorded) => (e ? `${e.kind} ${e.size} B` : "nothing");
        lines.push(`  first mismatch  segment event #${f.index}: recorded ${show(f.recorded)}, replayed ${show(f.replayed)}`);
      }
      printText(lines.join("\n"));
    }
    return mismatches > 0 ? EXIT_MISMATCH : 0;
  },
};
