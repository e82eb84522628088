import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { getPolicy, replay } from "@gmlake/stitch";
import { runPolicyContract } from "@gmlake/stitch/testing"; // as a user imports them: the example is built against dist
import { SimDriver } from "@gmlake/vmm";
import { EventKind, EventLog } from "@gmlake/trace";

// examples/typescript/own-segments.ts is in tsconfig.test.json: `pnpm typecheck` (CI) compiles it.
const EXAMPLE = new URL("../examples/typescript/own-segments.ts", import.meta.url);

describe("the README's TypeScript policy (examples/typescript/own-segments.ts)", () => {
  it("is the README's ```ts block, word for word", () => {
    const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
    const section = readme.slice(readme.indexOf("## Writing a policy in TypeScript"));
    const block = /```ts\n([\s\S]*?)```/.exec(section);
    expect(block?.[1]).toBe(readFileSync(EXAMPLE, "utf8"));
  });

  it("registers with an interface for its knobs, passes the contract suite and replays", async () => {
    const policy = (await import("../examples/typescript/own-segments.js")).default;
    expect(getPolicy("own-segments")).toBe(policy);
    expect(runPolicyContract(policy, { drivers: ["sim"] }).checks.length).toBeGreaterThan(0);
    const log = new EventLog();
    log.streamId(0);
    log.push(EventKind.alloc, 1, 1000, 0, 0, 0);
    log.push(EventKind.freeRequested, 1, 1000, 0, 0, 1);
    log.push(EventKind.freeCompleted, 1, 1000, 0, 0, 2);
    const r = replay(log, { policy: "own-segments", driver: new SimDriver(), options: { slackBytes: "1KiB" } });
    expect(r.peakReservedBytes).toBe(1024 + 1024);
  });
});
