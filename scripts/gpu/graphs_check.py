#!/usr/bin/env python3
"""CUDA graphs and private pools under an allocator (issue 29), one case a process:

  python3 graphs_check.py CASE ALLOCATOR [--steps N]   -> one line RESULT {json}
  python3 graphs_check.py summary RESULTS.jsonl OUT.md -> the table; exit 1 if one of ours failed
                                                          or differs from PyTorch default's results

CASE: manual (a training step captured with torch.cuda.graph and replayed; a second graph
sharing its pool, two graphs on one graph_pool_handle, torch.cuda.MemPool + use_mem_pool, the
pools' memory back after the graphs go), compile (a small GPT-2 trained under
torch.compile(mode="reduce-overhead"), cudagraph trees: training steps, then steps with an eval
of another shape after the replayed forward, so the trees record off a replayed path and put
the pool's checkpoint back (setCheckpointPoolState), then training again), compile-notrees (the
same with torch._inductor.config.triton.cudagraph_trees = False), lora (llama1b_lora's model,
LoRA, the same mode), generate (greedy generation of a small GPT-2-like decoder written here,
its KV cache preallocated: one decode step captured with torch.cuda.graph and replayed per
token, two prompts; the tokens also against the same steps run eagerly). The compiled cases
count cudagraph trees' checkpoints and restores (PyTorch's bindings wrapped: any allocator).
ALLOCATOR: pytorch, pytorch-expandable, ours:POLICY[,k=v...][@native|@pluggable].
Every run starts from the same seed; results (losses, evals, tokens) are compared with PyTorch
default's in the summary, and peak reserved memory beside PyTorch's two allocators.
"""
import json
import os
import sys
import time

CASES = ("manual", "compile", "compile-notrees", "lora", "generate")
REFS = ("pytorch", "pytorch-expandable")
GiB = float(1 << 30)


class Bad(Exception):
    pass


def parse_allocator(spec):
    """(policy or None, knobs, interface or None) of an allocator spec."""
    if spec in REFS:
        return None, {}, None
    base, at, interface = spec.partition("@")
    if not base.startswith("ours:") or len(base) == 5 or (at and interface not in ("native", "pluggable")):
        raise Bad(f"unknown allocator {spec!r} (pytorch, pytorch-expandable, ours:POLICY[,k=v...][@native|@pluggable])")
    parts = base[5:].split(",")
    return parts[0], dict(kv.split("=", 1) for kv in parts[1:] if "=" in kv), interface or None


def setup(spec):
    """Chooses the allocator before torch touches CUDA; returns (torch, gmlake_torch or None)."""
    policy, knobs, interface = parse_allocator(spec)
    if spec == "pytorch-expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    import torch

    ours = None
    if policy is not None:
        sys.path.insert(0, os.environ.get("GMLAKE_TORCH_PY", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../packages/torch-alloc/python")))
        import gmlake_torch as ours

        ours.enable(policy, interface=interface, **knobs)
    torch.manual_seed(1234)
    return torch, ours


def peak_reserved(torch, ours):
    return int(ours.stats()["reserved_bytes.all.peak"] if ours is not None else torch.cuda.max_memory_reserved())


def memory_now(torch, ours):
    """[reserved, peak reserved, in private pools] bytes now, under any allocator: ours from its
    stats, PyTorch's from memory_snapshot() (segments whose segment_pool_id is not (0, 0))."""
    if ours is not None:
        s = ours.stats()
        return [int(s["reserved_bytes.all.current"]), int(s["reserved_bytes.all.peak"]), int(s.get("private_pool_reserved_bytes") or 0)]
    pooled = sum(g["total_size"] for g in torch.cuda.memory_snapshot() if tuple(g.get("segment_pool_id") or (0, 0)) != (0, 0))
    return [int(torch.cuda.memory_reserved()), int(torch.cuda.max_memory_reserved()), int(pooled)]


def pool_figures(ours):
    if ours is None:
        return None
    s = ours.stats()
    return {k: s.get(k) for k in ("private_pools", "private_pool_reserved_bytes", "private_pool_in_use_bytes", "private_pool_calls")}


def case_manual(torch, ours, steps):
    import gc

    import torch.nn as nn
    import torch.nn.functional as F

    dev = "cuda"
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sx, sy = torch.randn(64, 512, device=dev), torch.randn(64, 512, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as PyTorch asks before a capture
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            F.mse_loss(model(sx), sy).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loss = F.mse_loss(model(sx), sy)
        loss.backward()
        opt.step()
    g2 = torch.cuda.CUDAGraph()  # an eval forward sharing the training graph's pool
    with torch.cuda.graph(g2, pool=g.pool()):
        out2 = model(sx).sum()
    losses, evals = [], []
    for i in range(steps):
        gen = torch.Generator(device=dev).manual_seed(i)
        sx.copy_(torch.randn(64, 512, device=dev, generator=gen))
        sy.copy_(torch.randn(64, 512, device=dev, generator=gen))
        g.replay()
        g2.replay()
        losses.append(loss.item())
        evals.append(out2.item())
    handle = torch.cuda.graph_pool_handle()  # two graphs on one handle
    a, b = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(a, pool=handle):
        ya = (sx * 2).sum()
    with torch.cuda.graph(b, pool=handle):
        yb = (sx * 3).sum()
    a.replay()
    b.replay()
    losses += [ya.item(), yb.item()]
    mempool = None
    try:
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            t = torch.full((1 << 20,), 2.0, device=dev)
        losses.append(t.sum().item())
        del t
        del pool
        mempool = "ok"
    except Exception as e:  # noqa: BLE001 (reported: where the interface cannot, a clear error)
        mempool = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    during = pool_figures(ours)
    del g, g2, a, b, loss, out2, ya, yb
    gc.collect()
    torch.cuda.synchronize()
    return {"losses": losses, "evals": evals, "mempool": mempool, "pools_during": during, "pools_after": pool_figures(ours)}


def gpt2_model(torch, layers=4, width=256, vocab=8192):
    import transformers

    # no dropout: the results depend on the allocator only, not on how the trees replay the RNG
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=8, vocab_size=vocab, n_positions=512,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg.use_cache = False
    return transformers.GPT2LMHeadModel(cfg).to("cuda"), vocab


def count_checkpoints(torch):
    """cudagraph trees' pool checkpoints (getCheckpointState) and restores (setCheckpointPoolState),
    counted under any allocator: PyTorch's bindings wrapped before the trees are imported."""
    counts = {"checkpoints": 0, "restores": 0}
    for name, key in (("_cuda_getCheckpointState", "checkpoints"), ("_cuda_setCheckpointPoolState", "restores")):
        fn = getattr(torch._C, name, None)
        if fn is not None:
            def wrapped(*a, _fn=fn, _key=key, **k):
                counts[_key] += 1
                return _fn(*a, **k)
            setattr(torch._C, name, wrapped)
    # and torch.cuda.empty_cache (torch.cuda.graph calls it before each capture)
    counts["empty_caches"] = 0
    empty = torch.cuda.empty_cache

    def counted_empty(*a, **k):
        counts["empty_caches"] += 1
        return empty(*a, **k)
    torch.cuda.empty_cache = counted_empty
    return counts


def ids_of(torch, vocab, seed, batch, seq):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, vocab, (batch, seq), device="cuda", generator=gen)


def train_compiled(torch, model, vocab, steps, batch, seq, params=None, eval_shape=None, ours=None):
    """Training steps under reduce-overhead; with eval_shape (batch, seq): at least 3 steps, then
    3 steps whose replayed forward is followed by an eval of that shape (no grad) before the
    backward, then the training steps again. "memory": memory_now() before the first step and
    after each (where the reserved bytes go: the private pool or the rest)."""
    counts = count_checkpoints(torch)
    opt = torch.optim.AdamW(params if params is not None else model.parameters(), lr=1e-4)
    fwd = torch.compile(model, mode="reduce-overhead")
    losses, evals, memory = [], [], [memory_now(torch, ours)]

    def step(i, eval_seed=None):
        ids = ids_of(torch, vocab, i, batch, seq)
        torch.compiler.cudagraph_mark_step_begin()
        loss = fwd(input_ids=ids, labels=ids).loss
        if eval_seed is not None:  # off the replayed forward's path: a recording (or warm-up) there
            with torch.no_grad():
                evals.append(fwd(input_ids=ids_of(torch, vocab, eval_seed, *eval_shape)).logits.float().mean().item())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        memory.append(memory_now(torch, ours))

    first = steps if eval_shape is None else max(steps, 3)  # warm-up, recording, replays
    for i in range(first):
        step(i)
    if eval_shape is not None:
        for i in range(3):
            step(first + i, eval_seed=1000 + i)
        for i in range(steps):
            step(first + 3 + i)
    out = {"losses": losses, "checkpoints": counts, "memory": memory}
    if eval_shape is not None:
        out["evals"] = evals
    return out


def case_compile(torch, ours, steps, trees=True):
    import torch._inductor.config as inductor

    inductor.triton.cudagraph_trees = trees
    model, vocab = gpt2_model(torch)
    out = train_compiled(torch, model, vocab, steps, batch=8, seq=256, eval_shape=(4, 128), ours=ours)
    out["pools"] = pool_figures(ours)
    return out


def case_lora(torch, ours, steps):
    import peft
    import transformers

    cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                                   num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)
    cfg.use_cache = False
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0))
    model.train()
    # what an empty_cache frees of the float32 weights .to(bfloat16) left cached (torch.cuda.graph calls one before each capture)
    before = memory_now(torch, ours)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    out = {"empty_cache_at_start": [before, memory_now(torch, ours)]}
    out.update(train_compiled(torch, model, cfg.vocab_size, steps, batch=4, seq=512, params=[p for p in model.parameters() if p.requires_grad], ours=ours))
    out["pools"] = pool_figures(ours)
    if ours is not None:
        s = ours.stats()
        out["engine"] = {k: s.get(k) for k in ("calls", "driver_calls", "counters", "pending_frees", "capture_deferred_frees", "num_deferred_frees")}
        if os.environ.get("GMLAKE_RECORD") == "1":  # the engine's history, for a replay of its calls here
            ours.snapshot(os.path.join(os.environ.get("GMLAKE_SNAPSHOT_DIR", "."), f"lora-{ours.stats()['policy']}.pickle"))
    return out


def decoder(torch, ctx, batch, vocab=8192, width=256, heads=8, layers=4):
    """A small GPT-2-like decoder (pre-norm, learned positions, tied embedding; seeded weights)
    with its KV cache preallocated for ctx positions. step(tok, pos): one token per sequence at
    position pos, a 0-d device tensor (so one captured graph serves every position: no host
    value, no sync), written into the cache there; returns the next tokens (greedy)."""
    import torch.nn.functional as F

    gen = torch.Generator(device="cuda").manual_seed(7)
    w = lambda *shape: torch.randn(*shape, device="cuda", generator=gen) * 0.02  # noqa: E731
    hd = width // heads
    wte, wpe = w(vocab, width), w(ctx, width)
    blocks = [{"qkv": w(width, 3 * width), "proj": w(width, width), "fc": w(width, 4 * width), "out": w(4 * width, width)}
              for _ in range(layers)]
    kc = torch.zeros(layers, batch, heads, ctx, hd, device="cuda")
    vc = torch.zeros_like(kc)
    slots = torch.arange(ctx, device="cuda").view(1, 1, 1, ctx)

    def step(tok, pos):
        at = pos.view(1)
        x = wte.index_select(0, tok) + wpe.index_select(0, at)  # (batch, width); no 0-d tensor index (its item() syncs)
        hidden = slots > pos  # positions not written yet
        for i, b in enumerate(blocks):
            q, k, v = (F.layer_norm(x, (width,)) @ b["qkv"]).split(width, dim=-1)
            kc[i].index_copy_(2, at, k.reshape(batch, heads, 1, hd))
            vc[i].index_copy_(2, at, v.reshape(batch, heads, 1, hd))
            att = (q.reshape(batch, heads, 1, hd) @ kc[i].transpose(-1, -2)) * hd ** -0.5
            att = att.masked_fill(hidden, float("-inf")).softmax(-1)
            x = x + (att @ vc[i]).reshape(batch, width) @ b["proj"]
            x = x + F.gelu(F.layer_norm(x, (width,)) @ b["fc"]) @ b["out"]
        return (F.layer_norm(x, (width,)) @ wte.t()).argmax(-1)

    return step


def case_generate(torch, ours, steps):
    batch, plen, new = 2, 16, max(8, steps * 4)
    step = decoder(torch, ctx=plen + new + 1, batch=batch)
    prompts = [ids_of(torch, 8192, 7 + r, batch, plen) for r in range(2)]
    tok = torch.zeros(batch, dtype=torch.long, device="cuda")
    pos = torch.zeros((), dtype=torch.long, device="cuda")

    def prefill(prompt):  # the prompt a token at a time, eagerly; tok, pos: the first new token and its position
        for t in range(plen):
            tok.copy_(prompt[:, t])
            pos.fill_(t)
            nxt = step(tok, pos)
        tok.copy_(nxt)
        pos.fill_(plen)

    def generate(decode):
        rounds = []
        for prompt in prompts:
            prefill(prompt)
            out = [tok.clone()]
            for _ in range(new - 1):
                nxt = decode()
                out.append(nxt.clone())
                tok.copy_(nxt)
                pos.add_(1)
            rounds.append(torch.stack(out, 1).tolist())
        return rounds

    with torch.no_grad():
        eager = generate(lambda: step(tok, pos))
        prefill(prompts[0])
        side = torch.cuda.Stream()  # warm-up before the capture, as PyTorch asks (it rewrites position plen alike)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step(tok, pos)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_next = step(tok, pos)

        def replay():
            g.replay()
            return static_next

        tokens = generate(replay)
        during = pool_figures(ours)
        del g, static_next
    return {"tokens": tokens, "eager_equal": tokens == eager, "pools": during}


def run_case(argv):
    if len(argv) < 2 or argv[0] not in CASES:
        raise Bad(f"usage: graphs_check.py CASE ALLOCATOR [--steps N] (CASE: {', '.join(CASES)})")
    case, spec = argv[0], argv[1]
    steps = 8
    if argv[2:3] == ["--steps"]:
        try:
            steps = int(argv[3])
        except (IndexError, ValueError):
            steps = 0
        if steps < 1:
            raise Bad("--steps takes a whole number >= 1")
    parse_allocator(spec)
    out = {"case": case, "allocator": spec}
    t0 = time.time()
    try:
        torch, ours = setup(spec)
        fn = {"manual": case_manual, "compile": case_compile, "compile-notrees": lambda t, o, s: case_compile(t, o, s, trees=False),
              "lora": case_lora, "generate": case_generate}[case]
        out.update(fn(torch, ours, steps))
        torch.cuda.synchronize()
        out.update(ok=True, peak_reserved_bytes=peak_reserved(torch, ours), torch=torch.__version__, gpu=torch.cuda.get_device_name())
    except Exception as e:  # noqa: BLE001 (the run's failure is its result)
        out.update(ok=False, error=f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:400]}")
    out["wall_s"] = round(time.time() - t0, 1)
    print("RESULT " + json.dumps(out), flush=True)


# ---- summary ----------------------------------------------------------------------------------
def rel_diff(r, ref):
    """The largest relative difference of r's losses and evals from ref's; None when they do not pair."""
    a, b = r.get("losses") or [], ref.get("losses") or []
    if len(a) != len(b) or not a:
        return None
    a, b = a + (r.get("evals") or []), b + (ref.get("evals") or [])
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def same_results(r, ref, exp=None):
    """(equal, how): tokens identical; losses within 1e-5 relative of the reference's, or within
    twice what PyTorch's own two allocators differ by (exp: expandable's run), where the case's
    kernels are not bit-stable across memory layouts (bf16 with atomics, cuBLAS by alignment)."""
    if "tokens" in ref or "tokens" in r:
        eq = r.get("tokens") == ref.get("tokens")
        return eq, "tokens equal" if eq else "tokens differ"
    worst = rel_diff(r, ref)
    if worst is None:
        return False, f"{len(r.get('losses') or [])} results, the reference {len(ref.get('losses') or [])}"
    spread = rel_diff(exp, ref) if exp is not None and exp is not r else None
    tol = max(1e-5, 2 * spread) if spread is not None else 1e-5
    how = f"max rel diff {worst:.1e}" + (f" (PyTorch's two: {spread:.1e})" if spread is not None and spread > 1e-5 else "")
    return worst <= tol, how


def summary(argv):
    if len(argv) != 2:
        raise Bad("usage: graphs_check.py summary RESULTS.jsonl OUT.md")
    if os.path.abspath(argv[0]) == os.path.abspath(argv[1]):
        raise Bad("the table would replace the results it reads: give another OUT.md")
    rows = []
    try:
        with open(argv[0]) as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        raise Bad(f"{argv[0]}:{n}: not a JSON line") from None
    except OSError as e:
        raise Bad(f"cannot read {argv[0]}: {e.strerror}") from None
    failed = []
    lines = ["# CUDA graphs and private pools (issue 29)", "",
             "| case | allocator | ok | results vs PyTorch default | peak reserved GiB | vs default | vs expandable | note |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | --- |"]
    for case in [c for c in CASES if any(r.get("case") == c for r in rows)]:
        mine = [r for r in rows if r.get("case") == case]
        ref = next((r for r in mine if r.get("allocator") == "pytorch" and r.get("ok")), None)
        exp = next((r for r in mine if r.get("allocator") == "pytorch-expandable" and r.get("ok")), None)
        for r in mine:
            ok = bool(r.get("ok"))
            eq, how = same_results(r, ref, exp) if ok and ref is not None else (False, "no reference" if ok else "-")
            peak = r.get("peak_reserved_bytes")
            rel = lambda o: f"{100 * (peak / o['peak_reserved_bytes'] - 1):+.1f}%" if ok and o and peak else "-"  # noqa: E731
            note = r.get("error") or ("MemPool: " + r["mempool"] if r.get("mempool") not in (None, "ok") else "")
            if not note and isinstance(r.get("checkpoints"), dict):  # cudagraph trees' checkpoints taken, and put back
                note = "checkpoints {checkpoints}, restores {restores}".format(**r["checkpoints"])
            if r.get("memory"):  # where the reserved bytes were at the step of the peak: the private pool and the rest
                at = max(r["memory"], key=lambda m: m[0])
                note += f"{'; ' if note else ''}at the most reserved {at[0] / GiB:.2f} GiB: pool {at[2] / GiB:.2f}"
            if not note and r.get("eager_equal") is False:
                note = "graph tokens differ from the same steps run eagerly"
            lines.append(f"| {case} | {r.get('allocator')} | {'yes' if ok else 'NO'} | {how} | "
                         f"{peak / GiB:.3f} | {rel(ref)} | {rel(exp)} | {note} |" if peak else
                         f"| {case} | {r.get('allocator')} | {'yes' if ok else 'NO'} | {how} | - | - | - | {note} |")
            if str(r.get("allocator", "")).startswith("ours:") and not (ok and eq):
                failed.append(f"{case} {r.get('allocator')}")
    lines += ["", f"failed or different from PyTorch default: {', '.join(failed)}" if failed else "every run of ours: ok, results equal to PyTorch default's"]
    tmp = argv[1] + f".tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, argv[1])
    print("\n".join(lines))
    return 1 if failed else 0


def main(argv):
    try:
        if argv[:1] == ["summary"]:
            return summary(argv[1:])
        run_case(argv)
        return 0
    except Bad as e:
        print(f"graphs_check: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
