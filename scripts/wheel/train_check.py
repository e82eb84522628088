"""A plain PyTorch training job with nothing of ours in it (gmlake_torch is imported only after
training, to compare): GPT-2 355M as the gpt2_ft workload (24 layers, 1024 wide, batch 8,
sequence lengths 64-1024 drawn with a fixed seed, bf16 autocast, AdamW), STEPS steps (default 6).
It logs memory as training scripts do: torch.cuda.max_memory_allocated(), max_memory_reserved(),
memory_stats() and memory_summary(). Run under GMLAKE_POLICY=vms (python or torchrun) the
allocator is ours; without it, PyTorch's. Prints the summary, then one line RESULT {json}:
the allocator, PyTorch's figures, and with ours the engine's own and whether they are equal.

  usage: [GMLAKE_POLICY=vms] python scripts/wheel/train_check.py   (or under torchrun)
"""
import json
import os
import random
import sys
import time

import torch


def build(dev, steps, rng):
    """The model and the batches' sequence lengths: GPT-2 355M (transformers), else an MLP stack."""
    lens = [rng.randint(64, 1024) for _ in range(steps)]
    try:
        import transformers
    except ImportError:  # no transformers in this image: a stack of linear layers, same loop
        layers = [torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)) for _ in range(12)]
        net = torch.nn.Sequential(torch.nn.Embedding(4096, 1024), *layers, torch.nn.Linear(1024, 4096)).to(dev)

        class Mlp(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net

            def forward(self, input_ids, labels):
                logits = self.net(input_ids)
                loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
                return type("Out", (), {"loss": loss})

        return Mlp(), 4096, lens, "mlp (no transformers)"
    cfg = transformers.GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024, use_cache=False)
    with dev:
        model = transformers.GPT2LMHeadModel(cfg)
    return model, cfg.vocab_size, lens, "gpt2_ft (GPT-2 355M)"


def train(steps):
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    torch.manual_seed(1234)
    model, vocab, lens, what = build(dev, steps, random.Random(1234))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses, times = [], []
    for L in lens:
        t0 = time.perf_counter()
        ids = torch.randint(0, vocab, (8, L), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(float(loss), 4))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        print(f"step {len(losses)}: seq {L}, loss {losses[-1]}, {times[-1]:.3f} s, "
              f"max_memory_allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB", flush=True)
    return what, losses, times


def report(what, losses, times):
    """What a training script logs, then RESULT {json}: with ours, the engine's figures beside torch's."""
    print(torch.cuda.memory_summary())
    res = {"workload": what, "steps": len(losses), "losses": losses, "median_step_s": sorted(times)[len(times) // 2],
           "max_memory_allocated": torch.cuda.max_memory_allocated(), "max_memory_reserved": torch.cuda.max_memory_reserved(),
           "memory_allocated": torch.cuda.memory_allocated(), "memory_reserved": torch.cuda.memory_reserved(),
           "num_device_alloc": torch.cuda.memory_stats().get("num_device_alloc"), "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
           "torchrun": "TORCHELASTIC_RUN_ID" in os.environ, "GMLAKE_POLICY": os.environ.get("GMLAKE_POLICY", "")}
    # only now, to compare: was it ours, and are torch's figures the engine's?
    gm = sys.modules.get("gmlake_torch")
    if gm is not None and gm._torch_allocator is not None:
        st = gm.stats()
        keys = ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "allocated_bytes.all.current", "reserved_bytes.all.current")
        res["allocator"] = f"gmlake:{st['policy']}"
        res["engine"] = {k: st[k] for k in keys + ("num_device_alloc",)}
        res["equal"] = [res[k] for k in ("max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved")] == [
            st[k] for k in keys]
    else:
        res["allocator"] = "pytorch"
    print("RESULT " + json.dumps(res), flush=True)
    return res


if __name__ == "__main__":
    report(*train(int(os.environ.get("STEPS", "6"))))
