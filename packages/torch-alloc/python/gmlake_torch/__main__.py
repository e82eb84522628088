"""python -m gmlake_torch run [--policy P] [--knobs k=v,...] SCRIPT [ARGS...]
        runs SCRIPT with the engine as PyTorch's allocator (enable() first, then the script as __main__)
python -m gmlake_torch build-oom-shim
        builds libgmlake_oom.so against this PyTorch (out of memory -> torch.cuda.OutOfMemoryError)
python -m gmlake_torch build-pair-bench
        builds libgmlake_pair_bench.so (the per-call microbenchmark in C++, scripts/gpu/live_checks.py micro)"""
import runpy
import sys

from . import GmlakeError, build_oom_shim, build_pair_bench, enable

USAGE = "gmlake_torch: usage: python -m gmlake_torch run [--policy P] [--knobs k=v,...] SCRIPT [ARGS...] | build-oom-shim | build-pair-bench"


def main(argv):
    if argv[:1] == ["build-oom-shim"] and len(argv) == 1:
        print(build_oom_shim(verbose=True))
        return 0
    if argv[:1] == ["build-pair-bench"] and len(argv) == 1:
        print(build_pair_bench(verbose=True))
        return 0
    if argv[:1] != ["run"]:
        print(USAGE, file=sys.stderr)
        return 2
    rest = argv[1:]
    policy, knobs = None, {}
    while rest and rest[0].startswith("--"):
        opt = rest.pop(0)
        if opt in ("--policy", "--knobs") and rest:
            val = rest.pop(0)
            if opt == "--policy":
                policy = val
            else:
                for kv in filter(None, val.split(",")):
                    k, eq, v = kv.partition("=")
                    if not eq:
                        print(f"gmlake_torch: --knobs expects name=value, got {kv!r}", file=sys.stderr)
                        return 2
                    knobs[k.strip()] = v.strip()
        else:
            print(f"gmlake_torch: unknown or incomplete option {opt} ({USAGE[len('gmlake_torch: '):]})", file=sys.stderr)
            return 2
    if not rest:
        print(USAGE, file=sys.stderr)
        return 2
    enable(policy, **knobs)
    sys.argv = rest
    runpy.run_path(rest[0], run_name="__main__")
    return 0


try:
    sys.exit(main(sys.argv[1:]))
except GmlakeError as e:
    print(str(e), file=sys.stderr)
    sys.exit(2)
