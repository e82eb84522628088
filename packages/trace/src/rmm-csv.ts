import { EventKind } from "./event-kind.js";
import { EventLog } from "./event-log.js";
import { TraceFormatError } from "./trace-format-error.js";

export const RMM_CSV_HEADER = "Thread,Time,Action,Pointer,Size,Stream";
const DAY_US = 86_400_000_000;

/** RMM's logging_resource_adaptor time: HH:MM:SS:ffffff (µs of the day, UTC). */
function rmmTime(us: number): string {
  const t = ((Math.floor(us) % DAY_US) + DAY_US) % DAY_US;
  const p = (n: number, w: number): string => String(n).padStart(w, "0");
  return `${p(Math.floor(t / 3_600_000_000), 2)}:${p(Math.floor(t / 60_000_000) % 60, 2)}:${p(Math.floor(t / 1_000_000) % 60, 2)}:${p(t % 1_000_000, 6)}`;
}

/**
 * The replay log of RMM's REPLAY_BENCHMARK (`Thread,Time,Action,Pointer,Size,Stream`): allocs
 * become `allocate`, completed frees `free`, ooms `allocate failure` (pointer 0x0); other
 * events have no RMM counterpart and are left out. Thread is the device index, Stream the
 * raw stream value.
 */
export function toRmmCsv(log: EventLog): string {
  const rows: string[] = [RMM_CSV_HEADER];
  for (let i = 0; i < log.length; i++) {
    const k = log.kind[i];
    let action: string;
    if (k === EventKind.alloc) action = "allocate";
    else if (k === EventKind.freeCompleted) action = "free";
    else if (k === EventKind.oom) action = "allocate failure";
    else continue;
    const ptr = k === EventKind.oom ? "0x0" : `0x${log.addr[i].toString(16)}`;
    rows.push(`${log.device[i]},${rmmTime(log.timeUs[i])},${action},${ptr},${log.size[i]},${log.streams[log.stream[i]] ?? 0}`);
  }
  return rows.join("\n") + "\n";
}

/**
 * Reads an RMM replay CSV into an EventLog (alloc / freeCompleted / oom). Times are µs of
 * the day; a time earlier than the previous one by more than 12 h is taken as the next day.
 */
export function parseRmmCsv(text: string, source = "<rmm csv>"): EventLog {
  const lines = text.split(/\r?\n/);
  const header = lines[0]?.trim().split(",").map((s) => s.trim()) ?? [];
  const col = (name: string): number => {
    const i = header.indexOf(name);
    if (i < 0) throw new TraceFormatError("BAD_HEADER", source, 1, `missing column ${name} (expected ${RMM_CSV_HEADER})`);
    return i;
  };
  const cThread = col("Thread"), cTime = col("Time"), cAction = col("Action"), cPtr = col("Pointer"), cSize = col("Size"), cStream = col("Stream");
  const log = new EventLog(lines.length);
  let dayOffset = 0;
  let prev = -1;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i].trim();
    if (line === "") continue;
    const f = line.split(",");
    const bad = (what: string): never => {
      throw new TraceFormatError("BAD_VALUE", source, i + 1, what);
    };
    if (f.length < header.length) throw new TraceFormatError("BAD_LINE", source, i + 1, `${f.length} fields, expected ${header.length}`);
    const thread = Number(f[cThread]);
    if (!Number.isInteger(thread) || thread < 0) bad(`bad Thread ${JSON.stringify(f[cThread])}`);
    const tm = /^(\d+):(\d+):(\d+):(\d+)$/.exec(f[cTime].trim());
    if (tm === null) bad(`bad Time ${JSON.stringify(f[cTime])} (expected HH:MM:SS:ffffff)`);
    const m = tm as RegExpExecArray;
    let t = ((Number(m[1]) * 60 + Number(m[2])) * 60 + Number(m[3])) * 1_000_000 + Number(m[4]);
    if (prev >= 0 && t + dayOffset < prev - DAY_US / 2) dayOffset += DAY_US;
    t += dayOffset;
    prev = t;
    const ptrText = f[cPtr].trim();
    if (!/^(0x)?[0-9a-fA-F]+$/.test(ptrText)) bad(`bad Pointer ${JSON.stringify(ptrText)}`);
    const ptr = parseInt(ptrText.replace(/^0x/, ""), 16);
    const size = Number(f[cSize]);
    if (!Number.isInteger(size) || size < 0) bad(`bad Size ${JSON.stringify(f[cSize])}`);
    const stream = Number(f[cStream]);
    if (!Number.isFinite(stream)) bad(`bad Stream ${JSON.stringify(f[cStream])}`);
    const action = f[cAction].trim();
    let kind: EventKind;
    if (action === "allocate") kind = EventKind.alloc;
    else if (action === "free") kind = EventKind.freeCompleted;
    else if (action === "allocate failure") kind = EventKind.oom;
    else return bad(`unknown Action ${JSON.stringify(action)}`);
    if (thread > 255) bad(`Thread ${thread} is used as the device index and must be 0..255`);
    log.push(kind, kind === EventKind.oom ? 0 : ptr, size, log.streamId(stream), thread, t);
  }
  return log;
}
