"""What the GPU did in a profiled stretch, from torch.profiler's Chrome trace: the time in
kernels and copies, how long the GPU was busy (the union of their intervals) and idle (the
span between the first start and the last end, less the busy time), and the kernels that
took the most time.

A step that is slower because its kernels are slower (the memory's layout, e.g. a TLB) has
more kernel time; one that is slower because the host feeds the GPU late (the allocator's
own time, a sync) has the same kernel time and more idle time. live_workloads.py
--profile-steps uses it.
"""

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def summarize(trace, top=12):
    """trace: the Chrome-trace dict (torch.profiler's export_chrome_trace, loaded)."""
    evs = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    out = {"kernels": 0, "kernel_us": 0.0, "copy_us": 0.0, "busy_us": 0.0, "span_us": 0.0, "idle_us": 0.0, "top": []}
    if not evs:
        return out
    by_name = {}
    spans = []
    for e in evs:
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        spans.append((ts, ts + dur))
        if e["cat"] == "kernel":
            out["kernels"] += 1
            out["kernel_us"] += dur
            n = by_name.setdefault(e.get("name", "?"), [0.0, 0])
            n[0] += dur
            n[1] += 1
        else:
            out["copy_us"] += dur
    spans.sort()
    busy, cur_s, cur_e = 0.0, spans[0][0], spans[0][1]
    for s, e in spans[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    span = max(e for _, e in spans) - spans[0][0]
    out.update(busy_us=busy, span_us=span, idle_us=span - busy)
    for k in ("kernel_us", "copy_us", "busy_us", "span_us", "idle_us"):
        out[k] = round(out[k], 1)
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
    out["top"] = [[name[:120], round(us, 1), n] for name, (us, n) in ranked]
    return out
