#!/usr/bin/env bash
# Measures the device memory a PyTorch process holds outside its caching allocator (the
# CUDA context, cuBLAS/cuDNN/Triton kernel modules, ...): what `gmlake compare --reserve`
# stands for (default 1 GiB). After each stage: used = total - free (cudaMemGetInfo),
# outside = used - torch.cuda.memory_reserved(). One `run` call on the GPU host, no carry
# beyond the working tree, about a minute:
#   bash scripts/gpu/measure-reserve.sh
# Out ($OUT): reserve.jsonl (one line per stage), reserve.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
timeout -k 10 300 python3 - >"$OUT/reserve.jsonl" 2>"$OUT/reserve.log" <<'PY'
import json, torch
def stage(name):
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    used = total - free
    res = torch.cuda.memory_reserved()
    print(json.dumps({"stage": name, "used_bytes": used, "reserved_bytes": res, "outside_bytes": used - res,
                      "outside_mib": round((used - res) / 2**20, 1), "torch": torch.__version__,
                      "gpu": torch.cuda.get_device_name()}), flush=True)
torch.cuda.init(); torch.zeros(1, device="cuda"); stage("context + first tensor")
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16); (a @ a).sum().item(); stage("cuBLAS bf16 matmul")
q = torch.randn(8, 16, 1024, 64, device="cuda", dtype=torch.bfloat16)
torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().item(); stage("SDPA (flash) attention")
x = torch.randn(64, 3, 224, 224, device="cuda"); torch.nn.Conv2d(3, 64, 7, device="cuda")(x).sum().item(); stage("cuDNN conv")
try:
    from transformers import GPT2Config, GPT2LMHeadModel
    m = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda()
    opt = torch.optim.AdamW(m.parameters())
    ids = torch.randint(0, 50257, (8, 512), device="cuda")
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            m(input_ids=ids, labels=ids).loss.backward()
        opt.step(); opt.zero_grad(set_to_none=True)
    stage("GPT-2 124M: 2 training steps (AdamW, bf16 autocast)")
except Exception as e:
    print(json.dumps({"stage": "GPT-2 training", "error": str(e)}), flush=True)
try:
    import triton  # noqa: F401
    f = torch.compile(lambda t: torch.nn.functional.gelu(t) * 2)
    f(torch.randn(1 << 20, device="cuda")).sum().item(); stage("torch.compile (Triton kernel)")
except Exception as e:
    print(json.dumps({"stage": "torch.compile", "error": str(e)}), flush=True)
PY
echo "exit $?" >>"$OUT/reserve.log"
cat "$OUT/reserve.jsonl"
