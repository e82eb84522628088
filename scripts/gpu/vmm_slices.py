#!/usr/bin/env python3
"""Can one physical handle be mapped in slices (cuMemMap with size < the handle's, or a
non-zero offset)? cuda.h's description of cuMemMap allows an offset, its parameter note says
"currently must be zero". If slices worked, vms could make one handle per grow (one create,
one mapping) and still move 64 MiB pieces of it later (docs/notebook/2026-12-01-vms-ideas.md, idea 12).

Measured on the H200 (driver 580, CUDA 13.0, 2026-12-01): a 64 MiB slice of a 256 MiB handle
at offset 0 is refused with CUDA_ERROR_NOT_SUPPORTED; the whole handle maps. Prints one JSON
line per case; exits 0 either way (the answer is the output). Usage: python3 vmm_slices.py
"""
import json

from cuvmm import MiB, create, cu, name, release, reserve

va = reserve(1 << 30)
h, _ = create(256 * MiB)
for offset, size in [(0, 64 * MiB), (64 * MiB, 64 * MiB), (0, 256 * MiB)]:
    rc = cu.cuMemMap(va, size, offset, h, 0)
    print(json.dumps({"handle_mib": 256, "map_offset_mib": offset // MiB, "map_size_mib": size // MiB, "result": name(rc)}))
    if rc == 0:
        cu.cuMemUnmap(va, size)
release(h)
cu.cuMemAddressFree(va, 1 << 30)
