"""The smallest memory budget on which a workload trains, live, per allocator.

Where largest_batch.py asks "how large a batch under this budget", this asks the question at a
resolution a batch step cannot show: at the workload's own batch, does it train under budget
B? Each allocator gets a grid of budgets around a predicted one (the sim's smallest capacity,
benchmarks/sim-*/fit-compare.txt, or --center), each candidate trains the workload's steps in
a fresh process with the same seeds (largest_batch.py's child: the budget through
torch.cuda.set_per_process_memory_fraction for every allocator). Candidates run side by side as
far as the device's memory holds their budgets. The answer per allocator is the smallest grid
budget from which every larger one trained; a grid that trains at its lowest point (or fails
at its highest) says so ("<= lo", "> hi"), and a failure above a success is reported.

Then, per workload, the budgets where the batch is the limit: a grid budget under which one
allocator trains the workload's batch and another runs out of memory is one where the first
fits a larger batch; the table says at which budgets that holds, measured, not inferred.

usage: python3 smallest_budget.py [--workloads W,...] [--allocators A,...] [--steps 12]
                                  [--step-gib 0.04] [--points 2] [--center W:A=GiB,...]
                                  [--fit-compare FILE] [--jobs N] [--device-gib G]
                                  [--time-limit S] [--candidate-timeout S] [--out DIR] [--known F,...]
                                  [--known-for A,...] [--no-timing]
  --center W:A=GiB: the prediction for workload W under allocator A (else the sim's number for
  A's policy: pytorch -> caching, pytorch-expandable -> expandable, ours:vms -> vms); one grid per
  workload, every allocator on it: from the lowest prediction to the highest, --points steps
  of --step-gib more on either side.
  --known F,...: earlier smallest-budget.json files (the same machine kind and steps): a candidate
  measured there is not run again, and one that a measured answer settles (the same allocator
  trained the same batch under a budget no larger, or ran out of memory under one no smaller)
  is taken as settled, marked in parentheses; the limit budgets count measured candidates only.
  --known-for A,...: only these allocators' known candidates count (default: every allocator's;
  leave out one whose code changed since).
  Last, unless --no-timing: each allocator's largest batch at each limit budget trained again
  with the GPU to itself, for its step time (median of the steps after the first) and tokens/s.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import largest_batch  # noqa: E402  (its child trains one candidate)
import script_args  # noqa: E402

GiB = 1 << 30
SIM_COLUMN = {"pytorch": "caching smallest", "pytorch-expandable": "expandable smallest", "ours:vms": "vms smallest"}
# what a process holds beside its budget (context, cuBLAS, the CUDA runtime): for packing only
BESIDE_GIB = 2.5


fail = script_args.failer("smallest_budget")


def latest_fit_compare():
    d = os.path.join(ROOT, "benchmarks")
    sims = sorted(x for x in os.listdir(d) if x.startswith("sim-") and os.path.exists(os.path.join(d, x, "fit-compare.txt")))
    return os.path.join(d, sims[-1], "fit-compare.txt") if sims else None


def read_fit_compare(path):
    """{trace: {column: GiB}} from fit-compare.mjs's text table (columns split on 2+ spaces)."""
    import re

    try:
        with open(path) as f:
            lines = [l.rstrip("\n") for l in f if l.strip()]
    except OSError as e:
        fail(f"--fit-compare {path}: {e.strerror}")
    head = re.split(r"\s{2,}", lines[0].strip())
    out = {}
    for l in lines[1:]:
        cells = re.split(r"\s{2,}", l.strip())
        if len(cells) < len(head) - 1:
            continue
        row = {}
        for k, v in zip(head, cells):
            try:
                row[k] = float(v)
            except ValueError:
                pass
        out[cells[0]] = row
    return out


def parse(argv):
    ap = argparse.ArgumentParser(prog="smallest_budget.py")
    ap.add_argument("--workloads", default="gpt2_ft,gpt2_ft_ckpt,llama1b_lora,qwen_lora_bigvocab,moe_ft")
    ap.add_argument("--allocators", default="pytorch-expandable,ours:vms")
    ap.add_argument("--steps", default="12")
    ap.add_argument("--step-gib", default="0.04")
    ap.add_argument("--points", default="2")
    ap.add_argument("--center", default="")
    ap.add_argument("--fit-compare", default=None)
    ap.add_argument("--jobs", default="10")
    ap.add_argument("--device-gib", default="140")
    ap.add_argument("--time-limit", default="540")
    ap.add_argument("--candidate-timeout", default="240")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", default=".")
    ap.add_argument("--known", default="")
    ap.add_argument("--known-for", default="")
    ap.add_argument("--no-timing", action="store_true")
    return script_args.parse(ap, argv)


def number(text, name, kind=float):
    return script_args.positive(fail, text, name, kind)


def grids(a):
    """[(workload, allocator, [budgets GiB])], or a one-line error."""
    step, points = number(a.step_gib, "step-gib"), number(a.points, "points", int)
    centers = {}
    for item in filter(None, (x.strip() for x in a.center.split(","))):
        key, _, v = item.partition("=")
        w, _, al = key.partition(":")
        if not al:
            fail(f"--center {item!r}: expected WORKLOAD:ALLOCATOR=GiB")
        centers[(w, al)] = number(v, "center")
    sim_path = a.fit_compare or latest_fit_compare()
    sim = read_fit_compare(sim_path) if sim_path else {}
    out = []
    allocs = [x.strip() for x in a.allocators.split(",") if x.strip()]
    for w in filter(None, (x.strip() for x in a.workloads.split(","))):
        if w not in largest_batch.DEFAULT_BATCH:
            fail(f"unknown workload {w!r}; training workloads: {', '.join(largest_batch.DEFAULT_BATCH)}")
        per = []
        for al in allocs:
            c = centers.get((w, al))
            if c is None:
                c = sim.get(w, {}).get(SIM_COLUMN.get(al, ""))
            if c is None:
                fail(f"no center for {w} under {al}: give --center {w}:{al}=GiB (the sim's table has none)")
            per.append(c)
        # one grid for every allocator of the workload (so that each budget is measured under
        # each): from the lowest center to the highest, `points` steps more on either side
        lo, hi = min(per) - step * points, max(per) + step * points
        grid = [round(lo + i * step, 3) for i in range(int((hi - lo) / step + 1e-9) + 1)]
        out += [(w, al, grid) for al in allocs]
    if not out:
        fail("nothing to do: give at least one workload and allocator")
    return out


class Runner:
    """Candidates side by side while their budgets (and what each process holds beside) fit the device."""

    def __init__(self, a):
        self.a = a
        self.room = number(a.device_gib, "device-gib") - 4
        self.used, self.running = 0.0, 0
        self.jobs = number(a.jobs, "jobs", int)
        self.cv = threading.Condition()
        self.t0 = time.monotonic()
        self.limit = number(a.time_limit, "time-limit")
        self.results = []
        self.lock = threading.Lock()

    def left(self):
        return self.limit - (time.monotonic() - self.t0)

    def one(self, w, al, budget, value=None, phase="grid"):
        need = budget + BESIDE_GIB
        with self.cv:
            self.cv.wait_for(lambda: self.running == 0 or (self.running < self.jobs and self.used + need <= self.room))
            self.used += need
            self.running += 1
            beside = self.running - 1
        try:
            lim = min(number(self.a.candidate_timeout, "candidate-timeout"), self.left())
            c = {"workload": w, "allocator": al, "budget_gib": budget, "beside": beside, "phase": phase,
                 "value": largest_batch.DEFAULT_BATCH[w] if value is None else value}
            if lim < 5:
                c.update(status="skipped", error="time limit")
            else:
                cmd = [self.a.python, os.path.join(HERE, "largest_batch.py"), "--child", w, "--allocator", al,
                       "--budget-gib", repr(budget), "--value", str(c["value"]), "--dim", "batch", "--steps", self.a.steps]
                t = time.monotonic()
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=lim)
                    text = p.stdout + p.stderr
                except subprocess.TimeoutExpired:  # cut by the time limit: no answer; by its own limit: an error
                    cut = lim < number(self.a.candidate_timeout, "candidate-timeout")
                    text = "LB " + json.dumps({"status": "skipped" if cut else "error", "error": f"cut after {lim:.0f} s"})
                c["seconds"] = round(time.monotonic() - t, 1)
                lb = [l for l in text.splitlines() if l.startswith("LB ")]
                res = [l for l in text.splitlines() if l.startswith("RESULT ")]
                c.update(json.loads(lb[-1][3:]) if lb else {"status": "error", "error": " | ".join(text.strip().splitlines()[-2:])})
                if res and c["status"] == "ok":
                    r = json.loads(res[-1][7:])
                    c["peak_reserved_bytes"] = r.get("peak_reserved_bytes") or (r.get("engine") or {}).get("reserved_bytes.all.peak")
                    c["losses"] = r.get("values")
                    c["step_s"] = r.get("step_s")
                if c["status"] != "ok" or phase != "timing":
                    c.pop("tokens", None)  # the tokens per step make tokens/s: kept for the timing runs only
            with self.lock:
                self.results.append(c)
                print(f"[{time.monotonic() - self.t0:6.1f} s] {w} {al} {budget:.3f} GiB batch {c['value']}: {c['status']}"
                      + (f" ({c.get('error')})" if c["status"] != "ok" else "") + f" [{beside} beside]", flush=True)
        finally:
            with self.cv:
                self.used -= need
                self.running -= 1
                self.cv.notify_all()


def verdict(cands):
    """(smallest budget from which every larger one trained, as text; a failure above a success, or None)."""
    cands = sorted((c for c in cands if c["status"] in ("ok", "oom", "error")), key=lambda c: c["budget_gib"])
    if not cands or all(c["status"] == "error" for c in cands):
        return "no answer", None
    cands = [c for c in cands if c["status"] != "error"]  # an error is listed in the notes, not read as out of memory
    ok = [c["status"] == "ok" for c in cands]
    if not ok[-1]:
        return f"> {cands[-1]['budget_gib']:.2f}", None
    i = len(ok) - 1
    while i > 0 and ok[i - 1]:
        i -= 1
    odd = [c["budget_gib"] for c in cands[:i] if c["status"] == "ok"]
    text = f"<= {cands[0]['budget_gib']:.2f}" if i == 0 else f"{cands[i]['budget_gib']:.2f}"
    return text, (f"trained at {', '.join(f'{b:.2f}' for b in odd)} below that" if odd else None)


def limits(w, allocs, results):
    """[(x, y, budgets)]: grid budgets at which x trained w's batch and y ran out of memory."""
    out = []
    grid = [c for c in results if c["workload"] == w and c["phase"] == "grid" and not c.get("inferred")]
    for x in allocs:
        for y in allocs:
            okx = {c["budget_gib"] for c in grid if c["allocator"] == x and c["status"] == "ok"}
            ooy = {c["budget_gib"] for c in grid if c["allocator"] == y and c["status"] == "oom"}
            if x != y and okx & ooy:
                out.append((x, y, sorted(okx & ooy)))
    return out


def limit_budget(w, allocs, results):
    """The budget for the confirm phase: the highest at which the batch is the limit, else the
    smallest grid budget at which every allocator trained it; None when neither was measured."""
    lim = [b for _, _, bs in limits(w, allocs, results) for b in bs]
    if lim:
        return max(lim)
    grid = [c for c in results if c["workload"] == w and c["phase"] == "grid"]
    every = [b for b in sorted({c["budget_gib"] for c in grid})
             if all(any(c["budget_gib"] == b and c["allocator"] == al and c["status"] == "ok" for c in grid) for al in allocs)]
    return every[0] if every else None


def confirm_runs(w, allocs, results):
    """At the limit budget: each allocator that trained the batch tries one more, one that did not tries one less."""
    b = limit_budget(w, allocs, results)
    if b is None:
        return []
    batch, runs = largest_batch.DEFAULT_BATCH[w], []
    for al in allocs:
        c = next((c for c in results if c["workload"] == w and c["allocator"] == al and c["budget_gib"] == b and c["phase"] == "grid"), None)
        if c is not None and c["status"] in ("ok", "oom"):
            v = batch + 1 if c["status"] == "ok" else batch - 1
            if v >= 1:
                runs.append((w, al, b, v))
    return runs


def largest_at(w, allocs, results):
    """(budget, {allocator: the largest batch measured there, as text}) for the confirm table."""
    b = limit_budget(w, allocs, results)
    if b is None:
        return None
    here = [c for c in results if c["workload"] == w and c["budget_gib"] == b and c["status"] in ("ok", "oom")]
    cells = {}
    for al in allocs:
        ok = sorted(c["value"] for c in here if c["allocator"] == al and c["status"] == "ok")
        no = sorted(c["value"] for c in here if c["allocator"] == al and c["status"] == "oom")
        if ok and no and no[0] == ok[-1] + 1:
            cells[al] = str(ok[-1])
        elif ok:
            cells[al] = f">= {ok[-1]}" if not no else f"{ok[-1]} ({no[0]} out of memory)"
        elif no:
            cells[al] = f"< {no[0]}"
        else:
            cells[al] = "-"
    return b, cells


def cell(w, al, at, results, steps):
    """The largest batch at the limit budget, with its step time and tokens/s when a timing run measured them."""
    text = at[1][al]
    t = next((c for c in results if c["phase"] == "timing" and c["status"] == "ok" and (c["workload"], c["allocator"]) == (w, al)
              and abs(c["budget_gib"] - at[0]) < 1e-9 and str(c["value"]) == text), None)
    st, tps = largest_batch.summarize(t, int(steps)) if t else (None, None)
    return text if st is None or tps is None else f"{text} ({st:.3f} s, {tps:,.0f}/s)"


def report(a, plan, results):
    lines = [f"Smallest budget that trains each workload at its own batch ({a.steps} steps, a fresh process per",
             "candidate, the budget through torch.cuda.set_per_process_memory_fraction for every allocator; GiB).",
             "`" + " ".join(f"{k}={v}" for k, v in (("SB_WORKLOADS", a.workloads), ("SB_ALLOCATORS", a.allocators),
                                                   ("SB_STEP_GIB", a.step_gib), ("SB_POINTS", a.points)) + ((("SB_CENTER", a.center),) if a.center else ()))
             + " bash scripts/gpu/smallest-budget.sh`", "",
             "| workload | batch | allocator | grid GiB | smallest that trains | the grid (+ trains, - out of memory, ! other error, ? not run: time limit; (x): settled by a measured answer) |",
             "| --- | ---: | --- | --- | ---: | --- |"]
    notes, per = [], {}
    for w, al, grid in plan:
        cs = [c for c in results if c["workload"] == w and c["allocator"] == al and c["phase"] == "grid"]
        text, odd = verdict(cs)
        per[(w, al)] = cs
        mark = lambda c: {"ok": "+", "oom": "-", "skipped": "?"}.get(c["status"], "!")  # noqa: E731
        marks = " ".join(f"{c['budget_gib']:.2f}" + (f"({mark(c)})" if c.get("inferred") else mark(c)) for c in sorted(cs, key=lambda c: c["budget_gib"]))
        lines.append(f"| {w} | {largest_batch.DEFAULT_BATCH[w]} | {al} | {grid[0]:.2f}-{grid[-1]:.2f} | {text} | {marks} |")
        if odd:
            notes.append(f"- {w} {al}: {odd} (not monotone)")
    lines += ["", "Budgets at which the batch is the limit (measured at each budget: one allocator trained the batch, the other ran out of memory):", ""]
    allocs = list(dict.fromkeys(al for _, al, _ in plan))
    for w in dict.fromkeys(w for w, _, _ in plan):
        for x, y, both in limits(w, allocs, results):
            lines.append(f"- {w}: {x} trains batch {largest_batch.DEFAULT_BATCH[w]} where {y} runs out of memory at "
                         + ", ".join(f"{b:.2f}" for b in both) + " GiB")
    if lines[-1] == "":
        lines.append("- none measured")
    confirm = [c for c in results if c["phase"] == "confirm"]
    if confirm:
        lines += ["", "The largest batch at the budget where the batch is the limit (the highest such budget; without one, the",
                  "smallest at which every allocator trained): each allocator's batch there, and the batch one above (or below) it;",
                  "in brackets its step time and tokens/s, trained again with the GPU to itself:", "",
                  "| workload | budget GiB | " + " | ".join(allocs) + " |", "| --- | ---: |" + " ---: |" * len(allocs)]
        for w in dict.fromkeys(w for w, _, _ in plan):
            at = largest_at(w, allocs, results)
            if at is None:
                continue
            lines.append(f"| {w} | {at[0]:.2f} | " + " | ".join(cell(w, al, at, results, a.steps) for al in allocs) + " |")
    errors = [c for c in results if c["status"] not in ("ok", "oom")]
    if notes or errors:
        lines += ["", "Notes:"] + notes + [f"- {c['workload']} {c['allocator']} {c['budget_gib']:.2f}: {c['status']} {c.get('error', '')}" for c in errors]
    return "\n".join(lines) + "\n"


def load_known(a):
    """The candidates of earlier runs (--known), each tagged with its file."""
    out = []
    for path in filter(None, (x.strip() for x in a.known.split(","))):
        try:
            with open(path) as f:
                doc = json.load(f)
            cs = [c for c in doc["candidates"] if c.get("status") in ("ok", "oom") and str(doc.get("steps")) == str(a.steps)]
        except (OSError, ValueError, KeyError, TypeError) as e:
            fail(f"--known {path}: cannot read its candidates ({e})")
        out += [dict(c, known=path) for c in cs]
    only = {x.strip() for x in a.known_for.split(",") if x.strip()}
    return [c for c in out if not only or c["allocator"] in only]


def settled(known, w, al, budget, value):
    """A known candidate that settles (w, al, budget, value): the measured one itself, or one
    the monotone budget settles (copied, marked inferred); None when none does."""
    same = [c for c in known if (c["workload"], c["allocator"], c["value"]) == (w, al, value)]
    for c in same:
        if abs(c["budget_gib"] - budget) < 1e-9:
            return dict(c)
    for c in same:
        if (c["status"] == "ok" and c["budget_gib"] <= budget) or (c["status"] == "oom" and c["budget_gib"] >= budget):
            return dict(c, budget_gib=budget, inferred=True, from_budget=c["budget_gib"])
    return None


def main(argv):
    a = parse(argv)
    number(a.steps, "steps", int)
    plan = grids(a)
    r = Runner(a)
    known = load_known(a)
    todo = []
    for w, al, grid in plan:
        for b in grid:
            k = settled(known, w, al, b, largest_batch.DEFAULT_BATCH[w])
            if k is not None:
                r.results.append(dict(k, phase="grid"))
            else:
                todo.append((w, al, b))
    # the largest budgets first, so that the device packs the small ones into what is left
    todo.sort(key=lambda t: -t[2])
    print(f"smallest_budget: {len(todo)} candidates, up to {r.jobs} at once in {r.room:.0f} GiB, time limit {r.limit:.0f} s", flush=True)
    with ThreadPoolExecutor(r.jobs) as pool:
        list(pool.map(lambda t: r.one(*t), todo))
    # then, at each workload's limit budget, one batch above (or below) the workload's own
    allocs = list(dict.fromkeys(al for _, al, _ in plan))
    more = []
    for t in (t for w in dict.fromkeys(w for w, _, _ in plan) for t in confirm_runs(w, allocs, r.results)):
        k = settled(known, *t)
        if k is not None and not k.get("inferred"):
            r.results.append(dict(k, phase="confirm"))
        else:
            more.append(t)
    print(f"smallest_budget: {len(more)} candidates at the limit budgets", flush=True)
    with ThreadPoolExecutor(r.jobs) as pool:
        list(pool.map(lambda t: r.one(*t, phase="confirm"), sorted(more, key=lambda t: -t[2])))
    if not a.no_timing:  # one at a time: the step times are the allocator's alone
        for w in dict.fromkeys(w for w, _, _ in plan):
            at = largest_at(w, allocs, r.results)
            for al in allocs if at is not None else []:
                if at[1][al].isdigit():
                    r.one(w, al, at[0], int(at[1][al]), phase="timing")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "smallest-budget.json"), "w") as f:
        json.dump({"plan": plan, "candidates": r.results, "steps": a.steps}, f, indent=1)
    text = report(a, plan, r.results)
    with open(os.path.join(a.out, "smallest-budget.md"), "w") as f:
        f.write(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
