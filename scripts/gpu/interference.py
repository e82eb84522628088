"""What one busy CPU core beside a training job costs its step time, measured inside the same
processes, so the machine's run-to-run noise cancels (issue 27).

Our engine's JS thread keeps a core partly busy while a step runs (step_time.py's "CPU
process" column: 1.33 cores where PyTorch's allocators use 1.00). Whether that slows the job
depends on the machine (on a virtual machine two vCPUs may share one physical core), and
fresh-process step times cannot tell: on the H200 host their runs differ by +-10% under the
same allocator. Here each run keeps a core busy (live_workloads.py --busy-core) during every
other step only, and the next run during the other steps; the same seeds give step i the same
shape in both, so each step index gives one ratio busy / idle from two runs that differ only
in the busy core.

usage: python3 interference.py [--workload W] [--allocator A] [--pairs N] [--steps N] [--warmup N]
                               [--time-limit S] [--out DIR] [--python PY]
  defaults: gpt2_ft, pytorch, 3 pairs of runs, 24 steps, warm-up 3 (those steps left out)
Out (DIR, default $OUT or .): interference.json (every run's step times) and interference.md.
Statistics (summarize): per pair the runs' own speeds cancel between its odd and even steps;
the geometric mean over pairs, with a 95% t-interval from the spread of the steps' ratios.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from step_time import Bad, Parser, mean, t975  # noqa: E402


def run(py, workload, allocator, steps, busy, limit):
    cmd = [py, os.path.join(HERE, "live_workloads.py"), workload, "--allocator", allocator, "--steps", str(steps),
           "--busy-core", busy]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"busy": busy, "ok": False, "error": "killed at the time limit"}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT ") and p.returncode == 0:
            r = json.loads(line[len("RESULT "):])
            return {"busy": busy, "ok": True, "step_s": r["step_s"], "busy_steps": r.get("busy_steps"),
                    "step_proc_cpu_s": r.get("step_proc_cpu_s")}
    tail = [l for l in p.stderr.strip().splitlines() if l.strip()]
    return {"busy": busy, "ok": False, "error": (tail[-1] if tail else f"exit {p.returncode}, no RESULT line")[:300]}


def summarize(pairs, warmup):
    """busy / idle over the complete pairs. Per pair and step index i, log(busy run's step i /
    idle run's step i) = log(cost) + or - log(run factor ratio), the sign set by i's parity: so the
    mean of the odd steps' and the mean of the even steps' logs, averaged, is the pair's log(cost)
    with the two runs' own speeds cancelled; the interval is from the spread inside those groups
    (pooled, N - 2 x pairs degrees of freedom)."""
    groups = []
    for odd, even in pairs:
        if not (odd.get("ok") and even.get("ok")):
            continue
        n = min(len(odd["step_s"]), len(even["step_s"]))
        g = {1: [], 0: []}
        for i in range(warmup, n):
            on, off = (odd, even) if i % 2 == 1 else (even, odd)
            g[i % 2].append(math.log(on["step_s"][i] / off["step_s"][i]))
        if g[0] and g[1]:
            groups.append((g[1], g[0]))
    if not groups:
        return None
    ests = [(mean(x) + mean(y)) / 2 for x, y in groups]
    m = mean(ests)
    count = sum(len(x) + len(y) for x, y in groups)
    df = count - 2 * len(groups)
    out = {"ratio": math.exp(m), "ci95": [None, None], "steps": count, "pairs": len(groups),
           "pair_ratios": [round(math.exp(e), 4) for e in ests]}
    if df >= 1:
        s2 = sum(sum((v - mean(g)) ** 2 for v in g) for x, y in groups for g in (x, y)) / df
        var = sum(s2 * (1 / len(x) + 1 / len(y)) / 4 for x, y in groups) / len(groups) ** 2
        h = t975(df) * math.sqrt(var)
        out["ci95"] = [math.exp(m - h), math.exp(m + h)]
    return out


def markdown(doc):
    st, s = doc["settings"], doc["summary"]
    lines = [f"# One busy core beside the job ({st['date']}{', ' + doc['machine'] if doc.get('machine') else ''})", "",
             f"{st['workload']} under {st['allocator']}: {st['pairs']} pairs of runs x {st['steps']} steps, a second "
             f"process keeping one core busy during the odd steps of one run of a pair and the even steps of the other; "
             f"per step index after the first {st['warmup']}: busy / idle.", ""]
    if s is None:
        lines.append("No complete pair: nothing to compare.")
    else:
        ci = "unbounded" if s["ci95"][0] is None else f"{s['ci95'][0]:.4f}..{s['ci95'][1]:.4f}"
        lines.append(f"**step time with a busy core / without: {s['ratio']:.4f} (95% CI {ci}), {s['steps']} step pairs in "
                     f"{s['pairs']} pairs of runs** (per pair: {', '.join(f'{q:.4f}' for q in s['pair_ratios'])})")
    lines += ["", "| pair | run | mean step s after warm-up | ok |", "| --- | --- | ---: | --- |"]
    for k, pair in enumerate(doc["pairs"], 1):
        for r in pair:
            ms = mean(r["step_s"][st["warmup"]:]) if r.get("ok") else None
            lines.append(f"| {k} | busy on {r['busy']} steps | {'-' if ms is None else f'{ms:.4f}'} | "
                         f"{'yes' if r.get('ok') else r.get('error', 'no')} |")
    return "\n".join(lines) + "\n"


def main(argv):
    ap = Parser(prog="interference.py")
    ap.add_argument("--workload", default="gpt2_ft")
    ap.add_argument("--allocator", default="pytorch")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=540)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv)
    if a.pairs < 1 or a.steps <= a.warmup + 1 or a.warmup < 0:
        raise Bad("--pairs must be >= 1, --warmup >= 0 and --steps at least --warmup + 2")
    deadline = time.monotonic() + a.time_limit
    doc = {"settings": {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "workload": a.workload,
                        "allocator": a.allocator, "pairs": a.pairs, "steps": a.steps, "warmup": a.warmup},
           "pairs": [], "summary": None}
    for k in range(a.pairs):
        pair = []
        for busy in (("odd", "even") if k % 2 == 0 else ("even", "odd")):  # alternate which runs first
            left = deadline - time.monotonic()
            if left < 1:
                doc["incomplete"] = f"the time limit ({a.time_limit:g} s) ended pair {k + 1}"
                break
            print(f"interference: pair {k + 1}, busy on {busy} steps", flush=True)
            pair.append(run(a.python, a.workload, a.allocator, a.steps, busy, left))
        if len(pair) == 2:
            doc["pairs"].append(sorted(pair, key=lambda r: r["busy"] != "odd"))  # (odd, even)
        if doc.get("incomplete"):
            break
    doc["summary"] = summarize(doc["pairs"], a.warmup)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "interference.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(a.out, "interference.md"), "w") as f:
        f.write(markdown(doc))
    print(markdown(doc))
    return 0 if doc["summary"] is not None else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Bad as e:
        print(f"interference: {e}", file=sys.stderr)
        sys.exit(2)
