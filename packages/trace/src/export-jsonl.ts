import { EVENT_KIND_NAMES, type EventKind } from "./event-kind.js";
import { EventLog } from "./event-log.js";
import { TraceFormatError } from "./trace-format-error.js";

/** One event per line: {"kind","addr","size","stream"(raw),"device","timeUs","aux"}. */
export function* jsonLines(log: EventLog): Generator<string> {
  for (let i = 0; i < log.length; i++) {
    yield `{"kind":"${EVENT_KIND_NAMES[log.kind[i]] ?? log.kind[i]}","addr":${log.addr[i]},"size":${log.size[i]},"stream":${log.streams[log.stream[i]] ?? 0},"device":${log.device[i]},"timeUs":${log.timeUs[i]},"aux":${log.aux[i]}}`;
  }
}

/** The whole log as JSON lines (newline-terminated). For big logs iterate jsonLines(). */
export function toJsonLines(log: EventLog): string {
  let out = "";
  for (const line of jsonLines(log)) out += line + "\n";
  return out;
}

const KIND_OF = new Map<string, number>(EVENT_KIND_NAMES.map((n, i) => [n, i]));

/** Reads what toJsonLines wrote (blank lines skipped). */
export function parseJsonLines(text: string, source = "<jsonl>"): EventLog {
  const lines = text.split("\n");
  const log = new EventLog(lines.length);
  const num = (o: Record<string, unknown>, k: string, line: number, required: boolean): number => {
    const v = o[k];
    if (typeof v === "number" && Number.isFinite(v)) return v;
    if (v === undefined && !required) return 0;
    throw new TraceFormatError("BAD_VALUE", source, line, `"${k}" is ${v === undefined ? "missing" : JSON.stringify(v)}, expected a number`);
  };
  for (let i = 0; i < lines.length; i++) {
    const text = lines[i].trim();
    if (text === "") continue;
    let o: unknown;
    try {
      o = JSON.parse(text);
    } catch (e) {
      throw new TraceFormatError("BAD_LINE", source, i + 1, `not JSON (${(e as Error).message})`);
    }
    if (typeof o !== "object" || o === null || Array.isArray(o)) throw new TraceFormatError("BAD_LINE", source, i + 1, "not a JSON object");
    const rec = o as Record<string, unknown>;
    const kind = typeof rec.kind === "string" ? KIND_OF.get(rec.kind) : undefined;
    if (kind === undefined) throw new TraceFormatError("BAD_VALUE", source, i + 1, `unknown kind ${JSON.stringify(rec.kind)}`);
    const device = num(rec, "device", i + 1, false);
    if (!Number.isInteger(device) || device < 0 || device > 255) throw new TraceFormatError("BAD_VALUE", source, i + 1, `device ${device} is not 0..255`);
    log.push(kind as EventKind, num(rec, "addr", i + 1, true), num(rec, "size", i + 1, true), log.streamId(num(rec, "stream", i + 1, false)), device, num(rec, "timeUs", i + 1, false), num(rec, "aux", i + 1, false));
  }
  return log;
}
