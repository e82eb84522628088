"""Tests of the live run's scripts that need no GPU and no torch: live_summary.py's logic (on
run 6's real results and on made-up ones), live_checks.py integrity over a fake torch (the
pass, a corrupted fill caught, knobs reaching ours), and live-run.sh's loops with a fake
python (tags, rounds, per-workload allocator lists, the summary's timing table), and
driver-time-fresh.sh on the sim driver (needs the packages built).

usage: python3 scripts/gpu/test_live_scripts.py   (from the repository root or anywhere)
"""
import json
import math
import os
import shutil
import signal
import subprocess
import time
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RUN6 = os.path.join(ROOT, "benchmarks", "h200-2026-12-01", "live-results-run6.jsonl")
sys.path.insert(0, HERE)
import kernel_profile  # noqa: E402
import live_summary  # noqa: E402

# A stand-in for torch, enough for live_checks.py integrity: a tensor is one value over its
# elements; `t != v` counts the elements that differ; memory_allocated() counts live bytes.
FAKE_TORCH = '''
import contextlib, os, threading
__version__ = "fake"
int32, int64, uint8, bool = "int32", "int64", "uint8", "bool"
_lock = threading.Lock()
_live = [0]
_cap = [int(os.environ.get("FAKE_CAPACITY", "0"))]  # bytes; 0: none (ours' enable or the fraction sets it)
_fills = [0]
_corrupt = int(os.environ.get("FAKE_CORRUPT", "0"))

class Tensor:
    def __init__(self, n, v=0, esize=4, budgeted=False):
        self._n, self._v, self._bytes = n, v, esize * n
        with _lock:
            if budgeted and _cap[0] and _live[0] + self._bytes > _cap[0]:
                self._bytes = 0
                raise cuda.OutOfMemoryError("CUDA out of memory (fake)")
            _live[0] += self._bytes
    def __del__(self):
        with _lock:
            _live[0] -= self._bytes
    def numel(self):
        return self._n
    def fill_(self, v):
        with _lock:
            _fills[0] += 1
            bad = _corrupt and _fills[0] % _corrupt == 0
        self._v = v + 1 if bad else v
        return self
    def __ne__(self, v):
        return Tensor(self._n, self._n if self._v != v else 0)
    def sum(self):
        return Tensor(1, self._v)
    def add_(self, o):
        self._v += o._v if isinstance(o, Tensor) else o
        return self
    def item(self):
        return self._v
    def __getitem__(self, i):
        if isinstance(i, slice):  # a view: no memory of its own
            a, b, _ = i.indices(self._n)
            return Tensor(max(0, b - a), self._v, 0)
        return Tensor(1, self._v, 0)
    def view(self, *shape):
        return self
    def record_stream(self, s):
        assert isinstance(s, cuda.Stream)

def empty(*shape, dtype=None, device=None):
    n = 1
    for k in shape:
        n *= k if isinstance(k, int) else 1
    return Tensor(n, 0, 1 if dtype in (uint8, bool) else 4, budgeted=True)

def zeros(shape, dtype=None, device=None):
    return Tensor(1, 0)

def ne(t, v, out=None):  # out[i] = t[i] != v: one value over the elements, 1 or 0
    out._n, out._v = t._n, (1 if t._v != v else 0)
    return out

def sum(t, dim=None, dtype=None, out=None):  # a count of the 1s: the elements times the value
    out._v = t._n * t._v
    return out

class _Cuda:
    _tls = threading.local()
    class OutOfMemoryError(RuntimeError):
        pass
    class _Props:
        total_memory = 1 << 40
    def get_device_properties(self, d):
        return self._Props()
    def set_per_process_memory_fraction(self, f):
        _cap[0] = int(f * (1 << 40))
    class Stream:
        def wait_stream(self, other):
            assert isinstance(other, _Cuda.Stream)
    @contextlib.contextmanager
    def stream(self, s):
        prev = getattr(self._tls, "s", None)
        self._tls.s = s
        try:
            yield
        finally:
            self._tls.s = prev
    def synchronize(self):
        pass
    def _sleep(self, cycles):
        pass
    def memory_allocated(self):
        return _live[0]
    def memory_stats(self):
        return {"num_alloc_retries": 0}

    # for the layout check: events whose elapsed time is a fixed 2 ms
    class Event:
        def __init__(self, enable_timing=False):
            self.timing = enable_timing
        def record(self):
            pass
        def synchronize(self):
            pass
        def elapsed_time(self, other):
            assert self.timing and other.timing
            return 2.0
    def get_device_name(self):
        return "fake"

cuda = _Cuda()

bfloat16 = "bfloat16"
def ones(n, dtype=None, device=None):
    return Tensor(n, 1)
def randn(*shape, dtype=None, device=None):
    n = 1
    for k in shape:
        n *= k
    return Tensor(n)
def empty_like(t):
    return Tensor(t._n)
def _copy(self, o):
    self._v = o._v
    return self
Tensor.copy_ = _copy
def matmul(a, b, out=None):
    assert out is not None and out._n == a._n == b._n
    return out
'''

FAKE_OURS = '''
import json, os
import torch
_knobs = None
def enable(policy, capacity_bytes=None, **knobs):
    global _knobs
    _knobs = dict(knobs, policy=policy)
    if capacity_bytes:
        torch._cap[0] = capacity_bytes
def stats():
    return {"allocated_bytes.all.current": torch._live[0], "pending_frees": 0, "num_cross_stream_reuses": 3,
            "num_deferred_frees": 2, "driver_total_calls": 5, "driver_calls": {"memMap": 5, "memUnmap": 0},
            "enabled_with": _knobs}
'''


class Summary(unittest.TestCase):
    def test_paired_ratio_per_step_and_per_round(self):
        # round 1: 2x the reference after warm-up; round 2: 1x
        xs = [[9, 9, 9, 2, 2], [9, 9, 9, 1, 1]]
        refs = [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
        med, lo, hi = live_summary.paired(xs, refs, 3)
        self.assertAlmostEqual(med, 1.5)
        self.assertEqual((lo, hi), (1.0, 2.0))
        self.assertIsNone(live_summary.paired(xs, refs, 5))  # nothing after warm-up
        # unequal lengths: only the steps every pair has
        self.assertAlmostEqual(live_summary.paired([[1, 1, 1, 3, 3, 3]], [[1, 1, 1, 1]], 3)[0], 3.0)

    def test_values_rule_on_run6(self):
        rows, _ = live_summary.load([RUN6])
        refs = live_summary.value_refs(rows)
        ref, noise, exact = refs["llama1b_fsdp"]
        self.assertFalse(exact)
        self.assertEqual(ref["median_step_s"], rows[[r.get("workload") for r in rows].index("llama1b_fsdp")]["median_step_s"])
        self.assertAlmostEqual(noise, 1.09e-4, delta=0.01e-4)
        vms = next(r for r in rows if r.get("workload") == "llama1b_fsdp" and r.get("allocator") == "ours:vms")
        diff, ok = live_summary.value_verdict(vms, refs)
        self.assertEqual(ok, "yes")
        self.assertEqual(live_summary.value_verdict(ref, refs)[0], "reference")
        far = dict(vms, values=[v * 1.01 for v in vms["values"]])  # 1% off: outside 3 x 1.1e-4
        self.assertEqual(live_summary.value_verdict(far, refs)[1], "NO")

    def test_generation_checksums_exact(self):
        rows = [{"workload": "opt1b_generate", "allocator": a, "values": v, "tag": t}
                for a, v, t in [("pytorch", [5, 6, 7], "w1"), ("pytorch", [5, 6, 7], "w2"),
                                ("ours:vms", [5, 6, 7, 8], "timing-x-r1"), ("ours:gmlake", [5, 6, 9], "w3")]]
        refs = live_summary.value_refs(rows)
        self.assertEqual(refs["opt1b_generate"][1:], (0, True))
        self.assertEqual(live_summary.value_verdict(rows[2], refs), ("0 of 3 differ", "yes"))
        self.assertEqual(live_summary.value_verdict(rows[3], refs), ("1 of 3 differ", "NO"))

    def test_engine_steady_state(self):
        r = {"step_engine": [{"driver.memMap": 100}, {}, {}, {"driver.memMap": 2, "num_sync_all_streams": 1},
                             {"driver.memMap": 4, "driver.eventRecord": 2}]}
        n, tot = live_summary.engine_steady(r, 3)
        self.assertEqual((n, tot), (2, {"driver.memMap": 6, "num_sync_all_streams": 1, "driver.eventRecord": 2}))

    def test_host_extra_per_step_against_the_plug(self):
        def run(a, rep, host_ms, step_s=(0.2, 0.2, 0.2, 0.2, 0.2)):
            return {"tag": f"timing-w-{a}-r{rep}", "workload": "w", "allocator": a, "rep": rep, "step_s": list(step_s),
                    "step_engine": [{"call_us": h * 1000} for h in host_ms]}
        rows = [run("plug:pytorch-expandable", 1, [50, 50, 50, 4, 4]), run("ours:vms", 1, [90, 90, 90, 6, 10]),
                run("plug:pytorch-expandable", 2, [50, 50, 50, 4, 4]), run("ours:vms", 2, [90, 90, 90, 8, 8]),
                run("ours:vms [--x]", 1, [0, 0, 0, 4, 4])]
        lines = live_summary.host_extra_table(rows, 3)
        # round 1: extras 2 and 6 ms (1% and 3% of 200 ms), median 2%; round 2: 4 and 4 (2%)
        self.assertIn("| w | ours:vms | plug:pytorch-expandable | 2 | 8.00 | 4.00 | +4.00 | +2.00 (+2.00..+2.00) |", lines)
        self.assertIn("| w | ours:vms [--x] | plug:pytorch-expandable | 1 | 4.00 | 4.00 | +0.00 | +0.00 (+0.00..+0.00) |", lines)
        self.assertEqual(live_summary.host_extra_table([r for r in rows if r["allocator"] != "plug:pytorch-expandable"], 3), [])

    def test_cli_on_run6_and_bad_input(self):
        out = subprocess.run([sys.executable, os.path.join(HERE, "live_summary.py"), RUN6], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("Tolerance rule", out.stdout)
        self.assertIn("| llama1b_fsdp | ours:vms | 0 | 8 |", out.stdout)
        bad = subprocess.run([sys.executable, os.path.join(HERE, "live_summary.py"), "/nonexistent/x.jsonl"],
                             capture_output=True, text=True)
        self.assertEqual(bad.returncode, 2)
        self.assertEqual(len(bad.stderr.strip().splitlines()), 1)

    def test_micro_rows_name_their_variant(self):
        def row(policy, tag, med):
            return {"check": "micro", "policy": policy, "tag": tag, "ok": True, "rc": 0, "median_us": med, "p99_us": 9,
                    "mean_us": 5, "timer_median_us": 0.08, "native": {"median_us": med / 4, "p99_us": 3, "mean_us": 1.4}}
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, "r.jsonl")
            with open(f, "w") as fh:
                for r in (row("vms", "micro-vms", 5.7), row("vms", "micro-vms-capture-always", 9.7),
                          row("plug:pytorch-expandable", "micro-plug_pytorch-expandable", 5.2)):
                    fh.write(json.dumps(r) + "\n")
            out = subprocess.run([sys.executable, os.path.join(HERE, "live_summary.py"), f], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("| vms | 5.7 |", out.stdout)
        self.assertIn("| vms (capture-always) | 9.7 |", out.stdout)
        self.assertIn("| plug:pytorch-expandable | 5.2 |", out.stdout)


    def test_the_js_threads_work_is_tabled_for_thread_runs_only(self):
        def row(alloc, threading, rep=None):
            e = {"threading": threading, "speculate": 6 if threading == "thread" else 0, "calls": {"allocs": 200, "frees": 190},
                 "num_speculation_hits": 150, "num_drained_frees": 95}
            return {"workload": "gpt2_ft", "allocator": alloc, "rep": rep, "tag": "timing-gpt2_ft-x" if rep else "gpt2_ft-x",
                    "engine": e, "rc": 0}
        lines = live_summary.js_thread_table([row("ours:vms", "thread", 1), row("ours:vms [GMLAKE_THREADING=locker]", "locker", 1),
                                              row("ours:vms", "thread")])
        self.assertEqual(lines[-2], "| gpt2_ft | ours:vms | timing r1 | 6 | 200 | 150 (75.0%) | 190 | 95 (50.0%) |")
        self.assertEqual(lines[-1], "| gpt2_ft | ours:vms | workloads | 6 | 200 | 150 (75.0%) | 190 | 95 (50.0%) |")
        self.assertEqual(len([x for x in lines if x.startswith("| gpt2_ft")]), 2)  # not the Locker's run
        self.assertEqual(live_summary.js_thread_table([row("ours:vms", "locker")]), [])

    def test_every_memcheck_log_is_summarized(self):
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, "results.jsonl"), "w").close()
            for spec, errors in (("vms", 0), ("vms_front_cache_entries_64", 2)):
                with open(os.path.join(d, f"memcheck-{spec}.log"), "w") as f:
                    f.write(f"========= ERROR SUMMARY: {errors} errors\n")
            out = subprocess.run([sys.executable, os.path.join(HERE, "live_summary.py"), d], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("smoke with ours:vms (", out.stdout)
        self.assertIn("ERROR SUMMARY: 0 errors", out.stdout)
        self.assertIn("smoke with ours:vms_front_cache_entries_64 (", out.stdout)
        self.assertIn("ERROR SUMMARY: 2 errors", out.stdout)


class KernelProfile(unittest.TestCase):
    def test_busy_is_the_union_and_idle_the_rest(self):
        ev = lambda cat, ts, dur, name="k": {"ph": "X", "cat": cat, "ts": ts, "dur": dur, "name": name}  # noqa: E731
        trace = {"traceEvents": [
            ev("kernel", 100, 50, "gemm"), ev("kernel", 120, 50, "gemm"),  # overlapping (two streams): busy 100..170
            ev("gpu_memcpy", 200, 10), ev("kernel", 300, 100, "add"),  # gaps 170..200 and 210..300
            ev("cpu_op", 0, 1000, "aten::add"), {"ph": "i", "cat": "kernel", "ts": 5}]}  # not the GPU's / not a span
        p = kernel_profile.summarize(trace)
        self.assertEqual((p["kernels"], p["kernel_us"], p["copy_us"]), (3, 200.0, 10.0))
        self.assertEqual((p["busy_us"], p["span_us"], p["idle_us"]), (180.0, 300.0, 120.0))
        self.assertEqual(p["top"], [["gemm", 100.0, 2], ["add", 100.0, 1]])
        self.assertEqual(kernel_profile.summarize({"traceEvents": []})["kernels"], 0)


class Integrity(unittest.TestCase):
    def run_check(self, *argv, corrupt=0, check="integrity"):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "torch"))
            with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
                f.write(FAKE_TORCH)
            os.makedirs(os.path.join(d, "ours", "gmlake_torch"))
            with open(os.path.join(d, "ours", "gmlake_torch", "__init__.py"), "w") as f:
                f.write(FAKE_OURS)
            env = dict(os.environ, PYTHONPATH=d, GMLAKE_TORCH_PY=os.path.join(d, "ours"), FAKE_CORRUPT=str(corrupt))
            p = subprocess.run([sys.executable, os.path.join(HERE, "live_checks.py"), check, *(("--seconds", "0.5") if check == "integrity" else ()), *argv],
                               capture_output=True, text=True, env=env, timeout=60)
        lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        self.assertEqual(len(lines), 1, p.stdout + p.stderr)
        return p.returncode, json.loads(lines[0][len("RESULT "):])

    def test_pytorch_control_passes(self):
        rc, r = self.run_check("--policy", "pytorch")
        self.assertEqual((rc, r["ok"], r["mismatches"], r["left_allocated_bytes"]), (0, True, 0, 0), r)
        self.assertEqual(r["control_mismatches"], 1000)
        self.assertGreater(r["allocs"], 100)
        self.assertTrue(all(t["allocs"] > 0 and t["cross_uses"] > 0 for t in r["threads"]))
        self.assertGreater(sum(t["stitch_rounds"] for t in r["threads"]), 0)

    def test_a_wrong_content_is_caught(self):
        rc, r = self.run_check("--policy", "pytorch", corrupt=50)
        self.assertEqual((rc, r["ok"]), (1, False))
        self.assertGreater(r["mismatches"], 0)

    def test_ours_gets_the_knobs_and_reports_the_engine(self):
        rc, r = self.run_check("--policy", "vms", "--knobs", "crossStream=false")
        self.assertEqual((rc, r["ok"]), (0, True), r)
        self.assertEqual(r["knobs"], {"crossStream": "false"})
        self.assertEqual(r["engine"]["num_cross_stream_reuses"], 3)
        self.assertEqual(r["engine"]["driver_calls"], {"memMap": 5})

    def test_under_a_budget_out_of_memory_is_caught_and_served_again(self):
        for policy in ("vms", "pytorch-expandable"):
            rc, r = self.run_check("--policy", policy, "--capacity-bytes", str(3 << 30))
            self.assertEqual((rc, r["ok"], r["mismatches"], r["served_after"]), (0, True, 0, True), r)
            self.assertGreater(r["ooms"], 0, r)
            self.assertEqual(r["capacity_bytes"], 3 << 30)

    def test_layout_reports_every_kernel_and_the_engine(self):
        rc, r = self.run_check("--policy", "vms", "--knobs", "maxHandleBytes=2097152", "--reps", "3", check="layout")
        self.assertEqual((rc, r["ok"]), (0, True), r)
        self.assertEqual(r["knobs"], {"maxHandleBytes": "2097152"})
        rows = r["rows"]
        # 2 ms a kernel: a 1 GiB copy moves 2 GiB, 1073.7 GB/s; an 8192^3 matmul is 1.1e12 flop, 549.8 TFLOP/s
        self.assertEqual(rows["copy_1024MiB_GBps"], 1073.7)
        self.assertEqual(rows["matmul_8192_TFLOPs"], 549.8)
        self.assertEqual(sorted(rows), sorted(f"{op}_{m}MiB_GBps" for op in ("copy", "add") for m in (256, 1024, 4096))
                         + ["matmul_4096_TFLOPs", "matmul_8192_TFLOPs"])
        self.assertEqual(r["engine"]["driver_calls"], {"memMap": 5})
        rc, r = self.run_check("--policy", "pytorch", "--reps", "2", check="layout")
        self.assertEqual((rc, r["ok"], "engine" in r), (0, True, False), r)

    def test_bad_knobs_one_line_exit_2(self):
        p = subprocess.run([sys.executable, os.path.join(HERE, "live_checks.py"), "integrity", "--knobs", "oops"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


FAKE_PYTHON = '''#!/usr/bin/env bash
# live-run.sh's PYTHON: live_workloads.py answers with a made-up RESULT, the rest is python3
if [ "$1" = scripts/gpu/live_workloads.py ]; then
  exec python3 - "$@" <<'EOF'
import json, sys
a = sys.argv[1:]
w, alloc, steps = a[1], a[a.index("--allocator") + 1], int(a[a.index("--steps") + 1])
rep = int(a[a.index("--rep") + 1]) if "--rep" in a else None
slow = 1.1 if alloc == "ours:vms" else 1.0
res = {"workload": w, "allocator": alloc, "steps": steps, "median_step_s": 0.3, "wall_s": 1.0,
       "values": [10.0 + i for i in range(steps)], "step_s": [2.0] + [0.3 * slow] * (steps - 1),
       "rep": rep, "sampler": "--sampler" in a, "node_flags": __import__("os").environ.get("GMLAKE_NODE_FLAGS"),
       "threading": __import__("os").environ.get("GMLAKE_THREADING"), "label": __import__("os").environ.get("GMLAKE_RUN_LABEL")}
if alloc.startswith("ours:"):
    res["engine"] = {"reserved_bytes.all.peak": 1 << 30, "driver_total_calls": 9, "driver_total_time_us": 10.0}
    res["step_engine"] = [{"driver.memMap": 9}] + [{"driver.memMap": 1, "num_sync_all_streams": 1, "call_us": 1500.0, "allocs": 500, "call_enter_us": 100.0, "call_prepare_us": 50.0, "call_js_us": 1000.0}] * (steps - 1)
if "--profile-steps" in a:
    k = 2.0 if alloc == "ours:vms" else 1.0
    res["profiles"] = {i: {"kernels": 10, "kernel_us": 200000.0 * k, "copy_us": 0.0, "busy_us": 200000.0 * k,
                           "span_us": 200000.0 * k + 90000.0, "idle_us": 90000.0,
                           "top": [["gemm", 150000.0 * k, 5], ["add", 50000.0, 5]]}
                       for i in a[a.index("--profile-steps") + 1].split(",")}
print("RESULT " + json.dumps(res))
EOF
fi
if [ "$1" = scripts/gpu/live_checks.py ] && [ "$2" = micro ]; then
  # a made-up micro row that says which library and knobs it ran with
  printf 'RESULT {"check": "micro", "policy": "%s", "ok": true, "median_us": 5.0, "p99_us": 9.0, "mean_us": 5.0, "timer_median_us": 0.1, "native": null, "engine": null, "lib": "%s", "speculate": "%s"}\\n' "$4" "${GMLAKE_TORCH_ALLOC_LIB:-}" "${GMLAKE_SPECULATE:-}"
  exit 0
fi
if [ "$1" = -c ] && [[ $2 == *pair_bench_path* ]]; then
  echo "$FAKE_PAIR_BENCH"
  exit 0
fi
exec python3 "$@"
'''


class LiveRun(unittest.TestCase):
    def test_unknown_step_one_line_exit_2(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, OUT=os.path.join(d, "out"), GMLAKE_RUN_DIR=os.path.join(d, "work"), STEPS="timing,bogus")
            p = subprocess.run(["bash", os.path.join(HERE, "live-run.sh")], capture_output=True, text=True, env=env,
                               cwd=ROOT, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown step 'bogus'", p.stdout + p.stderr)

    def test_bad_count_one_line_exit_2(self):
        for k, v in (("THREADING_REPS", "x"), ("TIMING_REPS", "0"), ("TOTAL", "-5"), ("TIMING_TIME_CALLS", "yes")):
            with tempfile.TemporaryDirectory() as d:
                env = dict(os.environ, OUT=os.path.join(d, "out"), GMLAKE_RUN_DIR=os.path.join(d, "work"), STEPS="timing", **{k: v})
                p = subprocess.run(["bash", os.path.join(HERE, "live-run.sh")], capture_output=True, text=True, env=env,
                                   cwd=ROOT, timeout=60)
            self.assertEqual(p.returncode, 2, k)
            self.assertIn(f"live-run: {k} ", p.stdout + p.stderr)
            self.assertIn(f"not '{v}'", p.stdout + p.stderr)
            self.assertEqual(len((p.stdout + p.stderr).strip().splitlines()), 1, p.stdout + p.stderr)

    def live_run(self, **knobs):
        """live-run.sh with the fake python: (its output, the result rows, the summary)."""
        with tempfile.TemporaryDirectory() as d:
            py = os.path.join(d, "python")
            with open(py, "w") as f:
                f.write(FAKE_PYTHON)
            os.chmod(py, 0o755)
            env = dict(os.environ, PYTHON=py, OUT=os.path.join(d, "out"), GMLAKE_RUN_DIR=os.path.join(d, "work"))
            env.update(knobs)
            p = subprocess.run(["bash", os.path.join(HERE, "live-run.sh")], capture_output=True, text=True, env=env,
                               cwd=ROOT, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            with open(os.path.join(d, "out", "live-results.jsonl")) as f:
                rows = [json.loads(l) for l in f]
            with open(os.path.join(d, "out", "live-summary.md")) as f:
                return p, rows, f.read()

    def test_env_sets_run_ours_once_each(self):
        _, rows, _ = self.live_run(STEPS="timing", TIMING_WORKLOADS="gpt2_ft", TIMING_ALLOCATORS="pytorch ours:vms", TIMING_REPS="1",
                                   TIMING_STEPS="4", TIMING_ENVS='; GMLAKE_NODE_FLAGS="--max-semi-space-size=1 --x" ;GMLAKE_THREADING=thread')
        got = [(r["tag"], r.get("node_flags"), r.get("threading"), r.get("label")) for r in rows]
        self.assertEqual(got, [("timing-gpt2_ft-pytorch-r1", None, None, ""), ("timing-gpt2_ft-ours_vms-r1", None, None, ""),
                               ("timing-gpt2_ft-ours_vms-e1-r1", "--max-semi-space-size=1 --x", None, 'GMLAKE_NODE_FLAGS="--max-semi-space-size=1 --x"'),
                               ("timing-gpt2_ft-ours_vms-e2-r1", None, "thread", "GMLAKE_THREADING=thread")])

    def test_a_trailing_empty_env_set_runs_too(self):
        _, rows, _ = self.live_run(STEPS="timing", TIMING_WORKLOADS="gpt2_ft", TIMING_ALLOCATORS="ours:vms", TIMING_REPS="1",
                                   TIMING_STEPS="4", TIMING_ENVS="GMLAKE_THREADING=thread;")
        self.assertEqual([(r["tag"], r.get("threading")) for r in rows],
                         [("timing-gpt2_ft-ours_vms-r1", "thread"), ("timing-gpt2_ft-ours_vms-e1-r1", None)])

    def test_memcheck_runs_each_spec_with_its_knobs(self):
        # no compute-sanitizer here: each spec's row says so, tagged with its knobs
        _, rows, summary = self.live_run(STEPS="memcheck", MEMCHECK_POLICIES="vms vms,front_cache_entries=64", PATH="/usr/bin:/bin")
        self.assertEqual([(r["tag"], r.get("skipped")) for r in rows],
                         [("memcheck-vms", "no compute-sanitizer"), ("memcheck-vms_front_cache_entries_64", "no compute-sanitizer")])

    def test_baseline_needs_its_bundle(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, OUT=os.path.join(d, "out"), GMLAKE_RUN_DIR=os.path.join(d, "work"), STEPS="timing",
                       TIMING_ENVS=";baseline GMLAKE_THREADING=thread")
            p = subprocess.run(["bash", os.path.join(HERE, "live-run.sh")], capture_output=True, text=True, env=env,
                               cwd=ROOT, timeout=60)
        self.assertEqual(p.returncode, 2)
        said = [l for l in (p.stdout + p.stderr).splitlines() if l.startswith("live-run:")]
        self.assertEqual(len(said), 1, p.stdout + p.stderr)
        self.assertIn("TIMING_ENVS names baseline", said[0])

    def test_micro_runs_the_bundled_baseline_beside_this_tree(self):
        with tempfile.TemporaryDirectory() as d:
            lib = os.path.join(d, "baseline", "lib", "libgmlake_torch_alloc.so")
            os.makedirs(os.path.dirname(lib))
            open(lib, "w").close()
            bench = os.path.join(d, "libgmlake_pair_bench.so")
            with open(bench, "w") as f:
                f.write("pair bench")
            _, rows, _ = self.live_run(STEPS="micro", BASELINE_LIB=lib, FAKE_PAIR_BENCH=bench)
            # the C++ pair bench is copied beside the baseline's library (the row looks for it there)
            self.assertTrue(os.path.exists(os.path.join(os.path.dirname(lib), "libgmlake_pair_bench.so")))
        tags = [r["tag"] for r in rows]
        i = tags.index("micro-vms")
        self.assertEqual(tags[i + 1], "micro-vms-baseline")
        self.assertEqual(rows[i + 1]["lib"], lib)
        self.assertEqual(rows[i]["lib"], "")
        j = tags.index("micro-vms-no-speculate")
        self.assertEqual((tags[j + 1], rows[j + 1]["lib"], rows[j + 1]["speculate"]), ("micro-vms-no-speculate-baseline", lib, "0"))
        # without a bundled baseline: no baseline rows
        _, rows, _ = self.live_run(STEPS="micro")
        self.assertFalse([r["tag"] for r in rows if "baseline" in r["tag"]])

    def test_loops_tags_and_summary(self):
        p, rows, summary = self.live_run(
            STEPS="timing,workloads,profile", PROFILE_ALLOCATORS="pytorch-expandable ours:vms", PROFILE_RUN_STEPS="5",
            PROFILE_STEPS="1,3", WORKLOADS="gpt2_ft opt1b_generate", ALLOCATORS="pytorch ours:vms pytorch",
            ALLOCATORS_opt1b_generate="ours:gmlake", LIVE_STEPS="4", TIMING_WORKLOADS="gpt2_ft llama1b_lora",
            TIMING_ALLOCATORS="pytorch-expandable pytorch ours:vms", TIMING_REPS="2", TIMING_STEPS="6")
        print(p.stdout[-200:] + summary if os.environ.get("SHOW") else "", end="")
        tags = [r["tag"] for r in rows]  # in STEPS's order: timing, then workloads, then profile
        self.assertEqual(tags[-2:], ["profile-gpt2_ft-pytorch-expandable", "profile-gpt2_ft-ours_vms"])
        tags = tags[:-2]
        self.assertEqual(tags[-4:], ["gpt2_ft-pytorch", "gpt2_ft-ours_vms", "gpt2_ft-pytorch-2", "opt1b_generate-ours_gmlake"])
        self.assertEqual(tags[:3], ["timing-gpt2_ft-pytorch-expandable-r1", "timing-gpt2_ft-pytorch-r1", "timing-gpt2_ft-ours_vms-r1"])
        self.assertEqual(len(tags), 4 + 2 * 2 * 3)
        self.assertEqual(tags[-5], "timing-llama1b_lora-ours_vms-r2")
        self.assertEqual([r["rep"] for r in rows if r["tag"].startswith("timing-gpt2_ft-pytorch-r")], [1, 2])
        self.assertIn("estimated ~", p.stdout)
        self.assertIn("| gpt2_ft | ours:vms | 2 | 0.3300 (0.3300..0.3300) | 1.100 (1.100..1.100) | 1.100 (1.100..1.100) |", summary)
        self.assertIn("| gpt2_ft | pytorch | 2 | 0.3000 (0.3000..0.3000) | 1.000 (1.000..1.000) | self: 1.000 (1.000..1.000) |", summary)
        self.assertIn("| gpt2_ft | ours:vms | timing r1 | 3 | 1.0 | memMap 1.0 | 0.00 | 1.50 | 3.00 | 0.20 / 0.10 / 2.00 / 0.70 |", summary)
        # the profile table: per step what the GPU did; the kernel that moved against the first allocator
        self.assertIn("| gpt2_ft | 3 | ours:vms | 330.0 | 10 | 400.00 | 0.00 | 400.00 | 90.00 | 1.50 |", summary)
        self.assertIn("| gpt2_ft | 1 | pytorch-expandable | 300.0 | 10 | 200.00 | 0.00 | 200.00 | 90.00 | - |", summary)
        self.assertIn("| gpt2_ft | 1 | ours:vms vs pytorch-expandable | gemm | 150.00 | 300.00 | +150.00 |", summary)


class DriverTimeFresh(unittest.TestCase):
    """driver-time-fresh.sh on the sim driver (one small corpus trace, one process each)."""

    @unittest.skipUnless(os.path.exists(os.path.join(ROOT, "packages", "stitch", "dist", "index.js")), "build first")
    def test_a_table_row_per_trace_and_spec_and_each_process_kept(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, DRIVER="sim", TRACES="moe_ft_expandable", CORPUS=os.path.join(ROOT, "corpus"), OUT=d)
            p = subprocess.run(["bash", os.path.join(HERE, "driver-time-fresh.sh"), "1", "vms", 'vms:{"minTailHandleBytes":134217728}'],
                               capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(d, "driver-time-fresh.md")) as f:
                table = f.read()
            with open(os.path.join(d, "driver-time-fresh-runs.md")) as f:
                runs = f.read()
        rows = [l for l in table.splitlines() if l.startswith("| moe_ft_expandable |")]
        self.assertEqual([r.split(" | ")[1] for r in rows], ["vms", 'vms:{"minTailHandleBytes":134217728}'])
        self.assertEqual(runs.count("### First touch"), 2)
        # the 128 MiB tail makes fewer calls than the default (the knob reached the replay)
        calls = [int(r.split(" | ")[3]) for r in rows]
        self.assertLess(calls[1], calls[0])

    def test_bad_reps_one_line_exit_2(self):
        p = subprocess.run(["bash", os.path.join(HERE, "driver-time-fresh.sh"), "0"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


# A stand-in libcuda for the probes: every call they make, on no device. FAKE_CUINIT sets what
# cuInit answers (100: CUDA_ERROR_NO_DEVICE, a host with the driver but no GPU); a map of less
# than a whole handle is refused as the H200's driver refuses it (CUDA_ERROR_NOT_SUPPORTED).
FAKE_LIBCUDA = r"""
#include <stddef.h>
#include <stdlib.h>
typedef unsigned long long u64;
static size_t sizes[1 << 16];
static u64 next_handle = 1, next_va = 1ull << 40;
int cuInit(unsigned f) { const char* e = getenv("FAKE_CUINIT"); return e ? atoi(e) : 0; }
int cuGetErrorName(int e, const char** s) {
  *s = e == 0 ? "CUDA_SUCCESS" : e == 100 ? "CUDA_ERROR_NO_DEVICE" : e == 801 ? "CUDA_ERROR_NOT_SUPPORTED" : "CUDA_ERROR_UNKNOWN";
  return 0;
}
int cuDeviceGet(int* d, int i) { *d = i; return 0; }
int cuDevicePrimaryCtxRetain(void** c, int d) { *c = (void*)1; return 0; }
int cuCtxSetCurrent(void* c) { return 0; }
int cuCtxSynchronize(void) { return 0; }
int cuMemGetAllocationGranularity(size_t* g, const void* p, int f) { *g = 2u << 20; return 0; }
int cuMemGetInfo_v2(size_t* fr, size_t* t) { *fr = *t = 1ull << 37; return 0; }
int cuMemAddressReserve(u64* p, size_t n, size_t a, u64 at, u64 f) { *p = next_va; next_va += n + (2u << 20); return 0; }
int cuMemAddressFree(u64 p, size_t n) { return 0; }
int cuMemCreate(u64* h, size_t n, const void* p, u64 f) { *h = next_handle++; sizes[*h % (1 << 16)] = n; return 0; }
int cuMemRelease(u64 h) { return 0; }
int cuMemMap(u64 p, size_t n, size_t off, u64 h, u64 f) { return off != 0 || n != sizes[h % (1 << 16)] ? 801 : 0; }
int cuMemUnmap(u64 p, size_t n) { return 0; }
int cuMemSetAccess(u64 p, size_t n, const void* d, size_t k) { return 0; }
"""


class DriverProbes(unittest.TestCase):
    """The ctypes probes (vmm_slices.py, vmm_setaccess.py): their whole flow on a stand-in
    libcuda; without a driver, without a device and on bad arguments, one line and exit 2."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        src, cls.fake = os.path.join(cls.dir.name, "fake.c"), os.path.join(cls.dir.name, "libcuda.so.1")
        with open(src, "w") as f:
            f.write(FAKE_LIBCUDA)
        subprocess.run(["cc", "-shared", "-fPIC", "-o", cls.fake, src], check=True)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def probe(self, script, *args, lib="/nonexistent/libcuda.so.1", **env):
        env = dict(os.environ, GMLAKE_LIBCUDA=lib, **env)
        return subprocess.run([sys.executable, os.path.join(HERE, script), *args], capture_output=True, text=True, env=env, timeout=120)

    def test_no_driver_one_line_exit_2(self):
        for script in ("vmm_slices.py", "vmm_setaccess.py"):
            p = self.probe(script)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn("cannot load the CUDA driver", p.stderr)
            self.assertEqual(p.stdout, "")

    def test_a_driver_without_a_device_one_line_exit_2(self):
        for script in ("vmm_slices.py", "vmm_setaccess.py"):
            p = self.probe(script, lib=self.fake, FAKE_CUINIT="100")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(p.stderr.strip(), f"{script}: cuInit: CUDA_ERROR_NO_DEVICE")
        p = self.probe("vmm_slices.py", lib="libc.so.6")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("is not the CUDA driver", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)

    def test_slices_probe_reports_each_case(self):
        p = self.probe("vmm_slices.py", lib=self.fake)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = [(r["map_offset_mib"], r["map_size_mib"], r["result"]) for r in map(json.loads, p.stdout.splitlines())]
        self.assertEqual(got, [(0, 64, "CUDA_ERROR_NOT_SUPPORTED"), (64, 64, "CUDA_ERROR_NOT_SUPPORTED"), (0, 256, "CUDA_SUCCESS")])

    def test_setaccess_probe_runs_every_case(self):
        p = self.probe("vmm_setaccess.py", "6", "2", lib=self.fake)
        self.assertEqual(p.returncode, 0, p.stderr)
        rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
        cases = [r["case"] for r in rows]
        self.assertEqual(len(cases), 17, cases)
        for want in ("va-first (280G reservation)", "reserve 1T", "live 1500 (280G reservation)", "batch 4 (280G reservation)",
                     "trash 32M between grows", "trash 32M + cuMemGetInfo", "trash 32M on the main thread, calls on a worker"):
            self.assertIn(want, cases)
        for r in rows:
            self.assertEqual((r["grows"], r["mib"]), (6, 2))
            self.assertGreaterEqual(r["create"], 0)
        self.assertIsNotNone(next(r for r in rows if r["case"] == "trash 32M + cuMemGetInfo")["warm-up call"])
        # the markdown table: a row per case
        self.assertEqual(sum(1 for l in p.stdout.splitlines() if l.startswith("| ") and not l.startswith("| case") and "---" not in l), 17)

    def test_bad_arguments_one_line_exit_2_before_the_driver(self):
        for args, word in ((["0"], "GROWS"), (["x"], "GROWS"), (["10", "3"], "MIB"), (["10", "-2"], "MIB")):
            p = self.probe("vmm_setaccess.py", *args)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn(word, p.stderr)
            self.assertNotIn("CUDA driver", p.stderr)


# largest_batch.py's stand-ins: a torch whose memory is a budget (set_per_process_memory_fraction of
# 100 GiB) and a live_workloads.py whose step needs 2 GiB + batch x PER x the longest length / 1000
# (PER per allocator), raising torch.cuda.OutOfMemoryError past the budget; ours' stats() says the
# budget the hook set (FAKE_NO_HOOK: the device's, as a torch that does not pass the fraction on).
FAKE_LB_TORCH = """import os
__version__ = "fake"
GiB = 1 << 30
class _Cuda:
    class OutOfMemoryError(RuntimeError):
        pass
    _fraction = 1.0
    def mem_get_info(self):
        return (0 if os.environ.get("FAKE_DEVICE_FULL") else 90 * GiB, 100 * GiB)
    def set_per_process_memory_fraction(self, f, device=None):
        _Cuda._fraction = f
cuda = _Cuda()
OutOfMemoryError = _Cuda.OutOfMemoryError
"""
FAKE_LB_WORKLOADS = """import argparse, json, os, time
ap = argparse.ArgumentParser()
ap.add_argument("name"); ap.add_argument("--allocator"); ap.add_argument("--steps", type=int)
args = ap.parse_args()
import torch
ours = None
PER = {"pytorch": 1.2, "pytorch-expandable": 1.05}.get(args.allocator, 1.0)  # GiB a sample of length 1000
class Ours:
    cap = None
    def stats(self):
        return {"capacity_bytes": None if os.environ.get("FAKE_NO_HOOK") else int(torch.cuda._fraction * 100 * torch.GiB)}
    def set_memory_fraction(self, f):
        return int(f * 100 * torch.GiB)
if args.allocator.startswith("ours:"):
    ours = Ours()
steps_out = []
def train_loop(model, vocab, batch, lens, opt, autocast=True, offload=False, micro=None):
    for i, L in enumerate(lens):
        time.sleep(float(os.environ.get("FAKE_STEP_S", "0")))
        Ls = sum(micro[i]) if micro else L
        need = 2 + batch * PER * max(lens if not micro else [sum(m) for m in micro]) / 1000
        if os.environ.get("FAKE_CRASH") == f"{args.name}:{batch}":
            raise ValueError("something else broke")
        if need * torch.GiB > torch.cuda._fraction * 100 * torch.GiB:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {need:.2f} GiB")
        steps_out.append(0.1 * batch * Ls / 1000)
WORKLOADS = {"gpt2_ft": lambda n: train_loop(None, 50257, 8, [1000, 500, 800, 1000][:n], None),
             "gpt2_microbatch": lambda n: train_loop(None, 50257, 4, [0] * n, None, micro=[[300, 200]] * n),
             "qwen_lora_bigvocab": lambda n: train_loop(None, 151936, 2, [4000, 2000, 1000, 3000][:n], None)}
def main():
    WORKLOADS[args.name](args.steps)
    print("RESULT " + json.dumps({"workload": args.name, "allocator": args.allocator, "step_s": steps_out, "peak_reserved_bytes": int(os.environ.get("FAKE_PEAK_GIB", "5")) << 30, "gpu": "fake", "torch": "fake"}))
"""
LB_PER = {"pytorch": 1.2, "pytorch-expandable": 1.05, "ours:vms": 1.0}
LB_LENS = {"gpt2_ft": ([1000, 500, 800, 1000], 8), "qwen_lora_bigvocab": ([4000, 2000, 1000, 3000], 2)}

# ... and for a candidate run against the real live_workloads.py: a torch and a transformers just
# big enough for its GPT-2 workloads, the model taking 1 GiB + 0.25 GiB a sample of 1000 tokens
FAKE_LB_REAL_TORCH = """import contextlib, types
__version__ = "stand-in"
bfloat16 = "bfloat16"
GiB = 1 << 30
_state = {"fraction": 1.0, "peak": 0}
class OutOfMemoryError(RuntimeError):
    pass
def manual_seed(s):
    pass
class device:
    def __init__(self, name):
        self.name = name
    def __enter__(self):
        return self
    def __exit__(self, *a):
        return False
class _T:
    def __init__(self, shape):
        self.shape = shape
def randint(lo, hi, shape, device=None):
    return _T(shape)
@contextlib.contextmanager
def autocast(*a, **k):
    yield
class _Opt:
    def __init__(self, params, lr=None):
        pass
    def step(self):
        pass
    def zero_grad(self, set_to_none=False):
        pass
optim = types.SimpleNamespace(AdamW=_Opt)
def _alloc(nbytes):
    if nbytes > _state["fraction"] * 100 * GiB:
        raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {nbytes / GiB:.2f} GiB")
    _state["peak"] = max(_state["peak"], nbytes)
class _Cuda:
    OutOfMemoryError = OutOfMemoryError
    def init(self): pass
    def mem_get_info(self): return (99 * GiB, 100 * GiB)
    def set_per_process_memory_fraction(self, f, device=None):
        assert isinstance(f, float) and 0 <= f <= 1
        _state["fraction"] = f
    def synchronize(self): pass
    def memory_stats(self): return {"num_alloc_retries": 0}
    def max_memory_reserved(self): return _state["peak"]
    def max_memory_allocated(self): return _state["peak"]
    def get_device_name(self): return "stand-in GPU"
cuda = _Cuda()
"""
FAKE_LB_TRANSFORMERS = """import torch
class _Cfg:
    def __init__(self, **kw):
        self.__dict__.update(kw)
        self.vocab_size = kw.get("vocab_size", 50257)
class GPT2Config(_Cfg):
    pass
class _Loss:
    def backward(self): pass
    def item(self): return 1.0
class GPT2LMHeadModel:
    # 1 GiB of weights and state, 0.25 GiB a sample of 1000 tokens
    def __init__(self, cfg):
        self.cfg = cfg
    def gradient_checkpointing_enable(self): pass
    def train(self): pass
    def parameters(self): return []
    def __call__(self, input_ids=None, labels=None):
        b, L = input_ids.shape
        torch._alloc(int((1 + 0.25 * b * L / 1000) * torch.GiB))
        return type("Out", (), {"loss": _Loss()})()
LlamaConfig = OPTConfig = MixtralConfig = GPT2Config
LlamaForCausalLM = OPTForCausalLM = MixtralForCausalLM = GPT2LMHeadModel
"""

class LargestBatch(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp()
        for name, text in (("torch.py", FAKE_LB_TORCH), ("live_workloads.py", FAKE_LB_WORKLOADS)):
            with open(os.path.join(self.d, name), "w") as f:
                f.write(text)
        self.env = dict(os.environ, PYTHONPATH=self.d, LB_LIVE_WORKLOADS=os.path.join(self.d, "live_workloads.py"))

    def tearDown(self):
        import shutil
        shutil.rmtree(self.d, ignore_errors=True)

    def lb(self, *args, **env):
        out = os.path.join(self.d, "out")
        p = subprocess.run([sys.executable, os.path.join(HERE, "largest_batch.py"), "--out", out, *args], capture_output=True,
                           text=True, env=dict(self.env, **env), timeout=300)
        doc = None
        if os.path.exists(os.path.join(out, "largest-batch.json")):
            with open(os.path.join(out, "largest-batch.json")) as f:
                doc = json.load(f)
        return p, doc

    @staticmethod
    def expected(workload, dim, alloc, budget):
        """The largest value the stand-in trains, found by trying each (its own arithmetic)."""
        lens, batch = LB_LENS[workload]
        best = 0
        for v in range(1, 200):
            b, longest = (v, max(lens)) if dim == "batch" else (batch, max(L * v // 8 for L in lens))
            need = 2 + b * LB_PER[alloc] * longest / 1000
            if need * (1 << 30) <= (budget * (1 << 30) / (100 * (1 << 30))) * 100 * (1 << 30):
                best = v
        return best

    def test_each_row_is_the_largest_that_trains(self):
        p, doc = self.lb("--workloads", "gpt2_ft,qwen_lora_bigvocab:seq", "--budgets", "40,24")
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        self.assertEqual(len(doc["rows"]), 2 * 2 * 3)
        for r in doc["rows"]:
            want = self.expected(r["workload"], r["dim"], r["allocator"], r["budget_gib"])
            self.assertEqual(r["largest"], want, r)
            self.assertTrue(r["complete"])
            # the answer trained and the one above it did not, each measured
            mine = {c["value"]: c["status"] for c in doc["candidates"] if (c["workload"], c["allocator"], c["budget_gib"]) == (r["workload"], r["allocator"], r["budget_gib"])}
            self.assertEqual(mine.get(want), "ok")
            lens, batch = LB_LENS[r["workload"]]
            b, ls = (want, lens) if r["dim"] == "batch" else (batch, [L * want // 8 for L in lens])
            times = [0.1 * b * L / 1000 for L in ls[1:]]  # the stand-in's step time; the first step left out
            self.assertAlmostEqual(r["step_s"], sorted(times)[len(times) // 2])
            self.assertAlmostEqual(r["tokens_per_s"], sum(b * L for L in ls[1:]) / sum(times))
            self.assertEqual(r["budget_via"], "set_per_process_memory_fraction")
        vms = [r for r in doc["rows"] if r["allocator"] == "ours:vms"]
        self.assertTrue(all(r["capacity_bytes"] == int(r["budget_gib"] * (1 << 30)) for r in vms), vms)
        self.assertIn("| gpt2_ft | 24 | ours:vms | 22 |", p.stdout)
        self.assertIn("| qwen_lora_bigvocab | 40 | pytorch | seq x31/8 (max 15500) |", p.stdout)
        # what one allocator (or budget) found starts the next: fewer candidates than searching each alone
        alone = sum(1 for c in doc["candidates"] if c["allocator"] == "pytorch-expandable" and c["budget_gib"] == 24)
        self.assertLess(doc["ran"], 2 * 2 * 3 * alone)

    def test_workloads_side_by_side_find_the_same_and_time_each_answer_alone(self):
        args = ("--workloads", "gpt2_ft,qwen_lora_bigvocab:seq", "--budgets", "24,40")
        _, one = self.lb(*args)
        p, three = self.lb(*args, "--jobs", "3", FAKE_STEP_S="0.05")
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertEqual(three["jobs"], 3)
        self.assertFalse(any(c["shared"] for c in one["candidates"]))
        self.assertTrue(any(c["shared"] for c in three["candidates"]))
        key = lambda r: (r["workload"], r["budget_gib"], r["allocator"])  # noqa: E731
        self.assertEqual([(key(r), r["largest"]) for r in three["rows"]], [(key(r), r["largest"]) for r in one["rows"]])
        for r in three["rows"]:  # each answer's times come from a run that had the GPU to itself
            alone = [c for c in three["candidates"] if (c["workload"], c["budget_gib"], c["allocator"], c["value"]) == key(r) + (r["largest"],) and not c["shared"]]
            self.assertEqual(len(alone), 1, r)
            self.assertEqual(alone[0]["status"], "ok")
        # no more at once than the device holds beside the largest budget: (140 - 4) // (64 + 3) = 2
        _, capped = self.lb("--workloads", "gpt2_ft", "--budgets", "64", "--allocators", "pytorch", "--jobs", "8")
        self.assertEqual(capped["jobs"], 2)

    def test_out_of_memory_with_the_device_full_is_tried_again_alone(self):
        args = ("--workloads", "gpt2_ft,qwen_lora_bigvocab:seq", "--budgets", "24", "--allocators", "pytorch")
        _, one = self.lb(*args)
        p, three = self.lb(*args, "--jobs", "3", FAKE_STEP_S="0.05", FAKE_DEVICE_FULL="1")
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertIn("again alone", p.stdout)
        self.assertEqual([r["largest"] for r in three["rows"]], [r["largest"] for r in one["rows"]])
        self.assertFalse([c for c in three["candidates"] if c["status"] == "oom" and c["shared"]])

    def test_a_budget_that_did_not_hold_is_said(self):
        p, doc = self.lb("--workloads", "gpt2_ft", "--budgets", "24", "--allocators", "pytorch", FAKE_PEAK_GIB="30")
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertTrue(doc["rows"][0]["over_budget"])
        self.assertIn("- gpt2_ft 24 GiB pytorch: 30.00 GiB", p.stdout)

    def test_ours_takes_the_budget_directly_where_the_hook_is_missing(self):
        p, doc = self.lb("--workloads", "gpt2_ft", "--budgets", "24", "--allocators", "ours:vms,pytorch", FAKE_NO_HOOK="1")
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        via = {r["allocator"]: (r["budget_via"], r["capacity_bytes"]) for r in doc["rows"]}
        self.assertEqual(via, {"ours:vms": ("gmlake_torch.set_memory_fraction", 24 << 30), "pytorch": ("set_per_process_memory_fraction", None)})

    def test_time_limit_stops_and_still_writes(self):
        p, doc = self.lb("--workloads", "gpt2_ft", "--budgets", "24,40", "--time-limit", "8", FAKE_STEP_S="0.3")
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertEqual(doc["stopped"], "time limit")
        self.assertGreater(len(doc["candidates"]), 0)
        self.assertLess(len([r for r in doc["rows"] if r["complete"]]), 6)
        with open(os.path.join(self.d, "out", "largest-batch.md")) as f:
            self.assertIn("Stopped early (time limit)", f.read())

    def test_resume_runs_nothing_twice(self):
        _, first = self.lb("--workloads", "gpt2_ft", "--budgets", "24", "--allocators", "pytorch-expandable,ours:vms")
        prev = os.path.join(self.d, "prev.json")
        os.replace(os.path.join(self.d, "out", "largest-batch.json"), prev)
        p, again = self.lb("--workloads", "gpt2_ft", "--budgets", "24", "--allocators", "pytorch-expandable,ours:vms", "--resume", prev)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertGreater(first["ran"], 0)
        self.assertEqual(again["ran"], 0)
        self.assertEqual([r["largest"] for r in again["rows"]], [r["largest"] for r in first["rows"]])
        # the table again here, from what was measured, nothing run (a workload never measured: incomplete)
        p, table = self.lb("--workloads", "gpt2_ft,moe_ft", "--budgets", "24", "--allocators", "pytorch-expandable,ours:vms",
                           "--resume", prev, "--report-only")
        self.assertEqual((p.returncode, table["ran"]), (0, 0), p.stderr)
        self.assertEqual([(r["workload"], r["largest"], r["complete"]) for r in table["rows"]],
                         [("gpt2_ft", r["largest"], True) for r in first["rows"]] + [("moe_ft", 0, False)] * 2)

    def test_a_failure_other_than_oom_is_listed_and_does_not_train(self):
        # the default batch (8) breaks for another reason: the search goes below it
        p, doc = self.lb("--workloads", "gpt2_ft", "--budgets", "24", "--allocators", "pytorch", FAKE_CRASH="gpt2_ft:8")
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        self.assertEqual(doc["rows"][0]["largest"], 7)
        self.assertIn("- gpt2_ft 24 GiB pytorch batch 8: ValueError: something else broke", p.stdout)

    def test_a_candidate_trains_the_real_live_workloads(self):
        with open(os.path.join(self.d, "torch.py"), "w") as f:
            f.write(FAKE_LB_REAL_TORCH)
        with open(os.path.join(self.d, "transformers.py"), "w") as f:
            f.write(FAKE_LB_TRANSFORMERS)
        env = dict(self.env)
        del env["LB_LIVE_WORKLOADS"]  # scripts/gpu/live_workloads.py itself

        def child(w, v, dim="batch"):
            p = subprocess.run([sys.executable, os.path.join(HERE, "largest_batch.py"), "--child", w, "--allocator", "pytorch",
                                "--budget-gib", "24", "--value", str(v), "--dim", dim, "--steps", "4"],
                               capture_output=True, text=True, env=env, timeout=120)
            lb = [l for l in p.stdout.splitlines() if l.startswith("LB ")]
            self.assertEqual((p.returncode, len(lb)), (0, 1), p.stdout + p.stderr)
            return json.loads(lb[0][3:]), p.stdout

        import random
        rng = random.Random(1234)  # live_workloads' seqs(4, 64, 1024)
        lens = [rng.randint(64, 1024) for _ in range(4)]
        got, out = child("gpt2_ft", 20)
        self.assertEqual((got["status"], got["batch"], got["tokens"], got["fraction"]), ("ok", 20, [20 * L for L in lens], 0.24))
        self.assertIn("RESULT ", out)  # live_workloads' own line, read by the search
        # past the budget: 1 + 0.25 x b x the longest / 1000 GiB > 24 GiB
        over = int(23 / (0.25 * max(lens) / 1000)) + 1
        self.assertEqual(child("gpt2_ft", over)[0]["status"], "oom")
        self.assertEqual(child("gpt2_ft", over - 1)[0]["status"], "ok")
        # the sequence scale (x v/8), and micro-batches' tokens
        got, _ = child("gpt2_ft", 4, "seq")
        self.assertEqual((got["batch"], got["max_len"]), (8, max(lens) * 4 // 8))
        got, _ = child("gpt2_microbatch", 3)
        self.assertEqual((got["status"], got["batch"]), ("ok", 3))
        self.assertTrue(all(t % 3 == 0 for t in got["tokens"]), got)

    def test_bad_arguments_one_line_exit_2(self):
        for args, word in ((["--workloads", "opt1b_generate"], "unknown workload"), (["--budgets", "24,x"], "--budgets"),
                           (["--allocators", "ours:vms,k=v,nope"], "unknown allocator 'nope'"), (["--steps", "0"], "--steps"),
                           (["--workloads", "gpt2_ft:depth"], "batch or seq"), (["--resume", "/nonexistent.json"], "--resume")):
            p, _ = self.lb(*args)
            self.assertEqual(p.returncode, 2, (args, p.stdout, p.stderr))
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn(word, p.stderr)

    def test_the_gpu_command(self):
        out = os.path.join(self.d, "gpu-out")
        sh = os.path.join(HERE, "largest-batch.sh")
        env = dict(self.env, OUT=out, LB_WORKLOADS="gpt2_ft", LB_BUDGETS="24", LB_ALLOCATORS="pytorch,pytorch-expandable", PYTHON=sys.executable)
        p = subprocess.run(["bash", sh], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        with open(os.path.join(out, "largest-batch.md")) as f:
            self.assertIn("| gpt2_ft | 24 | pytorch | 18 |", f.read())
        self.assertTrue(os.path.exists(os.path.join(out, "largest-batch.log")))
        # ours needs the live bundle; a bad TOTAL is refused before anything runs
        for extra, word in (({"LB_ALLOCATORS": "ours:vms", "LB_BUNDLE": "/nonexistent/live.tar.xz"}, "live.tar.xz missing"),
                            ({"TOTAL": "soon"}, "TOTAL must be")):
            p = subprocess.run(["bash", sh], capture_output=True, text=True, env=dict(env, **extra), cwd=ROOT, timeout=60)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertIn(word, p.stdout + p.stderr)


# ---- step_time.py: the step-time benchmark (issue 27) ------------------------------------------
sys.path.insert(0, HERE)
import step_time  # noqa: E402

# step_time.py's PYTHON: a run answers with step times made from its allocator and round (the
# same formula as expected() below), after FAKE_SLEEP seconds; FAKE_FAIL names an allocator
# whose runs fail; the build of the native CUDAAllocator fails with FAKE_BUILD_FAIL.
FAKE_STEP_PYTHON = r'''#!/usr/bin/env bash
if [[ $1 == */live_workloads.py || ( $1 == */step_time.py && $2 == child ) ]]; then
  exec python3 - "$@" <<'PY'
import json, os, sys, time
a = sys.argv[1:]
w = a[2] if a[1] == "child" else a[1]
alloc, steps, rep = a[a.index("--allocator") + 1], int(a[a.index("--steps") + 1]), int(a[a.index("--rep") + 1])
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps([w, rep, alloc, os.environ.get("GMLAKE_INTERFACE")]) + "\n")
with open(os.environ["FAKE_LOG"] + ".cpus", "a") as f:
    f.write(json.dumps(sorted(os.sched_getaffinity(0))) + "\n")
if os.environ.get("FAKE_FAIL") == alloc:
    sys.exit("boom: " + alloc)
with open(os.environ["FAKE_LOG"] + ".pid", "w") as f:
    f.write(str(os.getpid()))
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
base = {"pytorch": 0.200, "pytorch-expandable": 0.202}.get(alloc, 0.2015 if os.environ.get("GMLAKE_INTERFACE") == "native" else 0.210)
noise = [0.0, 0.004, -0.002, 0.003, -0.001, 0.002][rep % 6]
st = [1.5 + rep, 0.5, 0.3] + [base + noise + 0.001 * (i % 2) for i in range(steps - 3)]
# the launching thread busy half of each step, the process three quarters
print("RESULT " + json.dumps({"workload": w, "allocator": alloc, "step_s": st, "step_cpu_s": [x / 2 for x in st],
                              "step_proc_cpu_s": [x * 0.75 for x in st], "peak_reserved_bytes": 3 << 30, "gpu": "fake", "torch": "fake"}))
PY
fi
if [ "$1" = -m ] && [ "$2" = gmlake_torch ] && [ "$3" = build-cuda-allocator ]; then
  if [ -n "${FAKE_BUILD_FAIL:-}" ]; then echo "gmlake: building the native CUDAAllocator failed: x.cc:1: error: nope" >&2; exit 2; fi
  if [ -n "${FAKE_BUILD_LOG:-}" ]; then echo "build ${GMLAKE_TORCH_ALLOC_LIB:-default}" >>"$FAKE_BUILD_LOG"; fi
  echo built; exit 0
fi
exec python3 "$@"
'''


def fake_python(d, text):
    """An executable stand-in for python in folder d: its path."""
    py = os.path.join(d, "python")
    with open(py, "w") as f:
        f.write(text)
    os.chmod(py, 0o755)
    return py


def report_files(d, stem):
    """A report's STEM.json (parsed) and STEM.md in folder d, or (None, None) when none was written."""
    if not os.path.exists(os.path.join(d, stem + ".json")):
        return None, None
    with open(os.path.join(d, stem + ".json")) as f, open(os.path.join(d, stem + ".md")) as g:
        return json.load(f), g.read()


def run_driver(script, stem, fake, argv, env=None):
    """SCRIPT run over a fake python: (process, its STEM.json and .md, what the fake logged)."""
    with tempfile.TemporaryDirectory() as d:
        py = fake_python(d, fake)
        e = dict(os.environ, FAKE_LOG=os.path.join(d, "log"), **(env or {}))
        p = subprocess.run([sys.executable, os.path.join(HERE, script), *argv, "--python", py, "--out", d],
                           capture_output=True, text=True, env=e, timeout=120)
        doc, md = report_files(d, stem)
        log = []
        if os.path.exists(os.path.join(d, "log")):
            with open(os.path.join(d, "log")) as f:
                log = [json.loads(l) for l in f]
        return p, doc, md, log


def expected_run_mean(alloc, rep, steps, native=False):
    base = {"pytorch": 0.200, "pytorch-expandable": 0.202}.get(alloc, 0.2015 if native else 0.210)
    noise = [0.0, 0.004, -0.002, 0.003, -0.001, 0.002][rep % 6]
    return sum(base + noise + 0.001 * (i % 2) for i in range(steps - 3)) / (steps - 3)


class SmallestBudget(unittest.TestCase):
    """smallest_budget.py over largest_batch's stand-in: a workload needs 2 + batch x PER x longest / 1000 GiB."""

    setUp, tearDown = LargestBatch.setUp, LargestBatch.tearDown

    def sb(self, *args):
        out = os.path.join(self.d, "sb")
        p = subprocess.run([sys.executable, os.path.join(HERE, "smallest_budget.py"), "--out", out, "--jobs", "3", *args],
                           capture_output=True, text=True, env=self.env, timeout=300)
        return p, os.path.join(out, "smallest-budget.md")

    def test_the_smallest_budget_and_the_largest_batch_where_it_is_the_limit(self):
        # gpt2_ft at batch 8, longest 1000: vms needs 10.0 GiB, expandable 10.4 (10.5 on the grid:
        # 10.4's fraction rounds below), batch 7 under expandable 9.35
        p, md = self.sb("--workloads", "gpt2_ft", "--center", "gpt2_ft:pytorch-expandable=10.45,gpt2_ft:ours:vms=10.0",
                        "--step-gib", "0.1", "--points", "1")
        self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
        with open(md) as f:
            text = f.read()
        self.assertIn("| gpt2_ft | 8 | pytorch-expandable | 9.90-10.50 | 10.50 |", text)
        self.assertIn("| gpt2_ft | 8 | ours:vms | 9.90-10.50 | 10.00 |", text)
        self.assertIn("ours:vms trains batch 8 where pytorch-expandable runs out of memory at 10.00, 10.10, 10.20, 10.30, 10.40 GiB", text)
        # at 10.4 GiB: expandable trains 7 (measured), vms 8 and not 9 (measured); each timed alone
        # (the stand-in: 0.1 s a sample of 1000 tokens)
        self.assertIn("| gpt2_ft | 10.40 | 7 (0.560 s, 10,000/s) | 8 (0.640 s, 10,000/s) |", text)

    def test_known_candidates_are_not_run_again(self):
        args = ["--workloads", "gpt2_ft", "--center", "gpt2_ft:pytorch-expandable=10.45,gpt2_ft:ours:vms=10.0", "--step-gib", "0.1", "--points", "1"]
        p, md = self.sb(*args)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        first = os.path.join(self.d, "first.json")
        os.replace(os.path.join(os.path.dirname(md), "smallest-budget.json"), first)
        with open(md) as f:
            before = f.read()
        # expandable's answers known: only vms runs (its candidate count), the tables the same
        p, md = self.sb(*args, "--known", first, "--known-for", "pytorch-expandable")
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        with open(md) as f:
            after = f.read()
        self.assertIn("7 candidates", p.stdout)
        self.assertEqual(before.split("\n")[5:], after.split("\n")[5:])
        p, _ = self.sb(*args, "--known", os.path.join(self.d, "none.json"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("--known", p.stderr)

    def test_bad_input_is_one_line(self):
        for args, want in ((["--workloads", "nope"], "unknown workload 'nope'"),
                           (["--workloads", "gpt2_ft", "--center", "gpt2_ft=3"], "expected WORKLOAD:ALLOCATOR=GiB"),
                           (["--workloads", "gpt2_ft", "--fit-compare", os.path.join(self.d, "none.txt")], "--fit-compare")):
            p, _ = self.sb(*args)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(want, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


class StepTime(unittest.TestCase):
    def test_t_interval_and_fieller(self):
        m, lo, hi = step_time.t_interval([1, 2, 3, 4, 5])  # s = 1.5811, t(4) = 2.776
        self.assertAlmostEqual(m, 3)
        self.assertAlmostEqual(hi - m, 2.776 * 1.5811388 / 5 ** 0.5, places=4)
        self.assertEqual(step_time.t_interval([2.0])[1:], (None, None))
        self.assertEqual(step_time.t975(35), 2.042)  # between table rows: the lower row's (wider) quantile
        xs, ys = [1.05, 1.11, 0.98, 1.07, 1.02], [1.0, 1.04, 0.97, 1.0, 0.99]
        r, lo, hi = step_time.fieller(xs, ys)
        self.assertAlmostEqual(r, sum(xs) / sum(ys))
        self.assertLess(lo, r)
        self.assertLess(r, hi)
        # each bound solves Fieller's equation: (mx - q my)^2 = t^2 Var(mean(x) - q mean(y))
        n = len(xs)
        for q in (lo, hi):
            d = [x - q * y for x, y in zip(xs, ys)]
            md = sum(d) / n
            var = sum((v - md) ** 2 for v in d) / (n - 1) / n
            self.assertAlmostEqual(md ** 2, 2.776 ** 2 * var, places=9)
        # a reference whose mean is not clearly above 0: no bounded interval
        self.assertEqual(step_time.fieller([1, 2, 3], [-1, 1, 0.3])[1:], (None, None))

    def run_step_time(self, *argv, env=None):
        return run_driver("step_time.py", "step-time", FAKE_STEP_PYTHON, argv, env)

    def test_rounds_interleave_rotated_and_the_summary_is_the_runs(self):
        allocs = "pytorch,pytorch-expandable,ours:vms,ours:vms@native"
        p, doc, md, log = self.run_step_time("--workloads", "gpt2_ft,gpt2_124m_compile", "--allocators", allocs,
                                             "--rounds", "5", "--steps", "8")
        self.assertEqual(p.returncode, 0, p.stderr)
        a = allocs.split(",")
        # the prime run (round 0, not counted), then per round every allocator once, starting one later each round
        want = [["gpt2_ft", 0, "pytorch", None]]
        for rnd in range(1, 6):
            k = (rnd - 1) % 4
            want += [["gpt2_ft", rnd, x.split("@")[0], "native" if x.endswith("@native") else None] for x in a[k:] + a[:k]]
        self.assertEqual(log[:21], want)
        self.assertEqual(log[21][:2], ["gpt2_124m_compile", 0])  # the next workload after all of gpt2_ft's rounds
        rows = {(r["workload"], r["allocator"]): r for r in doc["summary"]}
        vms = rows[("gpt2_ft", "ours:vms")]
        means = [expected_run_mean("ours:vms", r, 8) for r in range(1, 6)]
        self.assertEqual(vms["runs"], 5)
        self.assertAlmostEqual(vms["mean_step_s"], sum(means) / 5, places=9)
        self.assertEqual(vms["ci95"], list(step_time.t_interval(means)[1:]))
        refs = [expected_run_mean("pytorch", r, 8) for r in range(1, 6)]
        self.assertAlmostEqual(vms["vs_pytorch"]["ratio"], sum(means) / sum(refs), places=9)
        self.assertEqual(vms["vs_pytorch"]["ci95"], list(step_time.fieller(means, refs)[1:]))
        native = rows[("gpt2_ft", "ours:vms@native")]
        self.assertAlmostEqual(native["mean_step_s"], sum(expected_run_mean("x", r, 8, native=True) for r in range(1, 6)) / 5, places=9)
        # the first three steps on their own: round r's first step is 1.5 + r (round 0 left out)
        self.assertAlmostEqual(vms["first_steps_s"][0], 1.5 + 3)
        self.assertEqual(vms["first_steps_s"][1:], [0.5, 0.3])
        self.assertEqual(vms["peak_reserved_bytes"], 3 << 30)
        self.assertIn("| ours:vms | 5 | %.4f (" % vms["mean_step_s"], md)
        self.assertIn("| pytorch | 5 |", md)
        self.assertIn("| self |", md)
        self.assertIn("## gpt2_124m_compile", md)
        self.assertNotIn("Incomplete", md)

    def test_pin_puts_every_run_on_the_cpus_named_and_the_cpu_shares_are_reported(self):
        cpu = min(os.sched_getaffinity(0))
        with tempfile.TemporaryDirectory() as d:
            py = fake_python(d, FAKE_STEP_PYTHON)
            e = dict(os.environ, FAKE_LOG=os.path.join(d, "log"))
            p = subprocess.run([sys.executable, os.path.join(HERE, "step_time.py"), "--workloads", "gpt2_ft", "--allocators",
                                "pytorch,ours:vms", "--rounds", "2", "--steps", "6", "--pin", str(cpu), "--python", py, "--out", d],
                               capture_output=True, text=True, env=e, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(d, "log.cpus")) as f:
                self.assertEqual([json.loads(l) for l in f], [[cpu]] * 5)  # the prime run and 2 rounds x 2
            with open(os.path.join(d, "step-time.json")) as f:
                doc = json.load(f)
            with open(os.path.join(d, "step-time.md")) as f:
                md = f.read()
        self.assertEqual(doc["settings"]["pin"], str(cpu))
        row = next(r for r in doc["summary"] if r["allocator"] == "ours:vms")
        self.assertAlmostEqual(row["main_cpu_share"], 0.5)
        self.assertAlmostEqual(row["process_cpu_share"], 0.75)
        self.assertIn("| 0.50 / 0.75 |", md)
        self.assertIn(f"every run pinned to CPUs {cpu}", md)

    def test_a_bad_pin_is_one_line(self):
        for pin, want in (("x", "a CPU list like 0-7"), ("3-1", "a CPU list like 0-7"), ("100000", "are not this process's")):
            p, _, _, log = self.run_step_time("--workloads", "gpt2_ft", "--allocators", "pytorch", "--pin", pin)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(want, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertEqual(log, [])

    def test_the_time_limit_writes_what_it_has(self):
        p, doc, md, log = self.run_step_time("--workloads", "gpt2_ft", "--allocators", "pytorch,ours:vms", "--rounds", "20",
                                             "--steps", "5", "--time-limit", "2.5", "--first-estimate", "0.1",
                                             env={"FAKE_SLEEP": "0.3"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(doc["incomplete"])
        self.assertIn("**Incomplete**", md)
        done = len(doc["runs"])
        self.assertGreater(done, 2)
        self.assertEqual(done + len(doc["skipped"]), 41)  # the prime run and 20 rounds of 2
        self.assertTrue(all(s.startswith("gpt2_ft ") for s in doc["skipped"]), doc["skipped"])
        self.assertEqual(len(log), done)
        self.assertIn("## Not run (time limit)", md)
        # a run that outlasts what is left is killed, and said
        p, doc, md, _ = self.run_step_time("--workloads", "gpt2_ft", "--allocators", "pytorch", "--rounds", "1", "--steps", "5",
                                           "--time-limit", "1.5", "--first-estimate", "0.1", "--no-prime", env={"FAKE_SLEEP": "30"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([(r["ok"], r["error"]) for r in doc["runs"]], [(False, "killed at the time limit")])

    def test_sigterm_kills_the_run_and_writes_what_it_has(self):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, FAKE_LOG=os.path.join(d, "log"), FAKE_SLEEP="60")
            p = subprocess.Popen([sys.executable, os.path.join(HERE, "step_time.py"), "--workloads", "gpt2_ft", "--allocators", "pytorch",
                                  "--rounds", "2", "--steps", "5", "--python", fake_python(d, FAKE_STEP_PYTHON), "--out", d],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            for _ in range(200):
                if os.path.exists(os.path.join(d, "log.pid")):
                    break
                time.sleep(0.05)
            with open(os.path.join(d, "log.pid")) as f:
                child = int(f.read())
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(timeout=30), 3)
            with open(os.path.join(d, "step-time.json")) as f:
                self.assertIn("stopped by signal", json.load(f)["incomplete"])
            time.sleep(0.2)
            try:  # gone, or a zombie that its new parent has not reaped yet
                with open(f"/proc/{child}/stat") as f:
                    self.assertEqual(f.read().split(")")[-1].split()[0], "Z")
            except FileNotFoundError:
                pass

    def test_failed_runs_are_listed_and_left_out(self):
        p, doc, md, _ = self.run_step_time("--workloads", "gpt2_ft", "--allocators", "pytorch,ours:caching", "--rounds", "2",
                                           "--steps", "5", env={"FAKE_FAIL": "ours:caching"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([r["allocator"] for r in doc["summary"]], ["pytorch"])
        self.assertIn("- gpt2_ft ours:caching round 1: boom: ours:caching", md)

    def test_report_merges_calls_pairing_each_calls_rounds(self):
        with tempfile.TemporaryDirectory() as d:
            files = []
            for k, (alloc_steps) in enumerate([0.210, 0.220]):
                runs = [{"workload": "gpt2_ft", "allocator": a, "round": r, "call": f"c{k}", "ok": True,
                         "step_s": [1, 1, 1] + [(alloc_steps if a == "ours:vms" else 0.2) + 0.001 * r] * 4}
                        for r in (1, 2) for a in ("pytorch", "ours:vms")]
                f = os.path.join(d, f"{k}.json")
                with open(f, "w") as fh:
                    json.dump({"settings": {"date": f"c{k}", "allocators": ["pytorch", "ours:vms"], "rounds": 2, "steps": 7,
                                            "warmup": 3, "order": "rotate"}, "runs": runs}, fh)
                files.append(f)
            p = subprocess.run([sys.executable, os.path.join(HERE, "step_time.py"), "report", *files, "--out", os.path.join(d, "m")],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(d, "m", "step-time.json")) as fh:
                row = next(r for r in json.load(fh)["summary"] if r["allocator"] == "ours:vms")
            self.assertEqual((row["runs"], row["vs_pytorch"]["rounds"]), (4, 4))
            self.assertEqual(len(row["vs_pytorch"]["round_ratios"]), 4)
            over = subprocess.run([sys.executable, os.path.join(HERE, "step_time.py"), "report", files[0], "--out", d],
                                  capture_output=True, text=True)
            self.assertEqual(over.returncode, 0, over.stderr)  # 0.json is not step-time.json: nothing overwritten
            clash = subprocess.run([sys.executable, os.path.join(HERE, "step_time.py"), "report", os.path.join(d, "m", "step-time.json"),
                                    "--out", os.path.join(d, "m")], capture_output=True, text=True)
            self.assertEqual(clash.returncode, 2)
            self.assertIn("overwrite an input", clash.stderr)

    def test_bad_input_one_line_exit_2(self):
        for argv in (["--allocators", "jemalloc"], ["--allocators", "pytorch@native"], ["--steps", "3"], ["--workloads", "bert"],
                     ["--rounds", "x"], ["report", "/nonexistent.json"]):
            p = subprocess.run([sys.executable, os.path.join(HERE, "step_time.py"), *argv], capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, argv)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, (argv, p.stderr))
            self.assertTrue(p.stderr.startswith("step_time: "), p.stderr)

    def test_step_time_sh_one_command(self):
        with tempfile.TemporaryDirectory() as d:
            py = fake_python(d, FAKE_STEP_PYTHON)
            env = dict(os.environ, PYTHON=py, OUT=os.path.join(d, "out"), FAKE_LOG=os.path.join(d, "log"), WORKLOADS="gpt2_ft",
                       ALLOCATORS="pytorch,pytorch-expandable", ROUNDS="2", STEPS="5")
            p = subprocess.run(["bash", os.path.join(HERE, "step-time.sh")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            with open(os.path.join(d, "out", "step-time.json")) as f:
                doc = json.load(f)
            self.assertEqual((doc["settings"]["rounds"], doc["settings"]["steps"], len(doc["runs"])), (2, 5, 5))
            self.assertLess(doc["settings"]["time_limit_s"], 570)
            # @native: the CUDAAllocator is built first, and a failed build is one line, exit 2
            if not os.path.exists(os.path.join(ROOT, "packages/torch-alloc/build/lib/libgmlake_torch_alloc.so")):
                return  # the engine is not built here: step-time.sh stops before the build (its own one line)
            p = subprocess.run(["bash", os.path.join(HERE, "step-time.sh")], capture_output=True, text=True, cwd=ROOT, timeout=120,
                               env=dict(env, ALLOCATORS="pytorch,ours:vms@native", FAKE_BUILD_FAIL="1"))
            self.assertEqual(p.returncode, 2)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn("error: nope", p.stderr)
            p = subprocess.run(["bash", os.path.join(HERE, "step-time.sh")], capture_output=True, text=True, cwd=ROOT, timeout=30,
                               env=dict(env, TOTAL="soon"))
            self.assertEqual((p.returncode, len(p.stderr.strip().splitlines())), (2, 1))


# ---- alternate_steps.py: ours' and PyTorch's steps alternating inside one process (issue 27) -----
import alternate_steps  # noqa: E402

# alternate_steps.py's PYTHON: a run answers with 3 x --steps steps in route order (its own copy of
# the pattern), ours' step FAKE_RATIO[allocator] x PyTorch's on each pair's inputs; the build of the
# native CUDAAllocator fails with FAKE_BUILD_FAIL.
FAKE_ALT_PYTHON = r'''#!/usr/bin/env bash
if [[ $1 == */live_workloads.py || ( $1 == */step_time.py && $2 == child ) ]]; then
  exec python3 - "$@" <<'PY'
import json, os, sys
a = sys.argv[1:]
w = a[2] if a[1] == "child" else a[1]
alloc, pairs, rep, ref = [a[a.index(k) + 1] for k in ("--allocator", "--steps", "--rep", "--alternate")]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps([w, int(rep), alloc, ref, int(pairs)]) + "\n")
ratio = {"ours:vms": 1.02, "ours:caching": 1.05}[alloc]
routes, steps = [], []
for k in range(3 * int(pairs)):
    i, j = k % 3, k // 3
    r = "prime" if i == 0 else "ours" if (i == 1) == (j % 2 == 0) else "pytorch"
    base = 0.2 + 0.01 * (j % 4) + 0.002 * int(rep)
    routes.append(r)
    steps.append({"prime": 0.3, "pytorch": base, "ours": ratio * base}[r])
print("RESULT " + json.dumps({"workload": w, "allocator": alloc, "step_s": steps, "step_route": routes,
                              "step_proc_cpu_s": [s / 2 for s in steps],
                              "engine": {"calls": {"allocs": 400, "frees": 400}, "num_speculation_hits": 100 * int(rep),
                                         "reserved_bytes.all.peak": 1 << 30, "num_device_alloc": 3}}))
PY
fi
if [ "$1" = -m ] && [ "$2" = gmlake_torch ] && [ "$3" = build-cuda-allocator ]; then
  if [ -n "${FAKE_BUILD_FAIL:-}" ]; then echo "gmlake: building the native CUDAAllocator failed: x.cc:1: error: nope" >&2; exit 2; fi
  if [ -n "${FAKE_BUILD_LOG:-}" ]; then echo "build ${GMLAKE_TORCH_ALLOC_LIB:-default}" >>"$FAKE_BUILD_LOG"; fi
  echo built; exit 0
fi
exec python3 "$@"
'''


def alternating_run(pyt, ours, prime=0.3, cpu=None, workload="gpt2_ft", allocator="ours:vms", ref="pytorch", rnd=1):
    """A run record as step_time.one_run keeps it: pair j's steps in route_of's order."""
    s, route = [], []
    for k in range(3 * len(pyt)):
        r = alternate_steps.route_of(k)
        route.append(r)
        s.append({"prime": prime, "ours": ours[k // 3], "pytorch": pyt[k // 3]}[r])
    rec = {"workload": workload, "allocator": allocator, "ref": ref, "round": rnd, "ok": True, "step_s": s, "step_route": route}
    if cpu is not None:
        rec["step_proc_cpu_s"] = [cpu[r] * x for r, x in zip(route, s)]
    return rec


class AlternateSteps(unittest.TestCase):
    def test_route_of_primes_each_pair_and_alternates_who_goes_first(self):
        self.assertEqual([alternate_steps.route_of(k) for k in range(12)],
                         ["prime", "ours", "pytorch", "prime", "pytorch", "ours"] * 2)

    def test_parse_compare(self):
        self.assertEqual(alternate_steps.parse_compare("ours:vms/pytorch-expandable  ours:caching,k=v/pytorch"),
                         [("ours:vms", "pytorch-expandable"), ("ours:caching,k=v", "pytorch")])
        # not ours (or no policy), ours@INTERFACE (it is always the native class here), a REF that is not PyTorch's, no REF
        self.assertEqual(alternate_steps.parse_compare("ours:vms@baseline/pytorch ours:vms/pytorch"),
                         [("ours:vms@baseline", "pytorch"), ("ours:vms", "pytorch")])
        for bad in ("pytorch/pytorch", "ours:/pytorch", "ours:vms@native/pytorch", "ours:vms/jemalloc", "ours:vms/ours:caching",
                    "ours:vms", "ours:vms/pytorch pytorch/ours:vms", "ours:@baseline/pytorch", "ours:vms@baselines/pytorch"):
            with self.assertRaises(step_time.Bad, msg=bad) as c:
                alternate_steps.parse_compare(bad)
            self.assertIn("ours:POLICY[,k=v...][@baseline]/REF", str(c.exception))

    def test_baseline_runs_the_bundled_library(self):
        with tempfile.TemporaryDirectory() as d:
            lib = os.path.join(d, "libgmlake_torch_alloc.so")
            with mock.patch.dict(os.environ, {"GMLAKE_BASELINE_LIB": lib}):
                with self.assertRaisesRegex(step_time.Bad, r"no baseline library .*bundle.sh --live --baseline REV"):
                    step_time.parse_allocator("ours:vms@baseline")
                open(lib, "w").close()
                self.assertEqual(step_time.parse_allocator("ours:vms,k=v@baseline"), ("ours:vms,k=v", {"GMLAKE_TORCH_ALLOC_LIB": lib}))
            with mock.patch.dict(os.environ, {}, clear=True):
                with self.assertRaisesRegex(step_time.Bad, "no baseline library"):
                    step_time.parse_allocator("ours:vms@baseline")
        with self.assertRaisesRegex(step_time.Bad, "@native, @pluggable or @baseline"):
            step_time.parse_allocator("pytorch@baseline")
        for empty in ("", "   "):
            with self.assertRaisesRegex(step_time.Bad, "needs at least one"):
                alternate_steps.parse_compare(empty)

    def test_pairs_of_reads_each_pair_by_its_routes(self):
        # each step's time is its index: a pair reads back as (ours' index, PyTorch's, prime's)
        route = [alternate_steps.route_of(k) for k in range(15)]
        run = {"step_s": list(range(15)), "step_route": route}
        self.assertEqual(alternate_steps.pairs_of(run, 1),  # pairs 1-4: the warmup pair left out
                         [(5, 4, 3, None, None), (7, 8, 6, None, None), (11, 10, 9, None, None), (13, 14, 12, None, None)])
        # 5 pairs after no warmup: the last left out (as many ours-first as PyTorch-first)
        self.assertEqual([p[:3] for p in alternate_steps.pairs_of(run, 0)], [(1, 2, 0), (5, 4, 3), (7, 8, 6), (11, 10, 9)])
        self.assertEqual(alternate_steps.pairs_of(run, 4), [])  # one pair left: none counted
        cpu = dict(run, step_proc_cpu_s=[10 * k for k in range(15)])
        self.assertEqual(alternate_steps.pairs_of(cpu, 3)[0], (11, 10, 9, 110, 100))
        self.assertEqual(alternate_steps.pairs_of(dict(cpu, step_proc_cpu_s=[1] * 14), 3)[0], (11, 10, 9, None, None))
        # routes that do not describe the steps: nothing rather than pairs of the wrong steps
        for broken in (dict(run, step_route=route[:-1]), {"step_s": list(range(14)), "step_route": route[:14]},
                       dict(run, step_route=route[:4] + ["ours"] + route[5:]), dict(run, step_route=None), {"step_s": []}):
            self.assertEqual(alternate_steps.pairs_of(broken, 1), [], broken)

    def test_summarize_a_ratio_over_the_pairs_of_every_process(self):
        # ours 1.01x PyTorch's in process 1 and 1.03x in process 2, with noise; the warmup pairs
        # (ours 5x slower) left out; pairs of 11, warmup 2: 8 counted each
        noise = [0.002, -0.001, 0.003, -0.002, 0.0, 0.001, -0.003, 0.002, -0.001, 0.001, 0.0]
        runs = []
        for rnd, k in ((1, 1.01), (2, 1.03)):
            pyt = [0.2 + 0.01 * (j % 3) + 0.001 * rnd for j in range(11)]
            ours = [(5 if j < 2 else k) * y + noise[j] * 0.2 * (-1) ** rnd for j, y in enumerate(pyt)]
            runs.append(alternating_run(pyt, ours, cpu={"prime": 0.4, "ours": 0.5, "pytorch": 0.25}, rnd=rnd))
        runs.append(dict(runs[0], ok=False, step_s=[9.0] * 33))  # a failed run: not counted
        runs.append(alternating_run([0.2] * 11, [0.3] * 11, ref="pytorch-expandable"))  # another comparison: its own row
        rows = alternate_steps.summarize(runs, 2)
        self.assertEqual([(r["allocator"], r["ref"]) for r in rows], [("ours:vms", "pytorch"), ("ours:vms", "pytorch-expandable")])
        r = rows[0]
        self.assertEqual((r["runs"], r["pairs"]), (2, 16))
        self.assertAlmostEqual(r["ratio"], 1.02, delta=0.003)
        lo, hi = r["ci95"]
        self.assertLess(lo, 1.02)
        self.assertLess(1.02, hi)
        self.assertLess(hi - lo, 0.03)
        per = [alternate_steps.pairs_of(run, 2) for run in runs[:2]]
        self.assertEqual(r["run_ratios"], [round(sum(p[0] for p in q) / sum(p[1] for p in q), 4) for q in per])
        self.assertAlmostEqual(r["run_ratios"][0], 1.01, delta=0.003)
        self.assertAlmostEqual(r["run_ratios"][1], 1.03, delta=0.003)
        pairs = per[0] + per[1]
        d = [x - y for x, y, *_ in pairs]
        self.assertAlmostEqual(r["diff_ms"][0], 1e3 * sum(d) / 16, places=9)
        self.assertAlmostEqual(r["mean_step_s"]["prime"], 0.3)
        self.assertAlmostEqual(r["diff_of_prime_step"], sum(d) / 16 / 0.3, places=9)
        self.assertAlmostEqual(r["process_cpu_share"]["ours"], 0.5)
        self.assertAlmostEqual(r["process_cpu_share"]["pytorch"], 0.25)
        self.assertNotIn("process_cpu_share", rows[1])  # no CPU times in those runs
        self.assertEqual((rows[1]["ratio"], rows[1]["run_ratios"]), (1.5, [1.5]))
        self.assertNotIn("answered_ahead", r)  # no engine counts in those runs

    def test_summarize_the_share_of_allocations_answered_ahead(self):
        run = lambda rnd, hits, allocs: dict(alternating_run([0.2] * 6, [0.2] * 6, rnd=rnd),
                                             engine={"calls": {"allocs": allocs}, "num_speculation_hits": hits})
        rows = alternate_steps.summarize([run(1, 30, 100), run(2, 60, 200)], 2)
        self.assertAlmostEqual(rows[0]["answered_ahead"], 90 / 300)
        self.assertIn("| 30.0% | - |", alternate_steps.markdown({"settings": {"pairs": 6, "warmup": 2}, "runs": [], "summary": rows}))
        self.assertNotIn("missed", rows[0])  # runs from before the misses were counted
        missed = lambda rnd, m: dict(run(rnd, 30, 100), engine=dict(run(rnd, 30, 100)["engine"], num_speculation_misses=m))
        rows = alternate_steps.summarize([missed(1, {"none": 40, "other": 20, "behind": 10}), missed(2, {"none": 20, "other": 0, "behind": 10})], 2)
        self.assertEqual(rows[0]["missed"], {"none": 0.3, "other": 0.1, "behind": 0.1})
        split = alternate_steps.summarize([missed(1, {"none": 40, "other": 20, "behind": 10, "none_after_free": 30}),
                                           missed(2, {"none": 20, "other": 0, "behind": 10, "none_after_free": 0})], 2)
        self.assertAlmostEqual(split[0]["missed"]["none_after_free"], 0.15)
        self.assertIn("30.0% / 10.0% / 10.0% (none after a free 15.0%) |", alternate_steps.markdown({"settings": {"pairs": 6, "warmup": 2}, "runs": [], "summary": split}))
        parts = {"none_late": 20, "none_after_answer": 10, "none_unforeseen": 20, "none_declined": 10, "none_throttled": 0}
        why = alternate_steps.summarize([missed(1, dict({"none": 40, "other": 20, "behind": 10, "none_after_free": 30}, **parts)),
                                         missed(2, dict({"none": 20, "other": 0, "behind": 10, "none_after_free": 0}, **parts))], 2)
        self.assertAlmostEqual(why[0]["missed"]["none_late"], 0.2)
        self.assertIn("(none after a free 15.0%); none late 20.0% / after_answer 10.0% / unforeseen 20.0% / declined 10.0% / throttled 0.0% |",
                      alternate_steps.markdown({"settings": {"pairs": 6, "warmup": 2}, "runs": [], "summary": why}))
        self.assertNotIn("made_ahead", rows[0])  # runs from before GMLAKE_AHEAD
        ahead = lambda rnd, m, u: dict(run(rnd, 30, 100), engine=dict(run(rnd, 30, 100)["engine"], num_made_ahead=m, num_undone_ahead=u))
        made = alternate_steps.summarize([ahead(1, 60, 6), ahead(2, 40, 4)], 2)
        self.assertAlmostEqual(made[0]["made_ahead"], 100 / 200)
        self.assertAlmostEqual(made[0]["undone_ahead"], 10 / 200)
        self.assertIn("(made 50.0%, undone 5.0%)", alternate_steps.markdown({"settings": {"pairs": 30, "warmup": 2}, "runs": [], "summary": made}))
        waits = lambda rnd, w: dict(run(rnd, 30, 100), engine=dict(run(rnd, 30, 100)["engine"], drain_wait_us=w))
        drained = alternate_steps.summarize([waits(1, 2), waits(2, 0.25), waits(3, 2)], 2)
        self.assertEqual(drained[0]["drain_wait_us"], [0.25, 2])
        self.assertIn("| 30.0%; drain at 0.25, 2 us |", alternate_steps.markdown({"settings": {"pairs": 6, "warmup": 2}, "runs": [], "summary": drained}))
        self.assertNotIn("drain_wait_us", made[0])  # runs from before it was said
        self.assertIn("| 30.0% | 30.0% / 10.0% / 10.0% |", alternate_steps.markdown({"settings": {"pairs": 6, "warmup": 2}, "runs": [], "summary": rows}))
        # one process without the counts: no share over part of the processes
        rows = alternate_steps.summarize([run(1, 30, 100), alternating_run([0.2] * 6, [0.2] * 6, rnd=2)], 2)
        self.assertNotIn("answered_ahead", rows[0])

    def write_doc(self, path, warmup, runs, date="x"):
        with open(path, "w") as f:
            json.dump({"settings": {"date": date, "pairs": 6, "warmup": warmup}, "runs": runs, "summary": [],
                       "skipped": [f"skipped in {date}"]}, f)

    def test_report_merges_calls(self):
        run = lambda rnd, k: alternating_run([0.2, 0.21, 0.22, 0.2, 0.21, 0.22], [k * y for y in (0.2, 0.21, 0.22, 0.2, 0.21, 0.22)], rnd=rnd)
        with tempfile.TemporaryDirectory() as d:
            a, b, out = os.path.join(d, "a.json"), os.path.join(d, "b.json"), os.path.join(d, "m")
            self.write_doc(a, 2, [run(1, 1.02), run(2, 1.02)], "a")
            self.write_doc(b, 2, [run(1, 1.04)], "b")
            p = subprocess.run([sys.executable, os.path.join(HERE, "alternate_steps.py"), "report", a, b, "--out", out],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            doc, md = report_files(out, "alternate-steps")
            self.assertEqual((len(doc["runs"]), doc["settings"]["merged"], doc["skipped"]), (3, 2, ["skipped in a", "skipped in b"]))
            (row,) = doc["summary"]
            self.assertEqual((row["runs"], row["pairs"], row["run_ratios"]), (3, 12, [1.02, 1.02, 1.04]))
            self.assertIn("| gpt2_ft | ours:vms | pytorch | 3, 12 |", md)
            # an --out whose alternate-steps.json is an input: refused, the input as it was
            with open(os.path.join(out, "alternate-steps.json")) as f:
                before = f.read()
            for argv in ([os.path.join(out, "alternate-steps.json"), a, "--out", out], [a, os.path.join(out, "alternate-steps.json"), "--out", out + "/"]):
                p = subprocess.run([sys.executable, os.path.join(HERE, "alternate_steps.py"), "report", *argv],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn("--out would replace one of the inputs", p.stderr)
                with open(os.path.join(out, "alternate-steps.json")) as f:
                    self.assertEqual(f.read(), before)
            # calls with another warmup count other pairs: not merged
            self.write_doc(b, 3, [run(1, 1.04)], "b")
            p = subprocess.run([sys.executable, os.path.join(HERE, "alternate_steps.py"), "report", a, b, "--out", os.path.join(d, "n")],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
            self.assertEqual(p.stderr.strip(), "alternate_steps: the files were made with different --warmup ([2, 3]): not comparable")
            self.assertFalse(os.path.exists(os.path.join(d, "n")))
            with open(b, "w") as f:
                f.write("[1, 2]")
            for bad in ([b], [os.path.join(d, "none.json")]):
                p = subprocess.run([sys.executable, os.path.join(HERE, "alternate_steps.py"), "report", *bad, "--out", os.path.join(d, "n")],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual((p.returncode, len(p.stderr.strip().splitlines())), (2, 1), p.stderr)
                self.assertIn("not a", p.stderr)

    def alternate(self, *argv, env=None):
        return run_driver("alternate_steps.py", "alternate-steps", FAKE_ALT_PYTHON, argv, env)

    def test_processes_rotate_the_comparisons_and_each_alternates_with_its_ref(self):
        p, doc, md, log = self.alternate("--workloads", "gpt2_ft", "--compare", "ours:vms/pytorch-expandable ours:caching/pytorch",
                                         "--procs", "2", "--pairs", "5", "--warmup", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        # --steps is the pairs (the run makes three steps of each); process 2 starts one comparison later
        self.assertEqual(log, [["gpt2_ft", 1, "ours:vms", "pytorch-expandable", 5], ["gpt2_ft", 1, "ours:caching", "pytorch", 5],
                               ["gpt2_ft", 2, "ours:caching", "pytorch", 5], ["gpt2_ft", 2, "ours:vms", "pytorch-expandable", 5]])
        rows = {(r["allocator"], r["ref"]): r for r in doc["summary"]}
        self.assertEqual(set(rows), {("ours:vms", "pytorch-expandable"), ("ours:caching", "pytorch")})
        vms, caching = rows[("ours:vms", "pytorch-expandable")], rows[("ours:caching", "pytorch")]
        self.assertEqual((vms["runs"], vms["pairs"]), (2, 8))  # 4 counted pairs of the 5 after 1 of warmup
        self.assertAlmostEqual(vms["ratio"], 1.02, places=9)
        self.assertAlmostEqual(caching["ratio"], 1.05, places=9)
        # the record keeps how ours' requests were answered, none of the rest of its stats
        self.assertEqual(doc["runs"][0]["engine"], {"calls": {"allocs": 400, "frees": 400}, "num_speculation_hits": 100})
        self.assertAlmostEqual(vms["answered_ahead"], (100 + 200) / 800)
        self.assertEqual([r["ref"] for r in doc["runs"]], ["pytorch-expandable", "pytorch", "pytorch", "pytorch-expandable"])
        self.assertIn("| gpt2_ft | ours:vms | pytorch-expandable | 2, 8 |", md)
        self.assertIn("1.0200 (", md)

    def test_bad_input_one_line_exit_2_nothing_run(self):
        for argv, want in ((["--pairs", "3", "--warmup", "3"], "--pairs (3) must be more than --warmup (3) + 1"),
                           (["--pairs", "2", "--warmup", "5"], "--pairs (2) must be more than --warmup (5) + 1"),
                           # one pair after the warmup: the even number counted is none
                           (["--pairs", "4", "--warmup", "3"], "--pairs (4) must be more than --warmup (3) + 1"),
                           (["--workloads", "bert"], "unknown workload 'bert'"),
                           (["--workloads", "gpt2_ft,bert"], "unknown workload 'bert'"),
                           (["--workloads", ","], "--workloads needs at least one name"),
                           (["--compare", "ours:vms@native/pytorch"], "--compare 'ours:vms@native/pytorch'"),
                           (["--procs", "0"], "--procs and --pairs must be >= 1"),
                           (["--pairs", "x"], "invalid int value"),
                           (["--pin", "x"], "a CPU list like 0-7")):
            p, doc, _, log = self.alternate(*argv)
            self.assertEqual(p.returncode, 2, (argv, p.stdout, p.stderr))
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, (argv, p.stderr))
            self.assertTrue(p.stderr.startswith("alternate_steps: "), p.stderr)
            self.assertIn(want, p.stderr)
            self.assertEqual((log, doc), ([], None), argv)

    def test_alternate_steps_sh_one_command(self):
        with tempfile.TemporaryDirectory() as d:
            py = fake_python(d, FAKE_ALT_PYTHON)
            env = dict(os.environ, PYTHON=py, OUT=os.path.join(d, "out"), FAKE_LOG=os.path.join(d, "log"), WORKLOADS="gpt2_ft",
                       COMPARE="ours:vms/pytorch", PROCS="1", PAIRS="4", WARMUP="1")
            if not os.path.exists(os.path.join(ROOT, "packages/torch-alloc/build/lib/libgmlake_torch_alloc.so")):
                self.skipTest("the engine is not built here: alternate-steps.sh stops before the build")
            p = subprocess.run(["bash", os.path.join(HERE, "alternate-steps.sh")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            doc, _ = report_files(os.path.join(d, "out"), "alternate-steps")
            self.assertEqual((doc["settings"]["pairs"], doc["settings"]["warmup"], len(doc["runs"])), (4, 1, 1))
            self.assertLess(doc["settings"]["time_limit_s"], 570)
            # ours runs as the native class: its build first, a failed build one line, exit 2, nothing run
            os.remove(os.path.join(d, "log"))
            p = subprocess.run(["bash", os.path.join(HERE, "alternate-steps.sh")], capture_output=True, text=True, cwd=ROOT, timeout=120,
                               env=dict(env, FAKE_BUILD_FAIL="1", OUT=os.path.join(d, "out2")))
            self.assertEqual((p.returncode, len(p.stderr.strip().splitlines())), (2, 1), p.stderr)
            self.assertIn("alternate-steps: gmlake: building the native CUDAAllocator failed: x.cc:1: error: nope", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(d, "log")))
            p = subprocess.run(["bash", os.path.join(HERE, "alternate-steps.sh")], capture_output=True, text=True, cwd=ROOT, timeout=30,
                               env=dict(env, TOTAL="soon"))
            self.assertEqual((p.returncode, len(p.stderr.strip().splitlines())), (2, 1), p.stderr)
            # ours@baseline: the class built beside the baseline's library too, and its runs apart from this tree's
            lib = os.path.join(d, "baseline.so")
            open(lib, "w").close()
            p = subprocess.run(["bash", os.path.join(HERE, "alternate-steps.sh")], capture_output=True, text=True, cwd=ROOT, timeout=120,
                               env=dict(env, OUT=os.path.join(d, "out3"), GMLAKE_BASELINE_LIB=lib, GMLAKE_BASELINE_REV="abc1234",
                                        FAKE_BUILD_LOG=os.path.join(d, "builds"), COMPARE="ours:vms/pytorch ours:vms@baseline/pytorch"))
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            with open(os.path.join(d, "builds")) as f:
                self.assertEqual(f.read().split("\n")[:2], ["build default", f"build {lib}"])
            doc, _ = report_files(os.path.join(d, "out3"), "alternate-steps")
            self.assertEqual(([r["allocator"] for r in doc["runs"]], doc["settings"]["baseline_rev"]), (["ours:vms", "ours:vms@baseline"], "abc1234"))

    def test_live_baseline_unpacks_the_bundled_revision(self):
        with tempfile.TemporaryDirectory() as d:
            root, run = os.path.join(d, "tree"), os.path.join(d, "run")
            lib = "baseline/packages/torch-alloc/build/lib/libgmlake_torch_alloc.so"
            os.makedirs(os.path.join(d, "pack", os.path.dirname(lib)))
            open(os.path.join(d, "pack", lib), "w").close()
            os.makedirs(os.path.join(root, ".gpu"))
            subprocess.run(["tar", "-cJf", os.path.join(root, ".gpu/baseline.tar.xz"), "-C", os.path.join(d, "pack"), "baseline"], check=True)
            with open(os.path.join(root, ".gpu/baseline.rev"), "w") as f:
                f.write("abc1234\n")
            script = f'root={root}; . {os.path.join(HERE, "live-env.sh")}; live_baseline t; echo "$GMLAKE_BASELINE_LIB $GMLAKE_BASELINE_REV"'
            p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=dict(os.environ, GMLAKE_RUN_DIR=run), timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.split(), [os.path.join(run, lib), "abc1234"])
            self.assertTrue(os.path.isfile(os.path.join(run, lib)))
            self.assertEqual(os.readlink(os.path.join(run, "baseline/packages/torch-alloc/build/libnode")),
                             os.path.join(root, "packages/torch-alloc/build/libnode"))  # this tree's libnode
            os.remove(os.path.join(root, ".gpu/baseline.tar.xz"))  # none bundled: nothing set
            p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env={"PATH": os.environ["PATH"], "GMLAKE_RUN_DIR": run}, timeout=60)
            self.assertEqual((p.returncode, p.stdout.strip()), (0, ""), p.stderr)

    # live_workloads.py itself on LargestBatch's stand-in torch and transformers, with a stand-in
    # gmlake_torch; torch's seeds, the batches' shapes and the switches logged in order
    def live_workloads(self, d, *argv, env=None):
        torch_text = FAKE_LB_REAL_TORCH
        for old, new in (("def manual_seed(s):\n    pass", "def manual_seed(s):\n    _event('seed', s)"),
                         ("def randint(lo, hi, shape, device=None):\n    return _T(shape)",
                          "def randint(lo, hi, shape, device=None):\n    _event('ids', list(shape))\n    return _T(shape)")):
            self.assertIn(old, torch_text)
            torch_text = torch_text.replace(old, new)
        log = "import json as _json, os as _os\ndef _event(*e):\n    with open(_os.environ['FAKE_EVENTS'], 'a') as f:\n        f.write(_json.dumps(list(e)) + '\\n')\n"
        torch_text = log + torch_text + "_event('conf', _os.environ.get('PYTORCH_CUDA_ALLOC_CONF'))\n"
        ours = os.path.join(d, "ours", "gmlake_torch")
        os.makedirs(ours, exist_ok=True)
        for path, text in ((os.path.join(d, "torch.py"), torch_text), (os.path.join(d, "transformers.py"), FAKE_LB_TRANSFORMERS),
                           (os.path.join(ours, "__init__.py"), "from torch import _event\ndef enable(policy, **kw):\n    _event('enable', policy, kw)\n"
                                                             "def stats():\n    return {}\n"),
                           (os.path.join(ours, "cuda_allocator.py"), "from torch import _event\ndef route(to):\n    _event('route', to)\n")):
            with open(path, "w") as f:
                f.write(text)
        events = os.path.join(d, "events")
        if os.path.exists(events):
            os.remove(events)
        e = dict(os.environ, PYTHONPATH=d, GMLAKE_TORCH_PY=os.path.join(d, "ours"), FAKE_EVENTS=events, **(env or {}))
        p = subprocess.run([sys.executable, os.path.join(HERE, "live_workloads.py"), *argv], capture_output=True, text=True, env=e, timeout=120)
        got = []
        if os.path.exists(events):
            with open(events) as f:
                got = [json.loads(l) for l in f]
        return p, got

    def test_live_workloads_runs_each_step_three_times_seeded_alike(self):
        import random
        rng = random.Random(1234)  # live_workloads' seqs(2, 64, 1024)
        lens = [rng.randint(64, 1024) for _ in range(2)]
        with tempfile.TemporaryDirectory() as d:
            # what the caller's environment says is replaced: the REF's setting
            for ref, outside, conf in (("pytorch-expandable", "", "expandable_segments:True"), ("pytorch", "expandable_segments:True", None)):
                p, events = self.live_workloads(d, "gpt2_ft", "--allocator", "ours:vms", "--steps", "2", "--alternate", ref,
                                                env={"PYTORCH_CUDA_ALLOC_CONF": outside})
                self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-3000:])
                # PyTorch's own allocator configured as REF before torch is imported; ours as its own CUDAAllocator
                want = [["conf", conf], ["enable", "vms", {"record": False, "interface": "native"}], ["seed", 1234]]
                for k in range(6):
                    want += [["seed", 1234 + k // 3], ["route", alternate_steps.route_of(k)], ["ids", [8, lens[k // 3]]]]
                self.assertEqual(events, want, ref)
                (line,) = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
                res = json.loads(line[len("RESULT "):])
                self.assertEqual((res["steps"], res["step_route"]), (6, [alternate_steps.route_of(k) for k in range(6)]))
            # without --alternate: no switch, no reseeding, the step route not kept
            p, events = self.live_workloads(d, "gpt2_ft", "--allocator", "ours:vms", "--steps", "2")
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
            self.assertEqual([e[0] for e in events], ["conf", "enable", "seed", "ids", "ids"])
            self.assertEqual(events[1], ["enable", "vms", {"record": False}])
            (line,) = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
            self.assertIsNone(json.loads(line[len("RESULT "):])["step_route"])

    def test_live_workloads_refuses_alternate_without_ours_or_with_other_per_step_work(self):
        with tempfile.TemporaryDirectory() as d:
            for argv, want in ((["--allocator", "pytorch"], "alternates an ours:POLICY allocator's steps"),
                               (["--allocator", "pytorch-expandable"], "alternates an ours:POLICY allocator's steps"),
                               (["--allocator", "plug:pytorch"], "alternates an ours:POLICY allocator's steps"),
                               (["--allocator", "ours:vms", "--record", os.path.join(d, "t.pickle")], "takes no --record"),
                               (["--allocator", "ours:vms", "--busy-core", "odd"], "takes no --record"),
                               (["--allocator", "ours:vms", "--profile-steps", "1"], "takes no --record")):
                p, events = self.live_workloads(d, "gpt2_ft", "--steps", "2", "--alternate", "pytorch", *argv)
                self.assertEqual(p.returncode, 1, (argv, p.stdout, p.stderr))
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, (argv, p.stderr))
                self.assertTrue(p.stderr.startswith("live_workloads: --alternate "), p.stderr)
                self.assertIn(want, p.stderr)
                self.assertEqual(events, [], argv)  # refused before torch was imported
        # the compiled workload's child says the same, in step_time's one line
        p = subprocess.run([sys.executable, os.path.join(HERE, "step_time.py"), "child", "gpt2_124m_compile", "--allocator", "pytorch",
                            "--alternate", "pytorch"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr.strip(), "step_time: --alternate alternates an ours:POLICY allocator's steps with PyTorch's own")


# ---- the native CUDAAllocator (packages/torch-alloc/python/gmlake_torch/cuda_allocator.cc) ------
# Built here on stand-in headers with the declarations of torch 2.11's c10 CUDAAllocator (and a
# newer variant, STUB_NEWEST: snapshot(id, include_traces), attachOomRejectionObserver, the
# observer types in c10), driven against a stand-in for libgmlake_torch_alloc.so that checks
# every free against its alloc's size and stream. What they cannot show: that the real header
# matches (the GPU host's build does) and PyTorch's own calls into the class.
STUB_HEADERS = {
"c10/util/Exception.h": r'''
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
namespace c10 {
struct Error : std::runtime_error { using std::runtime_error::runtime_error; };
struct OutOfMemoryError : Error { using Error::Error; };
inline void Cat(std::ostringstream&) {}
template <class T, class... R> void Cat(std::ostringstream& o, const T& t, const R&... r) { o << t; Cat(o, r...); }
template <class... A> std::string Str(const A&... a) { std::ostringstream o; Cat(o, a...); return o.str(); }
}
#define TORCH_CHECK_WITH(E, cond, ...) do { if (!(cond)) throw ::c10::E(::c10::Str(__VA_ARGS__)); } while (0)
#define TORCH_CHECK(cond, ...) TORCH_CHECK_WITH(Error, cond, __VA_ARGS__)
''',
"cuda_runtime_api.h": r'''
#pragma once
#include <cstddef>
#include <cstring>
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
#include <cstdlib>
#include <map>
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorPeerAccessAlreadyEnabled = 704 };
enum cudaMemcpyKind { cudaMemcpyDeviceToDevice = 3 };
inline cudaError_t cudaMemGetInfo(size_t* f, size_t* t) { *f = 1u << 30; *t = 2u << 30; return cudaSuccess; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { std::memcpy(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) { std::memcpy(d, s, n); return cudaSuccess; }
inline cudaError_t cudaDeviceEnablePeerAccess(int, unsigned) { return cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
// cudaMallocAsync's stand-in: host memory, each free checked against its alloc's stream, the
// device syncs counted (one program's state: the routing driver reads it)
struct StubAsync { std::map<void*, cudaStream_t> live; long mallocs = 0, frees = 0, bad_frees = 0, syncs = 0; };
inline StubAsync stub_async;
inline cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t s) {
  *p = std::malloc(n);
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  stub_async.live[*p] = s;
  stub_async.mallocs++;
  return cudaSuccess;
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  auto it = stub_async.live.find(p);
  if (it == stub_async.live.end() || it->second != s) { stub_async.bad_frees++; return cudaErrorInvalidValue; }
  stub_async.live.erase(it);
  std::free(p);
  stub_async.frees++;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { stub_async.syncs++; return cudaSuccess; }
''',
"c10/cuda/CUDAFunctions.h": r'''
#pragma once
#include <cuda_runtime_api.h>
#include <c10/util/Exception.h>
#include <cstdint>
namespace c10 { using DeviceIndex = int8_t; }
namespace c10::cuda {
inline cudaError_t GetDevice(c10::DeviceIndex* d) { *d = 0; return cudaSuccess; }
inline c10::DeviceIndex device_count() noexcept { return 2; }  // 2: the routing driver sees it reach init()
}
#define C10_CUDA_CHECK(e) TORCH_CHECK((e) == cudaSuccess, "cuda error")
''',
"c10/cuda/CUDAStream.h": r'''
#pragma once
#include <c10/cuda/CUDAFunctions.h>
namespace c10 {
struct Stream { void* s = nullptr; };
}
namespace c10::cuda {
struct CUDAStream {
  cudaStream_t s;
  explicit CUDAStream(c10::Stream x) : s(static_cast<cudaStream_t>(x.s)) {}
  explicit CUDAStream(cudaStream_t x) : s(x) {}
  cudaStream_t stream() const { return s; }
};
extern thread_local cudaStream_t t_current;
inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex) { return CUDAStream(t_current); }
}
''',
"c10/cuda/CUDAGuard.h": r'''
#pragma once
#include <c10/cuda/CUDAFunctions.h>
namespace c10::cuda { struct CUDAGuard { explicit CUDAGuard(c10::DeviceIndex) {} }; }
''',
"c10/cuda/CUDACachingAllocator.h": r'''
#pragma once
#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>
#include <c10/cuda/CUDAStream.h>
namespace c10 {
enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
struct Device { DeviceType t; DeviceIndex i; Device(DeviceType a, DeviceIndex b) : t(a), i(b) {} };
using DeleterFnPtr = void (*)(void*);
struct DataPtr {
  void* p = nullptr; void* ctx = nullptr; DeleterFnPtr d = nullptr; Device dev{DeviceType::CPU, 0};
  DataPtr(void* a, void* b, DeleterFnPtr c, Device e) : p(a), ctx(b), d(c), dev(e) {}
  DataPtr(DataPtr&& o) noexcept : p(o.p), ctx(o.ctx), d(o.d), dev(o.dev) { o.p = o.ctx = nullptr; }
  ~DataPtr() { if (ctx && d) d(ctx); }
  void* get() const { return p; }
  DeleterFnPtr get_deleter() const { return d; }
  Device device() const { return dev; }
  void* release_context() { void* c = ctx; ctx = nullptr; return c; }  // as c10's: get() stays, nothing deleted
};
struct Allocator {
  virtual ~Allocator() = default;
  virtual DataPtr allocate(size_t n) = 0;
  virtual DeleterFnPtr raw_deleter() const { return nullptr; }
  virtual void copy_data(void* dest, const void* src, std::size_t count) const = 0;
};
using CaptureId_t = unsigned long long;
using MempoolId_t = std::pair<CaptureId_t, CaptureId_t>;
struct GatheredContext { virtual ~GatheredContext() = default; };
#ifdef STUB_NEWEST
using OutOfMemoryObserver = std::function<void(int64_t, size_t, size_t, size_t)>;
enum struct RecordContext { NEVER = 0, STATE = 1, ALLOC = 2, ALL = 3 };
typedef std::shared_ptr<GatheredContext> (*CreateContextFn)();
#endif
namespace CachingAllocator {
struct Stat { int64_t current = 0, peak = 0, allocated = 0, freed = 0; };
enum struct StatType : uint64_t { AGGREGATE = 0, SMALL_POOL = 1, LARGE_POOL = 2, NUM_TYPES = 3 };
typedef std::array<Stat, 3> StatArray;
}
namespace CachingDeviceAllocator {
using namespace c10::CachingAllocator;
struct DeviceStats {
  StatArray allocation, segment, active, inactive_split, allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes;
  int64_t num_alloc_retries = 0, num_ooms = 0;
#ifdef STUB_NEWEST
  int64_t num_sync_all_streams = 0, num_device_alloc = 0, num_device_free = 0;
#endif
  int64_t max_split_size = 0;
};
struct TraceEntry {};
#ifndef STUB_NEWEST
enum struct RecordContext { NEVER = 0, STATE = 1, ALLOC = 2, ALL = 3 };
typedef std::shared_ptr<GatheredContext> (*CreateContextFn)();
#endif
using AllocatorTraceTracker = std::function<void(const TraceEntry&)>;
}
struct DeviceAllocator : public Allocator {
  virtual bool initialized() = 0;
  virtual void emptyCache(MempoolId_t mempool_id = {0, 0}) = 0;
  virtual void recordStream(const DataPtr& ptr, c10::Stream stream) = 0;
  virtual CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) = 0;
  virtual void resetAccumulatedStats(c10::DeviceIndex device) = 0;
  virtual void resetPeakStats(c10::DeviceIndex device) = 0;
  virtual std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) = 0;
};
}
namespace c10::cuda::CUDACachingAllocator {
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::AllocatorTraceTracker;
#ifndef STUB_NEWEST
using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::CreateContextFn;
using OutOfMemoryObserver = std::function<void(int64_t, size_t, size_t, size_t)>;
#else
using OomRejectionObserver = std::function<void(int64_t, size_t, size_t, size_t)>;
#endif
struct AllocatorState { virtual ~AllocatorState() = default; };
struct SnapshotInfo {};
struct CheckpointDelta { std::vector<void*> ptrs_freed; std::vector<DataPtr> dataptrs_allocd; };
struct ShareableHandle { ptrdiff_t offset; std::string handle; };
struct StreamSegmentSize { cudaStream_t stream; bool is_small_pool; size_t total_size; };
class CUDAAllocator : public DeviceAllocator {
 public:
  virtual void* raw_alloc(size_t nbytes) = 0;
  virtual void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) = 0;
  virtual void raw_delete(void* ptr) = 0;
  virtual void init(int device_count) = 0;
  virtual double getMemoryFraction(c10::DeviceIndex device) = 0;
  virtual void setMemoryFraction(double fraction, c10::DeviceIndex device) = 0;
  virtual std::vector<StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex device) = 0;
  virtual void enable(bool value) = 0;
  virtual bool isEnabled() const = 0;
  virtual void cacheInfo(c10::DeviceIndex device, size_t* largestBlock) = 0;
  virtual void* getBaseAllocation(void* ptr, size_t* size) = 0;
  virtual void recordStream(const DataPtr& ptr, CUDAStream stream) = 0;
  void recordStream(const DataPtr& ptr, c10::Stream stream) override { recordStream(ptr, CUDAStream(stream)); }
#ifdef STUB_NEWEST
  virtual SnapshotInfo snapshot(MempoolId_t mempool_id = {0, 0}, bool include_traces = true) = 0;
#else
  virtual SnapshotInfo snapshot(MempoolId_t mempool_id = {0, 0}) = 0;
#endif
  virtual void beginAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id, std::function<bool(cudaStream_t)> filter) = 0;
  virtual void endAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id) = 0;
  virtual void releasePool(c10::DeviceIndex device, MempoolId_t mempool_id) = 0;
#ifdef STUB_NEWEST
  // torch 2.11's pool virtuals: MemPool's destructor calls setUseOnOOM(device, id, false)
  virtual void createOrIncrefPool(c10::DeviceIndex, MempoolId_t, std::shared_ptr<CUDAAllocator> allocator = nullptr) { TORCH_CHECK(false, "createOrIncrefPool"); }
  virtual void setUseOnOOM(c10::DeviceIndex, MempoolId_t, bool) { TORCH_CHECK(false, "setUseOnOOM"); }
  virtual void setNoSplit(c10::DeviceIndex, MempoolId_t) { TORCH_CHECK(false, "setNoSplit"); }
#else
  virtual void createOrIncrefPool(c10::DeviceIndex, MempoolId_t, CUDAAllocator* allocator = nullptr) { TORCH_CHECK(false, "createOrIncrefPool"); }
  virtual void setUseOnOOM(c10::DeviceIndex, MempoolId_t) { TORCH_CHECK(false, "setUseOnOOM"); }
#endif
  virtual int getPoolUseCount(c10::DeviceIndex, MempoolId_t) { TORCH_CHECK(false, "getPoolUseCount"); return 0; }
  virtual bool checkPoolLiveAllocations(c10::DeviceIndex, MempoolId_t, const std::unordered_set<void*>&) { TORCH_CHECK(false, "check"); return false; }
  virtual ShareableHandle shareIpcHandle(void* ptr) = 0;
  virtual std::shared_ptr<void> getIpcDevPtr(std::string handle) = 0;
  virtual bool isHistoryEnabled() { return false; }
  virtual void recordHistory(bool enabled, CreateContextFn context_recorder, size_t alloc_trace_max_entries, RecordContext when,
                             bool clearHistory, const std::vector<std::string>& skip_actions) = 0;
  virtual void attachOutOfMemoryObserver(OutOfMemoryObserver observer) = 0;
#ifdef STUB_NEWEST
  virtual void attachOomRejectionObserver(OomRejectionObserver observer) = 0;
#endif
  virtual void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) = 0;
  virtual void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) = 0;
  virtual cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count, cudaStream_t stream,
                                  bool p2p_enabled) = 0;
  virtual std::shared_ptr<AllocatorState> getCheckpointState(c10::DeviceIndex device, MempoolId_t id) = 0;
  virtual CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device, std::shared_ptr<AllocatorState> pps) = 0;
  virtual std::string name() = 0;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex) override { return {0, 0}; }
};
extern std::atomic<CUDAAllocator*> allocator;
inline CUDAAllocator* get() { return allocator.load(); }
}
''',
}

FAKE_ENGINE = r'''// A stand-in for libgmlake_torch_alloc.so's entry points: addresses from a bump pointer, every
// free checked against its alloc's size and stream.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
struct CUstream_st;
namespace {
std::mutex mu;
std::map<unsigned long, std::pair<size_t, void*>> live;
unsigned long next_addr = 1ul << 40;
size_t live_bytes = 0, peak_bytes = 0;
long bad_frees = 0, empties = 0, records = 0, windows = 0, allocs = 0;
double fraction = 1.0;
thread_local std::string err;
}
#define X extern "C" __attribute__((visibility("default")))
X int gmlake_try_alloc(size_t size, int device, void* stream, void** out) {
  if (size > (1ul << 38)) { err = "CUDA out of memory. Tried to allocate (fake)"; return -1; }
  if (device != 0) { err = "gmlake: wrong device"; return -2; }
  std::lock_guard<std::mutex> l(mu);
  *out = reinterpret_cast<void*>(next_addr);
  live[next_addr] = {size, stream};
  next_addr += (size + 511) / 512 * 512;
  live_bytes += size;
  if (live_bytes > peak_bytes) peak_bytes = live_bytes;
  allocs++;
  return 0;
}
X void gmlake_free(void* p, size_t size, int device, void* stream) {
  std::lock_guard<std::mutex> l(mu);
  auto it = live.find(reinterpret_cast<unsigned long>(p));
  if (it == live.end() || it->second.first != size || it->second.second != stream || device != 0) { bad_frees++; return; }
  live_bytes -= size;
  live.erase(it);
}
X void gmlake_empty_cache() { empties++; }
X void gmlake_record_stream(void*, void*) { records++; }
X char* gmlake_text(int op, const char*) {
  char buf[512];
  std::lock_guard<std::mutex> l(mu);
  std::snprintf(buf, sizeof buf, "{\"allocated_bytes.all.current\":%zu,\"allocated_bytes.all.peak\":%zu,\"reserved_bytes.all.current\":%zu,"
                "\"reserved_bytes.all.peak\":%zu,\"segment.all.current\":3,\"num_alloc_retries\":2,\"num_ooms\":1,\"num_device_alloc\":7}",
                live_bytes, peak_bytes, live_bytes + 4096, peak_bytes + 4096);
  return strdup(op == 1 ? buf : "");
}
X void gmlake_text_free(char* s) { std::free(s); }
X const char* gmlake_last_error() { return err.c_str(); }
long filter_answer = -1, pool_uses = 0;
X void gmlake_begin_allocate_to_pool(int, std::pair<unsigned long long, unsigned long long> p, std::function<bool(CUstream_st*)> f) {
  windows++;
  pool_uses++;
  filter_answer = f ? f(reinterpret_cast<CUstream_st*>(p.first)) : -1;  // the filter reached the engine
}
X void gmlake_end_allocate_to_pool(int, std::pair<unsigned long long, unsigned long long>) { windows--; }
X void gmlake_release_pool(int, std::pair<unsigned long long, unsigned long long>) { pool_uses--; }
X void gmlake_create_pool(int, std::pair<unsigned long long, unsigned long long>) { pool_uses++; }
X int gmlake_pool_use_count(unsigned long long, unsigned long long) { return (int)pool_uses; }
// pool (0, 9) has live blocks at 0x100 and 0x200
X int gmlake_pool_live(unsigned long long, unsigned long long s, void* p) {
  if (s != 9) return 0;
  return p == nullptr ? 2 : (p == reinterpret_cast<void*>(0x100) || p == reinterpret_cast<void*>(0x200));
}
// pool (0, 9)'s checkpoint 41: its restore frees the last block allocated, allocates 3000 bytes on stream 0x9000
long checkpoint_drops = 0;
X long long gmlake_pool_checkpoint(unsigned long long, unsigned long long s) {
  if (s != 9) { err = "getCheckpointState: no pool (0, 8)"; return -2; }
  return 41;
}
X char* gmlake_pool_restore(long long id) {
  std::lock_guard<std::mutex> l(mu);
  if (id != 41 || live.empty()) return strdup("gmlake: setCheckpointPoolState: no checkpoint");
  auto last = std::prev(live.end());
  unsigned long freed = last->first, b = next_addr;
  live_bytes -= last->second.first;
  live.erase(last);
  next_addr += 4096;
  live[b] = {3000, reinterpret_cast<void*>(0x9000)};
  live_bytes += 3000;
  char buf[128];
  std::snprintf(buf, sizeof buf, "1 1 %lu %lu 3000 %lu", freed, b, 0x9000ul);
  return strdup(buf);
}
X int gmlake_pool_drop_checkpoint(long long id) { checkpoint_drops += id == 41; return 1; }
X void gmlake_set_memory_fraction(double f, int) { if (f <= 0) throw std::runtime_error("gmlake: bad fraction"); fraction = f; }
long capture_mode = 0;
X int gmlake_set_capture_check(int m) { long p = capture_mode; capture_mode = m; return (int)p; }
X long fake_counts(int k) {
  return k == 0 ? bad_frees : k == 1 ? (long)live.size() : k == 2 ? empties : k == 3 ? records : k == 4 ? windows : k == 6 ? filter_answer : k == 7 ? pool_uses : k == 8 ? checkpoint_drops : k == 9 ? allocs : capture_mode;
}
'''

NATIVE_DRIVER = r'''// Drives the native CUDAAllocator (cuda_allocator.cc, built on stub torch headers) against the
// stand-in engine: two threads of random alloc/free on their own streams, the DataPtr path,
// record_stream, statistics, out of memory and a bad free.
#include <c10/cuda/CUDACachingAllocator.h>
#include <dlfcn.h>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>
namespace c10::cuda::CUDACachingAllocator { std::atomic<CUDAAllocator*> allocator{nullptr}; }
namespace c10::cuda { thread_local cudaStream_t t_current = nullptr; }
extern "C" int gmlake_native_install(const char*, int, char*, size_t);
namespace A = c10::cuda::CUDACachingAllocator;
#define CHECK(c, ...) do { if (!(c)) { std::printf("FAIL %s: ", #c); std::printf(__VA_ARGS__); std::printf("\n"); return 1; } } while (0)
int main(int argc, char** argv) {
  void* fake = dlopen(argv[1], RTLD_NOW);
  CHECK(fake, "%s", dlerror());
  auto counts = reinterpret_cast<long (*)(int)>(dlsym(fake, "fake_counts"));
  char err[512] = {0};
  CHECK(gmlake_native_install("/nonexistent.so", 0, err, sizeof err) == -1, "no library");
  CHECK(std::string(err).find("not loaded") != std::string::npos, "%s", err);
  CHECK(gmlake_native_install(argv[1], 0, err, sizeof err) == 0, "%s", err);
  CHECK(gmlake_native_install(argv[1], 0, err, sizeof err) == 0, "twice");
  A::CUDAAllocator* a = A::get();
  CHECK(a && a->name() == "gmlake" && !a->initialized(), "installed");
  a->init(1);
  CHECK(a->initialized(), "init");
  const int ops = std::atoi(argv[2]);
  auto worker = [&](int seed) {
    std::mt19937_64 rng(seed);
    cudaStream_t s = reinterpret_cast<cudaStream_t>(0x1000 * (seed + 1));
    std::vector<void*> window(64, nullptr);
    for (int i = 0; i < ops; i++) {
      void*& w = window[rng() % window.size()];
      if (w) a->raw_delete(w);
      w = rng() % 7 == 0 ? nullptr : a->raw_alloc_with_stream(size_t(1) << (rng() % 26), s);
    }
    for (void* w : window) a->raw_delete(w);
  };
  std::thread t1(worker, 1), t2(worker, 2);
  t1.join();
  t2.join();
  CHECK(counts(0) == 0, "%ld frees with another size or stream than their alloc's", counts(0));
  CHECK(counts(1) == 0, "%ld blocks left", counts(1));
  {
    c10::cuda::t_current = reinterpret_cast<cudaStream_t>(0x7000);
    c10::DataPtr d = a->allocate(1000);
    CHECK(d.get() && d.get_deleter() == a->raw_deleter(), "DataPtr");
    a->recordStream(d, c10::cuda::CUDAStream(reinterpret_cast<cudaStream_t>(0x8000)));
    CHECK(counts(3) == 1, "record_stream forwarded");
    c10::DataPtr other(reinterpret_cast<void*>(16), nullptr, nullptr, c10::Device(c10::DeviceType::CUDA, 0));
    a->recordStream(other, c10::cuda::CUDAStream(reinterpret_cast<cudaStream_t>(0x8000)));
    CHECK(counts(3) == 1, "not ours: not forwarded");
    auto st = a->getDeviceStats(0);
    CHECK(st.allocated_bytes[0].current == 1000 && st.reserved_bytes[0].current == 5096 && st.segment[0].current == 3, "engine stats");
    CHECK(st.allocation[0].current == 1 && st.requested_bytes[0].current == 1000 && st.num_alloc_retries == 2, "counted stats");
    CHECK(a->allocate(0).get() == nullptr, "size 0");
  }
  CHECK(counts(1) == 0 && counts(0) == 0, "the DataPtr's deleter freed it with its size and stream");
  auto st = a->getDeviceStats(0);
  CHECK(st.allocation[0].current == 0 && st.allocation[0].peak >= 1 && st.requested_bytes[0].freed > 0, "after");
  a->resetPeakStats(0);
  a->resetAccumulatedStats(0);
  st = a->getDeviceStats(0);
  CHECK(st.allocation[0].peak == 0 && st.requested_bytes[0].allocated == 0, "reset");
  int observed = 0;
  a->attachOutOfMemoryObserver([&](int64_t, size_t, size_t total, size_t) { observed += total > 0; });
  bool oom = false;
  try { a->raw_alloc(size_t(1) << 40); } catch (const c10::OutOfMemoryError& e) { oom = std::string(e.what()).find("out of memory") != std::string::npos; }
  CHECK(oom && observed == 1, "out of memory raises OutOfMemoryError with the engine's message, observers told");
  bool bad = false;
  try { a->raw_delete(reinterpret_cast<void*>(0x1234)); } catch (const c10::Error& e) { bad = std::string(e.what()).find("did not hand out") != std::string::npos; }
  CHECK(bad, "a free of an unknown address");
  a->emptyCache({0, 0});
  CHECK(counts(2) == 1, "empty_cache");
  a->beginAllocateToPool(0, {0x42, 0}, [](cudaStream_t s) { return s == reinterpret_cast<cudaStream_t>(0x42); });
  CHECK(counts(4) == 1 && counts(6) == 1, "pool window with its filter (%ld)", counts(6));
  a->endAllocateToPool(0, {0x42, 0});
  a->createOrIncrefPool(0, {0, 9}, nullptr);  // torch.cuda.MemPool()
  CHECK(a->getPoolUseCount(0, {0, 9}) == 2, "pool uses %d", a->getPoolUseCount(0, {0, 9}));
  void* l1 = reinterpret_cast<void*>(0x100);
  void* l2 = reinterpret_cast<void*>(0x200);
  void* l3 = reinterpret_cast<void*>(0x300);
  CHECK(a->checkPoolLiveAllocations(0, {0, 9}, {l1, l2}) && !a->checkPoolLiveAllocations(0, {0, 9}, {l1}) &&
            !a->checkPoolLiveAllocations(0, {0, 9}, {l1, l3}) && !a->checkPoolLiveAllocations(0, {0, 8}, {l1, l2}),
        "checkPoolLiveAllocations: exactly the pool's live blocks");
  a->releasePool(0, {0x42, 0});
  a->releasePool(0, {0, 9});
  CHECK(counts(7) == 0 && a->getPoolUseCount(0, {0, 9}) == 0, "releasePool reached the engine");
  bool other = false;
#ifdef STUB_NEWEST
  std::shared_ptr<A::CUDAAllocator> another(reinterpret_cast<A::CUDAAllocator*>(16), [](A::CUDAAllocator*) {});
#else
  A::CUDAAllocator* another = reinterpret_cast<A::CUDAAllocator*>(16);
#endif
  try { a->createOrIncrefPool(0, {0, 10}, another); } catch (const c10::Error& e) {
    other = std::string(e.what()).find("MemPool(allocator=...) is not supported") != std::string::npos;
  }
  CHECK(other, "MemPool with another allocator refused");
#ifdef STUB_NEWEST
  a->setUseOnOOM(0, {0, 9}, false);  // every MemPool's destructor: must not throw
  bool onOom = false;
  try { a->setUseOnOOM(0, {0, 9}, true); } catch (const c10::Error& e) { onOom = std::string(e.what()).find("use_on_oom=True") != std::string::npos; }
  CHECK(onOom, "MemPool(use_on_oom=True) refused, saying so");
  bool noSplit = false;
  try { a->setNoSplit(0, {0, 9}); } catch (const c10::Error& e) { noSplit = std::string(e.what()).find("no_split=True") != std::string::npos; }
  CHECK(noSplit, "MemPool(no_split=True) refused, saying so");
#endif
  {  // cudagraph trees' checkpoints: the block live now freed (out of the live table), another live again
    c10::cuda::t_current = reinterpret_cast<cudaStream_t>(0x7100);
    void* stale = a->raw_alloc(2048);
    int64_t before = a->getDeviceStats(0).allocation[0].current;
    std::shared_ptr<A::AllocatorState> ck = a->getCheckpointState(0, {0, 9});
    A::CheckpointDelta d = a->setCheckpointPoolState(0, ck);
    CHECK(d.ptrs_freed.size() == 1 && d.ptrs_freed[0] == stale && d.dataptrs_allocd.size() == 1, "the delta: %zu freed, %zu allocated",
          d.ptrs_freed.size(), d.dataptrs_allocd.size());
    CHECK(d.dataptrs_allocd[0].get() != nullptr && d.dataptrs_allocd[0].get_deleter() == a->raw_deleter(), "allocated behind our deleter");
    CHECK(a->getDeviceStats(0).allocation[0].current == before && a->getDeviceStats(0).requested_bytes[0].current == 3000, "counted");
    bool gone = false;
    try { a->raw_delete(stale); } catch (const c10::Error& e) { gone = std::string(e.what()).find("did not hand out") != std::string::npos; }
    CHECK(gone, "the freed block left the live table (its storage's deleter is dropped: no second free)");
    bool refused = false;
    try { a->getCheckpointState(0, {0, 8}); } catch (const c10::Error& e) { refused = std::string(e.what()) == "gmlake: getCheckpointState: no pool (0, 8)"; }
    CHECK(refused, "a checkpoint of no pool refused with the engine's reason");
    refused = false;
    try { a->setCheckpointPoolState(0, std::make_shared<A::AllocatorState>()); } catch (const c10::Error& e) { refused = std::string(e.what()).find("not a checkpoint") != std::string::npos; }
    CHECK(refused, "another allocator's state refused");
    ck.reset();
    CHECK(counts(8) == 1, "the checkpoint dropped with its last reference");
  }
  CHECK(counts(0) == 0 && counts(1) == 0, "the restored block freed through its DataPtr with its size and stream (%ld bad, %ld left)", counts(0), counts(1));
  a->setMemoryFraction(0.5, 0);
  CHECK(a->getMemoryFraction(0) == 0.5, "fraction");
  size_t largest = 0;
  a->cacheInfo(0, &largest);
  CHECK(largest > 0, "cacheInfo");
  bool refused = false;
  try { a->snapshot({0, 0}); } catch (const c10::Error& e) { refused = true; }
  CHECK(refused, "snapshot refused");
  std::printf("OK %d\n", 2 * ops);
  return 0;
}
'''

# PyTorch's own allocator's stand-in, current before the install (what the routing sends to):
# host memory, every free checked against its allocs; its recordStream, as the real one's,
# takes only DataPtrs with its own deleter. init() throws while fail_inits > 0.
FAKE_THEIRS = r"""
#include <c10/cuda/CUDACachingAllocator.h>
#include <cstdlib>
#include <set>
namespace c10::cuda::CUDACachingAllocator::stub_theirs {
struct Counts {
  long inits = 0, init_arg = -1, fail_inits = 0, allocs = 0, frees = 0, bad_frees = 0, records = 0, foreign_records = 0, empties = 0;
  cudaStream_t record_stream = nullptr;
  std::set<void*> live;
};
inline Counts th;
inline void Delete(void* p) {
  if (th.live.erase(p) == 0) { th.bad_frees++; return; }
  std::free(p);
  th.frees++;
}
class Theirs final : public CUDAAllocator {
 public:
  bool init_ = false;
  DataPtr allocate(size_t n) override { void* p = raw_alloc(n); return {p, p, &Delete, c10::Device(c10::DeviceType::CUDA, 0)}; }
  DeleterFnPtr raw_deleter() const override { return &Delete; }
  void copy_data(void*, const void*, std::size_t) const override {}
  bool initialized() override { return init_; }
  void emptyCache(MempoolId_t) override { th.empties++; }
  DeviceStats getDeviceStats(c10::DeviceIndex) override { return {}; }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex) override {}
  void* raw_alloc(size_t n) override { return raw_alloc_with_stream(n, nullptr); }
  void* raw_alloc_with_stream(size_t n, cudaStream_t) override {
    TORCH_CHECK(init_, "theirs: allocation before init");
    void* p = std::malloc(n);
    th.live.insert(p);
    th.allocs++;
    return p;
  }
  void raw_delete(void* p) override { Delete(p); }
  void init(int n) override {
    if (th.fail_inits > 0) { th.fail_inits--; TORCH_CHECK(false, "no device (stub)"); }
    th.inits++;
    th.init_arg = n;
    init_ = true;
  }
  double getMemoryFraction(c10::DeviceIndex) override { return 1.0; }
  void setMemoryFraction(double, c10::DeviceIndex) override {}
  std::vector<StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex) override { return {}; }
  void enable(bool) override {}
  bool isEnabled() const override { return true; }
  void cacheInfo(c10::DeviceIndex, size_t* largest) override { *largest = 0; }
  void* getBaseAllocation(void* p, size_t*) override { return p; }
  void recordStream(const DataPtr& ptr, CUDAStream stream) override {
    if (ptr.get_deleter() != &Delete || th.live.count(ptr.get()) == 0) { th.foreign_records++; return; }
    th.records++;
    th.record_stream = stream.stream();
  }
#ifdef STUB_NEWEST
  SnapshotInfo snapshot(MempoolId_t, bool) override { return {}; }
  void attachOomRejectionObserver(OomRejectionObserver) override {}
#else
  SnapshotInfo snapshot(MempoolId_t) override { return {}; }
#endif
  void beginAllocateToPool(c10::DeviceIndex, MempoolId_t, std::function<bool(cudaStream_t)>) override {}
  void endAllocateToPool(c10::DeviceIndex, MempoolId_t) override {}
  void releasePool(c10::DeviceIndex, MempoolId_t) override {}
  ShareableHandle shareIpcHandle(void*) override { return {}; }
  std::shared_ptr<void> getIpcDevPtr(std::string) override { return nullptr; }
  void recordHistory(bool, CreateContextFn, size_t, RecordContext, bool, const std::vector<std::string>&) override {}
  void attachOutOfMemoryObserver(OutOfMemoryObserver) override {}
  void attachAllocatorTraceTracker(AllocatorTraceTracker) override {}
  void enablePeerAccess(c10::DeviceIndex, c10::DeviceIndex) override {}
  cudaError_t memcpyAsync(void*, int, const void*, int, size_t, cudaStream_t, bool) override { return cudaSuccess; }
  std::shared_ptr<AllocatorState> getCheckpointState(c10::DeviceIndex, MempoolId_t) override { return nullptr; }
  CheckpointDelta setCheckpointPoolState(c10::DeviceIndex, std::shared_ptr<AllocatorState>) override { return {}; }
  std::string name() override { return "native"; }
};
}  // namespace c10::cuda::CUDACachingAllocator::stub_theirs
"""

ROUTE_DRIVER = r"""// Drives gmlake_native_route (alternate_steps.py's switches) with the stand-in of PyTorch's own
// allocator current before the install, the stand-in engine and the stub's cudaMallocAsync: who
// allocates after each switch, that every block goes back to the one that gave it (whatever the
// route is at its free), record_stream, emptyCache and the refusals.
#include <dlfcn.h>
#include <cstdio>
#include <string>
""" + FAKE_THEIRS + r"""
namespace c10::cuda::CUDACachingAllocator { std::atomic<CUDAAllocator*> allocator{nullptr}; }
namespace c10::cuda { thread_local cudaStream_t t_current = nullptr; }
extern "C" int gmlake_native_install(const char*, int, char*, size_t);
extern "C" int gmlake_native_route(int, char*, size_t);
namespace A = c10::cuda::CUDACachingAllocator;
using A::stub_theirs::th;
#define CHECK(c, ...) do { if (!(c)) { std::printf("FAIL %s: ", #c); std::printf(__VA_ARGS__); std::printf("\n"); return 1; } } while (0)
int main(int, char** argv) {
  void* fake = dlopen(argv[1], RTLD_NOW);
  CHECK(fake, "%s", dlerror());
  auto engine = reinterpret_cast<long (*)(int)>(dlsym(fake, "fake_counts"));  // 0 bad frees, 2 empties, 3 records, 4 windows, 9 allocs
  char err[512] = {0};
  auto route = [&](int r) { err[0] = 0; return gmlake_native_route(r, err, sizeof err); };
  auto has = [&](const char* what) { return std::string(err).find(what) != std::string::npos; };
  CHECK(route(1) == -1 && has("not installed"), "routing before the install: %s", err);
  A::stub_theirs::Theirs theirs;
  A::allocator.store(&theirs);
  CHECK(gmlake_native_install(argv[1], 0, err, sizeof err) == 0, "%s", err);
  A::CUDAAllocator* a = A::get();
  CHECK(a != &theirs && a->name() == "gmlake", "installed over theirs");
  a->init(1);
  auto s1 = reinterpret_cast<cudaStream_t>(0x1000), s2 = reinterpret_cast<cudaStream_t>(0x2000), s3 = reinterpret_cast<cudaStream_t>(0x3000);
  void* o1 = a->raw_alloc_with_stream(100, s1);
  CHECK(engine(9) == 1 && th.allocs == 0 && th.inits == 0, "before any switch: the engine, theirs untouched");
  a->emptyCache({0, 0});
  CHECK(engine(2) == 1 && th.empties == 0, "never routed: emptyCache is the engine's alone");

  th.fail_inits = 1;
  CHECK(route(1) == -1 && std::string(err) == "gmlake: PyTorch's own allocator did not start: no device (stub)", "%s", err);
  a->beginAllocateToPool(0, {0x42, 0}, nullptr);
  CHECK(engine(4) == 1, "a refused switch leaves pool windows open");
  a->endAllocateToPool(0, {0x42, 0});
  a->releasePool(0, {0x42, 0});
  CHECK(route(3) == -1 && std::string(err) == "gmlake: route 3 is not 0 (the engine), 1 (PyTorch's) or 2 (cudaMallocAsync)", "%s", err);
  CHECK(route(-1) == -1 && has("route -1 is not"), "%s", err);
  void* o2 = a->raw_alloc_with_stream(50, s1);
  CHECK(engine(9) == 2 && th.allocs == 0, "refused switches switched nothing");
  int64_t ours_live = a->getDeviceStats(0).allocation[0].current;
  CHECK(ours_live == 2, "%ld", (long)ours_live);

  // 1: PyTorch's own, initialized at the first switch with the device count
  CHECK(route(1) == 0, "%s", err);
  CHECK(th.inits == 1 && th.init_arg == 2, "theirs' init(c10::cuda::device_count()): %ld, %ld", th.inits, th.init_arg);
  CHECK(route(1) == 0 && th.inits == 1, "initialized once");
  void* t1 = a->raw_alloc_with_stream(300, s2);
  CHECK(th.allocs == 1 && th.live.count(t1) == 1 && engine(9) == 2, "route 1: theirs allocates");
  c10::cuda::t_current = s2;
  {
    c10::DataPtr d = a->allocate(400);
    CHECK(th.allocs == 2 && d.get_deleter() == a->raw_deleter(), "a tensor of theirs behind our deleter (PyTorch sees one allocator)");
    a->recordStream(d, c10::cuda::CUDAStream(s3));
    CHECK(th.records == 1 && th.record_stream == s3 && th.foreign_records == 0 && engine(3) == 0,
          "record_stream reached theirs with a DataPtr of its own deleter (%ld, %ld, %ld)", th.records, th.foreign_records, engine(3));
    CHECK(th.frees == 0 && th.live.count(d.get()) == 1, "the stand-in DataPtr freed nothing");
    CHECK(a->getDeviceStats(0).allocation[0].current == ours_live, "theirs' blocks are not counted as the engine's");
    CHECK(route(0) == 0, "%s", err);
  }
  CHECK(th.frees == 1 && th.bad_frees == 0, "routed back to the engine, theirs' tensor went back to theirs");
  void* o3 = a->raw_alloc_with_stream(60, s1);
  CHECK(engine(9) == 3 && th.allocs == 2, "route 0: the engine again");
  a->raw_delete(t1);
  CHECK(th.frees == 2 && th.live.empty() && engine(0) == 0, "theirs' raw block freed by theirs");
  CHECK(a->getDeviceStats(0).allocation[0].current == ours_live + 1, "theirs' frees are not the engine's");

  // 2: cudaMallocAsync, freed on the block's stream; one another stream used waits for the device
  CHECK(route(2) == 0, "%s", err);
  void* p1 = a->raw_alloc_with_stream(128, s2);
  CHECK(stub_async.mallocs == 1 && engine(9) == 3 && th.allocs == 2, "route 2: cudaMallocAsync allocates");
  {
    c10::DataPtr q = a->allocate(256);
    CHECK(stub_async.mallocs == 2, "allocate() too");
    a->recordStream(q, c10::cuda::CUDAStream(s3));
    CHECK(engine(3) == 0 && th.records == 1 && th.foreign_records == 0, "a cudaMallocAsync block's record_stream goes to no allocator");
    CHECK(route(0) == 0, "%s", err);
    a->raw_delete(p1);
    CHECK(stub_async.frees == 1 && stub_async.bad_frees == 0 && stub_async.syncs == 0, "freed on its stream without a device sync");
  }
  CHECK(stub_async.frees == 2 && stub_async.bad_frees == 0 && stub_async.syncs == 1 && stub_async.live.empty(),
        "recorded on another stream: freed after a device sync (%ld syncs)", stub_async.syncs);

  bool refused = false;
  try { a->beginAllocateToPool(0, {0x43, 0}, nullptr); } catch (const c10::Error& e) { refused = std::string(e.what()).find("CUDA-graph pools are not supported") != std::string::npos; }
  CHECK(refused && engine(4) == 0, "a pool window refused once routed, routed back or not");
  a->emptyCache({0, 0});
  CHECK(engine(2) == 2 && th.empties == 1, "routed: emptyCache empties theirs too");
  a->raw_delete(o1);
  a->raw_delete(o2);
  a->raw_delete(o3);
  CHECK(engine(0) == 0 && engine(1) == 0 && a->getDeviceStats(0).allocation[0].current == 0, "the engine's blocks freed by the engine with their size and stream");
  CHECK(th.bad_frees == 0 && th.live.empty() && stub_async.bad_frees == 0, "no free went to the wrong allocator");
  std::printf("OK\n");
  return 0;
}
"""

# A stand-in torch for gmlake_torch.cuda_allocator.build(): its headers (the stubs), libc10 and a
# libc10_cuda that holds the current-allocator pointer and a pair loop through it (and, for
# route(), the stand-in of PyTorch's own allocator to put in place before the install).
FAKE_TORCH_FOR_BUILD = {
    "torch/__init__.py": "__version__ = '2.11.0+stub'\nclass _C:\n    _GLIBCXX_USE_CXX11_ABI = True\n",
    "torch/utils/__init__.py": "",
    "torch/utils/cpp_extension.py": "import os\ndef include_paths():\n    return [os.environ['STUB_INC']]\n",
}
FAKE_C10_CUDA = r'''
#include <c10/cuda/CUDACachingAllocator.h>
namespace c10::cuda::CUDACachingAllocator { std::atomic<CUDAAllocator*> allocator{nullptr}; }
namespace c10::cuda { thread_local cudaStream_t t_current = nullptr; }
extern "C" int stub_pairs(int n) {
  auto* a = c10::cuda::CUDACachingAllocator::get();
  if (a == nullptr || a->name() != "gmlake") return -1;
  if (!a->initialized()) a->init(1);
  for (int i = 0; i < n; i++) a->raw_delete(a->raw_alloc(size_t(512) << (i % 12)));
  return 0;
}
''' + FAKE_THEIRS + r'''
extern "C" void stub_theirs_install() { c10::cuda::CUDACachingAllocator::allocator.store(new c10::cuda::CUDACachingAllocator::stub_theirs::Theirs()); }
extern "C" long stub_theirs_counts(int k) {
  auto& th = c10::cuda::CUDACachingAllocator::stub_theirs::th;
  return k == 0 ? th.allocs : k == 1 ? th.frees : th.bad_frees;
}
'''


class NativeAllocator(unittest.TestCase):
    SRC = os.path.join(ROOT, "packages", "torch-alloc", "python", "gmlake_torch", "cuda_allocator.cc")

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        d = cls.inc = os.path.join(cls.dir.name, "inc")
        for p, t in STUB_HEADERS.items():
            os.makedirs(os.path.dirname(os.path.join(d, p)) or d, exist_ok=True)
            with open(os.path.join(d, p), "w") as f:
                f.write(t)
        cls.lib = os.path.join(cls.dir.name, "lib")
        os.makedirs(cls.lib)
        cls.engine = os.path.join(cls.lib, "libgmlake_torch_alloc.so")  # the stand-in, where library_path() looks
        for name, text in (("fake_engine.cc", FAKE_ENGINE), ("driver.cc", NATIVE_DRIVER), ("c10_cuda.cc", FAKE_C10_CUDA),
                           ("route_driver.cc", ROUTE_DRIVER)):
            with open(os.path.join(cls.dir.name, name), "w") as f:
                f.write(text)
        subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-o", cls.engine, os.path.join(cls.dir.name, "fake_engine.cc")], check=True)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_the_class_on_both_header_variants(self):
        for variant in ([], ["-DSTUB_NEWEST"]):
            exe = os.path.join(self.dir.name, "driver" + "".join(variant))
            b = subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-I" + self.inc, *variant, "-o", exe,
                                os.path.join(self.dir.name, "driver.cc"), self.SRC, "-ldl", "-lpthread"], capture_output=True, text=True)
            self.assertEqual(b.returncode, 0, b.stderr[-3000:])
            p = subprocess.run([exe, self.engine, "100000"], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(p.stdout.strip(), "OK 200000")

    def test_routing_on_both_header_variants(self):
        for variant in ([], ["-DSTUB_NEWEST"]):
            exe = os.path.join(self.dir.name, "route_driver" + "".join(variant))
            b = subprocess.run(["g++", "-std=c++17", "-O1", "-Wall", "-Werror", "-I" + self.inc, *variant, "-o", exe,
                                os.path.join(self.dir.name, "route_driver.cc"), self.SRC, "-ldl", "-lpthread"], capture_output=True, text=True)
            self.assertEqual(b.returncode, 0, b.stderr[-3000:])
            p = subprocess.run([exe, self.engine], capture_output=True, text=True, timeout=60)
            self.assertEqual((p.returncode, p.stdout.strip()), (0, "OK"), p.stdout + p.stderr)

    def fake_torch(self, broken=False):
        root = os.path.join(self.dir.name, "broken" if broken else "torch-ok")
        for p, t in FAKE_TORCH_FOR_BUILD.items():
            os.makedirs(os.path.dirname(os.path.join(root, p)), exist_ok=True)
            with open(os.path.join(root, p), "w") as f:
                f.write(t)
        tlib = os.path.join(root, "torch", "lib")
        os.makedirs(tlib, exist_ok=True)
        subprocess.run(["g++", "-std=c++17", "-shared", "-fPIC", "-I" + self.inc, "-o", os.path.join(tlib, "libc10_cuda.so"),
                        os.path.join(self.dir.name, "c10_cuda.cc")], check=True)
        subprocess.run(["g++", "-shared", "-fPIC", "-o", os.path.join(tlib, "libc10.so"), "-x", "c++", "/dev/null"], check=True)
        inc = self.inc
        if broken:
            inc = os.path.join(root, "inc")
            shutil.copytree(self.inc, inc, dirs_exist_ok=True)
            with open(os.path.join(inc, "c10/cuda/CUDACachingAllocator.h"), "a") as f:
                f.write("\nstruct Broken { int x = undeclared_name; };\n")
        env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.path.join(ROOT, "packages", "torch-alloc", "python"),
                   STUB_INC=inc, CUDA_HOME=os.path.join(self.dir.name, "no-cuda"), GMLAKE_TORCH_ALLOC_LIB=self.engine)
        return env, tlib

    def test_build_and_install_through_python(self):
        env, tlib = self.fake_torch()
        script = f"""
import ctypes, json, os
import gmlake_torch, gmlake_torch.cuda_allocator as ca
path = ca.build()
class Native: pass
n = Native(); n.path = gmlake_torch.library_path(); n.lib = ctypes.CDLL(n.path)
ca.install(n, 0)
c10 = ctypes.CDLL({os.path.join(tlib, "libc10_cuda.so")!r})
print(json.dumps({{"built": os.path.basename(path), "pairs": c10.stub_pairs(5000), "bad_frees": n.lib.fake_counts(0),
                  "left": n.lib.fake_counts(1), "capture_check": n.lib.fake_counts(5), "interface": ca.resolve_interface()}}))
"""
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertEqual(json.loads(p.stdout), {"built": "libgmlake_cuda_allocator-2.11.0_stub-abi1.so", "pairs": 0, "bad_frees": 0,
                                                "left": 0, "capture_check": 1, "interface": "pluggable"})
        bad = subprocess.run([sys.executable, "-c", "import gmlake_torch.cuda_allocator as ca; ca.resolve_interface('plug')"],
                             capture_output=True, text=True, env=env)
        self.assertIn("interface must be one of pluggable, native", bad.stderr)

    def test_route_through_python(self):
        # cuda_allocator.route()'s names reach the class as the right numbers: stub_pairs' allocations
        # land with theirs (pytorch), with neither (prime: cudaMallocAsync) or with the engine (ours)
        env, tlib = self.fake_torch()
        script = f"""
import ctypes, json
import gmlake_torch, gmlake_torch.cuda_allocator as ca
def refused(to):
    try:
        ca.route(to)
    except gmlake_torch.GmlakeError as e:
        return str(e)
c10 = ctypes.CDLL({os.path.join(tlib, "libc10_cuda.so")!r})
out = {{"not_enabled": refused("ours")}}
c10.stub_theirs_install()
class Native: pass
n = Native(); n.path = gmlake_torch.library_path(); n.lib = ctypes.CDLL(n.path)
gmlake_torch._native = n  # as enable() leaves it; the pluggable interface has no cuda_allocator
out["pluggable"] = refused("pytorch")
ca.install(n, 0)
out["unknown"] = refused("theirs")
for to in ("pytorch", "prime", "ours"):
    out[to] = [refused(to), c10.stub_pairs(50), c10.stub_theirs_counts(0), n.lib.fake_counts(9)]
out["theirs_frees"] = [c10.stub_theirs_counts(1), c10.stub_theirs_counts(2), n.lib.fake_counts(0), n.lib.fake_counts(1)]
print(json.dumps(out))
"""
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertEqual(json.loads(p.stdout), {
            "not_enabled": "gmlake: not enabled (call gmlake_torch.enable() first)",
            "pluggable": 'gmlake: routing needs enable(interface="native")',
            "unknown": "gmlake: route is one of ours, pytorch, prime, not 'theirs'",
            "pytorch": [None, 0, 50, 0], "prime": [None, 0, 50, 0], "ours": [None, 0, 50, 50],
            "theirs_frees": [50, 0, 0, 0]})

    def test_a_failed_build_is_one_line(self):
        env, _ = self.fake_torch(broken=True)
        p = subprocess.run([sys.executable, "-m", "gmlake_torch", "build-cuda-allocator"], capture_output=True, text=True, env=env, timeout=300)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("building the native CUDAAllocator failed", p.stderr)
        self.assertIn("undeclared_name", p.stderr)
        self.assertFalse([f for f in os.listdir(self.lib) if f.startswith("libgmlake_cuda_allocator")])  # nothing half-built left


# native-alloc-check.sh's PYTHON: the builds succeed (or FAKE_BUILD_FAIL), the checks pass, a
# micro row's C++ median is set by its variant; the tagging and the table are python3's.
FAKE_CHECK_PYTHON = r'''#!/usr/bin/env bash
if [ "$1" = -m ] && [ "$2" = gmlake_torch ]; then
  if [ -n "${FAKE_BUILD_FAIL:-}" ] && [ "$3" = build-cuda-allocator ]; then echo "gmlake: building the native CUDAAllocator failed: x: error: nope" >&2; exit 2; fi
  echo "built $3"; exit 0
fi
if [ "$1" = - ] && [ $# -eq 1 ]; then cat >/dev/null; echo 'RESULT {"check": "native-api", "ok": true}'; exit 0; fi
if [ "$1" = scripts/gpu/live_checks.py ] && [ "$2" = micro ]; then
  case "$4:${GMLAKE_INTERFACE:-}" in
    pytorch:*) us=1.00 ;; pytorch-expandable:*) us=0.60 ;; vms:native) us=1.20 ;; vms:pluggable) us=2.40 ;; caching:native) us=1.50 ;; *) us=9 ;;
  esac
  printf 'RESULT {"check": "micro", "policy": "%s", "ok": true, "median_us": 4.0, "native": {"median_us": %s, "mean_us": %s}}\n' "$4" "$us" "$us"
  exit 0
fi
if [ "$1" = scripts/gpu/live_checks.py ]; then echo "RESULT {\"check\": \"$2\", \"ok\": true, \"interface\": \"${GMLAKE_INTERFACE:-}\"}"; exit 0; fi
exec python3 "$@"
'''


class NativeAllocCheck(unittest.TestCase):
    @unittest.skipUnless(os.path.exists(os.path.join(ROOT, "packages/torch-alloc/build/lib/libgmlake_torch_alloc.so")), "build first")
    def test_the_table_and_the_issue_line(self):
        with tempfile.TemporaryDirectory() as d:
            py = fake_python(d, FAKE_CHECK_PYTHON)
            env = dict(os.environ, PYTHON=py, OUT=os.path.join(d, "out"), ROUNDS="2", PAIRS="10")
            p = subprocess.run(["bash", os.path.join(HERE, "native-alloc-check.sh")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            with open(os.path.join(d, "out", "native-alloc-check.md")) as f:
                md = f.read()
            with open(os.path.join(d, "out", "native-alloc-check.jsonl")) as f:
                rows = [json.loads(l) for l in f]
            self.assertIn("| vms-native | 2 | 4.00/4.00 | 1.20/1.20 | 1.20/1.20 |", md)
            self.assertIn("- vms-native: 1.20 us, within", md)
            self.assertIn("- caching-native: 1.50 us, NOT within", md)
            # the checks ran with the native interface, the micro rounds in turns
            self.assertEqual({r["interface"] for r in rows if r["tag"] in ("native-smoke", "native-oom", "native-capture", "native-integrity")}, {"native"})
            micro = [r["tag"] for r in rows if r["tag"].startswith("micro-")]
            self.assertEqual(micro[:6], ["micro-pytorch-r1", "micro-pytorch-expandable-r1", "micro-vms-pluggable-r1", "micro-vms-native-r1",
                                         "micro-caching-pluggable-r1", "micro-caching-native-r1"])
            self.assertEqual(len(micro), 12)
            # TAKEBACK=1: ours native with the take-back, and every variant's Python pairs of one size
            p = subprocess.run(["bash", os.path.join(HERE, "native-alloc-check.sh")], capture_output=True, text=True, cwd=ROOT, timeout=120,
                               env=dict(env, ROUNDS="1", TAKEBACK="1"))
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            with open(os.path.join(d, "out", "native-alloc-check.jsonl")) as f:
                micro = [json.loads(l)["tag"] for l in f if json.loads(l)["tag"].startswith("micro-")]
            self.assertEqual(micro, ["micro-pytorch-r1", "micro-pytorch-expandable-r1", "micro-vms-pluggable-r1", "micro-vms-native-r1",
                                     "micro-vms-native-takeback-r1", "micro-caching-pluggable-r1", "micro-caching-native-r1",
                                     "micro-caching-native-takeback-r1", "micro-pytorch-same-r1", "micro-vms-native-same-r1",
                                     "micro-vms-native-takeback-same-r1", "micro-caching-native-same-r1", "micro-caching-native-takeback-same-r1"])
            with open(os.path.join(d, "out", "native-alloc-check.md")) as f:
                md = f.read()
            self.assertIn("One size (Python median, best round; PyTorch default 4.00 + 0.3 = 4.30):", md)
            self.assertIn("- vms-native-takeback-same: 4.00 us, within", md)
            p = subprocess.run(["bash", os.path.join(HERE, "native-alloc-check.sh")], capture_output=True, text=True, cwd=ROOT, timeout=60,
                               env=dict(env, TAKEBACK="yes"))
            self.assertEqual(p.returncode, 2)
            self.assertIn("TAKEBACK must be 0 or 1", p.stderr)
            p = subprocess.run(["bash", os.path.join(HERE, "native-alloc-check.sh")], capture_output=True, text=True, cwd=ROOT, timeout=60,
                               env=dict(env, FAKE_BUILD_FAIL="1"))
            self.assertEqual(p.returncode, 2)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn("error: nope", p.stderr)



# graphs-check.sh's PYTHON: the builds succeed (or FAKE_BUILD_FAIL), each run prints the RESULT a
# case would: the same losses and tokens under every allocator but FAKE_DIFF's, a peak set by
# the allocator, FAKE_HANG's run never answers; the summary is graphs_check.py's own (python3).
FAKE_GRAPHS_PYTHON = r"""#!/usr/bin/env bash
if [ "$1" = -m ] && [ "$2" = gmlake_torch ]; then
  if [ -n "${FAKE_BUILD_FAIL:-}" ] && [ "$3" = build-cuda-allocator ]; then echo "gmlake: building the native CUDAAllocator failed: x: error: nope" >&2; exit 2; fi
  echo "built $3"; exit 0
fi
if [ "$1" = scripts/gpu/graphs_check.py ] && [ "$2" != summary ]; then
  exec python3 - "$@" <<'PY'
import json, os, sys, time
case, alloc, steps = sys.argv[2], sys.argv[3], int(sys.argv[5])
if alloc == os.environ.get("FAKE_HANG"):
    time.sleep(60)
peak = {"pytorch": 4, "pytorch-expandable": 3.5}.get(alloc, 3) * 2 ** 30
bump = 0.5 if alloc == os.environ.get("FAKE_DIFF") else 0.0
r = {"case": case, "allocator": alloc, "ok": True, "peak_reserved_bytes": int(peak), "steps": steps}
if case == "generate":
    r["tokens"] = [[[1, 2, 4 if bump else 3]]]
else:
    r["losses"] = [2.0 - 0.1 * i + bump for i in range(steps)]
    r["mempool"] = "ok" if "@native" in alloc or not alloc.startswith("ours") else "RuntimeError: createOrIncrefPool"
print("RESULT " + json.dumps(r))
PY
fi
exec python3 "$@"
"""


class GraphsCheck(unittest.TestCase):
    SH = os.path.join(HERE, "graphs-check.sh")

    def run_check(self, d, timeout=120, **env):
        py = fake_python(d, FAKE_GRAPHS_PYTHON)
        e = dict(os.environ, PYTHON=py, OUT=os.path.join(d, "out"), CASES="manual generate", STEPS="3",
                 ALLOCATORS="pytorch pytorch-expandable ours:vms@native ours:caching@pluggable")
        e.update(env)
        return subprocess.run(["bash", self.SH], capture_output=True, text=True, env=e, cwd=ROOT, timeout=timeout)

    def read(self, d):
        with open(os.path.join(d, "out", "graphs-check.md")) as f:
            md = f.read()
        with open(os.path.join(d, "out", "graphs-check.jsonl")) as f:
            return md, [json.loads(l) for l in f]

    @unittest.skipUnless(os.path.exists(os.path.join(ROOT, "packages/torch-alloc/build/lib/libgmlake_torch_alloc.so")), "build first")
    def test_every_case_under_every_allocator_beside_pytorch(self):
        with tempfile.TemporaryDirectory() as d:
            p = self.run_check(d)
            self.assertEqual(p.returncode, 0, p.stdout[-2000:] + p.stderr[-2000:])
            md, rows = self.read(d)
            self.assertEqual([(r["case"], r["allocator"]) for r in rows],
                             [(c, a) for c in ("manual", "generate") for a in ("pytorch", "pytorch-expandable", "ours:vms@native", "ours:caching@pluggable")])
            self.assertEqual({r["steps"] for r in rows}, {3})
            self.assertIn("| manual | ours:vms@native | yes | max rel diff 0.0e+00 | 3.000 | -25.0% | -14.3% |  |", md)
            self.assertIn("| generate | ours:caching@pluggable | yes | tokens equal | 3.000 | -25.0% | -14.3% |  |", md)
            # where the interface cannot (MemPool behind the plug), the row says the error
            self.assertIn("| manual | ours:caching@pluggable | yes | max rel diff 0.0e+00 | 3.000 | -25.0% | -14.3% | MemPool: RuntimeError: createOrIncrefPool |", md)
            self.assertIn("every run of ours: ok, results equal to PyTorch default's", md)

    @unittest.skipUnless(os.path.exists(os.path.join(ROOT, "packages/torch-alloc/build/lib/libgmlake_torch_alloc.so")), "build first")
    def test_a_different_result_or_a_hung_run_fails(self):
        with tempfile.TemporaryDirectory() as d:
            p = self.run_check(d, FAKE_DIFF="ours:caching@pluggable", FAKE_HANG="ours:vms@native", TIMEOUT_S="2")
            self.assertEqual(p.returncode, 1, p.stdout[-2000:] + p.stderr[-2000:])
            md, rows = self.read(d)
            self.assertIn("| manual | ours:caching@pluggable | yes | max rel diff 2.8e-01 |", md)
            self.assertIn("| generate | ours:caching@pluggable | yes | tokens differ |", md)
            self.assertIn("| manual | ours:vms@native | NO | - | - | - | - | no result (exit 124)", md)
            self.assertIn("failed or different from PyTorch default: manual ours:vms@native, manual ours:caching@pluggable, "
                          "generate ours:vms@native, generate ours:caching@pluggable", md)
            # the time budget: once spent, no run starts; the rows say so and the table is still written.
            # The first run hangs past the budget, so which runs are skipped does not hang on the machine's speed.
            p = self.run_check(d, FAKE_HANG="pytorch", TIMEOUT_S="2", BUDGET_S="1")
            self.assertEqual(p.returncode, 1, p.stdout[-2000:] + p.stderr[-2000:])
            md, rows = self.read(d)
            self.assertEqual([(r["case"], r["allocator"]) for r in rows if "skipped" in r.get("error", "")],
                             [(c, a) for c in ("manual", "generate") for a in ("pytorch", "pytorch-expandable", "ours:vms@native", "ours:caching@pluggable")][1:])
            self.assertIn("| generate | pytorch | NO | - | - | - | - | skipped: BUDGET_S=1 spent |", md)

    def test_the_notes_say_checkpoints_and_eager_mismatch(self):
        with tempfile.TemporaryDirectory() as d:
            rows = [{"case": "compile", "allocator": a, "ok": True, "peak_reserved_bytes": 2 ** 30, "losses": [1.0, 0.5], "evals": [2.0],
                     "checkpoints": {"checkpoints": 5, "restores": 2 if a == "pytorch" else 3}} for a in ("pytorch", "ours:vms@native")]
            rows += [{"case": "generate", "allocator": a, "ok": True, "peak_reserved_bytes": 2 ** 30, "tokens": [[[1, 2]]], "eager_equal": a == "pytorch"}
                     for a in ("pytorch", "ours:vms@native")]
            src, md = os.path.join(d, "r.jsonl"), os.path.join(d, "t.md")
            with open(src, "w") as f:
                f.write("".join(json.dumps(r) + "\n" for r in rows))
            p = subprocess.run([sys.executable, os.path.join(HERE, "graphs_check.py"), "summary", src, md], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("| compile | pytorch | yes | max rel diff 0.0e+00 | 1.000 | +0.0% | - | checkpoints 5, restores 2 |", p.stdout)
            self.assertIn("| compile | ours:vms@native | yes | max rel diff 0.0e+00 | 1.000 | +0.0% | - | checkpoints 5, restores 3 |", p.stdout)
            self.assertIn("| generate | pytorch | yes | tokens equal | 1.000 | +0.0% | - |  |", p.stdout)
            self.assertIn("| generate | ours:vms@native | yes | tokens equal | 1.000 | +0.0% | - | graph tokens differ from the same steps run eagerly |", p.stdout)

    def test_bad_input_one_line_exit_2(self):
        with tempfile.TemporaryDirectory() as d:
            for env, says in (({"CASES": "manual bogus"}, "unknown case 'bogus'"), ({"STEPS": "0"}, "STEPS must be a positive whole number"),
                              ({"ALLOCATORS": "pytorch ours"}, "unknown allocator 'ours'"), ({"TIMEOUT_S": "soon"}, "TIMEOUT_S must be"),
                              ({"BUDGET_S": "-1"}, "BUDGET_S must be")):
                p = self.run_check(d, **env)
                self.assertEqual(p.returncode, 2, (env, p.stderr))
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn(says, p.stderr)
            if os.path.exists(os.path.join(ROOT, "packages/torch-alloc/build/lib/libgmlake_torch_alloc.so")):
                p = self.run_check(d, FAKE_BUILD_FAIL="1")
                self.assertEqual(p.returncode, 2)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn("error: nope", p.stderr)
            bad = os.path.join(d, "bad.jsonl")
            with open(bad, "w") as f:
                f.write("{\n")
            for argv, says in (([bad, os.path.join(d, "t.md")], "bad.jsonl:1: not a JSON line"), ([bad, bad], "would replace the results"),
                               ([os.path.join(d, "none.jsonl"), os.path.join(d, "t.md")], "cannot read")):
                p = subprocess.run([sys.executable, os.path.join(HERE, "graphs_check.py"), "summary", *argv], capture_output=True, text=True)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn(says, p.stderr)
            p = subprocess.run([sys.executable, os.path.join(HERE, "graphs_check.py"), "manual", "pytorch", "--steps", "x"], capture_output=True, text=True)
            self.assertEqual((p.returncode, p.stderr.strip()), (2, "graphs_check: --steps takes a whole number >= 1"))

# ---- multi-gpu.sh / multi_gpu.py (issue 30): the orchestration on a stand-in python -------------
# The stand-in makes the venv (a copy of itself), logs pip, answers the site questions (as a python
# that is a venv itself), runs torchrun's ranks as FAKE_TORCHRUN (which writes each rank's result
# as multi_gpu.py rank would, from the environment it got) and everything else on python3 (the
# integrity checks: live_checks.py over the stand-in torch). What it cannot show: the ranks' own
# torch code (FSDP2, DDP, NCCL), which the GPU host runs.
FAKE_MG_PYTHON = r'''#!/bin/bash
if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "${@: -1}/bin" && cp "$0" "${@: -1}/bin/python"; exit 0; fi
if [ "$1" = -m ] && [ "$2" = pip ]; then echo "pip ${*: -1}" >> "$FAKE_LOG"; exit 0; fi
if [ "$1" = -m ] && [ "$2" = torch.distributed.run ]; then shift 2; exec python3 "$FAKE_TORCHRUN" "$@"; fi
if [ "$1" = -c ] && [[ $2 == *base_prefix* ]]; then printf 'True\n/outer/site-packages\n'; exit 0; fi
if [ "$1" = -c ] && [[ $2 == *sysconfig* ]]; then echo "$FAKE_PURELIB"; exit 0; fi
exec python3 "$@"
'''

FAKE_TORCHRUN = r'''
import json, os, subprocess, sys
args = sys.argv[1:]
n = int(args[args.index("--nproc-per-node") + 1])
script, _, workload = args[args.index("--nproc-per-node") + 2:args.index("--nproc-per-node") + 5]
d = args[args.index("--result-dir") + 1]
steps = int(args[args.index("--steps") + 1])
keys = ("GMLAKE_POLICY", "GMLAKE_KNOBS", "PYTORCH_CUDA_ALLOC_CONF", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
        "NVSHMEM_DISABLE_NVLS", "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK")
env = {k: os.environ.get(k) for k in keys}
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({"torchrun": workload, "nproc": n, "script": os.path.basename(script), "env": env}) + "\n")
hook = env["TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"] == "1"
if env["GMLAKE_POLICY"] and not hook and os.environ.get("FAKE_HOOK_OFF") != "1":
    alloc, base, peak = "gmlake:" + env["GMLAKE_POLICY"], 0.305, 36.0
elif env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True":
    alloc, base, peak = "pytorch-expandable", 0.310, 40.0
else:
    alloc, base, peak = "pytorch", 0.300, 45.0
if env["GMLAKE_POLICY"] and hook and os.environ.get("FAKE_NO_DECLINE") != "1":
    print("gmlake: GMLAKE_POLICY=vms not enabled: TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK is set: ours does not register ...; PyTorch's allocator stays")
count = os.path.join(os.path.dirname(os.environ["FAKE_LOG"]), "count-" + alloc)
k = int(open(count).read()) if os.path.exists(count) else 0  # the allocator's training runs so far: each its own noise
if not workload.startswith("nccl"):
    open(count, "w").write(str(k + 1))
fail = os.environ.get("FAKE_FAIL", "") == f"{workload}:{alloc}"
GiB = 2 ** 30
for r in range(n):
    if fail and r == 1:
        continue
    res = {"rank": r, "local_rank": r, "world": n, "workload": workload, "allocator": alloc, "used_before_bytes": GiB // 2,
           "nccl_own_bytes": (300 + r) << 20, "first_all_reduce_ok": True, "ok": True}
    if workload.startswith("nccl"):
        res["checks"] = {"mismatches": 0, "cases": ["x"]}
        res["mem_pool"] = {"ok": False, "what": "RuntimeError: stand-in"}
    else:
        res.update(step_s=[1.0] + [base + 0.002 * ((k + i + r) % 3) for i in range(steps - 1)],
                   losses=[10.0 - 0.1 * i + 0.01 * r + (1e-4 if alloc.startswith("gmlake") else 0) for i in range(steps)],
                   peak_reserved_bytes=int((peak - 0.25 * r) * GiB), device_used_peak_bytes=int((peak + 1 - 0.25 * r) * GiB),
                   peak_allocated_bytes=20 * GiB)
    with open(os.path.join(d, f"rank{r}.json"), "w") as f:
        json.dump(res, f)
sys.exit(1 if fail else 0)
'''


class MultiGpu(unittest.TestCase):
    def run_sh(self, **knobs):
        with tempfile.TemporaryDirectory() as d:
            for sub in ("torch", os.path.join("ours", "gmlake_torch"), "purelib"):
                os.makedirs(os.path.join(d, sub))
            with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
                f.write(FAKE_TORCH)
            with open(os.path.join(d, "ours", "gmlake_torch", "__init__.py"), "w") as f:
                f.write(FAKE_OURS)
            with open(os.path.join(d, "torchrun.py"), "w") as f:
                f.write(FAKE_TORCHRUN)
            wheel = os.path.join(d, "gmlake_torch-0.1.0-py3-none-any.whl")
            open(wheel, "w").close()
            py = fake_python(d, FAKE_MG_PYTHON)
            env = dict(os.environ, PYTHON=py, OUT=os.path.join(d, "out"), FAKE_LOG=os.path.join(d, "log"), FAKE_TORCHRUN=os.path.join(d, "torchrun.py"),
                       FAKE_PURELIB=os.path.join(d, "purelib"), PYTHONPATH=os.pathsep.join([d, os.path.join(d, "ours")]), WHEEL=wheel,
                       NPROC="2", ROUNDS="2", STEPS="5", WARMUP="1", INTEGRITY_SECONDS="0.3")
            env.update(knobs)
            p = subprocess.run(["bash", os.path.join(HERE, "multi-gpu.sh")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
            out = {"p": p, "doc": None, "md": None, "log": [], "pth": None}
            if os.path.exists(os.path.join(d, "out", "multi-gpu.json")):
                with open(os.path.join(d, "out", "multi-gpu.json")) as f:
                    out["doc"] = json.load(f)
                with open(os.path.join(d, "out", "multi-gpu.md")) as f:
                    out["md"] = f.read()
            if os.path.exists(env["FAKE_LOG"]):
                with open(env["FAKE_LOG"]) as f:
                    out["log"] = [json.loads(l) if l.startswith("{") else l.strip() for l in f]
            if os.path.exists(os.path.join(d, "purelib", "_gmlake_outer_venv.pth")):
                with open(os.path.join(d, "purelib", "_gmlake_outer_venv.pth")) as f:
                    out["pth"] = f.read()
            return out

    def test_one_command_every_phase_on_every_rank(self):
        r = self.run_sh()
        p, doc, md = r["p"], r["doc"], r["md"]
        self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-2000:])
        # the wheel, installed into a venv that also sees the outer venv's site-packages
        self.assertEqual([l for l in r["log"] if isinstance(l, str)], ["pip " + os.path.join(os.path.dirname(doc["settings"]["out"]), "gmlake_torch-0.1.0-py3-none-any.whl")])
        self.assertEqual(r["pth"], "/outer/site-packages\n")
        # integrity on both GPUs, ours, through the stand-in torch
        self.assertEqual([(x["gpu"], x["policy"], x["ok"], x["mismatches"]) for x in doc["integrity"]], [(0, "vms", True, 0), (1, "vms", True, 0)])
        runs = [l for l in r["log"] if isinstance(l, dict)]
        self.assertTrue(all(l["nproc"] == 2 and l["script"] == "multi_gpu.py" for l in runs))
        self.assertTrue(all(l["env"]["NCCL_NVLS_ENABLE"] == "0" and l["env"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
                            and l["env"]["NVSHMEM_DISABLE_NVLS"] == "1" for l in runs))
        # nccl per allocator, then ours with the registration hook: declined in one line, the ranks on PyTorch's
        self.assertEqual([l["torchrun"] for l in runs[:4]], ["nccl", "nccl", "nccl", "nccl_register"])
        self.assertEqual(runs[3]["env"]["TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"], "1")
        self.assertEqual([(x["tag"], x["ok"]) for x in doc["nccl"]], [("nccl-pytorch", True), ("nccl-pytorch-expandable", True), ("nccl-ours_vms", True),
                                                                       ("nccl-register-ours_vms", True)])
        self.assertIn("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK is set", doc["nccl"][3]["declined"])
        # training: rounds rotated, ours by GMLAKE_POLICY alone, expandable by its setting
        train = [(l["torchrun"], l["env"]["GMLAKE_POLICY"], l["env"]["PYTORCH_CUDA_ALLOC_CONF"]) for l in runs[4:]]
        P, E, O = (None, None), (None, "expandable_segments:True"), ("vms", None)
        self.assertEqual(train, [(w, *a) for w in ("llama1b_fsdp", "gpt2_ddp") for a in (P, E, O, E, O, P)])
        self.assertEqual(len(doc["runs"]), 12)
        self.assertTrue(all(x["ok"] for x in doc["runs"]))
        rows = {(x["workload"], x["allocator"]): x for x in doc["summary"]}
        vms = rows[("llama1b_fsdp", "ours:vms")]
        self.assertEqual(vms["runs"], 2)
        self.assertEqual([round(b / 2 ** 30, 2) for b in vms["peak_reserved_bytes"]], [36.0, 35.75])
        self.assertTrue(vms["below_expandable_every_rank"])
        self.assertNotIn("below_expandable_every_rank", rows[("gpt2_ddp", "ours:vms")])  # DDP: not an FSDP row
        # the slowest rank's step, mean after warm-up, over rounds; ratio to pytorch's of the same rounds
        def slowest_mean(base, k):
            return sum(max(base + 0.002 * ((k + i + rk) % 3) for rk in range(2)) for i in range(4)) / 4
        want = [slowest_mean(0.305, k) for k in (0, 1)]
        self.assertAlmostEqual(vms["mean_step_s"], sum(want) / 2)
        ref = [slowest_mean(0.300, k) for k in (0, 1)]
        self.assertAlmostEqual(vms["vs_pytorch"]["ratio"], sum(want) / sum(ref))
        self.assertAlmostEqual(vms["loss_diff_vs_pytorch"], 1e-4)
        self.assertIn("| llama1b_fsdp | ours:vms (below expandable on every rank) | 2 | 36.00 / 35.75 |", md)
        self.assertIn("## Integrity", md)
        self.assertIn("| nccl-register-ours_vms | pytorch | 0 | 300 / 301 |", md)

    def test_failures_are_said_and_exit_1(self):
        r = self.run_sh(FAKE_FAIL="gpt2_ddp:gmlake:vms", FAKE_NO_DECLINE="1", FAKE_CORRUPT="50", ROUNDS="1", WORKLOADS="gpt2_ddp")
        p, doc, md = r["p"], r["doc"], r["md"]
        self.assertEqual(p.returncode, 1, p.stderr[-2000:])
        self.assertFalse(any(x["ok"] for x in doc["integrity"]))
        self.assertTrue(all(x["mismatches"] > 0 for x in doc["integrity"]))
        reg = doc["nccl"][-1]
        self.assertEqual((reg["ok"], reg["declined"]), (False, None))
        self.assertIn("no line from ours declining the hook", reg["error"])
        bad = [x for x in doc["runs"] if not x["ok"]]
        self.assertEqual([x["tag"] for x in bad], ["gpt2_ddp-ours_vms-r1"])
        self.assertIn("torchrun exited 1; no result from rank(s) 1", bad[0]["error"])
        self.assertIn("- gpt2_ddp-ours_vms-r1: torchrun exited 1", md)
        # ours asked but a rank ran on PyTorch's: a failed run, named
        r = self.run_sh(FAKE_HOOK_OFF="1", ROUNDS="1", WORKLOADS="gpt2_ddp", ALLOCATORS="pytorch,ours:vms")
        self.assertEqual(r["p"].returncode, 1)
        self.assertIn("rank 0 ran on pytorch", [x for x in r["doc"]["runs"] if x["allocator"] == "ours:vms"][0]["error"])

    def test_phases_split_a_call_and_every_rank_is_a_column(self):
        r = self.run_sh(PHASES="train", NPROC="3", WORKLOADS="llama1b_fsdp", ROUNDS="1")
        self.assertEqual(r["p"].returncode, 0, r["p"].stderr[-2000:])
        self.assertEqual((r["doc"]["integrity"], r["doc"]["nccl"]), ([], []))
        self.assertEqual([l["torchrun"] for l in r["log"] if isinstance(l, dict)], ["llama1b_fsdp"] * 3)
        vms = [x for x in r["doc"]["summary"] if x["allocator"] == "ours:vms"][0]
        self.assertEqual([round(b / 2 ** 30, 2) for b in vms["peak_reserved_bytes"]], [36.0, 35.75, 35.5])
        self.assertIn("| 36.00 / 35.75 / 35.50 |", r["md"])

    def test_bad_input_one_line_exit_2(self):
        for knobs, want in (({"NPROC": "0"}, "NPROC must be a positive number"), ({"WHEEL": "/nonexistent.whl"}, "no wheel at"),
                            ({"ALLOCATORS": "pytorch,bogus"}, "unknown allocator 'bogus'"), ({"WORKLOADS": "nope"}, "unknown workload 'nope'"),
                            ({"STEPS": "1"}, "--steps more than --warmup"), ({"PHASES": "train,bench"}, "--phases: a comma list"), ({"TOTAL": "soon"}, "TOTAL must be")):
            r = self.run_sh(**knobs)
            self.assertEqual(r["p"].returncode, 2, (knobs, r["p"].stderr))
            self.assertEqual(len(r["p"].stderr.strip().splitlines()), 1, r["p"].stderr)
            self.assertIn(want, r["p"].stderr)
            self.assertEqual(r["log"], [], "nothing ran")



# interference.py's PYTHON: step i takes 0.1 + 0.01 x (i % 5) s (the same shapes in every run),
# x FAKE_RUN_FACTOR (the machine's noise: another factor per run), x 1.03 on a busy step.
FAKE_BUSY_PYTHON = r'''#!/usr/bin/env bash
exec python3 - "$@" <<'PY'
import json, os, sys
a = sys.argv[1:]
steps, busy = int(a[a.index("--steps") + 1]), a[a.index("--busy-core") + 1]
n = int(open(os.environ["FAKE_N"]).read()) if os.path.exists(os.environ["FAKE_N"]) else 0
open(os.environ["FAKE_N"], "w").write(str(n + 1))
if os.environ.get("FAKE_FAIL_RUN") == str(n):
    sys.exit("boom")
factor = [1.0, 1.1, 0.92, 1.05][n % 4]
on = [i for i in range(steps) if (i % 2 == 1) == (busy == "odd")]
st = [(0.1 + 0.01 * (i % 5)) * factor * (1.03 if i in on else 1.0) for i in range(steps)]
print("RESULT " + json.dumps({"step_s": st, "busy_steps": on}))
PY
'''


class Interference(unittest.TestCase):
    def run_it(self, *argv, env=None):
        with tempfile.TemporaryDirectory() as d:
            py = fake_python(d, FAKE_BUSY_PYTHON)
            p = subprocess.run([sys.executable, os.path.join(HERE, "interference.py"), *argv, "--python", py, "--out", d],
                               capture_output=True, text=True, env=dict(os.environ, FAKE_N=os.path.join(d, "n"), **(env or {})),
                               timeout=120)
            return (p, *report_files(d, "interference"))

    def test_the_busy_core_cost_is_found_through_run_to_run_noise(self):
        # runs differ by up to 18% (their factors), a busy step costs 3%: the ratio is 1.03 whatever the factors
        p, doc, md = self.run_it("--pairs", "2", "--steps", "10", "--warmup", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        s = doc["summary"]
        self.assertEqual(s["steps"], 16)
        self.assertEqual([[r["busy"] for r in pair] for pair in doc["pairs"]], [["odd", "even"]] * 2)
        # each pair's two runs ran 1.0 / 1.1 and 1.05 / 0.92 times as fast as each other: cancelled
        self.assertAlmostEqual(s["ratio"], 1.03, places=9)
        self.assertEqual(s["pair_ratios"], [1.03, 1.03])
        self.assertAlmostEqual(s["ci95"][0], 1.03, places=9)  # no noise inside a run: no spread
        self.assertIn(f"**step time with a busy core / without: {s['ratio']:.4f}", md)

    def test_a_failed_run_leaves_its_pair_out(self):
        p, doc, md = self.run_it("--pairs", "2", "--steps", "10", "--warmup", "2", env={"FAKE_FAIL_RUN": "1"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["summary"]["steps"], 8)
        self.assertIn("boom", md)

    def test_bad_input_is_one_line(self):
        p, doc, _ = self.run_it("--steps", "3", "--warmup", "2")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("--steps at least --warmup + 2", p.stderr)
        self.assertIsNone(doc)



class SpinProbe(unittest.TestCase):
    def test_bad_input_is_one_line_and_runs_nothing(self):
        for env, want in (({"STEPS": "4"}, "STEPS must be a whole number above 4"), ({"REPS": "0"}, "REPS a positive one")):
            with tempfile.TemporaryDirectory() as d:
                p = subprocess.run(["bash", os.path.join(HERE, "spin-probe.sh")], capture_output=True, text=True,
                                   env=dict(os.environ, OUT=d, **env), timeout=60)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn(want, p.stderr)
                self.assertEqual(os.listdir(d), [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
