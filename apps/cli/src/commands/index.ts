import type { Command } from "../command.js";
import { compareCommand } from "./compare.js";
import { doctor } from "./doctor.js";
import { inspect } from "./inspect.js";
import { replayCommand } from "./replay.js";
import { verifyCommand } from "./verify.js";

export const COMMANDS: readonly Command[] = [compareCommand, inspect, replayCommand, verifyCommand, doctor];
