#!/usr/bin/env python3
"""Checks a built gmlake_torch wheel on its own terms, apart from how build.py made it:
  - RECORD lists every file once with its sha256 and size, and nothing else;
  - its name's tags are WHEEL's, the version METADATA's;
  - no build or test leftovers (types, maps, tsbuildinfo, caches, the benches' and tests'
    binaries, the stitch testing helpers) and no file twice under two names;
  - the glibc tag is honest and tight: read with readelf -V (build.py uses objdump -T), every
    ELF file needs at most GLIBC_2.N of manylinux_2_N, and one needs exactly it.
  usage: python3 scripts/wheel/check_wheel.py WHEEL   (exit 1 with one line per problem)
"""
import base64
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile

LEFTOVERS = re.compile(r"(\.d\.ts|\.map|\.tsbuildinfo|\.pyc|/__pycache__/.*|/threading_bench|/throw_check|/testing\.js|/test/.*)$")


def problems(path):
    out = []
    name = os.path.basename(path)
    m = re.fullmatch(r"gmlake_torch-([^-]+)-(py3-none-manylinux_(\d+)_(\d+)_x86_64)\.whl", name)
    if not m:
        return [f"{name}: not gmlake_torch-<version>-py3-none-manylinux_<a>_<b>_x86_64.whl"]
    version, tag, major, minor = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
    info = f"gmlake_torch-{version}.dist-info"
    with zipfile.ZipFile(path) as z, tempfile.TemporaryDirectory() as d:
        names = z.namelist()
        if len(set(names)) != len(names):
            out.append("a path is in the zip twice")
        record = {}
        for line in z.read(f"{info}/RECORD").decode().splitlines():
            p, h, size = line.rsplit(",", 2)
            record[p] = (h, size)
        for n in names:
            data = z.read(n)
            if n == f"{info}/RECORD":
                continue
            want = record.get(n)
            got = ("sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode(), str(len(data)))
            if want != got:
                out.append(f"{n}: RECORD says {want}, the file is {got}")
            if LEFTOVERS.search(n):
                out.append(f"{n}: a build or test leftover")
        extra = set(record) - set(names)
        if extra:
            out.append(f"RECORD lists files not in the wheel: {sorted(extra)[:5]}")
        if f"Tag: {tag}" not in z.read(f"{info}/WHEEL").decode().splitlines():
            out.append(f"WHEEL does not say Tag: {tag}")
        if f"Version: {version}" not in z.read(f"{info}/METADATA").decode().splitlines():
            out.append(f"METADATA does not say Version: {version}")
        digests = {}
        needs = []
        for n in names:
            data = z.read(n)
            if len(data) > 4096:
                digests.setdefault(hashlib.sha256(data).hexdigest(), []).append(n)
            if data[:4] == b"\x7fELF":
                f = os.path.join(d, "elf")
                with open(f, "wb") as fh:
                    fh.write(data)
                text = subprocess.run(["readelf", "-V", "-W", f], capture_output=True, text=True, check=True).stdout
                vs = [tuple(map(int, v.split("."))) for v in re.findall(r"Name: GLIBC_([0-9.]+)", text)]
                needs.append((max(vs) if vs else (0,), n))
        for same in digests.values():
            if len(same) > 1:
                out.append(f"the same bytes twice: {', '.join(same)}")
        if not needs:
            out.append("no ELF file in the wheel")
        else:
            top, which = max(needs)
            if top[:2] != (major, minor):
                out.append(f"the tag says glibc {major}.{minor}, the binaries need at most {'.'.join(map(str, top))} ({which})")
    return out


def main(argv):
    if len(argv) != 1:
        print("usage: python3 scripts/wheel/check_wheel.py WHEEL", file=sys.stderr)
        return 2
    found = problems(argv[0])
    for p in found:
        print(f"check_wheel: {p}", file=sys.stderr)
    if not found:
        print(f"check_wheel: {os.path.basename(argv[0])}: RECORD, tags, no leftovers or duplicates, glibc tag tight")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
