"""Summarizes threading_bench JSON lines (stdin) as markdown tables, medians over runs: the
threading designs (ping and pairs, 1 and 2 threads), then the per-call parts (pb_pair and its
halves, js_pair, capture_check) of the runs that have them, by policy, driver and capture check."""
import json
import statistics as st
import sys

rows = [json.loads(line) for line in sys.stdin if line.startswith("{")]
keys = [("ping_1", "ping, 1 thread"), ("ping_n", "ping, 2 threads"), ("pair_1", "alloc+free, 1 thread"),
        ("pair_n", "alloc+free, 2 threads")]
print("| policy | design | " + " | ".join(f"{label} median / p99 us" for _, label in keys) + " |")
print("| --- | --- |" + " ---: |" * len(keys))
# rows of another library (live-run.sh's baseline: "lib": "baseline@REV") apart from this tree's
for pol, lib in dict.fromkeys((r["policy"], r.get("lib")) for r in rows):
    for d in ("locker", "thread"):
        rs = [r for r in rows if r["policy"] == pol and r.get("lib") == lib and r["threading"] == d]
        if not rs:
            continue
        cells = []
        for k, _ in keys:
            med = st.median(r[k]["median_us"] for r in rs)
            p99 = st.median(r[k]["p99_us"] for r in rs)
            cells.append(f"{med:.2f} / {p99:.2f}")
        print(f"| {pol} | {d}{f' ({lib})' if lib else ''} | " + " | ".join(cells) + " |")
starts = [r["start_ms"] for r in rows]
print(f"({len(rows)} runs; medians over the runs of each row; Node start + module load {min(starts):.0f}-{max(starts):.0f} ms)")

parts = [r for r in rows if "pb_pair" in r]
if parts:
    print("\n| policy | driver | capture check | design | round trip | pair (pair_bench pattern) | its alloc | its free | JS alone (mean) | one cuStreamIsCapturing |")
    print("| --- | --- | --- | --- |" + " ---: |" * 6)
    def group(r):
        return (r["policy"], r["driver"], r.get("capture_check_mode", "always"), r["threading"] + (f" ({r['lib']})" if r.get("lib") else ""))

    groups = dict.fromkeys(group(r) for r in parts)
    for g in groups:
        rs = [r for r in parts if group(r) == g]

        def cell(k, p99=True):
            med = st.median(r[k]["median_us"] for r in rs)
            return f"{med:.2f} / {st.median(r[k]['p99_us'] for r in rs):.2f}" if p99 else f"{med:.2f}"

        cap = [r["capture_check"] for r in rs if "median_us" in r["capture_check"]]
        capture = (f"{st.median(c['median_us'] for c in cap):.3f} / {st.median(c['p99_us'] for c in cap):.3f}" if cap
                   else rs[0]["capture_check"].get("skipped", "-"))
        js = st.median(r["js_pair"]["mean_us"] for r in rs)
        print(f"| {' | '.join(g)} | {cell('ping_1')} | {cell('pb_pair')} | {cell('pb_alloc', False)} | "
              f"{cell('pb_free', False)} | {js:.2f} | {capture} |")
    print("(median / p99 us, medians over the runs; JS alone: the same loop inside the embedded Node)")
