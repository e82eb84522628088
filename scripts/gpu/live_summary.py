"""live-run.sh's tables (markdown) from its results.jsonl and logs.

usage: python3 live_summary.py SOURCE... [--warmup N]
  SOURCE    a live-run work folder (its results.jsonl, memcheck-*.log) or a results .jsonl
            (several: one call's A and B outputs together, e.g. gpu-out-a/live-results.jsonl)
  --warmup  steps before this index are warm-up and left out of step times and the steady
            state's engine counts (default 3)

Runs tagged timing-* (live-run.sh's `timing` step, no sampler, interleaved rounds) make the
timing table; every run, timing ones included, counts for the loss comparison (the same
seeds give step i the same shape and data in every run, so the first steps of a longer run
compare with a shorter one's).
"""
import glob
import json
import os
import re
import statistics
import sys

GiB = 1 << 30
REFS = ("pytorch-expandable", "pytorch")  # the timing table's references
TOL_FACTOR = 3  # losses: within TOL_FACTOR x PyTorch default's own rep-to-rep max rel. diff ...
TOL_FLOOR = 1e-6  # ... or this (a few float32 ulps), where PyTorch repeats itself bit for bit


def load(sources):
    """The rows of every source, in order; and the memcheck logs found (folder, spec, text)."""
    rows, memchecks = [], []
    for src in sources:
        path = os.path.join(src, "results.jsonl") if os.path.isdir(src) else src
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict):
                    rows.append(r)
        folder = src if os.path.isdir(src) else os.path.dirname(src)
        for log in sorted(glob.glob(os.path.join(folder, "memcheck-*.log"))):
            spec = os.path.basename(log)[len("memcheck-"):-len(".log")]
            memchecks.append((src, spec, open(log, errors="replace").read()))
    return rows, memchecks


def gib(b):
    return f"{b / GiB:.2f}" if isinstance(b, (int, float)) else "-"


def is_timing(r):
    return str(r.get("tag", "")).startswith("timing-")


def is_exact(values):
    """Token checksums (generation): integers, equal or not; losses are floats."""
    return bool(values) and all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def rel_diff(a, b):
    """The max relative difference of a against b over the steps both have (None: none in common)."""
    n = min(len(a), len(b))
    if n == 0:
        return None
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a[:n], b[:n]))


def n_differ(a, b):
    n = min(len(a), len(b))
    return None if n == 0 else sum(1 for x, y in zip(a[:n], b[:n]) if x != y)


def value_refs(rows):
    """Per workload: (the reference run = the first PyTorch-default run, preferring the workloads
    step's; PyTorch default's own rep-to-rep difference: max over its other runs against it)."""
    out = {}
    for w in dict.fromkeys(r["workload"] for r in rows if r.get("workload")):
        runs = [r for r in rows if r.get("workload") == w and r.get("allocator") == "pytorch" and r.get("values")]
        runs.sort(key=is_timing)  # stable: the workloads step's runs first
        if not runs:
            continue
        ref = runs[0]
        exact = is_exact(ref["values"])
        noise = [(n_differ if exact else rel_diff)(r["values"], ref["values"]) for r in runs[1:]]
        noise = [x for x in noise if x is not None]
        out[w] = (ref, max(noise) if noise else None, exact)
    return out


def value_verdict(r, refs):
    """(the difference cell, the within-noise cell) of one run against its workload's reference."""
    w, vals = r.get("workload"), r.get("values") or []
    if w not in refs or not vals:
        return "-", "-"
    ref, noise, exact = refs[w]
    if r is ref:
        return "reference", "-"
    if exact:
        k = n_differ(vals, ref["values"])
        if k is None:
            return "-", "-"
        n = min(len(vals), len(ref["values"]))
        allowed = noise or 0
        return f"{k} of {n} differ", ("yes" if k <= allowed else "NO")
    d = rel_diff(vals, ref["values"])
    if d is None:
        return "-", "-"
    if noise is None:
        return f"{d:.2e}", "? (one PyTorch run)"
    return f"{d:.2e}", ("yes" if d <= max(TOL_FACTOR * noise, TOL_FLOOR) else "NO")


def steady(r, warmup):
    """The step times at index >= warmup."""
    return (r.get("step_s") or [])[warmup:]


def paired(xs, refs, warmup):
    """xs, refs: lists of step-time lists, paired by position (the same round). Per step index
    i >= warmup: the ratio x[i] / ref[i] averaged over the pairs; returns (median of those
    per-step ratios, min and max of the per-pair mean ratios) or None."""
    pairs = [(x, y) for x, y in zip(xs, refs) if x and y]
    if not pairs:
        return None
    n = min(min(len(x), len(y)) for x, y in pairs)
    if n <= warmup:
        return None
    per_step = [statistics.mean(x[i] / y[i] for x, y in pairs) for i in range(warmup, n)]
    per_pair = [statistics.mean(x[i] / y[i] for i in range(warmup, n)) for x, y in pairs]
    return statistics.median(per_step), min(per_pair), max(per_pair)


def fmt_ratio(p):
    return "-" if p is None else f"{p[0]:.3f} ({p[1]:.3f}..{p[2]:.3f})"


def timing_table(rows, warmup):
    runs = {}
    for r in rows:
        if is_timing(r) and r.get("workload") and r.get("step_s"):
            runs.setdefault(r["workload"], {}).setdefault(r["allocator"], []).append(r)
    lines = [f"\n## step time (timing step: interleaved rounds, no sampler; steps >= {warmup})\n",
             "Mean: over the steps of a run, then over its rounds (min..max of the rounds). Paired ratio: per step index, "
             "that step's time over the reference's same step in the same round, averaged over the rounds; the median of "
             "those per-step ratios (min..max of the rounds' mean ratios). Against itself: round k+1 over round k, "
             "PyTorch's own run-to-run spread.\n",
             "| workload | allocator | rounds | mean step s | vs " + " | vs ".join(REFS) + " |",
             "| --- | --- | ---: | ---: |" + " ---: |" * len(REFS)]
    for w, by_alloc in runs.items():
        for a, rs in by_alloc.items():
            rs = sorted(rs, key=lambda r: (r.get("rep") is None, r.get("rep") or 0))
            means = [statistics.mean(steady(r, warmup)) for r in rs if steady(r, warmup)]
            mean = f"{statistics.mean(means):.4f} ({min(means):.4f}..{max(means):.4f})" if means else "-"
            cells = []
            for ref in REFS:
                ref_runs = sorted(by_alloc.get(ref, []), key=lambda r: (r.get("rep") is None, r.get("rep") or 0))
                if a == ref:  # round k+1 against round k
                    p = paired([r["step_s"] for r in rs[1:]], [r["step_s"] for r in rs[:-1]], warmup)
                    cells.append("self: " + fmt_ratio(p))
                else:
                    by_rep = {r.get("rep"): r["step_s"] for r in ref_runs}
                    mine = [r for r in rs if r.get("rep") in by_rep]
                    p = paired([r["step_s"] for r in mine], [by_rep[r.get("rep")] for r in mine], warmup)
                    cells.append(fmt_ratio(p))
            lines.append(f"| {w} | {a} | {len(rs)} | {mean} | " + " | ".join(cells) + " |")
    return lines if runs else []


def engine_steady(r, warmup):
    """The engine's per-step deltas at index >= warmup, summed: (steps, {count: total})."""
    se = (r.get("step_engine") or [])[warmup:]
    tot = {}
    for d in se:
        for k, v in d.items():
            tot[k] = tot.get(k, 0) + v
    return len(se), tot


def engine_table(rows, warmup):
    lines = [f"\n## what the allocator does in the steady state (ours; PyTorch's own behind the plug: host time only; steps >= {warmup}, per step)\n",
             "Host: the time the calling threads spent inside alloc and free (GMLAKE_TIME_CALLS=1, or the plug's timer), per "
             "step and per alloc+free pair.\n",
             "| workload | allocator | run | steps | driver calls | by kind | driver ms | host ms in alloc+free | host us per pair | of which enter / prepare / JS / rest | syncs (all streams) | cross-stream reuses | deferred frees |",
             "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
    n_rows = 0
    for r in rows:
        if "step_engine" not in r:
            continue
        n, tot = engine_steady(r, warmup)
        if n == 0:
            continue
        n_rows += 1
        kinds = {k[len("driver."):]: v for k, v in tot.items() if k.startswith("driver.") and v}
        calls = sum(kinds.values())
        by_kind = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])) or "none"
        run = f"timing r{r.get('rep')}" if is_timing(r) else str(r.get("tag", "")).split("-")[0] or "workloads"
        host = f"{tot['call_us'] / n / 1000:.2f}" if "call_us" in tot else "-"  # GMLAKE_TIME_CALLS=1 runs
        pair = f"{tot['call_us'] / tot['allocs']:.2f}" if tot.get("allocs") else "-"
        parts = "-"
        if tot.get("allocs") and "call_js_us" in tot:  # per pair: taking the isolate, scopes + frees' hand-over, JS, the rest
            ps = [tot.get(f"call_{p}_us", 0) for p in ("enter", "prepare", "js")]
            parts = " / ".join(f"{v / tot['allocs']:.2f}" for v in ps + [tot["call_us"] - sum(ps)])
        lines.append(f"| {r['workload']} | {r['allocator']} | {run} | {n} | {calls / n:.1f} | {by_kind} | "
                     f"{tot.get('driver_us', 0) / n / 1000:.2f} | "
                     f"{host} | {pair} | {parts} | "
                     f"{tot.get('num_sync_all_streams', 0) / n:.2f} | "
                     f"{tot.get('num_cross_stream_reuses', 0) / n:.2f} | {tot.get('num_deferred_frees', 0) / n:.2f} |")
    return lines if n_rows else []


def js_thread_table(rows):
    """What ours' one JS thread did between calls, over each whole run (stats()): the
    allocations that took an address it worked out ahead (GMLAKE_SPECULATE) and the frees it
    handed to the engine while it waited (GMLAKE_DRAIN_US)."""
    lines = ["\n## the JS thread's work between calls (ours with one JS thread; whole runs)\n",
             "| workload | allocator | run | speculate | allocations | took an answer worked out ahead | frees | drained while it waited |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    n_rows = 0
    for r in rows:
        e = r.get("engine")
        if not isinstance(e, dict) or e.get("threading") != "thread" or not r.get("workload"):
            continue
        allocs, frees = e.get("calls", {}).get("allocs", 0), e.get("calls", {}).get("frees", 0)
        hits, drained = e.get("num_speculation_hits", 0), e.get("num_drained_frees", 0)
        pct = lambda x, n: f"{x} ({100 * x / n:.1f}%)" if n else str(x)  # noqa: E731
        run = f"timing r{r.get('rep')}" if is_timing(r) else "workloads"
        n_rows += 1
        lines.append(f"| {r['workload']} | {r['allocator']} | {run} | {e.get('speculate', 0)} | {allocs} | {pct(hits, allocs)} | "
                     f"{frees} | {pct(drained, frees)} |")
    return lines if n_rows else []


HOST_REFS = ("plug:pytorch-expandable", "plug:pytorch")  # PyTorch's own allocator, its calls timed


def host_extra_table(rows, warmup):
    """The allocator's host time per step against PyTorch's own (behind the plug, timed the
    same way) in the same round, step by step: how much longer a host-bound step is. The
    median over the steps >= warmup of all rounds (min..max of the rounds' medians)."""
    runs = {}
    for r in rows:
        if is_timing(r) and r.get("workload") and r.get("step_engine") and r.get("step_s"):
            runs.setdefault(r["workload"], {}).setdefault(r["allocator"], {})[r.get("rep")] = r
    lines = [f"\n## host time in alloc+free per step against PyTorch's own (same round, same step; steps >= {warmup})\n",
             "Extra: this allocator's host ms in alloc+free minus PyTorch's in the same step of the same round; as % of "
             "PyTorch's step time there. Medians over the steps of every round (min..max of the rounds' medians).\n",
             "| workload | allocator | against | rounds | host ms per step | its host ms | extra ms | extra % of step |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    n_rows = 0

    def host(r, i):
        return r["step_engine"][i].get("call_us")

    for w, by_alloc in runs.items():
        for ref in HOST_REFS:
            if ref not in by_alloc:
                continue
            for a, reps in by_alloc.items():
                if a in HOST_REFS:
                    continue
                mine, theirs, extra, pct, per_round = [], [], [], [], []
                for rep, r in reps.items():
                    q = by_alloc[ref].get(rep)
                    if q is None:
                        continue
                    n = min(len(r["step_engine"]), len(q["step_engine"]), len(q["step_s"]))
                    ps = []
                    for i in range(warmup, n):
                        x, y = host(r, i), host(q, i)
                        if x is None or y is None:
                            continue
                        mine.append(x / 1000)
                        theirs.append(y / 1000)
                        extra.append((x - y) / 1000)
                        ps.append((x - y) / 1000 / (q["step_s"][i] * 1000) * 100)
                    if ps:
                        pct += ps
                        per_round.append(statistics.median(ps))
                if not pct:
                    continue
                n_rows += 1
                med = statistics.median
                lines.append(f"| {w} | {a} | {ref} | {len(per_round)} | {med(mine):.2f} | {med(theirs):.2f} | {med(extra):+.2f} | "
                             f"{med(pct):+.2f} ({min(per_round):+.2f}..{max(per_round):+.2f}) |")
    return lines if n_rows else []


def profile_table(rows):
    """The profiled steps (live-run.sh's `profile` step): per step and allocator what the GPU
    did, then the kernels whose time moved most against the first allocator's same step."""
    runs = [r for r in rows if r.get("profiles")]
    if not runs:
        return []
    lines = ["\n## where a step's time goes (profile step: torch.profiler, CUDA activity; ms)\n",
             "Busy: the union of the GPU's kernel and copy intervals; idle: from the first start to the last end, less busy "
             "(the GPU waiting for the host). Host in alloc+free: ours' own calls (GMLAKE_TIME_CALLS=1). A profiled step's "
             "wall time carries the profiler's cost.\n",
             "| workload | step | allocator | wall | kernels | kernel time | copies | busy | idle | host in alloc+free |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    moved = []
    by_step = {}
    for r in runs:
        for i, p in sorted(r["profiles"].items(), key=lambda kv: int(kv[0])):
            i = int(i)
            wall = (r.get("step_s") or [None] * (i + 1))[i]
            eng = (r.get("step_engine") or [{}] * (i + 1))[i] or {}
            host = f"{eng['call_us'] / 1000:.2f}" if "call_us" in eng else "-"
            lines.append(f"| {r['workload']} | {i} | {r['allocator']} | {wall * 1000:.1f} | {p['kernels']} | "
                         f"{p['kernel_us'] / 1000:.2f} | {p['copy_us'] / 1000:.2f} | {p['busy_us'] / 1000:.2f} | "
                         f"{p['idle_us'] / 1000:.2f} | {host} |")
            by_step.setdefault((r["workload"], i), []).append((r["allocator"], p))
    for (w, i), allocs in by_step.items():
        ref_name, ref = allocs[0]
        ref_top = {name: us for name, us, _ in ref["top"]}
        for a, p in allocs[1:]:
            deltas = sorted(((us - ref_top[name], name, ref_top[name], us) for name, us, _ in p["top"] if name in ref_top),
                            key=lambda d: -abs(d[0]))[:3]
            for d, name, ref_us, us in deltas:
                moved.append(f"| {w} | {i} | {a} vs {ref_name} | {name[:70]} | {ref_us / 1000:.2f} | {us / 1000:.2f} | {d / 1000:+.2f} |")
    if moved:
        lines += ["\nThe costliest kernels whose time moved most (against the first allocator's same step):\n",
                  "| workload | step | allocators | kernel | ref ms | ms | change |", "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
        lines += moved
    return lines


def check_detail(r):
    c = r["check"]
    if c == "smoke":
        return (f"losses {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, peak reserved {gib(r['stats']['reserved_bytes.all.peak'])} GiB, "
                f"{r['stats']['driver_total_calls']} driver calls, {r['deferred_frees']} deferred frees, snapshot {r['snapshot_bytes']} B")
    if c == "oom":
        return f"{r.get('raised')} (shim {r.get('shim')}): {str(r.get('message'))[:120]}"
    if c == "capture":
        return f"replayed {r.get('replayed')}, grown in capture {r.get('grown_in_capture')}" + (f": {str(r.get('error'))[:120]}" if r.get("error") else "")
    if c == "integrity":
        e = r.get("engine") or {}
        d = (f"{r['mismatches']} mismatches (control {r['control_mismatches']}/1000), {r['allocs']} allocs, "
             f"{r['bytes'] / GiB:.1f} GiB in {r['seconds_run']} s, left allocated {r['left_allocated_bytes']} B")
        if e:
            d += (f"; engine: {e.get('num_cross_stream_reuses')} cross-stream reuses, {e.get('num_deferred_frees')} deferred frees, "
                  f"{e.get('pending_frees')} pending, {e.get('driver_total_calls')} driver calls, {e.get('num_sync_all_streams')} syncs")
        if r.get("errors"):
            d += "; errors: " + " / ".join(r["errors"])[:200]
        return d
    return ""


def main(argv):
    warmup = 3
    sources = []
    it = iter(argv)
    for a in it:
        if a == "--warmup":
            try:
                warmup = int(next(it))
            except (StopIteration, ValueError):
                print("live_summary: --warmup wants a whole number", file=sys.stderr)
                return 2
        else:
            sources.append(a)
    if not sources:
        print("usage: python3 live_summary.py SOURCE... [--warmup N]", file=sys.stderr)
        return 2
    try:
        rows, memchecks = load(sources)
    except OSError as e:
        print(f"live_summary: {e}", file=sys.stderr)
        return 2

    print("## checks\n\n| check | exit | ok | detail |\n| --- | ---: | --- | --- |")
    for r in rows:
        if r.get("check") in ("smoke", "oom", "capture", "integrity"):
            try:
                d = check_detail(r)
            except (KeyError, TypeError, IndexError, ZeroDivisionError):
                d = ""
            print(f"| {r['tag']} | {r.get('rc')} | {r.get('ok')} | {d} |")

    print("\n## per-call cost inside the PyTorch process (alloc+free pair, us)\n\n| allocator | from Python: median | p99 | mean | timer alone | from C++: median | p99 | mean |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        if r.get("check") == "micro":
            n = r.get("native") or {}
            # a variant of a policy's run (e.g. micro-vms-capture-always) says which in its tag
            plain = "micro-" + r["policy"].replace(":", "_")
            tag = r.get("tag") or plain
            label = r["policy"] if tag == plain else f"{r['policy']} ({tag.removeprefix(plain + '-')})"
            print(f"| {label} | {r['median_us']} | {r['p99_us']} | {r['mean_us']} | {r['timer_median_us']} | "
                  f"{n.get('median_us', '-')} | {n.get('p99_us', '-')} | {n.get('mean_us', '-')} |")

    lay = [r for r in rows if r.get("check") == "layout" and r.get("rows")]
    if lay:
        keys = list(lay[0]["rows"])
        print("\n## kernels on the allocator's memory layout (layout check; GB/s, TFLOP/s, median of reps)\n")
        print("| allocator | knobs | " + " | ".join(keys) + " |\n| --- | --- | " + " | ".join("---:" for _ in keys) + " |")
        for r in lay:
            knobs = ",".join(f"{k}={v}" for k, v in (r.get("knobs") or {}).items()) or "-"
            print(f"| {r['policy']} | {knobs} | " + " | ".join(str(r["rows"].get(k, "-")) for k in keys) + " |")

    print("\n## threading (CPU, sim driver, vms; us)\n\n| design | ping 1 thr median / p99 | ping 2 thr | alloc+free 1 thr | alloc+free 2 thr |\n| --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        if "threading" in r and "ping_1" in r:
            cells = [f"{r[k]['median_us']:.2f} / {r[k]['p99_us']:.2f}" for k in ("ping_1", "ping_n", "pair_1", "pair_n")]
            print(f"| {r['threading']} | " + " | ".join(cells) + " |")

    refs = value_refs(rows)
    print("\n## workloads\n")
    print(f"Values: losses (training) or token checksums (generation). Tolerance rule: a run's max rel. diff vs the "
          f"PyTorch-default reference (over the steps both have) is within noise when it is at most {TOL_FACTOR} x PyTorch "
          f"default's own rep-to-rep max rel. diff (its other runs against the same reference), or {TOL_FLOOR:g} where that "
          f"is smaller; token checksums must be "
          f"equal, round for round, unless PyTorch's own reps differ too (then at most as many rounds differ as there).\n")
    for w, (ref, noise, exact) in refs.items():
        ns = "not measured (one PyTorch run)" if noise is None else (f"{noise} rounds differ" if exact else f"{noise:.2e}")
        print(f"- {w}: PyTorch default's own rep-to-rep diff {ns}")
    print("\n| workload | allocator | exit | steps | median step s | peak used GiB (sampled) | peak reserved GiB | values first / last | max rel. diff vs pytorch | within noise | driver calls / ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: |")
    for r in rows:
        if not r.get("workload") or is_timing(r):
            continue
        eng = r.get("engine") or {}
        reserved = eng.get("reserved_bytes.all.peak", r.get("peak_reserved_bytes"))
        vals = r.get("values") or []
        diff, ok = value_verdict(r, refs)
        calls = f"{eng.get('driver_total_calls')} / {eng.get('driver_total_time_us', 0) / 1000:.1f}" if eng else "-"
        if vals and is_exact(vals):
            fl = f"{vals[0]} / {vals[-1]}"
        else:
            fl = f"{vals[0]:.4f} / {vals[-1]:.4f}" if vals and isinstance(vals[0], (int, float)) else "-"
        print(f"| {r['workload']} | {r['allocator']} | {r.get('rc')} | {r.get('steps')} | {r.get('median_step_s', 0):.4f} | "
              f"{gib(r.get('peak_used_bytes'))} | {gib(reserved)} | {fl} | {diff} | {ok} | {calls} |")

    timing = [r for r in rows if is_timing(r) and r.get("workload")]
    if timing:
        print("\nThe timing step's runs (no sampler) against the same references:\n")
        print("| workload | allocator | round | exit | steps | peak reserved GiB | max rel. diff vs pytorch | within noise |")
        print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
        for r in timing:
            eng = r.get("engine") or {}
            diff, ok = value_verdict(r, refs)
            print(f"| {r['workload']} | {r['allocator']} | {r.get('rep')} | {r.get('rc')} | {r.get('steps')} | "
                  f"{gib(eng.get('reserved_bytes.all.peak', r.get('peak_reserved_bytes')))} | {diff} | {ok} |")
    for line in timing_table(rows, warmup) + engine_table(rows, warmup) + js_thread_table(rows) + host_extra_table(rows, warmup) + profile_table(rows):
        print(line)

    other = [r for r in rows if not r.get("workload") and not r.get("check") and "threading" not in r
             and (r.get("rc") not in (0, None) or r.get("skipped"))]
    if other:
        print("\n## runs without a result\n\n| tag | exit | seconds | why |\n| --- | ---: | ---: | --- |")
        for r in other:
            print(f"| {r.get('tag')} | {r.get('rc', '-')} | {r.get('seconds', '-')} | {r.get('skipped') or 'no RESULT line'} |")

    print("\n## memcheck\n")
    if not memchecks:
        print("not run")
    for src, spec, text in memchecks:
        m = re.findall(r"ERROR SUMMARY: .*", text)
        print(f"compute-sanitizer memcheck, live_checks.py smoke with ours:{spec} ({os.path.basename(os.path.normpath(src))}): "
              f"{m[-1] if m else 'no ERROR SUMMARY line (cut short?)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
