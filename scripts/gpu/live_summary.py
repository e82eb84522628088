"""live-run.sh's tables (markdown) from its results.jsonl and logs.
usage: python3 live_summary.py WORK_DIR"""
import json
import os
import re
import sys

work = sys.argv[1]
rows = []
with open(os.path.join(work, "results.jsonl")) as f:
    for line in f:
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
GiB = 1 << 30


def gib(b):
    return f"{b / GiB:.2f}" if isinstance(b, (int, float)) else "-"


print("## checks\n\n| check | exit | ok | detail |\n| --- | ---: | --- | --- |")
for r in rows:
    if r.get("check") in ("smoke", "oom", "capture"):
        detail = {"smoke": lambda: f"losses {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, peak reserved {gib(r['stats']['reserved_bytes.all.peak'])} GiB, "
                                   f"{r['stats']['driver_total_calls']} driver calls, {r['deferred_frees']} deferred frees, snapshot {r['snapshot_bytes']} B",
                  "oom": lambda: f"{r.get('raised')} (shim {r.get('shim')}): {str(r.get('message'))[:120]}",
                  "capture": lambda: f"refused by {r.get('refused_by')}: {str(r.get('error'))[:120]}"}[r["check"]]
        try:
            d = detail()
        except (KeyError, TypeError, IndexError):
            d = ""
        print(f"| {r['tag']} | {r.get('rc')} | {r.get('ok')} | {d} |")

print("\n## per-call cost inside the PyTorch process (alloc+free pair, us)\n\n| allocator | from Python: median | p99 | mean | timer alone | from C++: median | p99 | mean |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    if r.get("check") == "micro":
        n = r.get("native") or {}
        print(f"| {r['policy']} | {r['median_us']} | {r['p99_us']} | {r['mean_us']} | {r['timer_median_us']} | "
              f"{n.get('median_us', '-')} | {n.get('p99_us', '-')} | {n.get('mean_us', '-')} |")

print("\n## threading (CPU, sim driver, vms; us)\n\n| design | ping 1 thr median / p99 | ping 2 thr | alloc+free 1 thr | alloc+free 2 thr |\n| --- | ---: | ---: | ---: | ---: |")
for r in rows:
    if "threading" in r and "ping_1" in r:
        cells = [f"{r[k]['median_us']:.2f} / {r[k]['p99_us']:.2f}" for k in ("ping_1", "ping_n", "pair_1", "pair_n")]
        print(f"| {r['threading']} | " + " | ".join(cells) + " |")

print("\n## workloads\n\n| workload | allocator | exit | steps | median step s | peak used GiB (sampled) | peak reserved GiB | values first / last | max rel. diff vs pytorch | driver calls / ms |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
base = {r["workload"]: r for r in rows if r.get("workload") and r.get("allocator") == "pytorch"}
for r in rows:
    if not r.get("workload"):
        if r.get("tag", "").count("-") and r.get("result", 1) is None and not r.get("check"):
            print(f"| {r['tag']} | - | {r.get('rc')} | - | - | - | - | - | - | - |")
        continue
    eng = r.get("engine") or {}
    reserved = eng.get("reserved_bytes.all.peak", r.get("peak_reserved_bytes"))
    vals = r.get("values") or []
    b = base.get(r["workload"])
    diff = "-"
    if b and b.get("values") and vals and len(b["values"]) == len(vals):
        diff = f"{max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(vals, b['values'])):.2e}"
    calls = f"{eng.get('driver_total_calls')} / {eng.get('driver_total_time_us', 0) / 1000:.1f}" if eng else "-"
    fl = f"{vals[0]:.4f} / {vals[-1]:.4f}" if vals and isinstance(vals[0], (int, float)) else "-"
    print(f"| {r['workload']} | {r['allocator']} | {r.get('rc')} | {r.get('steps')} | {r.get('median_step_s', 0):.4f} | {gib(r.get('peak_used_bytes'))} | {gib(reserved)} | {fl} | {diff} | {calls} |")

print("\n## memcheck\n")
log = os.path.join(work, "memcheck-vms.log")
if os.path.exists(log):
    text = open(log, errors="replace").read()
    m = re.findall(r"ERROR SUMMARY: .*", text)
    print(f"compute-sanitizer memcheck, live_checks.py smoke with ours:vms: {m[-1] if m else 'no ERROR SUMMARY line (cut short?)'}")
else:
    print("not run")
