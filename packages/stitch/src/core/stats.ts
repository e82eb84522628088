/**
 * Memory statistics named as torch.cuda.memory_stats() names them (all pools together).
 * allocated = bytes of live blocks (their rounded sizes); active = allocated + blocks whose
 * free was requested but not completed; requested = the program's original sizes;
 * reserved = memory held from the driver (cudaMalloc'd segments + live physical handles).
 */
export class AllocatorStats {
  allocatedBytes = 0;
  activeBytes = 0;
  requestedBytes = 0;
  reservedBytes = 0;
  peakAllocatedBytes = 0;
  peakActiveBytes = 0;
  peakRequestedBytes = 0;
  peakReservedBytes = 0;
  /** Live allocations (blocks handed out, pending frees included). */
  allocations = 0;
  /** Segments (cudaMalloc) or mapped ranges currently held. */
  segments = 0;
  /** Mallocs that went through release_cached_blocks and retried. */
  numAllocRetries = 0;
  numOoms = 0;
  numSegmentAllocs = 0;
  numSegmentFrees = 0;
  /** Device synchronizations before memory a kernel may still use was unmapped or freed (one per engine call at most). */
  numSyncs = 0;
  /** Blocks of one stream served to another, each after that stream waited on an event of the first. */
  numCrossStreamReuses = 0;
  /** Events recorded to learn when a stream's work up to a point is done (PolicyContext.markStream). */
  numStreamMarks = 0;
  /** Marks not done when first asked (vms: moves whose old mapping waited for a later call). */
  numLateMarks = 0;
  /** Unmaps that waited for their mark (cuEventSynchronize): a map had to land in the range first. */
  numMarkWaits = 0;
  /** Unmaps that needed no device synchronization: a done stream mark covered the range's last use. */
  numUnfencedUnmaps = 0;
  /** Frees deferred until the other streams a block was used on (recordStream) reached an event. */
  numDeferredFrees = 0;

  /** Call after reservedBytes grew. */
  bumpReserved(): void {
    if (this.reservedBytes > this.peakReservedBytes) this.peakReservedBytes = this.reservedBytes;
  }

  reset(): void {
    Object.assign(this, new AllocatorStats());
  }

  /** torch.cuda.memory_stats()-style keys (aggregate pool "all"). */
  toTorch(): Record<string, number> {
    return {
      "allocated_bytes.all.current": this.allocatedBytes,
      "allocated_bytes.all.peak": this.peakAllocatedBytes,
      "active_bytes.all.current": this.activeBytes,
      "active_bytes.all.peak": this.peakActiveBytes,
      "requested_bytes.all.current": this.requestedBytes,
      "requested_bytes.all.peak": this.peakRequestedBytes,
      "reserved_bytes.all.current": this.reservedBytes,
      "reserved_bytes.all.peak": this.peakReservedBytes,
      "segment.all.current": this.segments,
      num_alloc_retries: this.numAllocRetries,
      num_sync_all_streams: this.numSyncs,
      num_stream_marks: this.numStreamMarks,
      num_late_stream_marks: this.numLateMarks,
      num_unfenced_unmaps: this.numUnfencedUnmaps,
      num_stream_mark_waits: this.numMarkWaits,
      num_ooms: this.numOoms,
    };
  }
}
