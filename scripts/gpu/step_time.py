"""Step time as a user sees it: the same training script in a fresh process per run, the
allocators interleaved round by round, every run with the same seeds (live_workloads.py's
SEED 1234: the same shapes in the same order), and per workload and allocator the mean step
time after warm-up with a 95% confidence interval, its ratio to PyTorch's default allocator
and to expandable_segments with theirs, and the first steps (warm-up) on their own.

usage: python3 step_time.py [--workloads W,...] [--allocators A,...] [--rounds N] [--steps N]
                            [--warmup N] [--time-limit S] [--out DIR] [--python PY] [--order rotate|fixed]
                            [--pin CPUS]
       python3 step_time.py report RESULT.json [RESULT.json ...] [--out DIR]   (merges calls)
       python3 step_time.py child gpt2_124m_compile --allocator A --steps N [--rep R] [--alternate REF]

  workloads  live_workloads.py's (gpt2_ft, gpt2_ft_ckpt, llama1b_fsdp, llama1b_lora, opt1b_generate,
             qwen_lora_bigvocab, gpt2_offload, moe_ft, gpt2_microbatch) and gpt2_124m_compile
             (a GPT-2 124M shape, batch 8 x 1024 tokens, bf16 autocast, AdamW, torch.compile in its
             default mode; its compilation falls in the first steps); default: all of them
  allocators pytorch, pytorch-expandable, ours:POLICY[,k=v...][@native|@pluggable|@baseline] (@: how
             PyTorch reaches the engine, GMLAKE_INTERFACE; @baseline: ours at the revision that
             bundle.sh --live --baseline REV packed, $GMLAKE_BASELINE_LIB);
             default pytorch,pytorch-expandable,ours:vms,ours:caching
  rounds     default 5; each round runs every allocator once per workload, in an order rotated
             by one each round (round r starts at the r-th), so no allocator always runs first
  steps      default 24 per run; warmup default 3: the mean is over the steps after them
  --pin      a CPU list (0-7, 0,2,4-6) every run is pinned to: the same cores and memory node each
             run (default: the CPUs this process may use, as the scheduler places them)
  --no-prime without the one uncounted run per workload before round 1 (round 0: by default it
             warms the file cache and torch.compile's on-disk cache, so round 1 is not the cold one)
  time-limit seconds for the whole call (default 540): a run that would not fit (its estimate:
             the slowest run of that workload so far, else a default) is not started, every
             result so far is written after each run, and the report says what was left out
Out (DIR, default $OUT or .): step-time.json (settings, every run with its step times, the
summary) and step-time.md (the tables). Statistics: per run the mean of its steps after
warm-up; per allocator the mean over runs with a t-interval (n-1 degrees of freedom); a ratio
is mean(x) / mean(ref) over the rounds both completed, with Fieller's 95% interval for a ratio
of paired means (t quantile, the rounds' covariance), "unbounded" where the reference's mean
is not clearly above 0.
"""
import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LIVE_WORKLOADS = ["gpt2_ft", "gpt2_ft_ckpt", "llama1b_fsdp", "llama1b_lora", "opt1b_generate", "qwen_lora_bigvocab",
                  "gpt2_offload", "moe_ft", "gpt2_microbatch"]
COMPILED = "gpt2_124m_compile"
WORKLOADS = LIVE_WORKLOADS + [COMPILED]
DEFAULT_ALLOCATORS = "pytorch,pytorch-expandable,ours:vms,ours:caching"
REFS = ("pytorch", "pytorch-expandable")
# A run's first estimate on the H200 before one has been seen (s): process start, model build and
# first step, then the steps (live-run.sh's run_cost; the compiled one: ~60 s of compilation).
FIRST_COST = {"llama1b_fsdp": (18, 0.37), "gpt2_ft": (18, 0.28), "gpt2_ft_ckpt": (18, 0.39), "llama1b_lora": (18, 0.55),
              "opt1b_generate": (18, 3.2), COMPILED: (75, 0.05)}
# t quantiles for a two-sided 95% interval, by degrees of freedom (above 30: the next lower entry)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 11: 2.201,
        12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080,
        22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021,
        60: 2.000, 120: 1.980}


class Bad(Exception):
    """Bad input: said in one line, exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        raise Bad(message)


# ---- statistics ---------------------------------------------------------------------------
def t975(df):
    if df < 1:
        raise ValueError("no degrees of freedom")
    return T975[max(k for k in T975 if k <= df)] if df <= 120 else 1.960


def mean(xs):
    return sum(xs) / len(xs)


def t_interval(xs):
    """(mean, low, high): the 95% t-interval of the mean; low = high = None with fewer than 2."""
    m = mean(xs)
    if len(xs) < 2:
        return m, None, None
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    h = t975(len(xs) - 1) * s / math.sqrt(len(xs))
    return m, m - h, m + h


def fieller(xs, ys):
    """(ratio, low, high) of mean(xs) / mean(ys) over paired samples: Fieller's 95% interval,
    the set of r with (mean(x) - r mean(y))^2 <= t^2 Var(mean(x) - r mean(y)). low = high =
    None with fewer than 2 pairs or where the set is not a bounded interval (the reference's
    mean is not clearly above 0)."""
    n = len(xs)
    mx, my = mean(xs), mean(ys)
    r = mx / my
    if n < 2:
        return r, None, None
    sxx = sum((x - mx) ** 2 for x in xs) / (n - 1)
    syy = sum((y - my) ** 2 for y in ys) / (n - 1)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (n - 1)
    t2 = t975(n - 1) ** 2 / n
    a, b, c = my * my - t2 * syy, -2 * (mx * my - t2 * sxy), mx * mx - t2 * sxx
    disc = b * b - 4 * a * c
    if a <= 0 or disc < 0:
        return r, None, None
    lo, hi = (-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)
    return r, lo, hi


def run_mean(run, warmup):
    steps = run.get("step_s") or []
    return mean(steps[warmup:]) if len(steps) > warmup else None


def summarize(runs, warmup, allocators):
    """Per workload and allocator: runs, the mean step time and its interval, the ratios to the
    references (paired by call and round), the first three steps, peak reserved."""
    out = []
    ok = [r for r in runs if r.get("ok") and r["round"] > 0 and run_mean(r, warmup) is not None]
    for w in sorted({r["workload"] for r in ok}, key=lambda w: WORKLOADS.index(w) if w in WORKLOADS else 99):
        by = {}
        for r in ok:
            if r["workload"] == w:
                by.setdefault(r["allocator"], {})[(r.get("call"), r["round"])] = r
        for a in sorted(by, key=lambda a: allocators.index(a) if a in allocators else 99):
            mine = by[a]
            m, lo, hi = t_interval([run_mean(r, warmup) for r in mine.values()])
            row = {"workload": w, "allocator": a, "runs": len(mine), "mean_step_s": m, "ci95": [lo, hi]}
            for ref in REFS:
                if ref in by and ref != a:
                    keys = sorted(set(mine) & set(by[ref]), key=str)
                    if keys:
                        xs = [run_mean(mine[k], warmup) for k in keys]
                        ys = [run_mean(by[ref][k], warmup) for k in keys]
                        rr, rlo, rhi = fieller(xs, ys)
                        per_round = [x / y for x, y in zip(xs, ys)]
                        row["vs_" + ref] = {"ratio": rr, "ci95": [rlo, rhi], "rounds": len(keys),
                                            "round_ratios": [round(q, 4) for q in per_round]}
            firsts = []
            for i in range(3):
                vals = [r["step_s"][i] for r in mine.values() if len(r["step_s"]) > i]
                firsts.append(mean(vals) if vals else None)
            row["first_steps_s"] = firsts
            # the launching thread's CPU time per step after warm-up, as a share of the step's wall
            # time (near 1: the host bounds the step), and the whole process's (our JS thread too)
            for key, name in (("step_cpu_s", "main_cpu_share"), ("step_proc_cpu_s", "process_cpu_share")):
                shares = [sum(r[key][warmup:]) / sum(r["step_s"][warmup:]) for r in mine.values()
                          if r.get(key) and len(r[key]) == len(r["step_s"]) and sum(r["step_s"][warmup:]) > 0]
                row[name] = mean(shares) if shares else None
            peaks = sorted(r["peak_reserved_bytes"] for r in mine.values() if r.get("peak_reserved_bytes"))
            row["peak_reserved_bytes"] = peaks[len(peaks) // 2] if peaks else None
            out.append(row)
    return out


# ---- the report -----------------------------------------------------------------------------
def fmt_ci(lo, hi, digits):
    return "unbounded" if lo is None else f"{lo:.{digits}f}..{hi:.{digits}f}"


def markdown(doc):
    st = doc["settings"]
    lines = [f"# Step time ({st.get('date', '?')}{', ' + doc['machine'] if doc.get('machine') else ''})", ""]
    if doc.get("incomplete"):
        lines += [f"**Incomplete**: {doc['incomplete']}", ""]
    lines += [f"{st['rounds']} rounds x {st['steps']} steps, fresh process per run, allocators interleaved each round "
              f"({st['order']} order{', after one uncounted run per workload' if st.get('prime') else ''}), the same seeds "
              f"in every run; mean over the steps after the first {st['warmup']} "
              f"of each run, then over runs (95% t-interval). Ratios: mean(x) / mean(reference) over the rounds both "
              f"completed, Fieller's 95% interval for paired means. Steps 1-3: their mean over runs (warm-up). CPU: the "
              f"launching thread's CPU time over the measured steps' wall time, and the whole process's (our engine's "
              f"thread too){'; every run pinned to CPUs ' + st['pin'] if st.get('pin') else ''}.", ""]
    for w in sorted({r["workload"] for r in doc["summary"]}, key=lambda w: WORKLOADS.index(w) if w in WORKLOADS else 99):
        lines += [f"## {w}", "", "| allocator | runs | mean step s (95% CI) | vs pytorch (95% CI) | vs expandable (95% CI) | "
                  "steps 1 / 2 / 3 s | CPU main / process | peak reserved GiB |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in (x for x in doc["summary"] if x["workload"] == w):
            cells = [r["allocator"], str(r["runs"]), f"{r['mean_step_s']:.4f} ({fmt_ci(*r['ci95'], 4)})"]
            for ref in REFS:
                v = r.get("vs_" + ref)
                cells.append("self" if r["allocator"] == ref else "-" if v is None else
                             f"{v['ratio']:.3f} ({fmt_ci(*v['ci95'], 3)})" + ("" if v["rounds"] == r["runs"] else f", {v['rounds']} rounds"))
            cells.append(" / ".join("-" if x is None else f"{x:.3f}" for x in r["first_steps_s"]))
            mc, pc = r.get("main_cpu_share"), r.get("process_cpu_share")
            cells.append("-" if mc is None else f"{mc:.2f} / {pc:.2f}")
            cells.append("-" if r["peak_reserved_bytes"] is None else f"{r['peak_reserved_bytes'] / 2**30:.2f}")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    failed = [r for r in doc["runs"] if not r.get("ok")]
    if failed:
        lines += ["## Runs that failed", ""] + [f"- {r['workload']} {r['allocator']} round {r['round']}: {r.get('error', '?')}"
                                               for r in failed] + [""]
    if doc.get("skipped"):
        lines += ["## Not run (time limit)", "", ", ".join(doc["skipped"]), ""]
    return "\n".join(lines)


def write_whole(out_dir, stem, doc, text):
    """STEM.json (doc) and STEM.md (text), each written whole (a reader never sees half of one)."""
    os.makedirs(out_dir, exist_ok=True)
    for name, body in ((stem + ".json", json.dumps(doc, indent=1)), (stem + ".md", text)):
        tmp = os.path.join(out_dir, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(body)
        os.replace(tmp, os.path.join(out_dir, name))


def write(out_dir, doc):
    write_whole(out_dir, "step-time", doc, markdown(doc))


# ---- running ----------------------------------------------------------------------------------
def parse_allocator(spec):
    """(live_workloads.py's --allocator, extra environment)."""
    base, at, interface = spec.partition("@")
    if base not in REFS and not (base.startswith("ours:") and len(base) > 5):
        raise Bad(f"unknown allocator {spec!r} (pytorch, pytorch-expandable, ours:POLICY[,k=v...][@native|@pluggable|@baseline])")
    if at and (not base.startswith("ours:") or interface not in ("native", "pluggable", "baseline")):
        raise Bad(f"allocator {spec!r}: @native, @pluggable or @baseline, and only after ours:POLICY")
    if interface == "baseline":
        # the library finds its JS beside itself: the baseline's library is the baseline's engine
        lib = os.environ.get("GMLAKE_BASELINE_LIB", "")
        if not os.path.isfile(lib):
            raise Bad(f"allocator {spec!r}: no baseline library (GMLAKE_BASELINE_LIB={lib!r}): "
                      "bash scripts/gpu/bundle.sh --live --baseline REV here, and carry .gpu")
        return base, {"GMLAKE_TORCH_ALLOC_LIB": lib}
    return base, ({"GMLAKE_INTERFACE": interface} if at else {})


def command(py, workload, allocator, steps, rnd, extra=()):
    if workload == COMPILED:
        head = [py, os.path.join(HERE, "step_time.py"), "child", workload]
    else:
        head = [py, os.path.join(HERE, "live_workloads.py"), workload]
    return head + ["--allocator", allocator, "--steps", str(steps), "--rep", str(rnd), *extra]


def estimate(workload, steps, seen, first=None):
    if seen.get(workload):
        return 1.1 * max(seen[workload])
    if first is not None:
        return first
    start, per = FIRST_COST.get(workload, (18, 0.6))
    return start + per * (steps - 1)


RUNNING = [None]  # the run's process group, for a SIGTERM to this script


def on_term(doc, out_dir):
    """SIGTERM (an outer timeout): the run in progress goes, what was measured is written."""
    def handler(signum, frame):
        if RUNNING[0] is not None:
            os.killpg(RUNNING[0], signal.SIGKILL)
            os.waitpid(RUNNING[0], 0)
        doc["incomplete"] = f"stopped by signal {signum} after {len(doc['runs'])} runs"
        write(out_dir, doc)
        sys.exit(3)
    return handler


def parse_cpus(text):
    """--pin's CPU list ("0-7", "0,2,4-6") as a set of CPU numbers this process may run on."""
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
            raise Bad(f"--pin {text!r}: a CPU list like 0-7 or 0,2,4-6")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    allowed = os.sched_getaffinity(0)
    if not cpus <= allowed:
        raise Bad(f"--pin {text!r}: CPUs {sorted(cpus - allowed)} are not this process's (it may use {len(allowed)})")
    return cpus


# What a run's record keeps of the engine's stats(): how its requests were answered (the
# foresight's answers taken, the JS thread's drains; torch-alloc README "Threading").
ENGINE_KEPT = ("calls", "threading", "speculate", "num_speculations", "num_speculation_hits", "num_speculation_misses", "num_made_ahead", "num_undone_ahead",
               "num_free_drains", "drain_wait_us")


def one_run(py, workload, spec, steps, rnd, limit, pin=None, extra=()):
    allocator, env_extra = parse_allocator(spec)
    env = dict(os.environ, **env_extra)
    t0 = time.perf_counter()
    rec = {"workload": workload, "allocator": spec, "round": rnd}
    # a session of its own: at the limit the whole group goes (torch.compile's worker processes too)
    # --pin: every run on the same CPUs (the same cores and memory node each time)
    pre = (lambda: os.sched_setaffinity(0, pin)) if pin else None
    p = subprocess.Popen(command(py, workload, allocator, steps, rnd, extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, start_new_session=True, preexec_fn=pre)
    RUNNING[0] = p.pid
    try:
        out, err = p.communicate(timeout=limit)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        rc, err = "timeout", "killed at the time limit"
    RUNNING[0] = None
    rec["process_s"] = round(time.perf_counter() - t0, 3)
    result = None
    for line in out.splitlines():
        if line.startswith("RESULT "):
            try:
                result = json.loads(line[len("RESULT "):])
            except ValueError:
                pass
    if rc == 0 and result is not None and result.get("step_s"):
        st = result.get("engine") or {}
        kept = {k: st[k] for k in ENGINE_KEPT if k in st}
        if kept:
            rec["engine"] = kept
        rec.update(ok=True, step_s=result["step_s"], values=result.get("values"), wall_s=result.get("wall_s"),
                   peak_reserved_bytes=result.get("peak_reserved_bytes") or st.get("reserved_bytes.all.peak"),
                   torch=result.get("torch"), gpu=result.get("gpu"), step_cpu_s=result.get("step_cpu_s"),
                   step_proc_cpu_s=result.get("step_proc_cpu_s"), cpus_allowed=result.get("cpus_allowed"),
                   step_route=result.get("step_route"))
    else:
        tail = [l for l in (err or "").strip().splitlines() if l.strip()]
        rec.update(ok=False, rc=rc, error=(tail[-1] if tail else f"exit {rc}, no RESULT line")[:300])
    return rec


def main_run(args):
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            raise Bad(f"unknown workload {w!r} (one of {', '.join(WORKLOADS)})")
    allocators = [a for a in args.allocators.split(",") if a]
    for a in allocators:
        parse_allocator(a)
    if not workloads or not allocators:
        raise Bad("--workloads and --allocators need at least one name each")
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0 or args.time_limit <= 0:
        raise Bad("--rounds and --steps must be >= 1, --warmup >= 0, --time-limit > 0")
    if args.steps <= args.warmup:
        raise Bad(f"--steps ({args.steps}) must be more than --warmup ({args.warmup}): no step would be measured")
    pin = parse_cpus(args.pin) if args.pin else None
    deadline = time.monotonic() + args.time_limit
    call = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc = {"settings": {"date": call, "workloads": workloads, "allocators": allocators, "rounds": args.rounds, "steps": args.steps,
                        "warmup": args.warmup, "order": args.order, "time_limit_s": args.time_limit, "prime": args.prime,
                        "pin": args.pin},
           "runs": [], "summary": [], "skipped": []}
    plan = []
    for w in workloads:  # a workload's rounds before the next workload: each call gives whole workloads
        if args.prime:  # round 0: not counted (warms the file cache and torch.compile's cache for all alike)
            plan.append((w, 0, allocators[0]))
        for rnd in range(1, args.rounds + 1):
            k = (rnd - 1) % len(allocators) if args.order == "rotate" else 0
            plan += [(w, rnd, a) for a in allocators[k:] + allocators[:k]]
    seen = {}
    signal.signal(signal.SIGTERM, on_term(doc, args.out))
    for i, (w, rnd, a) in enumerate(plan):
        left = deadline - time.monotonic()
        if left < estimate(w, args.steps, seen, args.first_estimate):
            doc["skipped"] = [f"{pw} {pa} r{pr}" for pw, pr, pa in plan[i:]]
            doc["incomplete"] = (f"the time limit ({args.time_limit:g} s) left {max(left, 0):.0f} s, less than the next run's "
                                 f"estimate; {len(plan) - i} of {len(plan)} runs not started (listed at the end)")
            break
        print(f"step_time: {w} {a} round {rnd} ({i + 1}/{len(plan)}, {left:.0f} s left)", flush=True)
        rec = one_run(args.python, w, a, args.steps, rnd, max(1.0, left), pin)
        rec["call"] = call
        doc["runs"].append(rec)
        if rec["ok"]:
            seen.setdefault(w, []).append(rec["process_s"])
            doc["machine"] = doc.get("machine") or (f"{rec.get('gpu')}, torch {rec.get('torch')}" if rec.get("gpu") else None)
        else:
            print(f"step_time: {w} {a} round {rnd} failed: {rec['error']}", flush=True)
        doc["summary"] = summarize(doc["runs"], args.warmup, allocators)
        write(args.out, doc)
    doc["summary"] = summarize(doc["runs"], args.warmup, allocators)
    write(args.out, doc)
    print(markdown(doc))
    return 0


def main_report(files, out):
    docs = []
    for f in files:
        try:
            with open(f) as fh:
                docs.append(json.load(fh))
        except (OSError, ValueError) as e:
            raise Bad(f"cannot read {f}: {e}")
        if not isinstance(docs[-1], dict) or "runs" not in docs[-1] or "settings" not in docs[-1]:
            raise Bad(f"{f} is not a step-time.json")
    warm = {d["settings"]["warmup"] for d in docs}
    if len(warm) != 1:
        raise Bad(f"the files were measured with different --warmup ({sorted(warm)}): not comparable")
    allocators = []
    for d in docs:
        allocators += [a for a in d["settings"]["allocators"] if a not in allocators]
    st = dict(docs[0]["settings"], date=", ".join(d["settings"]["date"] for d in docs), allocators=allocators,
              rounds="/".join(str(d["settings"]["rounds"]) for d in docs),
              steps="/".join(sorted({str(d["settings"]["steps"]) for d in docs})))
    runs = [r for d in docs for r in d["runs"]]
    doc = {"settings": st, "runs": runs, "summary": summarize(runs, st["warmup"], allocators),
           "skipped": [s for d in docs for s in d.get("skipped", [])], "machine": next((d.get("machine") for d in docs if d.get("machine")), None)}
    if any(d.get("incomplete") for d in docs):
        doc["incomplete"] = "; ".join(d["incomplete"] for d in docs if d.get("incomplete"))
    if os.path.abspath(os.path.join(out, "step-time.json")) in {os.path.abspath(f) for f in files}:
        raise Bad("--out would overwrite an input: give another folder")
    write(out, doc)
    print(markdown(doc))
    return 0


# ---- the compiled workload (child process) ----------------------------------------------------
def child(argv):
    ap = Parser(prog="step_time.py child")
    ap.add_argument("name", choices=[COMPILED])
    ap.add_argument("--allocator", default="pytorch")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rep", type=int, default=None)
    ap.add_argument("--alternate", choices=["pytorch", "pytorch-expandable"], default=None)  # as live_workloads.py's
    a = ap.parse_args(argv)
    if a.alternate and not a.allocator.startswith("ours:"):
        raise Bad("--alternate alternates an ours:POLICY allocator's steps with PyTorch's own")
    # the allocator is chosen before torch is imported, as live_workloads.py does
    mode = a.alternate or a.allocator
    if mode == "pytorch-expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    elif mode == "pytorch":
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    elif not a.allocator.startswith("ours:"):
        raise Bad(f"unknown allocator {a.allocator!r}")
    import random

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    ours = None
    if a.allocator.startswith("ours:"):
        spec = a.allocator[len("ours:"):].split(",")
        sys.path.insert(0, os.environ.get("GMLAKE_TORCH_PY", os.path.join(HERE, "../../packages/torch-alloc/python")))
        import gmlake_torch as ours

        ours.enable(policy=spec[0], **dict(kv.split("=", 1) for kv in spec[1:] if kv), **({"interface": "native"} if a.alternate else {}))
    route_of = None
    if a.alternate:
        from alternate_steps import route_of
        from gmlake_torch import cuda_allocator
    seed = 1234
    random.seed(seed)
    torch.manual_seed(seed)
    dev = torch.device("cuda")
    vocab, ctx, d, heads, layers, batch = 50304, 1024, 768, 12, 12, 8

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(C, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            x = x + self.proj(y)
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(d)

        def forward(self, ids):
            x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
            for b in self.blocks:
                x = b(x)
            return self.ln(x) @ self.wte.weight.t()  # tied head

    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def loss_of(ids):  # the forward and the loss compiled together (inductor fuses the cross entropy)
        logits = model(ids[:, :-1])
        return F.cross_entropy(logits.float().view(-1, vocab), ids[:, 1:].reshape(-1))

    compiled = torch.compile(loss_of)  # default mode: no CUDA graphs
    gen = torch.Generator(device=dev).manual_seed(seed)
    times, values, routes, cpu, proc_cpu = [], [], [], [], []
    t_all = time.perf_counter()
    for k in range(a.steps * (3 if a.alternate else 1)):  # --alternate: three steps on the same tokens
        if route_of is not None:
            routes.append(route_of(k))
            cuda_allocator.route(routes[-1])
        if a.alternate:
            gen.manual_seed(seed + k // 3)
        c0, p0 = time.thread_time(), time.process_time()
        t0 = time.perf_counter()
        ids = torch.randint(0, vocab, (batch, ctx + 1), device=dev, generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(ids)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        cpu.append(round(time.thread_time() - c0, 6))
        proc_cpu.append(round(time.process_time() - p0, 6))
        values.append(loss.item())
    res = {"workload": a.name, "allocator": a.allocator, "steps": len(times), "step_s": times, "values": values,
           "wall_s": time.perf_counter() - t_all, "rep": a.rep, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
           "step_route": routes or None, "step_cpu_s": cpu, "step_proc_cpu_s": proc_cpu}
    if ours is None:
        res["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    else:
        res["engine"] = {k: v for k, v in ours.stats().items() if k in ENGINE_KEPT + ("reserved_bytes.all.peak",)}
    print("RESULT " + json.dumps(res), flush=True)
    return 0


def main(argv):
    if argv[:1] == ["child"]:
        return child(argv[1:])
    if argv[:1] == ["report"]:
        ap = Parser(prog="step_time.py report")
        ap.add_argument("files", nargs="+")
        ap.add_argument("--out", default=os.environ.get("OUT", "."))
        a = ap.parse_args(argv[1:])
        return main_report(a.files, a.out)
    ap = Parser(prog="step_time.py", description="fresh-process step times, allocators interleaved")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--allocators", default=DEFAULT_ALLOCATORS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=540)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--python", default=os.environ.get("PYTHON", sys.executable))
    ap.add_argument("--order", choices=["rotate", "fixed"], default="rotate")
    ap.add_argument("--pin", default=None, help="CPU list every run is pinned to (taskset's form: 0-7 or 0,2,4-6)")
    ap.add_argument("--first-estimate", type=float, default=None,
                    help="seconds a workload's first run is taken to need (default: the H200's, FIRST_COST)")
    ap.add_argument("--no-prime", dest="prime", action="store_false",
                    help="no uncounted first run per workload (by default one warms the file and compile caches)")
    return main_run(ap.parse_args(argv))


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Bad as e:
        print(f"step_time: {e}", file=sys.stderr)
        sys.exit(2)
