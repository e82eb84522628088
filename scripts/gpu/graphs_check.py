#!/usr/bin/env python3
"""CUDA graphs and private pools under an allocator (issue 29), one case a process:

  python3 graphs_check.py CASE ALLOCATOR [--steps N]   -> one line RESULT {json}
  python3 graphs_check.py summary RESULTS.jsonl OUT.md -> the table; exit 1 if one of ours failed
                                                          or differs from PyTorch default's results

CASE: manual (a training step captured with torch.cuda.graph and replayed; a second graph
sharing its pool, two graphs on one graph_pool_handle, torch.cuda.MemPool + use_mem_pool, the
pools' memory back after the graphs go), compile (a small GPT-2 trained under
torch.compile(mode="reduce-overhead"), cudagraph trees), compile-notrees (the same with
torch._inductor.config.triton.cudagraph_trees = False), lora (llama1b_lora's model, LoRA, the
same mode), generate (greedy generation with a static KV cache, the compiled forward replayed
per token). ALLOCATOR: pytorch, pytorch-expandable, ours:POLICY[,k=v...][@native|@pluggable].
Every run starts from the same seed; results (losses, tokens) are compared with PyTorch
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

    cfg = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=8, vocab_size=vocab, n_positions=512)
    cfg.use_cache = False
    return transformers.GPT2LMHeadModel(cfg).to("cuda"), vocab


def train_compiled(torch, model, vocab, steps, batch, seq, params=None):
    opt = torch.optim.AdamW(params if params is not None else model.parameters(), lr=1e-4)
    fwd = torch.compile(model, mode="reduce-overhead")
    losses = []
    for i in range(steps):
        gen = torch.Generator(device="cuda").manual_seed(i)
        ids = torch.randint(0, vocab, (batch, seq), device="cuda", generator=gen)
        torch.compiler.cudagraph_mark_step_begin()
        loss = fwd(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return {"losses": losses, "pools": pool_figures(None)}


def case_compile(torch, ours, steps, trees=True):
    import torch._inductor.config as inductor

    inductor.triton.cudagraph_trees = trees
    model, vocab = gpt2_model(torch)
    out = train_compiled(torch, model, vocab, steps, batch=8, seq=256)
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
    out = train_compiled(torch, model, cfg.vocab_size, steps, batch=4, seq=512, params=[p for p in model.parameters() if p.requires_grad])
    out["pools"] = pool_figures(ours)
    return out


def case_generate(torch, ours, steps):
    import transformers

    cfg = transformers.LlamaConfig(hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                                   num_key_value_heads=4, vocab_size=8192, max_position_embeddings=1024)
    model = transformers.LlamaForCausalLM(cfg).to("cuda").eval()
    compiled = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)

    def forward(*a, **k):
        # each token a new step of the graphs; the logits copied out before the next replay
        # overwrites them (generate keeps them past it: PyTorch refuses that otherwise)
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(*a, **k)
        out.logits = out.logits.clone()
        return out

    model.forward = forward
    gen = torch.Generator(device="cuda").manual_seed(7)
    prompt = torch.randint(0, cfg.vocab_size, (2, 16), device="cuda", generator=gen)
    tokens = []
    with torch.no_grad():
        for _ in range(2):  # the second round replays the graphs the first recorded
            out = model.generate(prompt, max_new_tokens=max(8, steps * 4), do_sample=False, cache_implementation="static",
                                 pad_token_id=0, disable_compile=True)  # ours is the one compile
            tokens.append(out[:, prompt.shape[1]:].tolist())
    return {"tokens": tokens, "pools": pool_figures(ours)}


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
def same_results(r, ref):
    """(equal, how): losses within 1e-5 relative of the reference's, tokens identical."""
    if "tokens" in ref or "tokens" in r:
        eq = r.get("tokens") == ref.get("tokens")
        return eq, "tokens equal" if eq else "tokens differ"
    a, b = r.get("losses") or [], ref.get("losses") or []
    if len(a) != len(b) or not a:
        return False, f"{len(a)} results, the reference {len(b)}"
    a, b = a + (r.get("evals") or []), b + (ref.get("evals") or [])
    worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
    return worst <= 1e-5, f"max rel diff {worst:.1e}"


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
            eq, how = same_results(r, ref) if ok and ref is not None else (False, "no reference" if ok else "-")
            peak = r.get("peak_reserved_bytes")
            rel = lambda o: f"{100 * (peak / o['peak_reserved_bytes'] - 1):+.1f}%" if ok and o and peak else "-"  # noqa: E731
            note = r.get("error") or ("MemPool: " + r["mempool"] if r.get("mempool") not in (None, "ok") else "")
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
