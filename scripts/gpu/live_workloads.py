"""Runs the project's training workloads live on a GPU under one allocator and prints one
JSON line with what was measured.

The models, shapes and seeds of ../shared/workloads/workloads.py (gpt2_ft, gpt2_ft_ckpt,
llama1b_fsdp, llama1b_lora, opt1b_generate), plus the project's own workloads whose largest
buffers change size every step (qwen_lora_bigvocab, gpt2_offload, moe_ft, gpt2_microbatch).

usage: python3 live_workloads.py NAME --allocator A [--steps N] [--record PATH] [--sampler SO] [--rep N]
                                [--profile-steps I,J] [--busy-core odd|even] [--alternate REF]
  A = pytorch              PyTorch's default caching allocator
      pytorch-expandable   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
      ours:POLICY[,k=v...] the stitching engine in this process (packages/torch-alloc)
      plug:pytorch, plug:pytorch-expandable  PyTorch's own behind the pluggable interface,
                           each call timed (pytorch_plug.py; the library at $GMLAKE_PLUG_LIB)
  --record PATH   dump a memory-history snapshot (pickle, gzip when PATH ends in .gz); with
                  ours, the engine's own history (gmlake_torch.snapshot)
  --sampler SO    memsampler.so: device memory in use sampled every 100 us inside the steps
  --rep N         the round of live-run.sh's `timing` step this run belongs to (kept in the result)
  --profile-steps I,J  those steps under torch.profiler (CUDA activity): per step the time in
                  kernels and copies, the GPU's busy and idle time, the costliest kernels
                  (kernel_profile.py); a profiled step's wall time is tagged, not comparable
  --busy-core odd|even  a second process keeps one CPU core busy during the odd (or even) steps
                  only, as our engine's JS thread would while it spins: what one busy core
                  beside the job costs a step on this machine (interference.py pairs the runs)
  --alternate REF every step three times in a row with the same inputs and seed: through
                  cudaMallocAsync (warms the per-shape caches), then once through ours (A =
                  ours:POLICY, as its own CUDAAllocator) and once through PyTorch's own allocator
                  REF (pytorch or pytorch-expandable), which goes first alternating
                  (alternate_steps.route_of); --steps counts the pairs

Measured: per step the wall time, the loss (training) or a checksum of the tokens
(generation) and the sampled peak of device memory in use; the allocator's own peaks. With
ours, per step also what the engine did in it (`step_engine`: the deltas of its driver calls
by kind, num_sync_all_streams and num_cross_stream_reuses, read from stats() after the
step's clock stopped, so the read is not in the step's time; with GMLAKE_TIME_CALLS=1 also
call_us, the host time spent inside the allocator's alloc and free).
"""
import argparse, atexit, gzip, json, os, pickle, random, signal, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("name")
ap.add_argument("--allocator", default="pytorch")
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--record", default=None)
ap.add_argument("--sampler", default=None)
ap.add_argument("--rep", type=int, default=None)
ap.add_argument("--profile-steps", default="")
ap.add_argument("--busy-core", choices=["odd", "even"], default=None)
ap.add_argument("--alternate", choices=["pytorch", "pytorch-expandable"], default=None)
args = ap.parse_args()
try:
    profile_steps = {int(x) for x in args.profile_steps.split(",") if x.strip()}
except ValueError:
    sys.exit(f"live_workloads: --profile-steps: expected step numbers like 6,7, got {args.profile_steps!r}")

if args.alternate and not args.allocator.startswith("ours:"):
    sys.exit("live_workloads: --alternate alternates an ours:POLICY allocator's steps with PyTorch's own")
if args.alternate and (args.record or args.busy_core or profile_steps):
    sys.exit("live_workloads: --alternate takes no --record, --busy-core or --profile-steps")
mode = args.alternate or args.allocator
if mode in ("pytorch-expandable", "plug:pytorch-expandable"):
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
elif mode in ("pytorch", "plug:pytorch"):
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
elif not args.allocator.startswith("ours:"):
    sys.exit(f"live_workloads: unknown allocator {args.allocator!r}")

import ctypes  # noqa: E402

sampler = None
if args.sampler:
    sampler = ctypes.CDLL(os.path.abspath(args.sampler))
    sampler.peak_used.restype = ctypes.c_size_t
    sampler.samples.restype = ctypes.c_ulong

import torch  # noqa: E402

ours = None
if args.allocator.startswith("ours:"):
    spec = args.allocator[len("ours:"):].split(",")
    knobs = dict(kv.split("=", 1) for kv in spec[1:] if kv)
    sys.path.insert(0, os.environ.get("GMLAKE_TORCH_PY", os.path.join(os.path.dirname(__file__), "../../packages/torch-alloc/python")))
    import gmlake_torch as ours  # noqa: E402

    ours.enable(policy=spec[0], record=bool(args.record), **knobs, **({"interface": "native"} if args.alternate else {}))
route_of = None
if args.alternate:
    from alternate_steps import route_of  # noqa: E402
    from gmlake_torch import cuda_allocator  # noqa: E402
plug = None
if args.allocator.startswith("plug:"):
    import pytorch_plug  # noqa: E402

    plug = pytorch_plug.enable(os.environ.get("GMLAKE_PLUG_LIB", "libpytorch_plug.so"))

SEED = 1234
random.seed(SEED)
torch.manual_seed(SEED)
dev = torch.device("cuda")
torch.cuda.init()
free0, total = torch.cuda.mem_get_info()
if sampler is not None:
    rc = sampler.start(torch.cuda.current_device(), 100)
    if rc != 0:
        sys.exit(f"memsampler: start failed ({rc})")


def schedule(items):
    """The steps to run: each item once, or with --alternate three times in a row, torch's
    generator seeded alike before each (the same tokens, dropout and experts' loads)."""
    for i, item in enumerate(items):
        for _ in range(3 if args.alternate else 1):
            if args.alternate:
                torch.manual_seed(SEED + i)
            yield item


def seqs(n, lo, hi):
    rng = random.Random(SEED)
    return [rng.randint(lo, hi) for _ in range(n)]


def build_causal_lm(kind, **kw):
    import transformers
    cfg = {"gpt2": transformers.GPT2Config, "llama": transformers.LlamaConfig, "opt": transformers.OPTConfig,
           "mixtral": transformers.MixtralConfig}[kind](**kw)
    cls = {"gpt2": transformers.GPT2LMHeadModel, "llama": transformers.LlamaForCausalLM, "opt": transformers.OPTForCausalLM,
           "mixtral": transformers.MixtralForCausalLM}[kind]
    cfg.use_cache = False
    with torch.device(dev):
        model = cls(cfg)
    return model, cfg


steps_out = []


profiler = None  # the running torch.profiler of a profiled step
# CPU time at the step's start: the main (launching) thread's and the whole process's (which
# holds our engine's JS thread too): a step whose main thread is busy for most of its wall time
# is bound by the host, not the GPU
step_cpu = [0.0, 0.0]


busy = None  # --busy-core's process: stopped (SIGSTOP) except during its steps


def busy_core(on):
    global busy
    if busy is None:
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        os.kill(busy.pid, signal.SIGSTOP)
        atexit.register(busy.kill)
    os.kill(busy.pid, signal.SIGCONT if on else signal.SIGSTOP)


def busy_step(i):
    return args.busy_core is not None and (i % 2 == 1) == (args.busy_core == "odd")


def step_begin():
    global profiler
    if (ours is not None or plug is not None) and engine_last is None:
        engine_delta()  # the baseline: what the model's build cost is not step 0's
    if sampler is not None:
        sampler.reset()
    if len(steps_out) in profile_steps:
        torch.cuda.synchronize()
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
        profiler.__enter__()
    if args.busy_core is not None:
        busy_core(busy_step(len(steps_out)))
    if route_of is not None:
        cuda_allocator.route(route_of(len(steps_out)))
    step_cpu[:] = [time.thread_time(), time.process_time()]
    return time.perf_counter()


ENGINE_COUNTS = ("num_sync_all_streams", "num_cross_stream_reuses", "num_deferred_frees")
engine_last = None  # the engine's counts at the end of the previous step (or before the first)


def engine_counts():
    if plug is not None:  # PyTorch's own behind the plug: only its host time
        us, n = plug.call_time_us()
        return {"call_us": us["alloc"] + us["free"], "allocs": n["alloc"]}
    st = ours.stats()
    c = {k: int(st.get(k) or 0) for k in ENGINE_COUNTS}
    c.update({"driver." + k: int(v) for k, v in (st.get("driver_calls") or {}).items()})
    c["driver_us"] = float(st.get("driver_total_time_us") or 0)
    ct = st.get("call_time_us")
    if ct:
        c["call_us"] = float(ct["alloc"] + ct["free"])
        c["allocs"] = int(st["num_calls"]["alloc"])
        for part in ("enter", "prepare", "js"):  # the embedding's parts (torch-alloc README)
            if part in ct:
                c[f"call_{part}_us"] = float(ct[part])
    return c


def engine_delta():
    """What the engine did since the last call: only the non-zero counts (a JSON text op, ~once per step)."""
    global engine_last
    now = engine_counts()
    last = engine_last or {}
    engine_last = now
    return {k: round(v - last.get(k, 0), 1) if k.endswith("_us") else v - last.get(k, 0)
            for k, v in now.items() if v != last.get(k, 0)}


def step_end(t0, value):
    global profiler
    torch.cuda.synchronize()
    s = time.perf_counter() - t0
    out = {"s": s, "value": value, "peak_used": int(sampler.peak_used()) if sampler is not None else None,
           "cpu": time.thread_time() - step_cpu[0], "proc_cpu": time.process_time() - step_cpu[1]}
    if busy is not None:
        busy_core(False)  # stopped outside the steps' clocks
    if route_of is not None:
        out["route"] = route_of(len(steps_out))
    if profiler is not None:
        import tempfile
        import kernel_profile
        profiler.__exit__(None, None, None)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "trace.json")
            profiler.export_chrome_trace(path)
            with open(path) as f:
                out["profile"] = kernel_profile.summarize(json.load(f))
        profiler = None
    if ours is not None or plug is not None:
        out["engine"] = engine_delta()
    steps_out.append(out)


def train_loop(model, vocab, batch, lens, opt, autocast=True, offload=False, micro=None):
    """The shared workloads' loop; `micro` splits a step into micro-batches of those lengths."""
    for L, m in schedule(list(zip(lens, micro or [None] * len(lens)))):
        t0 = step_begin()
        total_loss = 0.0
        for Lm in (m or [L]):
            ids = torch.randint(0, vocab, (batch, Lm), device=dev)
            ctx = torch.autocast("cuda", dtype=torch.bfloat16) if autocast else torch.autocast("cuda", enabled=False)
            with ctx:
                if offload:
                    with torch.autograd.graph.save_on_cpu(pin_memory=True):
                        out = model(input_ids=ids, labels=ids)
                        loss = out.loss
                        loss.backward()
                else:
                    out = model(input_ids=ids, labels=ids)
                    loss = out.loss
                    loss.backward()
            total_loss += loss.item()
            del out, loss, ids
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_end(t0, total_loss)


def gpt2(steps, ckpt=False, offload=False):
    model, cfg = build_causal_lm("gpt2", n_layer=24, n_embd=1024, n_head=16, n_positions=1024)
    if ckpt:
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    train_loop(model, cfg.vocab_size, 8, seqs(steps, 64, 1024), opt, offload=offload)


def gpt2_microbatch(steps):
    """Pipeline-style micro-batches: 4 per step, each of its own length, gradients accumulated."""
    model, cfg = build_causal_lm("gpt2", n_layer=24, n_embd=1024, n_head=16, n_positions=1024)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(SEED)
    micro = [[rng.randint(64, 1024) for _ in range(4)] for _ in range(steps)]
    train_loop(model, cfg.vocab_size, 4, [0] * steps, opt, micro=micro)


LLAMA_1B = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)


def lora(steps, kw, batch, lo, hi):
    import peft
    model, cfg = build_causal_lm("llama", torch_dtype=torch.bfloat16, **kw)
    model = model.to(torch.bfloat16)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    lcfg = peft.LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.05)
    model = peft.get_peft_model(model, lcfg)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    train_loop(model, cfg.vocab_size, batch, seqs(steps, lo, hi), opt)


def qwen_lora_bigvocab(steps):
    """A 152k-token vocabulary (Qwen2's) and sequences of 256-4096: logits of up to ~7 GiB
    whose size follows the sequence length, so the largest buffers change size every step."""
    kw = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=16, num_attention_heads=12,
              num_key_value_heads=2, vocab_size=151936, max_position_embeddings=8192)
    lora(steps, kw, 2, 256, 4096)


def moe_ft(steps):
    """A Mixtral-style MoE (8 experts, top-2): per-expert token counts differ every step."""
    model, cfg = build_causal_lm("mixtral", hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                                 num_attention_heads=16, num_key_value_heads=4, num_local_experts=8,
                                 num_experts_per_tok=2, vocab_size=32000, max_position_embeddings=4096)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    train_loop(model, cfg.vocab_size, 8, seqs(steps, 128, 1024), opt)


def opt_generate(rounds):
    model, cfg = build_causal_lm("opt", hidden_size=2048, ffn_dim=8192, num_hidden_layers=24, num_attention_heads=32,
                                 vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=2048)
    model = model.to(torch.bfloat16).eval()
    model.config.use_cache = True
    rng = random.Random(SEED)
    plans = [(rng.randint(1, 16), rng.randint(32, 768), rng.randint(16, 160)) for _ in range(rounds)]
    with torch.no_grad():
        for b, p, n in schedule(plans):
            t0 = step_begin()
            ids = torch.randint(4, cfg.vocab_size, (b, p), device=dev)
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                 do_sample=True, top_k=50, pad_token_id=1)
            step_end(t0, int(out.sum().item()))
            del out, ids


def llama_fsdp(steps):
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:  # a port the OS has free: runs side by side (random is seeded alike in each)
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    dist.init_process_group("nccl", rank=0, world_size=1)
    model, cfg = build_causal_lm("llama", **LLAMA_1B)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    try:
        train_loop(model, cfg.vocab_size, 4, seqs(steps, 128, 2048), opt)
    finally:
        dist.destroy_process_group()


WORKLOADS = {
    "gpt2_ft": lambda n: gpt2(n),
    "gpt2_ft_ckpt": lambda n: gpt2(n, ckpt=True),
    "llama1b_lora": lambda n: lora(n, LLAMA_1B, 8, 128, 2048),
    "llama1b_fsdp": llama_fsdp,
    "opt1b_generate": opt_generate,
    "qwen_lora_bigvocab": qwen_lora_bigvocab,
    "gpt2_offload": lambda n: gpt2(n, offload=True),
    "moe_ft": moe_ft,
    "gpt2_microbatch": gpt2_microbatch,
}


def main():
    if args.name not in WORKLOADS:
        sys.exit(f"unknown workload {args.name}; one of: {', '.join(WORKLOADS)}")
    if args.record and ours is None:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=2_000_000)
    t0 = time.perf_counter()
    WORKLOADS[args.name](args.steps)
    wall = time.perf_counter() - t0
    if sampler is not None:
        sampler.stop()
    times = sorted(s["s"] for s in steps_out)
    used = [s["peak_used"] for s in steps_out if s["peak_used"] is not None]
    # ours under other settings (live-run.sh's TIMING_ENVS) is another allocator to compare
    label = os.environ.get("GMLAKE_RUN_LABEL", "").strip() if ours is not None else ""
    res = {
        "workload": args.name, "allocator": args.allocator + (f" [{label}]" if label else ""), "steps": len(steps_out),
        "median_step_s": times[len(times) // 2], "wall_s": wall,
        "values": [s["value"] for s in steps_out], "step_s": [s["s"] for s in steps_out],
        "step_cpu_s": [round(s["cpu"], 6) for s in steps_out], "step_proc_cpu_s": [round(s["proc_cpu"], 6) for s in steps_out],
        "cpus_allowed": len(os.sched_getaffinity(0)),
        "busy_steps": [i for i in range(len(steps_out)) if busy_step(i)],
        "step_route": [s["route"] for s in steps_out] if args.alternate else None,
        "used_before_bytes": total - free0,
        "peak_used_bytes": max(used) if used else None,
        "samples": int(sampler.samples()) if sampler is not None else None,
        "sampler": sampler is not None, "rep": args.rep,
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
    }
    if plug is not None:
        res["peak_reserved_bytes"], res["peak_allocated_bytes"] = plug.peaks()
        res["call_time_us"], res["num_calls"] = plug.call_time_us()
        res["step_engine"] = [s["engine"] for s in steps_out]
    elif ours is None:
        st = torch.cuda.memory_stats()
        res.update(peak_reserved_bytes=torch.cuda.max_memory_reserved(), peak_allocated_bytes=torch.cuda.max_memory_allocated(),
                   num_alloc_retries=st.get("num_alloc_retries"), num_device_alloc=st.get("num_device_alloc"),
                   num_ooms=st.get("num_ooms"))
    else:
        res["engine"] = ours.stats()
        res["step_engine"] = [s["engine"] for s in steps_out]
    if profile_steps:
        res["profiles"] = {str(i): s["profile"] for i, s in enumerate(steps_out) if "profile" in s}
    if args.record and ours is not None:
        # the engine's own history, as a memory-viz pickle (gzip when PATH ends in .gz)
        ours.snapshot(args.record)
        res["trace_file"] = os.path.basename(args.record)
    elif args.record:
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        opener = gzip.open if args.record.endswith(".gz") else open
        with opener(args.record, "wb") as f:
            pickle.dump(snap, f, protocol=4)
        res["trace_events"] = sum(len(t) for t in snap.get("device_traces", []))
        res["trace_file"] = os.path.basename(args.record)
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
