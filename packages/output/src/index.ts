export {
  OutputError,
  OUTPUT_EXISTS,
  OUTPUT_IS_INPUT,
  OUTPUT_NOT_A_DIRECTORY,
  OUTPUT_NOT_A_FILE,
  OUTPUT_TWICE,
  describeErrno,
  errnoCode,
  type OutputErrorKind,
} from "./output-error.js";
export {
  checkOutputDir,
  checkOutputFile,
  checkOutputs,
  removeStaleTemps,
  writeOutputFile,
  writeOutputFiles,
  type OutputCheckOptions,
  type OutputTarget,
} from "./output-file.js";
export { writeFd, writeStdout } from "./stdout.js";
export { terminalSafe, terminalSafeJson } from "./terminal-text.js";
