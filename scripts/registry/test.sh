#!/usr/bin/env bash
# The packages as a user gets them. Starts a local npm registry (verdaccio, on loopback
# only, with its own config and storage in a temp folder), publishes every package to it
# with `pnpm publish`, then in fresh folders with plain npm and neither cmake nor a C++
# compiler on PATH:
#   1. `npm i @gmlake/stitch` alone: exactly @gmlake/{stitch,chunk-pool,vmm,trace,errors} and the
#      prebuilt addon, under 5 MB; the stitch README's first example runs (host driver);
#   2. `npx @gmlake/cli compare` on the embedded trace;
#   3. a TypeScript consumer of every package type-checks with moduleResolution node16, nodenext,
#      bundler and node10;
#   4. no prebuilt (`--omit=optional`): the install says what to do, sim works, host fails
#      with one line; then, with cmake and g++ back, following that line builds the addon
#      from source (GMLAKE_REGISTRY_SOURCE_BUILD=0 skips this part);
#   5. `npm i @gmlake/torch-alloc` then, in it, `npm run build:native` (libnode fetched with
#      apt-get download, the two libraries built from the tarball's sources with cmake and g++):
#      `python3 -m gmlake_torch check` on that copy starts the engine and allocates (host driver);
#   6. with GMLAKE_OLD_GLIBC_ROOT=DIR (a root of an older distribution, e.g. made with
#      `debootstrap --variant=minbase bullseye DIR`; needs root): the installed stitch
#      folder and this node binary copied into DIR, the README example run under chroot,
#      on that distribution's glibc.
# Run after `pnpm build` (.ci/run does). The registry is stopped and every folder removed
# at exit, whatever happened.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/scripts/registry"
step() { printf '\n== registry test: %s\n' "$*"; }
fail() {
  echo "registry test FAILED: $*" >&2
  exit 1
}

if [ "$(node -p 'process.platform + "-" + process.arch + (process.report.getReport().header.glibcVersionRuntime ? "-gnu" : "")')" != "linux-x64-gnu" ]; then
  echo "registry test: skipped (the prebuilt addon is for linux-x64-gnu)"
  exit 0
fi
[ -f "$root/packages/vmm-linux-x64-gnu/gmlake_vmm.node" ] || fail "no prebuilt addon: run pnpm build first"
upstream=$(npm config get registry)
started=$SECONDS

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gmlake-registry.XXXXXX")
registry_pid=""
cleanup() {
  if [ -n "$registry_pid" ]; then
    kill "$registry_pid" 2>/dev/null || true
    wait "$registry_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  if [ -n "${GMLAKE_OLD_GLIBC_ROOT:-}" ]; then rm -rf "$GMLAKE_OLD_GLIBC_ROOT/gmlake-registry-test"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP # so that an interrupted run cleans up too

step "start verdaccio"
mkdir -p "$tmp/verdaccio"
cp "$here/package.json" "$here/package-lock.json" "$tmp/verdaccio/"
(cd "$tmp/verdaccio" && npm ci --no-audit --no-fund --loglevel=error --cache "$tmp/npm-cache" >/dev/null)
port=$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')
url="http://127.0.0.1:$port/"
cat >"$tmp/verdaccio/config.yaml" <<EOF
storage: $tmp/storage
auth:
  htpasswd:
    file: $tmp/htpasswd
uplinks:
  upstream:
    url: $upstream
packages:
  "@gmlake/*":
    access: \$all
    publish: \$authenticated
  "**":
    access: \$all
    proxy: upstream
listen: 127.0.0.1:$port
log: { type: stdout, format: pretty, level: warn }
EOF
node "$tmp/verdaccio/node_modules/verdaccio/bin/verdaccio" --config "$tmp/verdaccio/config.yaml" >"$tmp/verdaccio.log" 2>&1 &
registry_pid=$!
URL="$url" node -e '
  const until = Date.now() + 30000;
  (async function ping() {
    try { if ((await fetch(process.env.URL + "-/ping")).ok) return; } catch {}
    if (Date.now() > until) { console.error("verdaccio did not answer in 30 s"); process.exit(1); }
    setTimeout(ping, 200);
  })();' || { cat "$tmp/verdaccio.log" >&2; fail "verdaccio did not start"; }
token=$(URL="$url" node -e '
  fetch(process.env.URL + "-/user/org.couchdb.user:ci", { method: "PUT", headers: { "content-type": "application/json" },
    body: JSON.stringify({ name: "ci", password: "registry-test" }) })
    .then((r) => r.json()).then((j) => { if (!j.token) throw new Error(JSON.stringify(j)); console.log(j.token); });')
printf 'registry=%s\n//127.0.0.1:%s/:_authToken=%s\n' "$url" "$port" "$token" >"$tmp/npmrc"
export NPM_CONFIG_USERCONFIG="$tmp/npmrc" NPM_CONFIG_CACHE="$tmp/npm-cache" npm_config_registry="$url"
echo "verdaccio on $url"

step "pnpm publish every package"
(cd "$root" && pnpm -r publish --no-git-checks --registry "$url" >"$tmp/publish.log" 2>&1) || { cat "$tmp/publish.log" >&2; fail "pnpm publish"; }
published=$(ROOT="$root" URL="$url" node --input-type=module -e '
  const { workspacePackages } = await import(process.env.ROOT + "/scripts/release/workspace.mjs");
  for (const { manifest: m } of workspacePackages()) {
    if (m.private) continue;
    const r = await fetch(process.env.URL + m.name.replace("/", "%2f"));
    const v = r.ok ? (await r.json())["dist-tags"]?.latest : undefined;
    if (v !== m.version) { console.error(`${m.name}@${m.version} not in the registry (latest: ${v})`); process.exit(1); }
    console.log(`${m.name}@${v}`);
  }')
echo "$published" | tr '\n' ' '
echo

# A PATH with node and npm but no cmake, no compiler, no make.
mkdir -p "$tmp/bin"
for t in node npm npx sh bash env; do ln -s "$(command -v "$t")" "$tmp/bin/$t"; done
nobuild="$tmp/bin"
for t in cmake g++ c++ gcc cc clang++ make; do
  if env PATH="$nobuild" sh -c "command -v $t" >/dev/null; then fail "$t is on the restricted PATH"; fi
done

step "npm i @gmlake/stitch, alone, without cmake or a compiler"
mkdir -p "$tmp/stitch" && cd "$tmp/stitch"
echo '{ "name": "stitch-user", "private": true, "type": "module" }' >package.json
PATH="$nobuild" npm i @gmlake/stitch --no-audit --no-fund --foreground-scripts --loglevel=error >install.log 2>&1 || { cat install.log >&2; fail "npm i @gmlake/stitch"; }
if grep -q "@gmlake/vmm:" install.log; then cat install.log >&2; fail "the prebuilt addon was not found at install"; fi
node "$here/installed.mjs" . --max-mb 5 \
  --expect @gmlake/stitch,@gmlake/chunk-pool,@gmlake/vmm,@gmlake/trace,@gmlake/errors,@gmlake/vmm-linux-x64-gnu
README="$root/packages/stitch/README.md" node -e '
  const md = require("fs").readFileSync(process.env.README, "utf8");
  const m = md.match(/```js\n([\s\S]*?)```/);
  if (!m) { console.error("no ```js block in the stitch README"); process.exit(1); }
  process.stdout.write(m[1]);' >example.mjs
PATH="$nobuild" node example.mjs | tee example.out
grep -q "stitches: 1" example.out || fail "the stitch README example did not stitch"
from=$(PATH="$nobuild" node --input-type=module -e 'const m = await import("@gmlake/vmm"); const a = m.probeCuda().addon; console.log(a.loaded ? a.from : a.error)')
[ "$from" = "prebuilt" ] || fail "the addon loaded is not the prebuilt: $from"
echo "addon: $from"

step "npx @gmlake/cli compare (the embedded trace)"
mkdir -p "$tmp/cli" && cd "$tmp/cli"
PATH="$nobuild" npx --yes @gmlake/cli compare >compare.out 2>compare.err || { cat compare.err >&2; fail "npx @gmlake/cli compare"; }
cat compare.out
grep -q "^train_default (embedded): the limit is" compare.out || fail "no heading for the embedded trace in gmlake compare"
for p in caching expandable gmlake vms; do
  grep -Eq "^$p +[0-9.]+ GiB" compare.out || fail "no $p row in gmlake compare"
done

step "TypeScript consumers: moduleResolution node16, nodenext, bundler, node10"
mkdir -p "$tmp/types" && cd "$tmp/types"
node "$here/types-consumer.mjs" . "$root/node_modules/@types"
PATH="$nobuild" npm i --no-audit --no-fund --loglevel=error >install.log 2>&1 || { cat install.log >&2; fail "npm i (types consumer)"; }
node "$here/installed.mjs" .
for r in node16 nodenext bundler node10; do
  node "$root/node_modules/typescript/bin/tsc" -p "tsconfig.$r.json" || fail "tsc, moduleResolution $r"
  echo "tsc --moduleResolution $r: ok"
done

step "no prebuilt (--omit=optional), no build tools: sim works, host says what to do"
mkdir -p "$tmp/noprebuilt" && cd "$tmp/noprebuilt"
echo '{ "name": "no-prebuilt", "private": true, "type": "module" }' >package.json
PATH="$nobuild" npm i --omit=optional @gmlake/vmm --no-audit --no-fund --foreground-scripts --loglevel=error >install.log 2>&1 || { cat install.log >&2; fail "npm i --omit=optional @gmlake/vmm"; }
grep "@gmlake/vmm: no addon: " install.log || { cat install.log >&2; fail "the install did not say what to do"; }
cat >try.mjs <<'EOF'
import { createDriver } from "@gmlake/vmm";
const sim = createDriver("sim");
sim.memRelease(sim.memCreate(sim.device.granularity.minimum));
console.log("sim: ok");
try {
  createDriver(process.argv[2] ?? "host");
  console.log("host: ok");
} catch (e) {
  console.log(`host: ${e.code}: ${e.message}`);
}
EOF
PATH="$nobuild" node try.mjs | tee try.out
grep -q "^sim: ok" try.out || fail "sim does not work without an addon"
grep -q "^host: VMM_ADDON_NOT_LOADED: .*npm rebuild @gmlake/vmm" try.out || fail "host without an addon: no one-line hint"
[ "$(wc -l <try.out)" -eq 2 ] || fail "the host error is not one line"

if [ "${GMLAKE_REGISTRY_SOURCE_BUILD:-1}" != "0" ]; then
  step "source build fallback: what the hint says, with cmake and g++ on PATH"
  tools=$(sed -n 's/.*then `npm i -D \([^`&]*\) && npm rebuild @gmlake\/vmm`.*/\1/p' try.out)
  [ -n "$tools" ] || fail "no recipe in the hint"
  echo "npm i -D $tools && npm rebuild @gmlake/vmm (with --omit=optional: as where no prebuilt exists)"
  # shellcheck disable=SC2086 # $tools is a list of package specs
  npm i -D --omit=optional $tools --no-audit --no-fund --loglevel=error >build.log 2>&1 || { cat build.log >&2; fail "npm i -D $tools"; }
  npm rebuild @gmlake/vmm --foreground-scripts >>build.log 2>&1 || { cat build.log >&2; fail "npm rebuild @gmlake/vmm"; }
  grep -q "@gmlake/vmm: source build loaded" build.log || { cat build.log >&2; fail "the source build did not load"; }
  [ ! -e node_modules/@gmlake/vmm-linux-x64-gnu ] || fail "the prebuilt was installed after all"
  node try.mjs host | tee try.out
  grep -q "^host: ok" try.out || fail "host after the source build"
fi

if command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null; then
  step "npm i @gmlake/torch-alloc, then npm run build:native in it"
  mkdir -p "$tmp/torch-alloc" && cd "$tmp/torch-alloc"
  echo '{ "name": "torch-alloc-user", "private": true }' >package.json
  npm i @gmlake/torch-alloc --no-audit --no-fund --loglevel=error >install.log 2>&1 || { cat install.log >&2; fail "npm i @gmlake/torch-alloc"; }
  ta="$tmp/torch-alloc/node_modules/@gmlake/torch-alloc"
  (cd "$ta" && npm run build:native) >build.log 2>&1 || { tail -20 build.log >&2; fail "npm run build:native in the installed @gmlake/torch-alloc"; }
  PYTHONPATH="$ta/python" python3 -m gmlake_torch check | tee check.out
  grep -q '"ok": true' check.out && grep -q "\"library\": \"$ta/build/lib/" check.out || fail "gmlake_torch check on the npm-installed copy"
else
  echo "registry test: npm run build:native skipped (needs apt-get and dpkg-deb for Debian's libnode)"
fi

if [ -n "${GMLAKE_OLD_GLIBC_ROOT:-}" ]; then
  old="$GMLAKE_OLD_GLIBC_ROOT"
  step "the stitch example on an older glibc: chroot $old ($(chroot "$old" ldd --version | head -1))"
  mkdir -p "$old/gmlake-registry-test"
  cp "$(readlink -f "$(command -v node)")" "$old/gmlake-registry-test/node"
  cp -a "$tmp/stitch" "$old/gmlake-registry-test/stitch"
  chroot "$old" /usr/bin/env -u NODE_EXTRA_CA_CERTS /bin/sh -c 'cd /gmlake-registry-test/stitch && /gmlake-registry-test/node example.mjs' | tee "$tmp/old-glibc.out"
  grep -q "stitches: 1" "$tmp/old-glibc.out" || fail "the stitch example under chroot $old"
fi

cd "$root"
echo
echo "registry test: passed in $((SECONDS - started)) s"
