import { EventKind } from "./event-kind.js";
import type { EventLog } from "./event-log.js";
import type { StackFrame } from "./stack-frame.js";

/** Where memory was allocated: one frame of the stack, and what is live from it. */
export interface AllocationSite {
  /** "file.py:123 in fn", or "(no stack recorded)". */
  label: string;
  /** The frame the site is named after (null for blocks without a stack). */
  frame: StackFrame | null;
  /** Requested bytes of the blocks live from this site. */
  bytes: number;
  blocks: number;
  /** The stack of the site's largest live block, innermost first (at most 12 frames). */
  stack: StackFrame[];
}

export interface SitesAtPeak {
  /** The event after which the requested bytes of live blocks peaked (-1: no allocation). */
  eventIndex: number;
  timeUs: number;
  /** Requested bytes live there (the trace's peak; the same for every allocator). */
  peakRequestedBytes: number;
  /** Sites by bytes, largest first (at most `top`). */
  sites: AllocationSite[];
  /** Sites in all, and bytes of the live blocks that had no stack. */
  totalSites: number;
  bytesWithoutStack: number;
}

/**
 * Frames of PyTorch itself (a torch/ package in site-packages, not any path that
 * happens to contain "torch/", such as a venv in /opt/torch), Triton and the
 * interpreter: a site is named after the
 * innermost frame that is none of these (the model's or the user's code), so that
 * `torch/nn/modules/linear.py` does not absorb every Linear layer of a model.
 */
const LIBRARY_FRAME = /(^|\/(site|dist)-packages\/)(torch|triton|functorch)\/|^<|\.(cpp|cc|cu|h|hpp)$|^\?\?$/;

/** The frame a stack is attributed to: its innermost frame outside PyTorch's own code, else its innermost. */
export function siteFrame(stack: readonly StackFrame[] | undefined): StackFrame | null {
  if (!stack || stack.length === 0) return null;
  for (const f of stack) if (!LIBRARY_FRAME.test(f.filename)) return f;
  return stack[0]!;
}

export function siteLabel(f: StackFrame | null): string {
  return f === null ? "(no stack recorded)" : `${f.filename}:${f.line} in ${f.name}`;
}

/**
 * The allocation sites holding the most memory at the trace's peak: the moment the
 * requested bytes of live blocks (alloc .. free_completed) peaked, each live block's
 * stack attributed to its site (siteFrame), summed per site. Needs the stacks: a snapshot
 * recorded with `_record_memory_history(context="all", stacks="python")` and read with
 * frames. With several devices, the peak of the devices' sum.
 */
export function sitesAtPeak(log: EventLog, frames: readonly (readonly StackFrame[] | undefined)[], top = 10): SitesAtPeak {
  const { kind, addr, size, device } = log;
  const live = new Map<string, number>(); // device:addr -> alloc row
  const key = (i: number) => `${device[i]}:${addr[i]}`;
  let requested = 0;
  let peak = 0;
  let peakIndex = -1;
  for (let i = 0; i < log.length; i++) {
    const k = kind[i];
    if (k === EventKind.alloc) {
      const prev = live.get(key(i));
      if (prev !== undefined) requested -= size[prev]!;
      live.set(key(i), i);
      requested += size[i]!;
      if (requested > peak) {
        peak = requested;
        peakIndex = i;
      }
    } else if (k === EventKind.freeCompleted) {
      const prev = live.get(key(i));
      if (prev !== undefined) {
        requested -= size[prev]!;
        live.delete(key(i));
      }
    }
  }
  // The blocks live just after the peak event: replay up to it.
  const at = new Map<string, number>();
  for (let i = 0; i <= peakIndex; i++) {
    const k = kind[i];
    if (k === EventKind.alloc) at.set(key(i), i);
    else if (k === EventKind.freeCompleted) at.delete(key(i));
  }
  const bySite = new Map<string, AllocationSite & { largest: number }>();
  let withoutStack = 0;
  for (const row of at.values()) {
    const stack = frames[row];
    const f = siteFrame(stack);
    if (f === null) withoutStack += size[row]!;
    const label = siteLabel(f);
    let s = bySite.get(label);
    if (s === undefined) {
      s = { label, frame: f, bytes: 0, blocks: 0, stack: [], largest: -1 };
      bySite.set(label, s);
    }
    s.bytes += size[row]!;
    s.blocks++;
    if (size[row]! > s.largest) {
      s.largest = size[row]!;
      s.stack = (stack ?? []).slice(0, 12).map((x) => ({ name: x.name, filename: x.filename, line: x.line }));
    }
  }
  const sites = [...bySite.values()]
    .sort((a, b) => b.bytes - a.bytes || a.label.localeCompare(b.label))
    .map(({ largest: _l, ...s }) => s);
  return {
    eventIndex: peakIndex,
    timeUs: peakIndex >= 0 ? log.timeUs[peakIndex]! : 0,
    peakRequestedBytes: peak,
    sites: sites.slice(0, top),
    totalSites: sites.length,
    bytesWithoutStack: withoutStack,
  };
}
