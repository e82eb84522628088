/**
 * One shard of a sweep: tasks are dealt round-robin by task id (task i runs in shard
 * i mod count), so that every shard gets a mix of large and small traces and of policies.
 * Indices are 0-based, as Slurm's SLURM_ARRAY_TASK_ID (with --array=0-N) and Kubernetes'
 * JOB_COMPLETION_INDEX are.
 */
export interface Shard {
  index: number;
  count: number;
}

/** "2/8" -> {index: 2, count: 8}; null on anything else (the caller reports it). */
export function parseShard(text: string): Shard | null {
  const m = /^\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(text);
  if (!m) return null;
  const index = Number(m[1]);
  const count = Number(m[2]);
  if (!(count >= 1 && count <= 100_000 && index < count)) return null;
  return { index, count };
}

export function inShard(taskId: number, shard: Shard | null): boolean {
  return shard === null || taskId % shard.count === shard.index;
}
