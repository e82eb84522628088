#!/usr/bin/env bash
# Fetches Debian bookworm's libnode108 (Node 18.20, as a shared library), its headers and
# what a host may lack (ICU 72, libuv, c-ares, nghttp2, brotli, and the builtin JS files
# that libnode reads at start) with `apt-get download`, and unpacks them with
# `dpkg-deb -x` into build/libnode/. Nothing is installed system-wide. Needs a Debian (or
# Ubuntu with Debian's bookworm sources) apt; an existing build/libnode is kept.
#   usage: bash scripts/fetch-libnode.sh [--force]
set -euo pipefail
pkg=$(cd "$(dirname "$0")/.." && pwd)
dest="$pkg/build/libnode"
stamp="$dest/.fetched"
if [ -f "$stamp" ] && [ "${1:-}" != "--force" ]; then exit 0; fi
debs=(libnode108 libnode-dev libuv1-dev libuv1 libc-ares2 libicu72 libnghttp2-14 libbrotli1
      node-acorn node-cjs-module-lexer node-undici)
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "fetch-libnode: needs apt-get and dpkg-deb (Debian's libnode108 comes from Debian bookworm)" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# _apt cannot write into a private temp dir; it downloads unsandboxed then (a warning only).
if ! (cd "$tmp" && apt-get download -q "${debs[@]}" >"$tmp/apt.log" 2>&1); then
  cat "$tmp/apt.log" >&2
  echo "fetch-libnode: apt-get download failed (run 'apt-get update' first, or add Debian bookworm's sources)" >&2
  exit 2
fi
rm -rf "$dest"
mkdir -p "$dest"
for d in "$tmp"/*.deb; do dpkg-deb -x "$d" "$dest"; done
# Only what the embedding needs stays (headers, the libraries, the builtin JS files).
rm -rf "$dest/usr/share/doc" "$dest/usr/share/man" "$dest/usr/share/lintian"
lib="$dest/usr/lib/x86_64-linux-gnu"
[ -f "$lib/libnode.so.108" ] || { echo "fetch-libnode: libnode.so.108 missing after unpacking" >&2; exit 2; }
[ -f "$dest/usr/include/node/node.h" ] || { echo "fetch-libnode: node.h missing after unpacking" >&2; exit 2; }
# libnode reads five builtin JS files (acorn, cjs-module-lexer, undici) from the absolute
# path /usr/share/nodejs/ compiled into it, and aborts the process without them. Our copy
# reads them from /proc/self/fd/987/ instead (the same length, so a byte patch):
# libgmlake_torch_alloc.so opens build/libnode/usr/share/nodejs as fd 987 before it starts
# Node, so nothing needs to be installed under /usr/share.
perl -0777 -pi -e 's|/usr/share/nodejs/|/proc/self/fd/987/|g' "$lib/libnode.so.108"
[ "$(grep -c '/proc/self/fd/987/' "$lib/libnode.so.108")" -gt 0 ] || { echo "fetch-libnode: patching libnode's builtin path failed" >&2; exit 2; }
ls "$tmp"/*.deb | xargs -n1 basename >"$stamp"
echo "fetch-libnode: $(du -sh "$dest" | cut -f1) in build/libnode"
