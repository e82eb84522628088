"""PyTorch's memory APIs answered from the engine.

Behind the pluggable interface PyTorch's own torch.cuda.memory_stats(), memory_allocated(),
max_memory_*(), reset_peak_memory_stats(), memory_summary(), memory_snapshot(), _snapshot()
and _record_memory_history() raise in C++ ("CUDAPluggableAllocator does not yet support ...").
enable() calls install(torch), which replaces those Python functions in torch.cuda.memory and
their aliases in torch.cuda with the ones below, so a script that logs memory runs unchanged.

What the engine gives, under PyTorch's keys (every key PyTorch returns is there):
  allocated_bytes / reserved_bytes / active_bytes / requested_bytes .all.current and .peak,
  segment.all.current, allocation.all.current / .allocated / .freed, active.all.current,
  num_alloc_retries, num_ooms, num_sync_all_streams, num_device_alloc, num_device_free,
  max_split_size (-1: the engine has no such limit, PyTorch's value when it is unset) and
  oversize_allocations / oversize_segments (0: without max_split_size PyTorch counts none).
UNTRACKED lists the rest, 0 in memory_stats() and "n/a" in memory_summary(): the small/large
pool split (the engine keeps one pool), the bytes allocated and freed in total, the peaks of
the counts, and inactive_split (the engine does not split blocks as PyTorch does).

reset_peak_memory_stats() sets the engine's peaks back to their current values (exact; an
engine without that operation: the peak is then exact once the job passes the previous one,
until then the highest figure seen at the reset and at each read since, a lower bound).
reset_accumulated_memory_stats() subtracts the counters at the reset (exact).
_snapshot() / _dump_snapshot() need the engine's history: GMLAKE_RECORD=1, enable(record=True),
or (with GMLAKE_POLICY's hook) _record_memory_history() before the first CUDA tensor.
"""
import collections
import os
import pickle
import sys
import tempfile

_POOLS = ("all", "large_pool", "small_pool")
_METRICS = ("current", "peak", "allocated", "freed")
_ARRAYS = ("active", "active_bytes", "allocated_bytes", "allocation", "inactive_split", "inactive_split_bytes",
           "requested_bytes", "reserved_bytes", "segment")
_SINGLES = ("oversize_allocations", "oversize_segments")
_SCALARS = ("max_split_size", "num_alloc_retries", "num_device_alloc", "num_device_free", "num_ooms", "num_sync_all_streams")
ALL_KEYS = tuple(sorted([f"{a}.{p}.{m}" for a in _ARRAYS for p in _POOLS for m in _METRICS] +
                        [f"{s}.{m}" for s in _SINGLES for m in _METRICS] + list(_SCALARS)))
# The engine's own stats() names that are PyTorch's keys as they are.
_SAME = tuple(f"{a}.all.{m}" for a in ("allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes")
              for m in ("current", "peak")) + ("segment.all.current", "num_alloc_retries", "num_ooms",
                                               "num_sync_all_streams", "num_device_alloc", "num_device_free")
_DERIVED = ("allocation.all.current", "allocation.all.allocated", "allocation.all.freed", "active.all.current")
_KNOWN_CONSTANT = {"max_split_size": -1, **{f"{s}.{m}": 0 for s in _SINGLES for m in _METRICS}}
UNTRACKED = tuple(k for k in ALL_KEYS if k not in _SAME and k not in _DERIVED and k not in _KNOWN_CONSTANT)
_PEAKS = {k: k[: -len("peak")] + "current" for k in ALL_KEYS if k.endswith(".peak") and k in _SAME}
_ACCUMULATED = tuple(k for k in ALL_KEYS if (k.endswith(".allocated") or k.endswith(".freed") or k.startswith("num_"))
                     and k not in UNTRACKED and k not in _KNOWN_CONSTANT)


def torch_stats(st):
    """PyTorch's flat memory_stats() dict (every key) from gmlake_torch.stats()'s `st`."""
    out = dict.fromkeys(ALL_KEYS, 0)
    out.update(_KNOWN_CONSTANT)
    for k in _SAME:
        out[k] = int(st.get(k, 0))
    calls = st.get("calls") or {}
    live = int(st.get("live_blocks", 0))
    # every allocation that succeeded: the engine's, and those the front cache or the take-back served without it
    made = (int(calls.get("allocs", 0)) - int(calls.get("ooms", 0)) + int(st.get("num_front_cache_hits", 0))
            + int(st.get("num_queue_takebacks", 0)))
    out["allocation.all.current"] = live
    out["allocation.all.allocated"] = made
    out["allocation.all.freed"] = max(0, made - live)
    out["active.all.current"] = live + int(st.get("pending_frees", 0))
    return out


class _Books:
    """What the resets changed: the peaks' floor since the last peak reset, the counters' base."""

    def __init__(self):
        self.peak_reset = None  # {peak key: (engine peak at the reset, highest seen since)}
        self.base = {}

    def view(self, raw):
        out = dict(raw)
        if self.peak_reset is not None:
            for k, cur in _PEAKS.items():
                at_reset, seen = self.peak_reset[k]
                seen = max(seen, raw[cur])
                self.peak_reset[k] = (at_reset, seen)
                # a new all-time peak since the reset is the peak since the reset
                out[k] = raw[k] if raw[k] > at_reset else seen
        for k, v in self.base.items():
            out[k] = max(0, raw[k] - v)
        return out

    def reset_peaks(self, raw):
        self.peak_reset = {k: (raw[k], raw[cur]) for k, cur in _PEAKS.items()}

    def reset_accumulated(self, raw):
        self.base = {k: raw[k] for k in _ACCUMULATED}


class MemoryApi:
    """The replacements, bound to one torch module and the engine's stats() and snapshot(path)
    (callables, so tests can stand in for both)."""

    def __init__(self, torch, stats, snapshot, device, reset_peaks=None):
        self.torch = torch
        self.engine_stats = stats
        self.engine_snapshot = snapshot
        self.engine_reset_peaks = reset_peaks  # () -> True when the engine reset them
        self.device = device
        self.books = _Books()
        self._recording = None  # known at the first question (records())
        self._warned_record = False

    def records(self):
        """Whether the engine keeps its history (asked once: a snapshot of it, thrown away)."""
        if self._recording is None:
            with tempfile.TemporaryDirectory() as d:
                try:
                    self.engine_snapshot(os.path.join(d, "probe.pickle"))
                    self._recording = True
                except Exception as e:  # the engine's "started with record=false"
                    if "record" not in str(e):
                        raise
                    self._recording = False
        return self._recording

    # -- devices ---------------------------------------------------------------
    def _index(self, device):
        """The device index asked about (None: the current device once CUDA is initialised,
        else ours; PyTorch's own functions answer 0 / {} before then)."""
        if device is None:
            cuda = self.torch.cuda
            try:
                if cuda.is_initialized():
                    return int(cuda.current_device())
            except Exception:  # a stand-in or a torch without them: ours
                pass
            return self.device
        if isinstance(device, bool):
            raise ValueError(f"Expected a cuda device, but got: {device!r}")
        if isinstance(device, int):
            return device
        if isinstance(device, str):
            kind, _, idx = device.partition(":")
            if kind != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {device}")
            return int(idx) if idx else self._index(None)
        idx = getattr(device, "index", None)
        if getattr(device, "type", "cuda") != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        return self._index(None) if idx is None else int(idx)

    def _raw(self, device):
        """PyTorch's keys for `device`: the engine's figures, or zeros for a device it does not serve."""
        if self._index(device) != self.device:
            return {**dict.fromkeys(ALL_KEYS, 0), **_KNOWN_CONSTANT}
        return torch_stats(self.engine_stats())

    # -- torch.cuda.memory's functions ---------------------------------------------
    def memory_stats(self, device=None):
        idx = self._index(device)
        raw = self._raw(idx)
        view = self.books.view(raw) if idx == self.device else raw
        return collections.OrderedDict(sorted(view.items()))

    def memory_stats_as_nested_dict(self, device=None):
        nested = {}
        for k, v in self.memory_stats(device).items():
            d = nested
            parts = k.split(".")
            for p in parts[:-1]:
                d = d.setdefault(p, {})
            d[parts[-1]] = v
        return nested

    def memory_allocated(self, device=None):
        return self.memory_stats(device)["allocated_bytes.all.current"]

    def max_memory_allocated(self, device=None):
        return self.memory_stats(device)["allocated_bytes.all.peak"]

    def memory_reserved(self, device=None):
        return self.memory_stats(device)["reserved_bytes.all.current"]

    def max_memory_reserved(self, device=None):
        return self.memory_stats(device)["reserved_bytes.all.peak"]

    def reset_peak_memory_stats(self, device=None):
        if self._index(device) != self.device:
            return
        if self.engine_reset_peaks is not None and self.engine_reset_peaks():
            self.books.peak_reset = None
        else:
            self.books.reset_peaks(self._raw(device))

    def reset_accumulated_memory_stats(self, device=None):
        if self._index(device) == self.device:
            self.books.reset_accumulated(self._raw(device))

    def memory_summary(self, device=None, abbreviated=False):
        idx = self._index(device)
        s = self.memory_stats(idx)
        st = self.engine_stats() if idx == self.device else {}
        return summary(s, idx, st.get("policy", "gmlake"), abbreviated)

    def _snapshot(self, device=None, *args, **kwargs):
        """PyTorch's snapshot dict (segments, device_traces, allocator_settings) from the engine's history."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "snapshot.pickle")
            self._dump_snapshot(path)
            with open(path, "rb") as f:
                return pickle.load(f)

    def _dump_snapshot(self, filename="dump_snapshot.pickle", *args, **kwargs):
        if self._recording is not False:
            try:
                self.engine_snapshot(filename)
                self._recording = True
                return
            except Exception as e:  # the engine's "started with record=false"
                if "record" not in str(e):
                    raise
                self._recording = False
        raise RuntimeError("gmlake: no history to snapshot: the engine records only when started with GMLAKE_RECORD=1 "
                           "(or enable(record=True), or torch.cuda.memory._record_memory_history() before the first CUDA tensor)")

    def memory_snapshot(self, mempool_id=None):
        return self._snapshot()["segments"]

    def _record_memory_history(self, enabled="all", *args, **kwargs):
        """The engine's history is set at its start: on, this is a no-op; off, one warning."""
        if enabled and not self._warned_record and not self.records():
            self._warned_record = True
            print("gmlake: _record_memory_history: the engine was started without its history (set GMLAKE_RECORD=1, or call "
                  "it before the first CUDA tensor under GMLAKE_POLICY); _snapshot() has nothing to show", file=sys.stderr)

    # aliases PyTorch keeps (deprecated names)
    def memory_cached(self, device=None):
        return self.memory_reserved(device)

    def max_memory_cached(self, device=None):
        return self.max_memory_reserved(device)

    def reset_max_memory_allocated(self, device=None):
        return self.reset_peak_memory_stats(device)

    def reset_max_memory_cached(self, device=None):
        return self.reset_peak_memory_stats(device)


FUNCTIONS = ("memory_stats", "memory_stats_as_nested_dict", "memory_allocated", "max_memory_allocated", "memory_reserved",
             "max_memory_reserved", "memory_cached", "max_memory_cached", "reset_peak_memory_stats",
             "reset_max_memory_allocated", "reset_max_memory_cached", "reset_accumulated_memory_stats", "memory_summary",
             "memory_snapshot", "_snapshot", "_dump_snapshot", "_record_memory_history")


def _fmt_bytes(n):
    for unit in ("B  ", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 * 8 or unit == "TiB":
            return f"{n:6d} {unit}"
        n //= 1024
    return f"{n:6d} TiB"


def summary(s, device, policy, abbreviated=False):
    """memory_summary()'s table as PyTorch lays it out, with the engine's figures; n/a where it has none."""
    w = 75
    rows = [("Allocated memory", "allocated_bytes", True), ("Active memory", "active_bytes", True),
            ("Requested memory", "requested_bytes", True), ("GPU reserved memory", "reserved_bytes", True),
            ("Non-releasable memory", "inactive_split_bytes", True), ("Allocations", "allocation", False),
            ("Active allocs", "active", False), ("GPU reserved segments", "segment", False),
            ("Non-releasable allocs", "inactive_split", False)]
    sep, thick = "|" + "-" * w + "|", "|" + "=" * w + "|"
    out = [thick, "|" + f" gmlake {policy} allocator memory summary, device ID {device} ".center(w) + "|", sep,
           "|" + f"CUDA OOMs: {s['num_ooms']}".center(37) + "|" + f"cudaMalloc retries: {s['num_alloc_retries']}".center(37) + "|",
           thick, "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |"]
    for title, key, is_bytes in rows:
        out.append(sep)
        pools = ("all",) if abbreviated else _POOLS
        for pool in pools:
            label = title if pool == "all" else f"      from {pool.replace('_pool', '')} pool"
            cells = []
            for m in _METRICS:
                k = f"{key}.{pool}.{m}"
                cells.append("     n/a   " if k in UNTRACKED else (_fmt_bytes(s[k]) if is_bytes else f"{s[k]:10d}") + " ")
            out.append(f"| {label:<21} |" + "|".join(c.rjust(12) for c in cells) + "|")
    out.append(thick)
    for title, key in (("Oversize allocations", "oversize_allocations"), ("Oversize GPU segments", "oversize_segments")):
        out.append(f"| {title:<21} |" + "|".join(f"{s[f'{key}.{m}']:10d}  " for m in _METRICS) + "|")
    out.append(thick)
    note = " n/a: the engine does not keep it (gmlake_torch.memory_api.UNTRACKED) "
    out.append("|" + note.ljust(w) + "|")
    out.append(thick)
    return "\n".join(out) + "\n"


_installed = None  # (the MemoryApi, {(id(module), name): (module, PyTorch's function or None)})


_TEXT_RESET_PEAKS = 6  # the bridge's TEXT_RESET_PEAKS (src/ops.ts)


def _engine_reset_peaks():
    import gmlake_torch as g

    return g._require().text(_TEXT_RESET_PEAKS) == ""  # an older engine answers "unknown text operation 6"


def install(torch, stats=None, snapshot=None, device=None, reset_peaks=None):
    """Replaces PyTorch's memory functions (in torch.cuda.memory and, where it has them,
    torch.cuda) with the engine's; a second call rebinds them. The defaults are the started
    engine's (gmlake_torch.stats, snapshot, the device it serves). Returns the MemoryApi."""
    global _installed
    import gmlake_torch as g

    if stats is None or snapshot is None:
        native = g._require()
        stats, snapshot = stats or g.stats, snapshot or g.snapshot
        reset_peaks = reset_peaks or _engine_reset_peaks
        if device is None:
            device = getattr(native, "device", None)
    if device is None:
        device = int(os.environ.get("GMLAKE_DEVICE", "0"))
    api = MemoryApi(torch, stats, snapshot, device, reset_peaks)
    originals = {} if _installed is None else _installed[1]
    for mod in (torch.cuda.memory, torch.cuda):
        for name in FUNCTIONS:
            if mod is torch.cuda and not hasattr(mod, name):
                continue  # torch.cuda has the public names only
            originals.setdefault((id(mod), name), (mod, getattr(mod, name, None)))
            setattr(mod, name, getattr(api, name))
    _installed = (api, originals)
    return api


def uninstall():
    """Puts PyTorch's functions back (for tests)."""
    global _installed
    if _installed is not None:
        for (_, name), (mod, fn) in _installed[1].items():
            if fn is None:
                delattr(mod, name)
            else:
                setattr(mod, name, fn)
    _installed = None
