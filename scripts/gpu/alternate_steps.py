"""Step time inside one process (issue 27): every step of a job runs three times in a row on
the same inputs: through cudaMallocAsync (not counted), then once through the engine and once
through PyTorch's own allocator, so what differs between the two steps of a pair is the
allocator; the machine's run-to-run speed (fresh processes on the H200 host differ by up to 30%,
docs/notebook/2026-12-03-step-time-noise.md) cancels inside each pair.

usage: python3 alternate_steps.py [--workloads W,...] [--compare "A/REF ..."] [--procs N] [--pairs N]
                                  [--warmup N] [--time-limit S] [--out DIR] [--python PY] [--pin CPUS]
       python3 alternate_steps.py report RESULT.json [RESULT.json ...] [--out DIR]   (merges calls)

  workloads  step_time.py's (live_workloads.py's and gpt2_124m_compile); default gpt2_ft
  compare    what to alternate: ours:POLICY[,k=v...][@baseline] / PyTorch's allocator (pytorch or
             pytorch-expandable), space-separated (@baseline: ours at the revision bundle.sh
             --live --baseline REV packed, in processes of its own, so a change is measured
             against what it changes in the same call); default
             "ours:vms/pytorch-expandable ours:vms/pytorch ours:caching/pytorch"
  procs      fresh processes per workload and comparison (default 2), the comparisons' order
             rotated by one each time; pairs: per process (default 20); warmup: the first pairs
             of each process left out (default 3)
  time-limit seconds for the whole call (default 540): a run that would not fit is not started;
             every result so far is written after each run

How: ours runs as its own CUDAAllocator (enable(interface="native")); the allocator PyTorch had
stays behind it (gmlake_torch/cuda_allocator.cc), and before each step
gmlake_torch.cuda_allocator.route() says which one allocates; a block is freed by the one that
gave it. The first step of each three ("prime") warms what a process caches per shape (cuDNN's
plans for a new sequence length cost gpt2_ft ~0.13 s a step on the H200, whoever allocates) and
leaves both allocators as they were: each meets the shape's sizes for the first time in its
step, as in a plain run. Pair j runs ours first when j is even and PyTorch's first when odd
(route_of); an even number of pairs is counted, so going first counts alike for both. Torch's
generator is seeded alike before the three.
What PyTorch's side pays here that it would not alone: our class's virtual call, the route check
and the live table's insert and erase (a spin lock and a hash probe per call); both allocators'
caches stay resident. What ours pays: its JS thread wakes once per step from its sleep. What neither holds: what the
first step makes to keep (the optimizer's state, buffers kept for the run) comes from
cudaMallocAsync, as step 0 is a prime step, so both pools are smaller than in a plain run: peak
memory is not measured here (step_time.py and live-run.sh measure it).
Statistics: the ratio is sum(ours' steps) / sum(PyTorch's steps) over the counted pairs of every
process, with Fieller's 95% interval for paired means (the pairs as samples); per process the
same ratio alone; the difference per step in ms, also over the prime steps' mean (a step with
its per-shape work, as a plain run's: the share of a user's step). CPU: process CPU seconds per wall second in each side's steps (ours: its JS
thread too). Out (DIR, default $OUT or .): alternate-steps.json and alternate-steps.md.
"""
import argparse
import json
import os
import signal
import sys
import time

import step_time as st

REFS = ("pytorch", "pytorch-expandable")
DEFAULT_COMPARE = "ours:vms/pytorch-expandable ours:vms/pytorch ours:caching/pytorch"
# the parts of a `none` miss, by what the JS thread last found (num_speculation_misses' none_*)
NONE_PARTS = ("late", "after_answer", "unforeseen", "declined", "throttled")


def route_of(k):
    """Which allocator step k of an alternating run allocates through: steps come in threes,
    prime first; then pair k // 3 runs ours first when even, PyTorch's first when odd."""
    i, j = k % 3, k // 3
    if i == 0:
        return "prime"
    return "ours" if (i == 1) == (j % 2 == 0) else "pytorch"


def parse_compare(text):
    """[(ours spec, reference)] from "A/REF A/REF ..."."""
    out = []
    for item in text.split():
        a, slash, ref = item.rpartition("/")
        base, at, tail = a.partition("@")
        if not slash or not base.startswith("ours:") or len(base) <= 5 or (at and tail != "baseline") or ref not in REFS:
            raise st.Bad(f"--compare {item!r}: ours:POLICY[,k=v...][@baseline]/REF, REF one of {', '.join(REFS)} "
                         "(ours runs as its own CUDAAllocator: no @native or @pluggable)")
        out.append((a, ref))
    if not out:
        raise st.Bad("--compare needs at least one ours:POLICY/REF")
    return out


def pairs_of(run, warmup):
    """[(ours' step s, PyTorch's, the prime step's, ours' process CPU s, PyTorch's)] of the run's
    counted pairs: after the first `warmup`, an even number (ABBA: as many ours-first as not)."""
    s, route, cpu = run.get("step_s") or [], run.get("step_route") or [], run.get("step_proc_cpu_s")
    if len(route) != len(s) or len(s) % 3:
        return []
    out = []
    for j in range(warmup, len(s) // 3):
        k = {route[3 * j + i]: 3 * j + i for i in range(3)}
        if set(k) != {"prime", "ours", "pytorch"}:
            return []
        c = (cpu[k["ours"]], cpu[k["pytorch"]]) if cpu and len(cpu) == len(s) else (None, None)
        out.append((s[k["ours"]], s[k["pytorch"]], s[k["prime"]], *c))
    return out[:len(out) // 2 * 2]


def summarize(runs, warmup):
    rows = []
    keys = []
    for r in runs:
        if r.get("ok") and (r["workload"], r["allocator"], r["ref"]) not in keys:
            keys.append((r["workload"], r["allocator"], r["ref"]))
    for w, a, ref in keys:
        mine = [r for r in runs if r.get("ok") and (r["workload"], r["allocator"], r["ref"]) == (w, a, ref)]
        every, per_run = [], []
        for r in mine:
            p = pairs_of(r, warmup)
            if p:
                every += p
                per_run.append(round(sum(x[0] for x in p) / sum(x[1] for x in p), 4))
        if len(every) < 2:
            continue
        xs, ys = [p[0] for p in every], [p[1] for p in every]
        ratio, lo, hi = st.fieller(xs, ys)
        diff, dlo, dhi = st.t_interval([x - y for x, y in zip(xs, ys)])
        prime = st.mean([p[2] for p in every])
        row = {"workload": w, "allocator": a, "ref": ref, "runs": len(per_run), "pairs": len(every),
               "mean_step_s": {"ours": st.mean(xs), "pytorch": st.mean(ys), "prime": prime}, "ratio": ratio, "ci95": [lo, hi],
               "diff_ms": [1e3 * diff, None if dlo is None else 1e3 * dlo, None if dhi is None else 1e3 * dhi],
               "diff_of_prime_step": diff / prime, "run_ratios": per_run}
        if all(p[3] is not None for p in every):
            row["process_cpu_share"] = {"ours": sum(p[3] for p in every) / sum(xs), "pytorch": sum(p[4] for p in every) / sum(ys)}
        engines = [r.get("engine") or {} for r in mine]
        if mine and all((e.get("calls") or {}).get("allocs") for e in engines):
            # ours' allocations (its steps and the setup before them) that took an answer its JS thread had worked out ahead
            allocs = sum(e["calls"]["allocs"] for e in engines)
            row["answered_ahead"] = sum(e.get("num_speculation_hits") or 0 for e in engines) / allocs
            if all(e.get("num_speculation_misses") for e in engines):  # the rest, by why (torch-alloc README "Threading")
                row["missed"] = {k: sum(e["num_speculation_misses"].get(k, 0) for e in engines) / allocs for k in ("none", "other", "behind")}
                if all("none_after_free" in e["num_speculation_misses"] for e in engines):  # of none: a free since the allocation before
                    row["missed"]["none_after_free"] = sum(e["num_speculation_misses"]["none_after_free"] for e in engines) / allocs
                if all("none_late" in e["num_speculation_misses"] for e in engines):  # of none: what the JS thread last found
                    for k in NONE_PARTS:
                        row["missed"][f"none_{k}"] = sum(e["num_speculation_misses"][f"none_{k}"] for e in engines) / allocs
            if all("drain_wait_us" in e for e in engines):  # how long frees waited for a drain at the end (GMLAKE_DRAIN_US=auto: as learned)
                row["drain_wait_us"] = sorted({e["drain_wait_us"] for e in engines})
            if all("num_made_ahead" in e for e in engines):  # GMLAKE_AHEAD: made ahead for the answer after them, and of those undone
                row["made_ahead"] = sum(e["num_made_ahead"] for e in engines) / allocs
                row["undone_ahead"] = sum(e["num_undone_ahead"] for e in engines) / allocs
        rows.append(row)
    return rows


def markdown(doc):
    s = doc["settings"]
    lines = [f"# Alternating steps ({s.get('date', '?')})", ""]
    if doc.get("incomplete"):
        lines += [f"**Incomplete**: {doc['incomplete']}", ""]
    lines += [f"{s['pairs']} pairs of steps per process, the first {s['warmup']} left out, an even number counted; "
              "each pair the same inputs through ours and through PyTorch's allocator in one process, after a step "
              "through cudaMallocAsync on them (prime), which of the two goes first alternating. Ratio: ours' steps "
              "over PyTorch's, summed over the counted pairs of every process, Fieller's 95% interval; per process "
              "the same alone. Difference: ours' step minus PyTorch's (95% t-interval), and over the prime step "
              "(a step with its per-shape work, as in a plain run). CPU: process CPU s per wall s in each side's steps. "
              "Ahead: ours' allocations that took an answer its JS thread had worked out before they came (made: those "
              "it made ahead to work out the answer after them, undone: of those not taken; drain: how long queued frees "
              "waited for its drain at the end of each process); missed: "
              "those that found none standing / one for another request / frees queued after it (of none: those with a free since the allocation before).", "",
              "| workload | ours | against | processes, pairs | mean step s ours / PyTorch / prime | ratio (95% CI) | "
              "difference ms (95% CI), of prime | per process | CPU ours / PyTorch | ahead | missed |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    for r in doc["summary"]:
        cpu = r.get("process_cpu_share")
        lines.append(f"| {r['workload']} | {r['allocator']} | {r['ref']} | {r['runs']}, {r['pairs']} | "
                     f"{r['mean_step_s']['ours']:.4f} / {r['mean_step_s']['pytorch']:.4f} / {r['mean_step_s']['prime']:.4f} | "
                     f"{r['ratio']:.4f} ({st.fmt_ci(*r['ci95'], 4)}) | {r['diff_ms'][0]:+.2f} ({st.fmt_ci(*r['diff_ms'][1:], 2)}), "
                     f"{100 * r['diff_of_prime_step']:+.2f}% | {', '.join(f'{q:.4f}' for q in r['run_ratios'])} | "
                     + ("-" if cpu is None else f"{cpu['ours']:.2f} / {cpu['pytorch']:.2f}") + " | "
                     + (f"{100 * r['answered_ahead']:.1f}%" if "answered_ahead" in r else "-")
                     + (f" (made {100 * r['made_ahead']:.1f}%, undone {100 * r['undone_ahead']:.1f}%)" if "made_ahead" in r else "")
                     + (f"; drain at {', '.join(f'{w:g}' for w in r['drain_wait_us'])} us" if "drain_wait_us" in r else "") + " | "
                     + (" / ".join(f"{100 * r['missed'][k]:.1f}%" for k in ("none", "other", "behind")) if "missed" in r else "-")
                     + (f" (none after a free {100 * r['missed']['none_after_free']:.1f}%)" if "none_after_free" in r.get("missed", {}) else "")
                     + ("; none " + " / ".join(f"{k} {100 * r['missed']['none_' + k]:.1f}%" for k in NONE_PARTS) if "none_late" in r.get("missed", {}) else "")
                     + " |")
    failed = [r for r in doc["runs"] if not r.get("ok")]
    if failed:
        lines += ["", "## Runs that failed", ""] + [f"- {r['workload']} {r['allocator']}/{r['ref']} process {r['round']}: "
                                                   f"{r.get('error', '?')}" for r in failed]
    if doc.get("skipped"):
        lines += ["", "## Not run (time limit)", "", ", ".join(doc["skipped"])]
    return "\n".join(lines) + "\n"


def write(out_dir, doc):
    """alternate-steps.json and .md, each written whole."""
    doc["summary"] = summarize(doc["runs"], doc["settings"]["warmup"])
    st.write_whole(out_dir, "alternate-steps", doc, markdown(doc))


def main_run(args):
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in st.WORKLOADS:
            raise st.Bad(f"unknown workload {w!r} (one of {', '.join(st.WORKLOADS)})")
    if not workloads:
        raise st.Bad("--workloads needs at least one name")
    compare = parse_compare(args.compare)
    if args.procs < 1 or args.pairs < 1 or args.warmup < 0 or args.time_limit <= 0:
        raise st.Bad("--procs and --pairs must be >= 1, --warmup >= 0, --time-limit > 0")
    if args.pairs <= args.warmup + 1:
        raise st.Bad(f"--pairs ({args.pairs}) must be more than --warmup ({args.warmup}) + 1: no pair would be counted (an even number is)")
    pin = st.parse_cpus(args.pin) if args.pin else None
    deadline = time.monotonic() + args.time_limit
    doc = {"settings": {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "workloads": workloads,
                        "compare": [f"{a}/{ref}" for a, ref in compare], "procs": args.procs, "pairs": args.pairs,
                        "warmup": args.warmup, "time_limit_s": args.time_limit, "pin": args.pin,
                        "baseline_rev": os.environ.get("GMLAKE_BASELINE_REV")},
           "runs": [], "summary": [], "skipped": []}
    seen = {}

    def on_term(signum, frame):  # an outer timeout: the run in progress goes, what was measured is written
        if st.RUNNING[0] is not None:
            os.killpg(st.RUNNING[0], signal.SIGKILL)
            os.waitpid(st.RUNNING[0], 0)
        doc["incomplete"] = f"stopped by signal {signum} after {len(doc['runs'])} runs"
        write(args.out, doc)
        sys.exit(3)

    signal.signal(signal.SIGTERM, on_term)
    for w in workloads:
        for proc in range(1, args.procs + 1):
            for i in range(len(compare)):
                a, ref = compare[(i + proc - 1) % len(compare)]
                left = deadline - time.monotonic()
                if st.estimate(w, 3 * args.pairs, seen) > left:
                    doc["skipped"].append(f"{w} {a}/{ref} process {proc}")
                    continue
                rec = st.one_run(args.python, w, a, args.pairs, proc, left, pin, extra=["--alternate", ref])
                rec["ref"] = ref
                seen.setdefault(w, []).append(rec["process_s"])
                doc["runs"].append(rec)
                write(args.out, doc)
                print(f"alternate-steps: {w} {a}/{ref} process {proc}: "
                      + (f"{rec['process_s']:.0f} s" if rec.get("ok") else f"failed: {rec.get('error')}"), flush=True)
    write(args.out, doc)
    print(markdown(doc))
    return 0 if all(r.get("ok") for r in doc["runs"]) and doc["runs"] else 1


def main_report(argv):
    ap = st.Parser(prog="alternate_steps.py report")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args(argv)
    docs = []
    for f in a.files:
        try:
            with open(f) as fh:
                docs.append(json.load(fh))
        except (OSError, ValueError) as e:
            raise st.Bad(f"{f}: not a readable alternate-steps.json ({e})") from None
        if not isinstance(docs[-1], dict) or not isinstance(docs[-1].get("runs"), list) or "settings" not in docs[-1]:
            raise st.Bad(f"{f}: not an alternate-steps.json (no settings and runs)")
    warm = {d["settings"].get("warmup") for d in docs}
    if len(warm) != 1:
        raise st.Bad(f"the files were made with different --warmup ({sorted(warm, key=str)}): not comparable")
    doc = dict(docs[0], runs=[r for d in docs for r in d["runs"]], skipped=[s for d in docs for s in d.get("skipped", [])])
    doc["settings"] = dict(docs[0]["settings"], merged=len(docs))
    doc.pop("incomplete", None)
    if any(d.get("incomplete") for d in docs):
        doc["incomplete"] = "; ".join(d["incomplete"] for d in docs if d.get("incomplete"))
    if os.path.realpath(os.path.join(a.out, "alternate-steps.json")) in {os.path.realpath(f) for f in a.files}:
        raise st.Bad("--out would replace one of the inputs: give another directory")
    write(a.out, doc)
    print(markdown(doc))
    return 0


def main(argv):
    if argv[:1] == ["report"]:
        return main_report(argv[1:])
    ap = st.Parser(prog="alternate_steps.py")
    ap.add_argument("--workloads", default="gpt2_ft")
    ap.add_argument("--compare", default=DEFAULT_COMPARE)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=540)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pin", default=None)
    return main_run(ap.parse_args(argv))


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except st.Bad as e:
        print(f"alternate_steps: {e}", file=sys.stderr)
        sys.exit(2)
