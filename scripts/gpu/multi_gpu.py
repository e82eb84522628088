"""Training across the GPUs of one host with ours on every rank (issue 30), beside PyTorch's own
allocators: torchrun --nproc-per-node N, ours switched on by the wheel's autoenable hook alone
(GMLAKE_POLICY; each rank on LOCAL_RANK), PyTorch default and expandable_segments the controls.

usage: python3 multi_gpu.py run --nproc N --wheel WHL [--phases integrity,nccl,train] [--workloads W,...] [--allocators A,...] [--rounds R]
                                [--steps S] [--warmup W] [--integrity-policies P,...] [--integrity-seconds S]
                                [--time-limit S] [--out DIR] [--python PY]
       python3 multi_gpu.py rank WORKLOAD --steps S --result-dir DIR     (one rank, under torchrun)

  workloads  llama1b_fsdp (FSDP2 over ../shared/workloads' Llama-1B: each decoder layer and the root
             fully_shard-ed, batch 4, sequences 128-2048), gpt2_ddp (DDP over gpt2_ft's GPT-2 355M,
             batch 8, sequences 64-1024), llama7b_fsdp (the same FSDP2 over a 7B shape: 4096 wide,
             32 layers, 11008 MLP, batch 1); bf16 autocast, AdamW; the same sequence lengths on every
             rank (the SEED's), each rank's tokens from SEED + rank. Default: llama1b_fsdp,gpt2_ddp
  allocators pytorch, pytorch-expandable, ours:POLICY[,k=v...] (GMLAKE_POLICY, GMLAKE_KNOBS); default
             pytorch,pytorch-expandable,ours:vms
Phases, each run a fresh torchrun: (1) integrity: live_checks.py integrity (two threads, two streams,
every tensor pattern-checked) on every GPU at once, one process per GPU, for each integrity policy;
(2) nccl, per allocator: all_reduce, all_gather_into_tensor and reduce_scatter_tensor on tensors the
allocator made (some after frees, on a side stream too), each result checked element by element;
the device memory NCCL takes for itself at its first collective (device used minus the allocator's
reserved, before and after); torch.cuda.MemPool with NCCL's allocator (backend.mem_allocator), tried;
and with ours, TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1: ours declines in one line (the rank
runs on PyTorch's allocator, which registers); (3) training: per workload ROUNDS rounds, the
allocators in an order rotated each round, STEPS steps each: per rank peak reserved
(max_memory_reserved, the engine's under ours), the device memory in use at step ends (peak),
step times and losses. Summary: per workload and allocator the mean step (the slowest rank's each
step, mean after WARMUP, then over rounds with a 95% t-interval), Fieller ratios to PyTorch default
and expandable, per rank peaks, and the largest loss difference from PyTorch default (same round
and rank) beside PyTorch's own between rounds.
Every process it starts has NVLink multicast off. Out: multi-gpu.json, multi-gpu.md, logs/.
Exit 0 when every run passed, 1 when a run failed or found a mismatch, 2 on bad input, 3 on SIGTERM.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from step_time import Bad, Parser, fieller, mean, t_interval  # noqa: E402

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
REGISTER_HOOK = "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"
WORKLOADS = ("llama1b_fsdp", "gpt2_ddp", "llama7b_fsdp")
REFS = ("pytorch", "pytorch-expandable")
SEED = 1234
LLAMA_1B = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)
LLAMA_7B = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096)
# workload -> (batch, shortest, longest sequence)
SHAPES = {"llama1b_fsdp": (4, 128, 2048), "gpt2_ddp": (8, 64, 1024), "llama7b_fsdp": (1, 128, 2048)}
GiB = 2 ** 30


# ---- one rank (under torchrun) ------------------------------------------------------------------
def seqs(n, lo, hi):
    rng = random.Random(SEED)
    return [rng.randint(lo, hi) for _ in range(n)]


def write_json(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


def rank_main(a):
    local, rank = int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(local)  # CUDA starts here: the autoenable hook makes ours the allocator on LOCAL_RANK
    dev = torch.device("cuda", local)
    gm = sys.modules.get("gmlake_torch")
    if gm is not None and getattr(gm, "_torch_allocator", None) is not None:
        allocator = "gmlake:" + str(gm.stats().get("policy"))
    else:
        allocator = "pytorch-expandable" if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") else "pytorch"
    total = torch.cuda.mem_get_info()[1]

    def used():
        return total - torch.cuda.mem_get_info()[0]

    res = {"rank": rank, "local_rank": local, "world": world, "workload": a.workload, "allocator": allocator,
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    v = torch.cuda.nccl.version()
    res["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    torch.cuda.synchronize()
    u0, r0 = used(), torch.cuda.memory_reserved()
    dist.init_process_group("nccl")
    one = torch.ones(1, device=dev)
    dist.all_reduce(one)  # the first collective: NCCL makes its communicator and its buffers here
    torch.cuda.synchronize()
    u1, r1 = used(), torch.cuda.memory_reserved()
    res.update(used_before_bytes=u0, nccl_own_bytes=(u1 - u0) - (r1 - r0), first_all_reduce_ok=int(one.item()) == world)
    try:
        if a.workload in ("nccl", "nccl_register"):
            res["checks"] = nccl_checks(torch, dist, dev, rank, world)
            res["ok"] = res["first_all_reduce_ok"] and res["checks"]["mismatches"] == 0
            if a.workload == "nccl":  # the checks are kept should the probe end the process
                res["mem_pool"] = {"ok": False, "what": "not reached: the process ended in the MemPool probe"}
                write_json(os.path.join(a.result_dir, f"rank{rank}.json"), res)
                res["mem_pool"] = mem_pool_probe(torch, dist, dev, world)
        else:
            train(torch, dist, dev, rank, a, res, used)
            res["ok"] = res["first_all_reduce_ok"]
    finally:
        dist.destroy_process_group()
    write_json(os.path.join(a.result_dir, f"rank{rank}.json"), res)
    return 0


def nccl_checks(torch, dist, dev, rank, world):
    """Collectives on tensors the allocator made, some in memory other tensors just freed (vms
    stitches freed handles into one range), one on a side stream; every element checked."""
    want = world * (world + 1) // 2
    bad = torch.zeros((), dtype=torch.int64, device=dev)
    cases = []
    hold = [torch.empty(n << 20, dtype=torch.uint8, device=dev) for n in (48, 8, 64, 8, 96)]
    hold = hold[1::2]  # the 48, 64 and 96 MiB freed, kept apart: the larger tensors below can land across them
    for n in (1 << 10, 1 << 20, 48 << 20):
        x = torch.full((n,), float(rank + 1), device=dev)
        dist.all_reduce(x)
        bad += (x != want).sum()
        g = torch.empty(world * n, device=dev)
        dist.all_gather_into_tensor(g, torch.full((n,), float(rank + 1), device=dev))
        bad += (g.view(world, n) != torch.arange(1, world + 1, device=dev, dtype=g.dtype).view(world, 1)).sum()
        out = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(out, torch.full((world * n,), float(rank + 1), device=dev))
        bad += (out != want).sum()
        cases.append(f"{n * 4} B: all_reduce, all_gather_into_tensor, reduce_scatter_tensor")
        del x, g, out
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = torch.full((1 << 22,), float(rank + 1), device=dev)
        dist.all_reduce(y)
        bad += (y != want).sum()
    torch.cuda.current_stream().wait_stream(side)
    cases.append("all_reduce on a side stream")
    torch.cuda.synchronize()
    return {"mismatches": int(bad.item()), "cases": cases}


def mem_pool_probe(torch, dist, dev, world):
    """torch.cuda.MemPool with NCCL's allocator (ncclMemAlloc), as PyTorch's NCCL user-buffer docs do: what happens."""
    try:
        backend = dist.distributed_c10d._get_default_group()._get_backend(dev)
        pool = torch.cuda.MemPool(backend.mem_allocator)
        with torch.cuda.use_mem_pool(pool):
            t = torch.ones(1 << 20, device=dev)
        backend.register_mem_pool(pool)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        ok = bool((t == world).all().item())
        backend.deregister_mem_pool(pool)
        return {"ok": ok, "what": "allocated in the pool, registered, all_reduce checked"}
    except Exception as e:  # noqa: BLE001 (recorded: what this PyTorch and allocator do)
        return {"ok": False, "what": f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"}


def train(torch, dist, dev, rank, a, res, used):
    import transformers
    batch, lo, hi = SHAPES[a.workload]
    torch.manual_seed(SEED)
    if a.workload == "gpt2_ddp":
        cfg = transformers.GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024, use_cache=False)
        with dev:
            model = transformers.GPT2LMHeadModel(cfg)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    else:
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch < 2.6
            from torch.distributed._composable.fsdp import fully_shard
        cfg = transformers.LlamaConfig(**(LLAMA_1B if a.workload == "llama1b_fsdp" else LLAMA_7B), use_cache=False)
        with dev:
            model = transformers.LlamaForCausalLM(cfg)
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device=dev).manual_seed(SEED + rank)
    steps, losses, peak_used = [], [], 0
    for L in seqs(a.steps, lo, hi):
        t0 = time.perf_counter()
        ids = torch.randint(0, cfg.vocab_size, (batch, L), device=dev, generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.item()))
        torch.cuda.synchronize()
        steps.append(time.perf_counter() - t0)
        peak_used = max(peak_used, used())
        del ids, loss
    res.update(step_s=steps, losses=losses, device_used_peak_bytes=peak_used, peak_reserved_bytes=torch.cuda.max_memory_reserved(),
               peak_allocated_bytes=torch.cuda.max_memory_allocated())


# ---- the orchestrator ---------------------------------------------------------------------------
def allocator_env(spec):
    """The environment that picks an allocator (nothing of ours in the script: the hook does it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GMLAKE_POLICY", "GMLAKE_KNOBS", "PYTORCH_CUDA_ALLOC_CONF", REGISTER_HOOK)}
    env.update(NO_MULTICAST)
    if spec == "pytorch-expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    elif spec.startswith("ours:") and len(spec) > 5:
        policy, *knobs = spec[len("ours:"):].split(",")
        env["GMLAKE_POLICY"] = policy
        if knobs:
            env["GMLAKE_KNOBS"] = ",".join(knobs)
    elif spec != "pytorch":
        raise Bad(f"unknown allocator {spec!r} (pytorch, pytorch-expandable, ours:POLICY[,k=v...])")
    return env


def expected_allocator(spec):
    return "gmlake:" + spec[len("ours:"):].split(",")[0] if spec.startswith("ours:") else spec


class Runner:
    def __init__(self, a):
        self.a, self.deadline = a, time.monotonic() + a.time_limit
        self.doc = {"settings": {k: v for k, v in vars(a).items() if k not in ("cmd", "python", "wheel")},
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "integrity": [], "nccl": [], "runs": [], "skipped": []}
        self.logs = os.path.join(a.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.seen = {}
        self.running = None

    def left(self):
        return self.deadline - time.monotonic()

    def fits(self, kind, what):
        est = 1.15 * max(self.seen[kind]) if self.seen.get(kind) else {"integrity": 30 + self.a.integrity_seconds}.get(kind, 60 + 10 * self.a.nproc)
        if self.left() < est:
            self.doc["skipped"].append(what)
            return False
        return True

    def spawn(self, cmd, env, log, limit):
        """Runs cmd in a session of its own (at the limit, or on SIGTERM, the whole group goes); (rc, seconds)."""
        t0 = time.monotonic()
        with open(log, "w") as f:
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=self.a.out)
            self.running = p
            try:
                rc = p.wait(timeout=max(1.0, limit))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                rc = "timeout"
            self.running = None
        return rc, round(time.monotonic() - t0, 2)

    def torchrun(self, tag, workload, spec, extra_env=None):
        """One torchrun of every rank: the ranks' results, or why not."""
        d = os.path.join(self.logs, tag)
        os.makedirs(d, exist_ok=True)
        env = dict(allocator_env(spec), **(extra_env or {}))
        cmd = [self.a.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(self.a.nproc),
               os.path.join(HERE, "multi_gpu.py"), "rank", workload, "--steps", str(self.a.steps), "--result-dir", d]
        rc, secs = self.spawn(cmd, env, d + ".log", self.left())
        ranks = []
        for r in range(self.a.nproc):
            try:
                with open(os.path.join(d, f"rank{r}.json")) as f:
                    ranks.append(json.load(f))
            except (OSError, ValueError):
                ranks.append(None)
        rec = {"tag": tag, "workload": workload, "allocator": spec, "rc": rc, "seconds": secs, "ranks": ranks}
        with open(d + ".log", errors="replace") as f:
            log = f.read()
        problems = []
        if rc != 0:
            problems.append(f"torchrun exited {rc}")
        missing = [str(i) for i, r in enumerate(ranks) if r is None]
        if missing:
            problems.append(f"no result from rank(s) {','.join(missing)}")
        want = expected_allocator(spec) if REGISTER_HOOK not in (extra_env or {}) else "pytorch"
        wrong = [f"rank {i} ran on {r['allocator']}" for i, r in enumerate(ranks) if r is not None and r["allocator"] != want]
        problems += wrong
        problems += [f"rank {i} failed its checks" for i, r in enumerate(ranks) if r is not None and not r.get("ok")]
        if problems:
            tail = [l for l in log.strip().splitlines() if l.strip()][-1:] or [""]
            rec["error"] = "; ".join(problems) + (f" (log: {tail[0][:300]})" if rc != 0 or missing else "")
        rec["ok"] = not problems
        return rec, log

    def integrity(self, policy):
        """live_checks.py integrity on every GPU at once, one process per GPU."""
        procs = []
        for g in range(self.a.nproc):
            env = dict(allocator_env("pytorch"), CUDA_VISIBLE_DEVICES=str(g), GMLAKE_TORCH_PY=self.a.torch_py)
            log = open(os.path.join(self.logs, f"integrity-{policy}-gpu{g}.log"), "w")
            cmd = [self.a.python, os.path.join(HERE, "live_checks.py"), "integrity", "--policy", policy, "--seconds", str(self.a.integrity_seconds)]
            procs.append((g, log, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.a.out)))
        rows = []
        for g, log, p in procs:
            try:
                rc = p.wait(timeout=max(1.0, self.left()))
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
            log.close()
            with open(log.name, errors="replace") as f:
                lines = [l for l in f.read().splitlines() if l.startswith("RESULT ")]
            r = json.loads(lines[-1][len("RESULT "):]) if lines else {}
            rows.append({"policy": policy, "gpu": g, "rc": rc, "ok": rc == 0 and bool(r.get("ok")), "mismatches": r.get("mismatches"),
                         "allocs": r.get("allocs"), "seconds_run": r.get("seconds_run"), "errors": r.get("errors")})
        return rows

    def save(self):
        self.doc["summary"] = summarize(self.doc["runs"], self.a.warmup, self.a.allocators)
        write_json(os.path.join(self.a.out, "multi-gpu.json"), self.doc)
        tmp = os.path.join(self.a.out, "multi-gpu.md.tmp")
        with open(tmp, "w") as f:
            f.write(markdown(self.doc))
        os.replace(tmp, os.path.join(self.a.out, "multi-gpu.md"))

    def run(self):
        a = self.a
        for policy in a.integrity_policies if "integrity" in a.phases else ():
            t0 = time.monotonic()
            if self.fits("integrity", f"integrity {policy}"):
                self.doc["integrity"] += self.integrity(policy)
                self.seen.setdefault("integrity", []).append(time.monotonic() - t0)
                self.save()
        checks = [(f"nccl-{s}", "nccl", s, None) for s in a.allocators]
        checks += [(f"nccl-register-{s}", "nccl_register", s, {REGISTER_HOOK: "1"}) for s in a.allocators if s.startswith("ours:")][:1]
        if "nccl" not in a.phases:
            checks = []
        for tag, workload, spec, extra in checks:
            if self.fits("nccl", tag):
                rec, log = self.torchrun(tag.replace(":", "_").replace(",", "_"), workload, spec, extra)
                if extra:  # ours asked with the hook on: the line that says why it declined
                    said = [l for l in log.splitlines() if REGISTER_HOOK + " is set" in l]
                    rec["declined"] = said[0].strip() if said else None
                    if not said:
                        rec.update(ok=False, error=(rec.get("error", "") + "; no line from ours declining the hook").lstrip("; "))
                self.doc["nccl"].append(rec)
                self.seen.setdefault("nccl", []).append(rec["seconds"])
                self.save()
        for w in a.workloads if "train" in a.phases else ():
            for rnd in range(1, a.rounds + 1):
                k = (rnd - 1) % len(a.allocators)
                for spec in a.allocators[k:] + a.allocators[:k]:
                    tag = f"{w}-{spec}-r{rnd}".replace(":", "_").replace(",", "_")
                    if not self.fits(w, tag):
                        continue
                    print(f"multi_gpu: {tag} ({self.left():.0f} s left)", flush=True)
                    rec, _ = self.torchrun(tag, w, spec)
                    rec["round"] = rnd
                    self.doc["runs"].append(rec)
                    if rec["ok"]:
                        self.seen.setdefault(w, []).append(rec["seconds"])
                    else:
                        print(f"multi_gpu: {tag} failed: {rec['error']}", flush=True)
                    self.save()
        self.save()
        print(markdown(self.doc))
        failed = [r for r in self.doc["integrity"] + self.doc["nccl"] + self.doc["runs"] if not r["ok"]]
        return 1 if failed else 0


def run_mean(rec, warmup):
    """The slowest rank's time of each step, mean over the steps after warm-up."""
    per = [r["step_s"] for r in rec["ranks"]]
    steps = [max(xs) for xs in zip(*per)]
    return mean(steps[warmup:]) if len(steps) > warmup else None


def summarize(runs, warmup, allocators):
    out = []
    ok = [r for r in runs if r["ok"] and run_mean(r, warmup) is not None]
    for w in [w for w in WORKLOADS if any(r["workload"] == w for r in ok)]:
        by = {}
        for r in ok:
            if r["workload"] == w:
                by.setdefault(r["allocator"], {})[r["round"]] = r
        for spec in [s for s in allocators if s in by]:
            mine = by[spec]
            row = {"workload": w, "allocator": spec, "runs": len(mine)}
            row["mean_step_s"], lo, hi = t_interval([run_mean(r, warmup) for r in mine.values()])
            row["ci95"] = [lo, hi]
            for ref in REFS:
                keys = sorted(set(mine) & set(by.get(ref, {}))) if ref != spec else []
                if keys:
                    rr, rlo, rhi = fieller([run_mean(mine[k], warmup) for k in keys], [run_mean(by[ref][k], warmup) for k in keys])
                    row["vs_" + ref] = {"ratio": rr, "ci95": [rlo, rhi], "rounds": len(keys)}
            last = mine[max(mine)]
            for key in ("peak_reserved_bytes", "device_used_peak_bytes", "nccl_own_bytes"):
                row[key] = [max(r["ranks"][i][key] for r in mine.values()) for i in range(len(last["ranks"]))]
            if "pytorch" in by:
                keys = sorted(set(mine) & set(by["pytorch"]))
                diffs = [abs(x - y) for k in keys for a_, b_ in zip(mine[k]["ranks"], by["pytorch"][k]["ranks"]) for x, y in zip(a_["losses"], b_["losses"])]
                row["loss_diff_vs_pytorch"] = max(diffs) if diffs and spec != "pytorch" else None
            rounds = sorted(mine)
            own = [abs(x - y) for a_, b_ in zip(mine[rounds[0]]["ranks"], mine[rounds[-1]]["ranks"]) for x, y in zip(a_["losses"], b_["losses"])] if len(rounds) > 1 else []
            row["loss_diff_own_rounds"] = max(own) if own else None
            out.append(row)
    for w in {r["workload"] for r in out if r["workload"].endswith("_fsdp")}:
        rows = {r["allocator"]: r for r in out if r["workload"] == w}
        exp = rows.get("pytorch-expandable")
        for spec, r in rows.items():
            if spec.startswith("ours:") and exp:
                r["below_expandable_every_rank"] = all(x < y for x, y in zip(r["peak_reserved_bytes"], exp["peak_reserved_bytes"]))
    return out


def fmt_ci(lo, hi, digits):
    return "unbounded" if lo is None else f"{lo:.{digits}f}..{hi:.{digits}f}"


def gib(xs):
    return " / ".join(f"{x / GiB:.2f}" for x in xs)


def markdown(doc):
    st = doc["settings"]
    n = st["nproc"]
    lines = [f"# {n} GPUs, one process per GPU, ours on every rank ({doc['date']})", "",
             f"torchrun --nproc-per-node {n}; ours by GMLAKE_POLICY alone (the wheel's hook); {st['rounds']} rounds x "
             f"{st['steps']} steps, allocators rotated each round; step = the slowest rank's, mean after {st['warmup']} "
             "steps, then over rounds (95% t-interval); ratios with Fieller's interval; GiB = 2^30 B, per rank r0 / r1 / ...", ""]
    if doc.get("summary"):
        lines += ["| workload | allocator | runs | peak reserved GiB per rank | device used GiB per rank | NCCL's own MiB (r0) | "
                  "mean step s (95% CI) | vs pytorch | vs expandable | max loss diff vs pytorch (own rounds) |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in doc["summary"]:
            cells = [r["workload"], r["allocator"] + (" (below expandable on every rank)" if r.get("below_expandable_every_rank") else
                                                      " (NOT below expandable on every rank)" if r.get("below_expandable_every_rank") is False else ""),
                     str(r["runs"]), gib(r["peak_reserved_bytes"]), gib(r["device_used_peak_bytes"]), f"{r['nccl_own_bytes'][0] / 2**20:.0f}",
                     f"{r['mean_step_s']:.4f} ({fmt_ci(*r['ci95'], 4)})"]
            for ref in REFS:
                v = r.get("vs_" + ref)
                cells.append("self" if r["allocator"] == ref else "-" if v is None else f"{v['ratio']:.3f} ({fmt_ci(*v['ci95'], 3)})")
            d, own = r.get("loss_diff_vs_pytorch"), r.get("loss_diff_own_rounds")
            cells.append(("-" if d is None else f"{d:.2e}") + " (" + ("-" if own is None else f"{own:.2e}") + ")")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if doc["integrity"]:
        lines += ["## Integrity (live_checks.py integrity on every GPU at once)", "", "| policy | GPU | ok | mismatches | allocations |", "| --- | ---: | --- | ---: | ---: |"]
        lines += [f"| {r['policy']} | {r['gpu']} | {'yes' if r['ok'] else 'NO'} | {r['mismatches']} | {r['allocs']} |" for r in doc["integrity"]]
        lines.append("")
    if doc["nccl"]:
        lines += ["## NCCL", "", "| run | allocator on the ranks | collectives checked, mismatches | NCCL's own MiB per rank | MemPool(NCCL's allocator) | note |",
                  "| --- | --- | ---: | ---: | --- | --- |"]
        for r in doc["nccl"]:
            rk = [x for x in r["ranks"] if x]
            mism = sum(x["checks"]["mismatches"] for x in rk if "checks" in x) if rk else "-"
            own = " / ".join(f"{x['nccl_own_bytes'] / 2**20:.0f}" for x in rk) or "-"
            pool = rk[0].get("mem_pool", {}).get("what", "-") if rk else "-"
            note = r.get("declined") or r.get("error") or ""
            lines.append(f"| {r['tag']} | {', '.join(sorted({x['allocator'] for x in rk})) or '-'} | {mism} | {own} | {pool} | {note} |")
        lines.append("")
    failed = [r for r in doc["runs"] if not r["ok"]]
    if failed:
        lines += ["## Runs that failed", ""] + [f"- {r['tag']}: {r.get('error')}" for r in failed] + [""]
    if doc["skipped"]:
        lines += ["## Not run (time limit)", "", ", ".join(doc["skipped"]), ""]
    return "\n".join(lines)


def install_wheel(py, wheel, tmp):
    """The wheel as a user installs it: a venv over `py` (its torch), pip install --no-index; the venv's python
    and the folder gmlake_torch is in. A `py` that is a venv itself gets its own site-packages by a .pth line."""
    def ran(cmd, what):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise Bad(f"{what}: {([l for l in (p.stderr + p.stdout).splitlines() if l.strip()] or ['exit %d' % p.returncode])[-1]}")
        return p.stdout.strip()

    env_dir = os.path.join(tmp, "env")
    ran([py, "-m", "venv", "--system-site-packages", "--without-pip", env_dir], f"a venv over {py}")
    vpy = os.path.join(env_dir, "bin", "python")
    outer = ran([py, "-c", "import site, sys; print(sys.prefix != sys.base_prefix); print('\\n'.join(site.getsitepackages()))"], "site-packages").splitlines()
    if outer and outer[0] == "True":
        purelib = ran([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "the venv's site-packages")
        with open(os.path.join(purelib, "_gmlake_outer_venv.pth"), "w") as f:
            f.write("\n".join(outer[1:]) + "\n")
    ran([vpy, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check", wheel], f"pip install {os.path.basename(wheel)}")
    where = ran([vpy, "-c", "import gmlake_torch, os; print(os.path.dirname(os.path.dirname(os.path.abspath(gmlake_torch.__file__))))"],
                "import gmlake_torch")
    return vpy, where


def main(argv):
    if argv[:1] == ["rank"]:
        ap = Parser(prog="multi_gpu.py rank")
        ap.add_argument("workload", choices=list(WORKLOADS) + ["nccl", "nccl_register"])
        ap.add_argument("--steps", type=int, default=12)
        ap.add_argument("--result-dir", required=True)
        return rank_main(ap.parse_args(argv[1:]))
    if argv[:1] != ["run"]:
        raise Bad("expected 'run' (the whole job) or 'rank' (one rank, under torchrun)")
    ap = Parser(prog="multi_gpu.py run")
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--workloads", default="llama1b_fsdp,gpt2_ddp")
    ap.add_argument("--allocators", default="pytorch,pytorch-expandable,ours:vms")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--phases", default="integrity,nccl,train")
    ap.add_argument("--integrity-policies", default="vms")
    ap.add_argument("--integrity-seconds", type=float, default=20)
    ap.add_argument("--time-limit", type=float, default=540)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv[1:])
    a.workloads = [w for w in a.workloads.split(",") if w]
    a.allocators = [s for s in a.allocators.split(",") if s]
    a.integrity_policies = [p for p in a.integrity_policies.split(",") if p]
    a.phases = [p for p in a.phases.split(",") if p]
    if not a.phases or any(p not in ("integrity", "nccl", "train") for p in a.phases):
        raise Bad(f"--phases: a comma list of integrity, nccl, train, not {','.join(a.phases)!r}")
    for w in a.workloads:
        if w not in WORKLOADS:
            raise Bad(f"unknown workload {w!r} (one of {', '.join(WORKLOADS)})")
    for s in a.allocators:
        allocator_env(s)
    if a.nproc < 1 or a.rounds < 1 or a.steps <= a.warmup or a.warmup < 0 or a.time_limit <= 0 or a.integrity_seconds <= 0:
        raise Bad("--nproc and --rounds must be >= 1, --steps more than --warmup (>= 0), the times > 0")
    if not a.workloads or not a.allocators:
        raise Bad("--workloads and --allocators need at least one name each")
    if not os.path.isfile(a.wheel):
        raise Bad(f"no wheel at {a.wheel}")
    os.makedirs(a.out, exist_ok=True)
    a.out = os.path.abspath(a.out)
    with tempfile.TemporaryDirectory(prefix="gmlake-multi-") as tmp:
        a.python, a.torch_py = install_wheel(a.python, os.path.abspath(a.wheel), tmp)
        runner = Runner(a)

        def on_term(signum, frame):
            if runner.running is not None:
                os.killpg(runner.running.pid, signal.SIGKILL)
                runner.running.wait()
            runner.doc["incomplete"] = f"stopped by signal {signum}"
            runner.save()
            sys.exit(3)

        signal.signal(signal.SIGTERM, on_term)
        return runner.run()


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except Bad as e:  # bad input: one line
        code = print(f"multi_gpu: {e}", file=sys.stderr) or 2
    sys.exit(code)
