#!/usr/bin/env bash
# Build the truth probe against each pinned node-llama-cpp release (tools/truth/releases.json).
#   tools/truth/build.sh CACHE        (or MEMFIT_TRUTH_CACHE=CACHE tools/truth/build.sh)
# For each release: `npm i -E node-llama-cpp@VERSION` into CACHE/node-llama-cpp-VERSION, the llama.cpp source
# bundle the package ships cloned beside it (headers only: the probe reads llama.cpp's own objects), and the
# probe compiled and linked against the release's prebuilt libllama (CACHE/node-llama-cpp-VERSION/probe).
# Fails when the llama.cpp tag or commit a release bundles differs from the one releases.json names.
# MEMFIT_TRUTH_INSTALL_ONLY=1: install, clone and check the releases, without compiling the probe.
# Needs node 20 with npm, g++, git and python3. Nothing is written into the repository.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${1:-${MEMFIT_TRUTH_CACHE:-}}"
[ -n "$CACHE" ] || { echo "usage: $0 CACHE (or set MEMFIT_TRUTH_CACHE)" >&2; exit 2; }
mkdir -p "$CACHE" && CACHE="$(cd "$CACHE" && pwd)"
status=0
for VERSION in $(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))))' "$HERE/releases.json"); do
  R="$CACHE/node-llama-cpp-$VERSION"
  mkdir -p "$R"
  if [ ! -d "$R/node_modules/node-llama-cpp" ]; then
    (cd "$R" && { [ -f package.json ] || npm init -y >/dev/null; } && npm i -E --ignore-scripts "node-llama-cpp@$VERSION" >/dev/null)
  fi
  PKG="$R/node_modules/node-llama-cpp/llama"
  LIB="$R/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
  [ -d "$R/llama.cpp" ] || git -c advice.detachedHead=false clone -q "$PKG/gitRelease.bundle" "$R/llama.cpp"
  TAG=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tag"])' "$PKG/llama.cpp.info.json")
  COMMIT=$(git -C "$R/llama.cpp" rev-parse HEAD)
  echo "node-llama-cpp $VERSION bundles llama.cpp $TAG ($COMMIT)"
  python3 - "$HERE/releases.json" "$VERSION" "$TAG" "$COMMIT" <<'PY' || status=1
import json, sys
path, version, tag, commit = sys.argv[1:]
pinned = json.load(open(path))[version]
if (pinned["llama_cpp_tag"], pinned["llama_cpp_commit"]) != (tag, commit):
    sys.exit(f"releases.json names {pinned} for {version}, the package bundles {tag} {commit}")
PY
  [ -z "${MEMFIT_TRUTH_INSTALL_ONLY:-}" ] || continue  # the release and its source only (tools/truth/mock/build.sh)
  LLAMA=$(cd "$LIB" && ls libllama.*so | grep -v common | head -1)
  GGML=$(cd "$LIB" && ls libggml.*so | head -1)
  S="$R/llama.cpp"
  g++ -std=c++17 -O1 -w -I"$S/include" -I"$S/ggml/include" -I"$S/src" -I"$S/common" "$HERE/probe.cpp" \
      -o "$R/probe" -L"$LIB" -l:"$LLAMA" -l:"$GGML" -lggml-base -lllama-common -Wl,-rpath,"$LIB"
  echo "$R/probe (libs: $LIB)"
done
exit $status
