import { recordedBy, type RecordedBy } from "@gmlake/torch-trace";
import { computeStats } from "@gmlake/trace";
import { privatePoolTags, replay } from "@gmlake/stitch";
import { SimDriver } from "@gmlake/vmm";
import type { Command } from "../command.js";
import { loadTrace } from "../load-trace.js";
import { asUsage } from "../options.js";
import { formatBytes } from "../sizes.js";
import { field, wrap } from "../table.js";
import { printJson, printText } from "../outputs.js";

export interface InspectJson {
  trace: string;
  /** What made it: PyTorch's allocator (its mode) or the stitching engine live (its policy). */
  recordedBy: RecordedBy;
  events: number;
  allocs: number;
  frees: number;
  streams: number;
  devices: number[];
  durationUs: number;
  peakRequestedBytes: number;
  peakAllocatedBytes: number;
  recordedPeakReservedBytes: number;
  recordedUtilization: number;
  segmentEvents: Record<string, number>;
  ooms: number;
  allocatorSettings: Record<string, unknown>;
  reconstructed: { missingAllocs: number; liveFromSegments: number; missingSegments: number; syntheticEvents: number };
  unknownActions: Record<string, number>;
  pickleProtocol: number;
  gzip: boolean;
}

export const inspect: Command = {
  name: "inspect",
  summary: "read a PyTorch memory snapshot and summarize it",
  positionals: "optional-many",
  options: { json: { type: "boolean" } },
  help: `Usage: gmlake inspect [trace] [--json]

Reads a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot; gzip or plain) and
prints what it holds: events, streams, devices, peak requested (the requested bytes of
live blocks: the trace's own figure), peak allocated (PyTorch's max_memory_allocated,
which counts block sizes: found by replaying the exact model of the allocator that
recorded the trace), recorded peak reserved (max_memory_reserved, from the segment
events) and utilization (peak requested / peak reserved), and the recorded allocator
settings. Without a trace: the embedded default.

Options:
  --json    one JSON object: events, allocs, frees, streams, devices, durationUs,
            peakRequestedBytes, peakAllocatedBytes, recordedPeakReservedBytes,
            recordedUtilization, segmentEvents, ooms, allocatorSettings (camelCase,
            bytes as integers), reconstructed, unknownActions, pickleProtocol, gzip

Example:
  gmlake inspect ../shared/traces/gpt2_ft.pickle.gz --json`,
  async run(values, positionals) {
    if (positionals.length > 1) {
      for (const p of positionals) await inspect.run(values, [p]);
      return;
    }
    const t = await loadTrace(positionals[0]);
    const s = t.snapshot;
    const st = computeStats(s.events, { roundupPower2Divisions: s.allocatorSettings.roundupPower2Divisions });
    const k = st.countsByKind;
    const { raw: _raw, ...settings } = s.allocatorSettings;
    // PyTorch's max_memory_allocated counts block sizes (an unsplit remainder too), which
    // only the allocator knows: replay the exact model of the allocator that recorded it.
    const model = s.allocatorSettings.expandableSegments ? "expandable" : "caching";
    const m = asUsage(() =>
      replay(s.events, {
        policy: model,
        driver: new SimDriver(),
        settings: s.allocatorSettings,
        recorder: null,
        onOom: "continue",
        pools: privatePoolTags(s.events, s.segments),
      }),
    ); // a malformed event stream (BAD_TRACE) is bad input: exit 2
    const out: InspectJson = {
      trace: t.name,
      recordedBy: recordedBy(s.allocatorSettings),
      events: s.events.length,
      allocs: k.alloc ?? 0,
      frees: k.freeCompleted ?? 0,
      streams: st.countsByStream.length,
      devices: st.devices,
      durationUs: st.lastTimeUs - st.firstTimeUs,
      peakRequestedBytes: st.peakRequestedBytes,
      peakAllocatedBytes: m.peakAllocatedBytes,
      recordedPeakReservedBytes: st.peakReservedBytes,
      recordedUtilization: st.peakReservedBytes > 0 ? st.peakRequestedBytes / st.peakReservedBytes : 1,
      segmentEvents: {
        segmentAlloc: k.segmentAlloc ?? 0,
        segmentFree: k.segmentFree ?? 0,
        segmentMap: k.segmentMap ?? 0,
        segmentUnmap: k.segmentUnmap ?? 0,
      },
      ooms: k.oom ?? 0,
      allocatorSettings: settings,
      reconstructed: {
        missingAllocs: s.reconstructed.missingAllocs,
        liveFromSegments: s.reconstructed.liveFromSegments,
        missingSegments: s.reconstructed.missingSegments,
        syntheticEvents: s.reconstructed.syntheticEvents,
      },
      unknownActions: s.unknownActions,
      pickleProtocol: s.protocol,
      gzip: s.gzip,
    };
    if (values.json) {
      printJson(out);
      return;
    }
    const by = out.recordedBy;
    const seg = out.segmentEvents;
    // segments but no history (recorded without _record_memory_history): no peak to speak of
    const noHistory = out.events === out.reconstructed.syntheticEvents && s.segments.length > 0;
    const lines = [
      wrap(`${t.name}: ${out.events.toLocaleString("en-US")} events over ${(out.durationUs / 1e6).toFixed(2)} s, ${out.allocs.toLocaleString("en-US")} allocations, ${out.streams} stream(s), device(s) ${out.devices.join(", ") || "none"}`),
      field("recorded with", by.label),
      field("peak requested", `${formatBytes(out.peakRequestedBytes)} (${formatBytes(out.peakAllocatedBytes)} allocated as PyTorch counts blocks)`),
      field("peak reserved", `${formatBytes(out.recordedPeakReservedBytes)} (recorded by ${by.who})`),
      noHistory
        ? field("warning", "segments but no allocation history (recorded without _record_memory_history): no utilization to give")
        : field("utilization", `${out.recordedUtilization.toFixed(3)}  (fragmentation ${(100 * (1 - out.recordedUtilization)).toFixed(1)}%)`),
      field("segment events", `${seg.segmentAlloc} alloc, ${seg.segmentFree} free, ${seg.segmentMap} map, ${seg.segmentUnmap} unmap; ${out.ooms} out-of-memory`),
    ];
    const r = out.reconstructed;
    if (r.syntheticEvents > 0) {
      lines.push(field("reconstructed", `${r.missingAllocs} allocs missing from the ring buffer, ${r.liveFromSegments} live blocks from segments`));
    }
    const unknown = Object.entries(out.unknownActions);
    if (unknown.length) lines.push(field("skipped actions", unknown.map(([a, n]) => `${a} x${n}`).join(", ")));
    printText(lines.join("\n"));
  },
};
