#!/usr/bin/env bash
# Build the mock-GPU placement probe (probe_mock.cpp + mock_gpu.cpp) against each pinned node-llama-cpp release.
#   tools/truth/mock/build.sh CACHE [OUT]       (or MEMFIT_TRUTH_CACHE=CACHE tools/truth/mock/build.sh)
# tools/truth/build.sh (MEMFIT_TRUTH_INSTALL_ONLY=1) first installs each release into CACHE/node-llama-cpp-VERSION (reusing an install already
# there), clones the llama.cpp source it bundles and checks it against releases.json. The probe is compiled against
# that source's headers (it reads llama.cpp's private members, so they must be the libraries' own) and linked
# against the release's prebuilt libllama, libllama-common (common_fit_params) and libggml:
# OUT/probe_mock-VERSION (OUT defaults to CACHE/mock). Needs node 20 with npm, g++, git and python3.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${1:-${MEMFIT_TRUTH_CACHE:-}}"
[ -n "$CACHE" ] || { echo "usage: $0 CACHE [OUT] (or set MEMFIT_TRUTH_CACHE)" >&2; exit 2; }
MEMFIT_TRUTH_INSTALL_ONLY=1 "$HERE/../build.sh" "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"
OUT="${2:-$CACHE/mock}"
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
for VERSION in $(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))))' "$HERE/../releases.json"); do
  R="$CACHE/node-llama-cpp-$VERSION"
  LIB="$R/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
  LLAMA=$(cd "$LIB" && ls libllama.*so | grep -v common | head -1)
  GGML=$(cd "$LIB" && ls libggml.*so | head -1)
  # what the mock probe needs beyond the CPU probe: registering devices, and the fitter (the symbol lists captured
  # first: grep -q ends a pipe early, which pipefail would take for nm failing)
  SYMS_GGML=$(nm -D --defined-only "$LIB/$GGML")
  SYMS_COMMON=$(nm -D --defined-only "$LIB/libllama-common.so")
  for sym in ggml_backend_register ggml_backend_device_register; do
    grep -q " T $sym$" <<<"$SYMS_GGML" || { echo "$GGML of $VERSION lacks $sym" >&2; exit 1; }
  done
  grep -q common_fit_params <<<"$SYMS_COMMON" || { echo "libllama-common.so of $VERSION lacks common_fit_params" >&2; exit 1; }
  S="$R/llama.cpp"
  g++ -std=c++17 -O1 -w -I"$S/include" -I"$S/ggml/include" -I"$S/ggml/src" -I"$S/src" -I"$S/common" -I"$HERE" \
      "$HERE/probe_mock.cpp" "$HERE/mock_gpu.cpp" -o "$OUT/probe_mock-$VERSION" \
      -L"$LIB" -l:libllama-common.so -l:"$LLAMA" -l:"$GGML" -lggml-base -Wl,-rpath,"$LIB"
  echo "$OUT/probe_mock-$VERSION (libs: $LIB)"
done
