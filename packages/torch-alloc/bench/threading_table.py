"""Summarizes threading_bench JSON lines (stdin) as a markdown table: medians over runs."""
import json
import statistics as st
import sys

rows = [json.loads(line) for line in sys.stdin if line.startswith("{")]
keys = [("ping_1", "ping, 1 thread"), ("ping_n", "ping, 2 threads"), ("pair_1", "alloc+free, 1 thread"),
        ("pair_n", "alloc+free, 2 threads")]
print("| policy | design | " + " | ".join(f"{label} median / p99 us" for _, label in keys) + " |")
print("| --- | --- |" + " ---: |" * len(keys))
for pol in dict.fromkeys(r["policy"] for r in rows):
    for d in ("locker", "thread"):
        rs = [r for r in rows if r["policy"] == pol and r["threading"] == d]
        if not rs:
            continue
        cells = []
        for k, _ in keys:
            med = st.median(r[k]["median_us"] for r in rs)
            p99 = st.median(r[k]["p99_us"] for r in rs)
            cells.append(f"{med:.2f} / {p99:.2f}")
        print(f"| {pol} | {d} | " + " | ".join(cells) + " |")
starts = [r["start_ms"] for r in rows]
print(f"({len(rows)} runs; medians over the runs of each row; Node start + module load {min(starts):.0f}-{max(starts):.0f} ms)")
