import { EventKind, EventLog } from "@gmlake/trace";
import { rng } from "./helpers.js";

export interface VarlenOptions {
  seed: number;
  steps: number;
  /** Vocabulary: the logits are batch x seq x vocab (bf16), their fp32 copy and its gradient twice that. */
  vocab: number;
  batch: number;
  hidden: number;
  intermediate: number;
  layers: number;
  /** Sequence length drawn per step, uniformly in [minSeq, maxSeq]... */
  minSeq: number;
  maxSeq: number;
  /** ...unless given, one per step. */
  seqs?: readonly number[];
  /** Gradient checkpointing: the forward keeps only each layer's input; the backward recomputes the layer. */
  recompute?: boolean;
}

/**
 * The lengths ../shared/workloads/workloads.py draws (`seqs(12, 256, 4096)`: Python's
 * random.Random(1234)): the longest step is the sixth, so the live peak is in the first
 * half and the second half needs no memory the first did not.
 */
export const WORKLOAD_SEQS = [3443, 2061, 734, 286, 627, 3987, 3561, 2640, 399, 3006, 3094, 599];

export const LARGE_VOCAB_LORA: VarlenOptions = {
  seed: 7,
  steps: 16,
  vocab: 128_256,
  batch: 4,
  hidden: 2048,
  intermediate: 5632,
  layers: 16,
  minSeq: 256,
  maxSeq: 4096,
};

/**
 * A LoRA fine-tune with a very large vocabulary as an allocation trace: frozen bf16
 * weights allocated once, then per step a random sequence length drives every activation
 * and the logits (GiB-sized: batch x seq x vocab in bf16, an fp32 copy for the loss, its
 * gradient), so the largest buffers change size every step. Recomputation-free: each
 * layer saves its inputs for the backward pass, which frees them in reverse.
 */
export function varlenLoraTrace(o: VarlenOptions = LARGE_VOCAB_LORA): EventLog {
  const r = rng(o.seed);
  const log = new EventLog(1 << 16);
  let t = 0;
  let addr = 1;
  const live = new Map<number, number>();
  const alloc = (bytes: number): number => {
    const a = addr++ * 4096; // distinct recorded addresses; the replay places its own
    const size = Math.max(1, Math.round(bytes));
    live.set(a, size);
    log.push(EventKind.alloc, a, size, 0, 0, (t += 5));
    return a;
  };
  const free = (a: number): void => {
    const size = live.get(a)!;
    live.delete(a);
    log.push(EventKind.freeRequested, a, size, 0, 0, (t += 1));
    log.push(EventKind.freeCompleted, a, size, 0, 0, (t += 1));
  };
  log.streamId(0);
  const { hidden: H, intermediate: I, vocab: V, batch: B } = o;
  // frozen weights and the embedding (bf16), LoRA adapters (fp32) with AdamW state
  for (let l = 0; l < o.layers; l++) {
    for (const n of [H * H, (H * H) / 4, (H * H) / 4, H * H, H * I, H * I, I * H]) alloc(n * 2);
    for (let k = 0; k < 8; k++) alloc(16 * H * 4);
  }
  alloc(V * H * 2);
  alloc(V * H * 2);
  const lora = [...Array(o.layers * 8).keys()].map(() => 16 * H * 4);
  let adam: number[] = [];
  for (let step = 0; step < o.steps; step++) {
    const s = o.seqs?.[step] ?? o.minSeq + Math.floor(r() * (o.maxSeq - o.minSeq + 1));
    const tok = B * s;
    const ids = alloc(tok * 8);
    let x = alloc(tok * H * 2);
    const saved: number[][] = [];
    const layer = (input: number, keep: boolean): number[] => {
      const norm = alloc(tok * H * 2);
      const qkv = alloc(tok * H * 2 * 1.5);
      const att = alloc(tok * H * 2);
      const tmp = alloc(tok * I * 2);
      const up = alloc(tok * I * 2);
      const act = alloc(tok * I * 2);
      free(tmp);
      const acts = [norm, qkv, att, up, act];
      if (!keep) for (const a of acts) free(a);
      void input;
      return keep ? acts : [];
    };
    for (let l = 0; l < o.layers; l++) {
      const acts = layer(x, !o.recompute);
      const out = alloc(tok * H * 2);
      saved.push([...acts, x]);
      x = out;
    }
    // the loss as transformers computes it: bf16 logits, an fp32 copy, log-softmax saved for the backward
    const logits = alloc(tok * V * 2);
    const f32 = alloc(tok * V * 4);
    const logp = alloc(tok * V * 4);
    const loss = alloc(4);
    free(f32);
    const gLogp = alloc(tok * V * 4);
    free(logp);
    const gF32 = alloc(tok * V * 4);
    free(gLogp);
    const gBf16 = alloc(tok * V * 2);
    free(gF32);
    free(logits);
    let gx = alloc(tok * H * 2);
    free(gBf16);
    free(x);
    for (let l = o.layers - 1; l >= 0; l--) {
      const again = o.recompute ? layer(saved[l]![saved[l]!.length - 1]!, true) : [];
      const g1 = alloc(tok * I * 2);
      const g2 = alloc(tok * I * 2);
      const gq = alloc(tok * H * 2 * 1.5);
      free(g1);
      const gOut = alloc(tok * H * 2);
      free(g2);
      free(gq);
      free(gx);
      for (const a of again) free(a);
      for (const a of saved[l]!) free(a);
      gx = gOut;
    }
    free(gx);
    free(loss);
    free(ids);
    // optimizer: gradients of the adapters, AdamW state made at the first step
    const grads = lora.map((n) => alloc(n));
    if (adam.length === 0) adam = lora.flatMap((n) => [alloc(n), alloc(n)]);
    for (const g of grads) free(g);
  }
  return log;
}
