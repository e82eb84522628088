"""python -m gmlake_torch build-oom-shim: builds libgmlake_oom.so against this PyTorch."""
import sys

from . import GmlakeError, build_oom_shim

if sys.argv[1:] != ["build-oom-shim"]:
    sys.exit("usage: python -m gmlake_torch build-oom-shim")
try:
    print(build_oom_shim(verbose=True))
except GmlakeError as e:
    sys.exit(str(e))
