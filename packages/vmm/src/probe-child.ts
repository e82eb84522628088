/** Entry point of probeCuda()'s child process: prints the in-process probe as JSON. Also usable by hand: `node dist/probe-child.js`. */
import { probeCudaInProcess } from "./probe.js";

process.stdout.write(`${JSON.stringify(probeCudaInProcess(!process.argv.includes("--no-mem-info")))}\n`);
