import { EventKind } from "../src/event-kind.js";
import { EventLog } from "../src/event-log.js";

type Row = [kind: EventKind, addr: number, size: number, timeUs: number, stream?: number, device?: number, aux?: number];

/** An EventLog from rows [kind, addr, size, timeUs, rawStream = 0, device = 0, aux = 0]. */
export function logOf(rows: Row[]): EventLog {
  const log = new EventLog(4);
  for (const [kind, addr, size, t, stream = 0, device = 0, aux = 0] of rows) log.push(kind, addr, size, log.streamId(stream), device, t, aux);
  return log;
}

export const K = EventKind;
export const MiB = 2 ** 20;
