// The fuzz target: bytes -> the snapshot reader -> (when it reads) a replay of its events
// through a policy on the simulated driver, as `gmlake replay` does. Bad input must end
// in a SnapshotError (reader) or a StitchError BAD_TRACE (replay refusing an event
// stream); anything else thrown is a finding.
const { readSnapshotBytes, SnapshotError } = await import("@gmlake/torch-trace");
const { privatePoolTags, replay } = await import("@gmlake/stitch");
const { SimDriver } = await import("@gmlake/vmm");

const POLICIES = ["caching", "expandable", "gmlake", "vms"];
/** Replays only small logs: the point is the paths, not the length. */
const MAX_REPLAY_EVENTS = 4000;

export function isExpected(e) {
  return e instanceof SnapshotError || (e instanceof Error && e.code === "BAD_TRACE");
}

export function fuzzOne(data) {
  let snap;
  try {
    snap = readSnapshotBytes(data, { name: "fuzz" });
  } catch (e) {
    if (e instanceof SnapshotError) {
      if (e.message.includes("\n")) throw new Error(`a SnapshotError message of more than one line: ${JSON.stringify(e.message.slice(0, 200))}`);
      return;
    }
    throw e;
  }
  if (snap.events.length === 0 || snap.events.length > MAX_REPLAY_EVENTS) return;
  const policy = POLICIES[data.length % POLICIES.length];
  const driver = new SimDriver();
  try {
    replay(snap.events, { policy, driver, settings: snap.allocatorSettings, recorder: null, onOom: "continue", pools: privatePoolTags(snap.events, snap.segments) });
  } catch (e) {
    if (!isExpected(e)) throw e;
  } finally {
    driver.close?.();
  }
}
