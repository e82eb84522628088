"""Does PyTorch's own viewer code see the stacks in our memory-viz export?

usage: python3 memviz_frames.py EXPORT.pickle [NEEDLE ...]
Formats every trace entry's frames with torch.cuda._memory_viz's own frame formatter (what
its trace viewer shows for an entry) and counts the entries whose stack names one of the
needles (default: GPT-2's modeling_gpt2 and activations.py, for gpt2_ft_stacks). Prints one
RESULT json line; exit 0 when some entry names one, 1 when none does, 2 on a bad file.
"""
import json
import pickle
import sys

from torch.cuda import _memory_viz as viz

if len(sys.argv) < 2:
    sys.exit("usage: python3 memviz_frames.py EXPORT.pickle [NEEDLE ...]")
needles = sys.argv[2:] or ["modeling_gpt2", "activations.py"]
try:
    with open(sys.argv[1], "rb") as f:
        snap = pickle.load(f)
    traces = snap["device_traces"]
except (OSError, pickle.UnpicklingError, KeyError, TypeError, EOFError) as e:
    print(f"memviz_frames: {sys.argv[1]}: {e}", file=sys.stderr)
    sys.exit(2)
entries = with_frames = naming = 0
top = {}
for trace in traces:
    for e in trace:
        entries += 1
        frames = e.get("frames") or []
        if not frames:
            continue
        with_frames += 1
        text = [viz._frame_fmt(fr) for fr in frames]
        hits = [t for t in text if any(n in t for n in needles)]
        if hits:
            naming += 1
            top[hits[0]] = top.get(hits[0], 0) + 1
res = {"file": sys.argv[1], "entries": entries, "with_frames": with_frames, "naming": naming,
       "needles": needles, "top": sorted(top.items(), key=lambda kv: -kv[1])[:5]}
print("RESULT " + json.dumps(res))
sys.exit(0 if naming > 0 else 1)
