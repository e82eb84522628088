"""The largest batch that trains under a memory budget, per workload, budget and allocator.

For each training workload of live_workloads.py, each budget (GiB) and each allocator, the
batch size (or, for NAME:seq, the sequence lengths in eighths of the workload's own) is
bisected: every candidate trains --steps steps in a fresh process with the workload's seeds,
the budget given to every allocator through torch.cuda.set_per_process_memory_fraction
(budget / the device's memory; ours takes it through its memory-fraction hook). A candidate
fits when every step trains; out of memory (torch.cuda.OutOfMemoryError) does not. What
is known carries over: a batch that fits under a budget fits under a larger one, one that
does not fit does not under a smaller one, and an allocator's search starts at the answer
another allocator found. Results go to DIR/largest-batch.json and .md after every
candidate; --time-limit stops the search (the running candidate is cut) and still writes
them; --resume FILE takes the candidates an earlier run measured.

usage: python3 largest_batch.py [--workloads W,W[:seq],...] [--budgets 24,40] [--allocators A,...]
                                [--steps 4] [--time-limit S] [--candidate-timeout S] [--max-batch N]
                                [--out DIR] [--resume FILE] [--jobs N] [--device-gib G] [--report-only]
  A = pytorch | pytorch-expandable | ours:POLICY[,k=v...]   (live_workloads.py's names)
  step time: the median over the steps after the first; tokens/s: those steps' tokens over their time.
  --jobs N: up to N workloads searched side by side (no more than a G GiB device holds at the
  largest budget, 3 GiB a process beside it); an answer found beside others is trained again
  with the GPU to itself for its step time and tokens/s.
  --report-only (with --resume): the table from the candidates measured, nothing run (no GPU needed).
internal: python3 largest_batch.py --child NAME --allocator A --budget-gib G --value V --dim batch|seq --steps N
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

import script_args

HERE = os.path.dirname(os.path.abspath(__file__))
GiB = 1 << 30
# live_workloads.py's training workloads and the batch each trains at (the search starts there)
DEFAULT_BATCH = {"gpt2_ft": 8, "gpt2_ft_ckpt": 8, "llama1b_lora": 8, "llama1b_fsdp": 4, "qwen_lora_bigvocab": 2,
                 "moe_ft": 8, "gpt2_offload": 8, "gpt2_microbatch": 4}
DEFAULT_WORKLOADS = "gpt2_ft,gpt2_ft_ckpt,llama1b_lora,llama1b_fsdp,qwen_lora_bigvocab,moe_ft"
SEQ_UNIT = 8  # --dim seq: the candidate v trains on the workload's lengths x v / 8


fail = script_args.failer("largest_batch")


# ---- one candidate, in its own process ----

def child(a):
    """Trains live_workloads.py's workload `a.child` at one batch (or sequence scale) under the
    budget and prints one `LB {json}` line: status ok, oom or error, the tokens of each step."""
    lw = os.environ.get("LB_LIVE_WORKLOADS") or os.path.join(HERE, "live_workloads.py")
    sys.argv = [lw, a.child, "--allocator", a.allocator, "--steps", str(a.steps)]
    sys.path.insert(0, os.path.dirname(lw))
    out = {"status": "error"}
    g = {"__name__": "live_workloads", "__file__": lw}
    try:
        # its module code: the allocator chosen (ours enabled), torch imported, CUDA initialized
        with open(lw) as f:
            exec(compile(f.read(), lw, "exec"), g)
        torch = g["torch"]
        total = torch.cuda.mem_get_info()[1]
        budget = int(a.budget_gib * GiB)
        fraction = min(1.0, budget / total)
        out.update(device_bytes=total, budget_bytes=budget, fraction=fraction, budget_via="set_per_process_memory_fraction")
        torch.cuda.set_per_process_memory_fraction(fraction)
        ours = g.get("ours")
        if ours is not None:
            cap = ours.stats().get("capacity_bytes")
            if cap is None or abs(cap - budget) > 64 << 20:
                # a torch whose pluggable interface does not pass the fraction on: the same budget directly
                cap = ours.set_memory_fraction(fraction)
                out["budget_via"] = "gmlake_torch.set_memory_fraction"
            out["capacity_bytes"] = cap
        tokens = out["tokens"] = []
        orig = g["train_loop"]

        def train_loop(model, vocab, batch, lens, opt, autocast=True, offload=False, micro=None):
            if a.dim == "batch":
                batch = a.value
            else:
                lens = [max(1, L * a.value // SEQ_UNIT) for L in lens]
                micro = [[max(1, L * a.value // SEQ_UNIT) for L in m] for m in micro] if micro else None
            tokens.extend(batch * (sum(micro[i]) if micro else L) for i, L in enumerate(lens))
            out.update(batch=batch, max_len=max(max(m) for m in micro) if micro else max(lens))
            return orig(model, vocab, batch, lens, opt, autocast=autocast, offload=offload, micro=micro)

        g["train_loop"] = train_loop
        g["main"]()  # prints live_workloads' RESULT line
        out["status"] = "ok"
    except (Exception, SystemExit) as e:  # noqa: BLE001: a candidate's failure is its result (live_workloads exits on a bad name)
        oom = type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower()
        out.update(status="oom" if oom else "error", error=f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}")
        if oom:
            try:  # the device's own free memory then: near 0, the device was full, not the budget
                out["device_free_bytes"] = int(g["torch"].cuda.mem_get_info()[0])
            except Exception:  # noqa: BLE001
                pass
    print("LB " + json.dumps(out), flush=True)
    sys.stderr.flush()
    # the verdict is out: no teardown (a process group, the engine, CUDA) that could hang or crash after it
    os._exit(0)


# ---- the search ----

def parse_args(argv):
    ap = argparse.ArgumentParser(prog="largest_batch.py", add_help=True)
    ap.add_argument("--workloads", default=DEFAULT_WORKLOADS)
    ap.add_argument("--budgets", default="24,40")
    ap.add_argument("--allocators", default="pytorch-expandable,ours:vms,pytorch")
    ap.add_argument("--steps", default="4")
    ap.add_argument("--time-limit", default="540")
    ap.add_argument("--candidate-timeout", default="240")
    ap.add_argument("--max-batch", default="512")
    ap.add_argument("--out", default=".")
    ap.add_argument("--resume", default=None)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--jobs", default="1")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--device-gib", default="140")
    # one candidate (the search runs itself with these)
    ap.add_argument("--child", default=None)
    ap.add_argument("--allocator", default=None)
    ap.add_argument("--budget-gib", type=float, default=None)
    ap.add_argument("--value", type=int, default=None)
    ap.add_argument("--dim", default="batch")
    return script_args.parse(ap, argv)


def positive(text, name, kind=int):
    return script_args.positive(fail, text, name, kind)


def plan(a):
    """(workloads as (name, dim), budgets GiB, allocators), or a one-line error."""
    workloads = []
    for w in filter(None, (x.strip() for x in a.workloads.split(","))):
        name, _, dim = w.partition(":")
        dim = dim or "batch"
        if name not in DEFAULT_BATCH:
            fail(f"unknown workload {name!r}; training workloads: {', '.join(DEFAULT_BATCH)}")
        if dim not in ("batch", "seq"):
            fail(f"{w}: the dimension is batch or seq, not {dim!r}")
        workloads.append((name, dim))
    budgets = [positive(b.strip(), "budgets", float) for b in a.budgets.split(",") if b.strip()]
    allocators = [x.strip() for x in a.allocators.split(",") if x.strip()]
    # ours:POLICY,k=v... holds commas: a piece with '=' belongs to the ours: before it
    merged = []
    for x in allocators:
        if "=" in x and merged and merged[-1].startswith("ours:"):
            merged[-1] += "," + x
        elif x in ("pytorch", "pytorch-expandable") or x.startswith("ours:"):
            merged.append(x)
        else:
            fail(f"unknown allocator {x!r} (pytorch, pytorch-expandable, ours:POLICY[,k=v...])")
    if not workloads or not budgets or not merged:
        fail("nothing to do: give at least one workload, budget and allocator")
    return workloads, sorted(budgets), merged


def summarize(c, steps):
    """A fitting candidate's step time (median of the steps after the first) and tokens/s."""
    s = c.get("step_s") or []
    t = c.get("tokens") or []
    keep = list(range(1, len(s))) if len(s) > 1 else list(range(len(s)))
    if not keep or len(t) < len(s):
        return None, None
    times = sorted(s[i] for i in keep)
    secs = sum(s[i] for i in keep)
    return times[len(times) // 2], (sum(t[i] for i in keep) / secs if secs > 0 else None)


class Gpu:
    """The device shared by candidates: up to n at once, or one alone (a timing run waits for
    the others to end and holds the rest off). Each candidate's record says whether another ran
    beside it at any moment (its step times are then not the allocator's alone)."""

    def __init__(self, n):
        self.n, self.free, self.waiting = n, n, 0
        self.cv = threading.Condition()
        self.running = []

    def take(self, record, alone):
        with self.cv:
            if alone:
                self.waiting += 1
                self.cv.wait_for(lambda: self.free == self.n)
                self.waiting -= 1
                self.free = 0
            else:
                self.cv.wait_for(lambda: self.free > 0 and self.waiting == 0)
                self.free -= 1
            for r in self.running:
                r["shared"] = True
            record["shared"] = bool(self.running)
            self.running.append(record)

    def give(self, record, alone):
        with self.cv:
            self.running.remove(record)
            self.free = self.n if alone else self.free + 1
            self.cv.notify_all()


class Search:
    def __init__(self, a, workloads, budgets, allocators):
        self.a = a
        self.steps = positive(a.steps, "steps")
        self.limit = positive(a.time_limit, "time-limit", float)
        self.cand_limit = positive(a.candidate_timeout, "candidate-timeout", float)
        self.max_value = positive(a.max_batch, "max-batch")
        self.workloads, self.budgets, self.allocators = workloads, budgets, allocators
        self.t0 = time.monotonic()
        self.candidates = []  # every candidate measured (and those taken from --resume)
        self.rows = []
        self.stopped = None
        self.ran = 0
        self.lock = threading.Lock()
        # candidates at once: as asked, as many as the device holds at the largest budget
        self.jobs = max(1, min(positive(a.jobs, "jobs"), int((positive(a.device_gib, "device-gib", float) - 4) // (max(budgets) + 3))))
        self.gpu = Gpu(self.jobs)
        if a.resume:
            try:
                with open(a.resume) as f:
                    old = json.load(f)
                self.candidates = [c for c in old["candidates"] if c.get("status") in ("ok", "oom", "error")]
            except (OSError, ValueError, KeyError, TypeError) as e:
                fail(f"--resume {a.resume}: cannot read its candidates ({e})")

    def left(self):
        return self.limit - (time.monotonic() - self.t0)

    def log(self, msg):
        print(f"[{time.monotonic() - self.t0:6.1f} s] {msg}", flush=True)

    def known(self, w, dim, alloc, budget, value, alone=False):
        """The candidate measured at this point (alone: one no other candidate ran beside), or None."""
        for c in self.candidates:
            if (c["workload"], c["dim"], c["allocator"], c["budget_gib"], c["value"], c["steps"]) == (w, dim, alloc, budget, value, self.steps):
                if not alone or not c.get("shared"):
                    return c
        return None

    def run(self, w, dim, alloc, budget, value, alone=False):
        """True (trains), False (does not), None (out of time: the search stops). alone: the GPU
        to itself (a timing run), else beside up to --jobs - 1 others."""
        c = self.known(w, dim, alloc, budget, value, alone)
        if c is not None:
            return c["status"] == "ok"
        if self.a.report_only:  # the row stays incomplete
            return None
        if self.stopped:
            return None
        slot = {}
        self.gpu.take(slot, alone)
        try:
            return self.measure(w, dim, alloc, budget, value, slot)
        finally:
            self.gpu.give(slot, alone)

    def measure(self, w, dim, alloc, budget, value, slot):
        """One candidate in its own process; `slot` (its GPU record) says whether it had company."""
        lim = min(self.cand_limit, self.left())
        if lim < 5:
            self.stopped = "time limit"
            return None
        cmd = [self.a.python, os.path.abspath(__file__), "--child", w, "--allocator", alloc, "--budget-gib", repr(budget),
               "--value", str(value), "--dim", dim, "--steps", str(self.steps)]
        t = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=lim)
            text, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            if lim < self.cand_limit:  # cut by the time limit: no answer
                self.stopped = "time limit"
                self.log(f"{w} {budget:g} GiB {alloc} {dim} {value}: cut by the time limit")
                return None
            text, rc = text + f"\ncandidate timed out after {lim:.0f} s", None
        c = {"workload": w, "dim": dim, "allocator": alloc, "budget_gib": budget, "value": value, "steps": self.steps,
             "seconds": round(time.monotonic() - t, 1), "rc": rc}
        lb = [l for l in text.splitlines() if l.startswith("LB ")]
        res = [l for l in text.splitlines() if l.startswith("RESULT ")]
        info = json.loads(lb[-1][3:]) if lb else {"status": "error", "error": "no result: " + " | ".join(text.strip().splitlines()[-3:])}
        c.update(info)
        if res and c["status"] == "ok":
            r = json.loads(res[-1][7:])
            c["step_s"] = r.get("step_s")
            c["gpu"], c["torch"] = r.get("gpu"), r.get("torch")
            c["peak_reserved_bytes"] = r.get("peak_reserved_bytes") or (r.get("engine") or {}).get("reserved_bytes.all.peak")
        elif c["status"] == "ok":
            c.update(status="error", error="no RESULT line")
        c["shared"] = slot.get("shared", False)
        if c["status"] == "oom" and c["shared"] and c.get("device_free_bytes", GiB) < GiB:
            # the device itself was full (other candidates beside it), not the budget: again alone
            self.log(f"{w} {budget:g} GiB {alloc} {dim} {value}: out of memory with the device full beside others; again alone")
            return None if self.stopped else self.alone_again(w, dim, alloc, budget, value, slot)
        with self.lock:
            self.candidates.append(c)
            self.ran += 1
            self.log(f"{w} {budget:g} GiB {alloc} {dim} {value}: {c['status']} in {c['seconds']} s"
                     + (f" ({c['error']})" if c["status"] != "ok" and c.get("error") else "")
                     + (" [beside others]" if c["shared"] else ""))
            self.write()
        return c["status"] == "ok"

    def alone_again(self, w, dim, alloc, budget, value, slot):
        """Gives back its shared slot, measures with the GPU to itself, takes a shared slot again (run() gives it back)."""
        self.gpu.give(slot, False)
        try:
            return self.run(w, dim, alloc, budget, value, alone=True)
        finally:
            slot.clear()
            self.gpu.take(slot, False)

    def bounds(self, w, dim, alloc, budget):
        """What this allocator's earlier candidates say: the largest value known to fit under
        `budget` (0: none), the smallest known not to (None: none), from any budget."""
        lo, hi = 0, None
        for c in self.candidates:
            if (c["workload"], c["dim"], c["allocator"], c["steps"]) != (w, dim, alloc, self.steps):
                continue
            if c["status"] == "ok" and c["budget_gib"] <= budget:
                lo = max(lo, c["value"])
            elif c["status"] != "ok" and c["budget_gib"] >= budget:
                hi = c["value"] if hi is None else min(hi, c["value"])
        return lo, hi

    def largest(self, w, dim, alloc, budget, start, step):
        """Gallops from `start` (up by step, 2 step, ... while it trains; down while nothing is
        known to train), then bisects: (the largest that trains, or 0; whether it finished)."""
        lo, hi = self.bounds(w, dim, alloc, budget)
        if hi is not None and hi <= lo:  # noise: a value failed below one that trained; trust the fit
            hi = None
        v = max(lo + 1, min(start, self.max_value if hi is None else hi - 1))
        while (hi is None or hi - lo > 1) and v <= self.max_value:
            ok = self.run(w, dim, alloc, budget, v)
            if ok is None:
                return lo, False
            if ok:
                lo = v
            else:
                hi = v
            if hi is None:
                v = lo + step if lo + step <= self.max_value or lo >= self.max_value else self.max_value
            elif lo == 0:
                v = max(hi - step, 1)
            else:
                v = (lo + hi) // 2
            step *= 2
        return lo, True

    def go(self):
        if self.jobs == 1:
            for w, dim in self.workloads:
                self.workload(w, dim)
        else:  # workloads side by side, each searched in order; every answer timed alone
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(self.jobs) as pool:
                list(pool.map(lambda wd: self.workload(*wd), self.workloads))
        self.write()
        return self

    def workload(self, w, dim):
        for budget in self.budgets:
            found = {}
            for alloc in self.allocators:
                if self.stopped:
                    break
                lo, _ = self.bounds(w, dim, alloc, budget)
                smaller = [b for b in self.budgets if b < budget]
                if found:  # another allocator's answer under this budget: start there, small steps
                    start, step = max(1, min(found.values())), 1
                elif lo > 0 and smaller:  # this allocator's answer under a smaller budget, scaled
                    start, step = max(lo + 1, int(lo * budget / smaller[-1])), max(1, lo // 4)
                else:
                    start = DEFAULT_BATCH[w] if dim == "batch" else SEQ_UNIT
                    step = start
                self.log(f"== {w} ({dim}) under {budget:g} GiB, {alloc}: from {start}")
                best, done = self.largest(w, dim, alloc, budget, start, step)
                found[alloc] = best
                self.add_row(w, dim, alloc, budget, best, done)

    def add_row(self, w, dim, alloc, budget, best, done):
        if best and self.known(w, dim, alloc, budget, best, alone=True) is None:
            # the answer trained beside other candidates: its step time comes from a run alone
            self.log(f"{w} {budget:g} GiB {alloc} {dim} {best}: timed alone")
            self.run(w, dim, alloc, budget, best, alone=True)
        c = (self.known(w, dim, alloc, budget, best, alone=True) or self.known(w, dim, alloc, budget, best)) if best else None
        st, tps = summarize(c, self.steps) if c else (None, None)
        row = {"workload": w, "dim": dim, "budget_gib": budget, "allocator": alloc, "largest": best, "complete": done,
               "at_max": done and best >= self.max_value, "step_s": st, "tokens_per_s": tps,
               "peak_reserved_bytes": c.get("peak_reserved_bytes") if c else None,
               "max_len": c.get("max_len") if c else None, "budget_via": c.get("budget_via") if c else None,
               "capacity_bytes": c.get("capacity_bytes") if c else None,
               # the allocator held more than the budget: the budget did not hold for it
               "over_budget": bool(c and c.get("peak_reserved_bytes") and c["peak_reserved_bytes"] > budget * GiB),
               "candidates": sum(1 for x in self.candidates if (x["workload"], x["dim"], x["allocator"], x["budget_gib"]) == (w, dim, alloc, budget))}
        order = lambda r: ([x[0] for x in self.workloads].index(r["workload"]), r["budget_gib"], self.allocators.index(r["allocator"]))  # noqa: E731
        with self.lock:
            self.rows = sorted([r for r in self.rows if (r["workload"], r["dim"], r["budget_gib"], r["allocator"]) != (w, dim, budget, alloc)] + [row], key=order)
        self.log(f"-> {w} {budget:g} GiB {alloc}: largest {dim} {best}" + ("" if done else " (incomplete)")
                 + (f", {st:.3f} s/step, {tps:.0f} tokens/s" if st is not None and tps is not None else ""))

    def markdown(self):
        env = {"LB_WORKLOADS": ",".join(w if d == "batch" else f"{w}:seq" for w, d in self.workloads),
               "LB_BUDGETS": ",".join(f"{b:g}" for b in self.budgets), "LB_ALLOCATORS": ",".join(self.allocators), "LB_STEPS": self.steps}
        cmd = " ".join(f"{k}={v}" for k, v in env.items()) + " bash scripts/gpu/largest-batch.sh"
        where = sorted({f"{c['gpu']}, torch {c['torch']}" for c in self.candidates if c.get("gpu")})
        lines = [f"Largest batch that trains under a memory budget ({'; '.join(where) or 'GPU not reported'}): {self.steps} steps a",
                 "candidate, each in a fresh process, the budget through torch.cuda.set_per_process_memory_fraction for",
                 "every allocator; step time: the median of the steps after the first; tokens/s: their tokens over their",
                 f"time; seq rows: the workload's lengths x N/8. `{cmd}`", "",
                 "| workload | budget GiB | allocator | largest | step s | tokens/s | peak reserved GiB | candidates |",
                 "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
        for r in self.rows:
            largest = f"{r['largest']}{'+' if r['at_max'] else ''}{'' if r['complete'] else ' (incomplete)'}"
            if r["dim"] == "seq":
                largest = f"seq x{r['largest']}/8" + (f" (max {r['max_len']})" if r["max_len"] else "") + ("" if r["complete"] else " (incomplete)")
            fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
            peak = None if r["peak_reserved_bytes"] is None else r["peak_reserved_bytes"] / GiB
            lines.append(f"| {r['workload']} | {r['budget_gib']:g} | {r['allocator']} | {largest} | {fmt(r['step_s'], '.3f')} | "
                         f"{fmt(r['tokens_per_s'], '.0f')} | {fmt(peak, '.2f')} | {r['candidates']} |")
        over = [r for r in self.rows if r.get("over_budget")]
        if over:
            lines += ["", "Peak reserved past the budget (the budget did not hold for that allocator):"]
            lines += [f"- {r['workload']} {r['budget_gib']:g} GiB {r['allocator']}: {r['peak_reserved_bytes'] / GiB:.2f} GiB" for r in over]
        errors = [c for c in self.candidates if c["status"] == "error"]
        if errors:
            lines += ["", "Candidates that failed with something other than out of memory (counted as not training):"]
            lines += [f"- {c['workload']} {c['budget_gib']:g} GiB {c['allocator']} {c['dim']} {c['value']}: {c.get('error', '')}" for c in errors]
        if self.stopped:
            lines += ["", f"Stopped early ({self.stopped}): rows marked incomplete, the rest not reached."]
        if self.a.report_only and any(not r["complete"] for r in self.rows):
            lines += ["", "Tabulated from earlier candidates (--report-only): rows marked incomplete need more."]
        return "\n".join(lines) + "\n"

    def write(self):
        os.makedirs(self.a.out, exist_ok=True)
        doc = {"steps": self.steps, "budgets_gib": self.budgets, "allocators": self.allocators,
               "workloads": [f"{w}:{d}" for w, d in self.workloads], "jobs": self.jobs, "stopped": self.stopped, "ran": self.ran,
               "seconds": round(time.monotonic() - self.t0, 1), "rows": self.rows, "candidates": self.candidates}
        for name, text in (("largest-batch.json", json.dumps(doc, indent=1)), ("largest-batch.md", self.markdown())):
            path = os.path.join(self.a.out, name)
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)


def main(argv):
    a = parse_args(argv)
    if a.child:
        if a.allocator is None or a.budget_gib is None or a.value is None or a.dim not in ("batch", "seq"):
            fail("--child needs --allocator, --budget-gib, --value and --dim batch|seq")
        a.steps = positive(a.steps, "steps")
        return child(a)
    workloads, budgets, allocators = plan(a)
    if a.report_only and not a.resume:
        fail("--report-only needs --resume FILE (the candidates to tabulate)")
    s = Search(a, workloads, budgets, allocators)
    s.log(f"workloads {', '.join(w for w, _ in workloads)}; budgets {', '.join(f'{b:g}' for b in budgets)} GiB; "
          f"allocators {', '.join(allocators)}; {s.steps} steps; {s.jobs} candidate(s) at once; time limit {s.limit:g} s"
          + (f"; {len(s.candidates)} candidates from {a.resume}" if a.resume else ""))
    s.go()
    print(s.markdown(), end="")
    s.log(f"done: {s.ran} candidates run" + (f", stopped: {s.stopped}" if s.stopped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
