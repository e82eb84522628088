/**
 * Output files, checked before the work and written atomically.
 *
 * checkOutputFile() runs before a command does anything expensive and refuses, as a
 * "path" OutputError: a path that is one of the inputs (same device and inode, so links
 * count), an existing regular file without `force`, a directory, a parent directory that
 * is missing or not writable, and the same output given twice (checkOutputs).
 *
 * writeOutputFile() writes to a temporary file in the target's own directory (same file
 * system, so rename is atomic), fsyncs it and moves it into place: rename with `force`,
 * else link (which fails if the name appeared meanwhile: no silent clobbering even in a
 * race). On any failure the temporary file is removed, so a full disk never leaves a
 * partial file under the final name; one a killed writer left is removed by the next
 * write into that folder (removeStaleTemps). An existing non-regular target (/dev/stdout,
 * a FIFO, /dev/full) is written in place: renaming over a device node would replace it.
 */
import {
  accessSync,
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  realpathSync,
  renameSync,
  statSync,
  statfsSync,
  unlinkSync,
  type Stats,
} from "node:fs";
import { hostname } from "node:os";
import { basename, dirname, join, resolve } from "node:path";

import {
  OUTPUT_EXISTS,
  OUTPUT_IS_INPUT,
  OUTPUT_NOT_A_DIRECTORY,
  OUTPUT_NOT_A_FILE,
  OUTPUT_TWICE,
  OutputError,
  describeErrno,
  errnoCode,
  writeError,
} from "./output-error.js";
import { writeFd } from "./stdout.js";
import { terminalSafe } from "./terminal-text.js";

export interface OutputCheckOptions {
  /** Replace an existing regular file (the CLI's --force). */
  readonly force?: boolean;
  /** Paths the command reads: the output may be none of them. */
  readonly inputs?: readonly (string | undefined)[];
  /** The option that named the path, for messages ("--plot"). */
  readonly option?: string;
}

/** A checked output path: write it with writeOutputFile. */
export interface OutputTarget {
  /** As the user gave it (for messages). */
  readonly path: string;
  /** The file really written (symbolic links followed). */
  readonly file: string;
  /** Written in place (an existing device, FIFO or socket), not via a temporary file. */
  readonly inPlace: boolean;
  readonly force: boolean;
}

function statOrNull(path: string, follow = true): Stats | null {
  try {
    return follow ? statSync(path) : lstatSync(path);
  } catch (e) {
    if (errnoCode(e) === "ENOENT") return null;
    throw e;
  }
}

function pathError(code: string, path: string, option: string | undefined, why: string): OutputError {
  return new OutputError("path", code, path, `${option ? `${option} ` : ""}${terminalSafe(path)}: ${why}`);
}

/** The target a path names: a dangling or live symbolic link is followed to its target. */
function realTarget(path: string): string {
  const abs = resolve(path);
  const l = statOrNull(abs, false);
  if (l?.isSymbolicLink()) {
    try {
      return realpathSync(abs);
    } catch {
      return abs; // dangling: writing creates a file beside the link, not through it
    }
  }
  return abs;
}

/** What standard input is (a trace read through "-" is that file), or null when closed. */
function stdinStat(): Stats | null {
  try {
    return fstatSync(0);
  } catch {
    return null;
  }
}

function sameFile(a: Stats, b: Stats): boolean {
  return a.dev === b.dev && a.ino === b.ino;
}

/** Checks an output file before the work; throws a "path" OutputError. */
export function checkOutputFile(path: string, options: OutputCheckOptions = {}): OutputTarget {
  const opt = options.option;
  if (path === "") throw pathError(OUTPUT_NOT_A_FILE, path, opt, "an empty file name");
  if (path.endsWith("/")) throw pathError(OUTPUT_NOT_A_FILE, path, opt, "names a directory, not a file");
  let file: string;
  let st: Stats | null;
  try {
    file = realTarget(path);
    st = statOrNull(file);
  } catch (e) {
    throw pathError(errnoCode(e), path, opt, describeErrno(errnoCode(e)));
  }
  if (st) {
    for (const input of options.inputs ?? []) {
      if (input === undefined) continue;
      const ist = input === "-" ? stdinStat() : statOrNull(resolve(input));
      if (ist && sameFile(st, ist)) throw pathError(OUTPUT_IS_INPUT, path, opt, `is the input ${input === "-" ? "read from standard input" : terminalSafe(input)}: an output never replaces an input`);
    }
    if (st.isDirectory()) throw pathError(OUTPUT_NOT_A_FILE, path, opt, "is a directory");
    if (st.isFile() && !options.force) throw pathError(OUTPUT_EXISTS, path, opt, "exists (pass --force to replace it)");
    if (!st.isFile()) {
      // A device or FIFO: written in place, so it must be writable now.
      try {
        accessSync(file, constants.W_OK);
      } catch (e) {
        throw pathError(errnoCode(e), path, opt, describeErrno(errnoCode(e)));
      }
      return { path, file, inPlace: true, force: options.force ?? false };
    }
  }
  checkWritableDir(dirname(file), path, opt);
  return { path, file, inPlace: false, force: options.force ?? false };
}

function checkWritableDir(dir: string, path: string, option: string | undefined): void {
  const dst = statOrNull(dir);
  if (!dst) throw pathError("ENOENT", path, option, `the directory ${terminalSafe(dir)} does not exist`);
  if (!dst.isDirectory()) throw pathError(OUTPUT_NOT_A_DIRECTORY, path, option, `${terminalSafe(dir)} is not a directory`);
  try {
    accessSync(dir, constants.W_OK);
  } catch (e) {
    throw pathError(errnoCode(e), path, option, `cannot write in ${terminalSafe(dir)}: ${describeErrno(errnoCode(e))}`);
  }
  const fs = kernelFileSystem(dir);
  if (fs !== null) throw pathError("EPERM", path, option, `${terminalSafe(dir)} is on ${fs}, which holds no files of ours`);
}

/** procfs, sysfs, cgroupfs, ... by statfs type: writable for root, yet no file can be made there. */
const KERNEL_FS: Readonly<Record<number, string>> = { 0x9fa0: "procfs", 0x62656572: "sysfs", 0x27e0eb: "cgroupfs", 0x63677270: "cgroup2fs", 0x64626720: "debugfs", 0x74726163: "tracefs", 0x73636673: "securityfs" };

function kernelFileSystem(dir: string): string | null {
  try {
    return KERNEL_FS[Number(statfsSync(dir).type)] ?? null;
  } catch {
    return null; // no statfs here: the write itself will tell
  }
}

/**
 * Checks an output directory (created if missing, with its parents) before the work,
 * and returns its absolute path. The files written into it are checked one by one with
 * checkOutputFile as usual.
 */
export function checkOutputDir(path: string, options: Omit<OutputCheckOptions, "force"> = {}): string {
  const opt = options.option;
  const abs = resolve(path);
  let st: Stats | null;
  try {
    st = statOrNull(abs);
  } catch (e) {
    // ENOTDIR: a component is a file ("existing-file/sub"); EACCES, ELOOP, ...
    throw pathError(errnoCode(e), path, opt, `cannot create the directory: ${describeErrno(errnoCode(e))}`);
  }
  if (st && !st.isDirectory()) throw pathError(OUTPUT_NOT_A_DIRECTORY, path, opt, "exists and is not a directory");
  if (!st) {
    try {
      makeDirs(abs);
    } catch (e) {
      throw pathError(errnoCode(e), path, opt, `cannot create the directory: ${describeErrno(errnoCode(e))}`);
    }
  }
  checkWritableDir(abs, path, opt);
  return abs;
}

/**
 * mkdir -p, one component at a time from the deepest existing one. Node's recursive
 * mkdirSync retries forever where mkdir answers ENOENT for a parent that exists (/proc).
 */
function makeDirs(abs: string): void {
  const missing: string[] = [];
  let d = abs;
  while (statOrNull(d) === null) {
    missing.push(d);
    const up = dirname(d);
    if (up === d) break;
    d = up;
  }
  for (let i = missing.length - 1; i >= 0; i--) {
    try {
      mkdirSync(missing[i]!);
    } catch (e) {
      if (errnoCode(e) !== "EEXIST") throw e;
    }
  }
}

/** Checks several outputs at once: each as checkOutputFile, and no file named twice. */
export function checkOutputs(paths: readonly { path: string; option?: string }[], options: Omit<OutputCheckOptions, "option"> = {}): OutputTarget[] {
  const targets = paths.map((p) => checkOutputFile(p.path, { ...options, option: p.option }));
  const seen = new Map<string, string>();
  for (const t of targets) {
    const prev = seen.get(t.file);
    if (prev !== undefined && !t.inPlace) throw pathError(OUTPUT_TWICE, t.path, undefined, `given twice (also as ${terminalSafe(prev)})`);
    seen.set(t.file, t.path);
  }
  return targets;
}

let tmpCounter = 0;

/** This host in temp names (8 hex digits), so that a run on another host sharing the folder is never taken for a dead one. */
const HOST_TAG = (() => {
  let h = 0x811c9dc5;
  for (const c of hostname()) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193) >>> 0;
  return h.toString(16).padStart(8, "0");
})();
const TMP_RE = /^\.(.+)\.gmlake-([0-9a-f]{8})-(\d+)-\d+\.tmp$/;

/** The temporary file beside a target: `.NAME.gmlake-HOST-PID-N.tmp`. */
function tmpName(file: string): string {
  return join(dirname(file), `.${basename(file)}.gmlake-${HOST_TAG}-${process.pid}-${++tmpCounter}.tmp`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return errnoCode(e) === "EPERM"; // someone else's live process
  }
}

/**
 * Removes the temporary files that killed writers (SIGKILL, power loss before the rename)
 * left in the folder of `file`: ours by name, of this host, of a process that no longer
 * runs (whatever file they were for). Returns how many went.
 */
export function removeStaleTemps(file: string): number {
  let names: string[];
  try {
    names = readdirSync(dirname(file));
  } catch {
    return 0;
  }
  let n = 0;
  for (const name of names) {
    const m = TMP_RE.exec(name);
    if (m === null || m[2] !== HOST_TAG) continue;
    const pid = Number(m[3]);
    if (pid === process.pid || alive(pid)) continue;
    try {
      unlinkSync(join(dirname(file), name));
      n++;
    } catch {
      // gone already, or not ours to remove
    }
  }
  return n;
}

/** Writes `data` to a checked target, atomically; throws a "write" OutputError and leaves nothing behind. */
export function writeOutputFile(target: OutputTarget, data: string | Uint8Array): void {
  if (target.inPlace) return writeInPlace(target, data);
  commit(target, stage(target, data));
}

/**
 * Writes several checked targets all or nothing: every file is written to its temporary
 * file and synced first, and only when all are there do they take their names (devices
 * and FIFOs last, in place). A failure while writing (disk full, a bad value) leaves none
 * of them; only a rename failing midway (the file system itself failing) can leave some.
 */
export function writeOutputFiles(items: readonly { target: OutputTarget; data: string | Uint8Array }[]): void {
  const staged: { target: OutputTarget; tmp: string }[] = [];
  try {
    for (const { target, data } of items) if (!target.inPlace) staged.push({ target, tmp: stage(target, data) });
  } catch (e) {
    for (const s of staged) unlinkQuietly(s.tmp);
    throw e;
  }
  staged.forEach((s, i) => {
    try {
      commit(s.target, s.tmp);
    } catch (e) {
      for (const later of staged.slice(i + 1)) unlinkQuietly(later.tmp);
      throw e;
    }
  });
  for (const { target, data } of items) if (target.inPlace) writeInPlace(target, data);
}

function writeInPlace(target: OutputTarget, data: string | Uint8Array): void {
  let fd = -1;
  try {
    fd = openSync(target.file, "w");
    writeFd(fd, target.path, data);
    closeSync(fd);
    fd = -1;
  } catch (e) {
    if (fd >= 0) closeSync(fd);
    throw writeError(target.path, e);
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // gone already (renamed, or never created)
  }
}

/** The data in a synced temporary file beside the target; returns its path (nothing is left on failure). */
function stage(target: OutputTarget, data: string | Uint8Array): string {
  removeStaleTemps(target.file);
  const tmp = tmpName(target.file);
  let fd = -1;
  try {
    fd = openSync(tmp, "wx", 0o666);
    writeFd(fd, target.path, data);
    fsyncSync(fd); // the bytes are on disk before the name points at them
    closeSync(fd);
    return tmp;
  } catch (e) {
    if (fd >= 0) {
      try {
        closeSync(fd);
      } catch {
        // already failing: the write error is the one to report
      }
    }
    unlinkQuietly(tmp);
    throw writeError(target.path, e);
  }
}

/** The staged file takes the target's name (replacing it only with force); the temporary name goes either way. */
function commit(target: OutputTarget, tmp: string): void {
  try {
    if (target.force) renameSync(tmp, target.file);
    else place(tmp, target);
  } catch (e) {
    throw writeError(target.path, e);
  } finally {
    unlinkQuietly(tmp); // linked (a second name) or not placed; after a rename it is gone already
  }
}

/** Moves the temporary file to its name without replacing a file that appeared since the check. */
function place(tmp: string, target: OutputTarget): void {
  try {
    linkSync(tmp, target.file);
  } catch (e) {
    const code = errnoCode(e);
    if (code === "EEXIST") throw new OutputError("path", OUTPUT_EXISTS, target.path, `${terminalSafe(target.path)}: exists (pass --force to replace it)`);
    // File systems without hard links (vfat, some FUSE): check, then rename.
    if (code !== "EPERM" && code !== "ENOTSUP" && code !== "EOPNOTSUPP" && code !== "EMLINK") throw e;
    if (statOrNull(target.file)) throw new OutputError("path", OUTPUT_EXISTS, target.path, `${terminalSafe(target.path)}: exists (pass --force to replace it)`);
    renameSync(tmp, target.file);
  }
}
