/**
 * PyTorch's allocator configuration as recorded in a snapshot's `allocator_settings`
 * (camelCase, bytes as integers). A replay of the caching or expandable model takes its
 * configuration from here by default, so that it makes the decisions PyTorch made.
 */
export interface AllocatorSettings {
  /** The PYTORCH_CUDA_ALLOC_CONF string as recorded ('' when unset). */
  allocConf: string;
  /** Bytes; null when unlimited (recorded as -1). */
  maxSplitSize: number | null;
  /** 0 when unset. */
  garbageCollectionThreshold: number;
  expandableSegments: boolean;
  /**
   * Divisions for roundup_power2_divisions, indexed by log2(size) - 20 (16 entries:
   * 1 MiB, 2 MiB, ... 32 GiB and above); 0 = not set for that interval.
   */
  roundupPower2Divisions: number[];
  /** max_non_split_rounding in bytes (PyTorch's default 20 MiB). */
  maxNonSplitRounding: number;
  /** Every recorded key as read (snake_case), for what the fields above do not carry. */
  raw: Record<string, unknown>;
}

export const DEFAULT_ALLOCATOR_SETTINGS: AllocatorSettings = Object.freeze({
  allocConf: "",
  maxSplitSize: null,
  garbageCollectionThreshold: 0,
  expandableSegments: false,
  roundupPower2Divisions: new Array<number>(16).fill(0),
  maxNonSplitRounding: 20 * 1024 * 1024,
  raw: {},
}) as AllocatorSettings;
