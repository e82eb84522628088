import type { Command } from "../command.js";
import { compareCommand } from "./compare.js";
import { doctor } from "./doctor.js";
import { explainCommand } from "./explain.js";
import { inspect } from "./inspect.js";
import { policiesCommand } from "./policies.js";
import { replayCommand } from "./replay.js";
import { verifyCommand } from "./verify.js";

export const COMMANDS: readonly Command[] = [compareCommand, explainCommand, inspect, replayCommand, verifyCommand, policiesCommand, doctor];
