#!/usr/bin/env bash
# Builds the native llama.cpp peer from the sources node-llama-cpp@3.21.1 ships.
#
#   bench/peer/build_native.sh [--jobs N] [--force] [--avx2]
#
# The npm package node-llama-cpp@3.21.1 carries the llama.cpp commit it was built from as a git
# bundle (node_modules/node-llama-cpp/llama/gitRelease.bundle). This script
#   1. installs node-llama-cpp@3.21.1 (npm, no postinstall) into $PAGODA_PEER_CACHE/npm,
#   2. clones that bundle into $PAGODA_PEER_CACHE/llama.cpp,
#   3. builds llama-bench, llama-batched-bench and llama-server there with
#      -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF (Release, CPU only).
# PAGODA_PEER_CACHE defaults to /work/cache (outside the repository). The binaries land in
# $PAGODA_PEER_CACHE/llama.cpp/build/bin; bench/peer/side_by_side.sh finds them there.
# --avx2: the like-for-like peer of `pagoda --isa avx2` on any host: GGML_NATIVE=OFF with AVX,
# AVX2, FMA and F16C on and nothing of AVX-512, into build-avx2/bin (side_by_side.sh --isa avx2).
# About 7 minutes on 2 cores. A benchmark tool, never run in CI. Idempotent: a finished build
# is kept unless --force.
set -euo pipefail

CACHE="${PAGODA_PEER_CACHE:-/work/cache}"
VERSION="3.21.1"
JOBS="$(nproc)"
FORCE=0
AVX2=0
die() { echo "build_native: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] build_native: $*" >&2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --jobs) JOBS="${2:?--jobs needs a number}"; shift 2 ;;
    --force) FORCE=1; shift ;;
    --avx2) AVX2=1; shift ;;
    -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
for tool in npm git cmake; do command -v "$tool" >/dev/null || die "$tool is not installed"; done

NPM_DIR="$CACHE/npm"
SRC="$CACHE/llama.cpp"
BUILD="$SRC/build"
ISA_FLAGS=(-DGGML_NATIVE=ON)
if (( AVX2 )); then
  BUILD="$SRC/build-avx2"
  ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
             -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF
             -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi
BIN="$BUILD/bin"
TARGETS=(llama-bench llama-batched-bench llama-server)

if (( ! FORCE )); then
  all=1
  for t in "${TARGETS[@]}"; do [[ -x "$BIN/$t" ]] || all=0; done
  if (( all )); then log "already built in $BIN (--force to rebuild)"; exit 0; fi
fi

mkdir -p "$NPM_DIR"
BUNDLE="$NPM_DIR/node_modules/node-llama-cpp/llama/gitRelease.bundle"
if [[ ! -f "$BUNDLE" ]]; then
  log "installing node-llama-cpp@$VERSION into $NPM_DIR"
  [[ -f "$NPM_DIR/package.json" ]] || echo '{"name":"pagoda-peer-cache","private":true}' >"$NPM_DIR/package.json"
  (cd "$NPM_DIR" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true NODE_LLAMA_CPP_POSTINSTALL=skip \
    npm install --no-audit --no-fund --ignore-scripts --omit=optional "node-llama-cpp@$VERSION" >&2)
fi
[[ -f "$BUNDLE" ]] || die "no $BUNDLE after npm install"

if [[ ! -d "$SRC/.git" ]] || (( FORCE )); then
  rm -rf "$SRC"
  log "cloning $BUNDLE into $SRC"
  git -c advice.detachedHead=false clone --quiet "$BUNDLE" "$SRC"
fi
log "llama.cpp at $(git -C "$SRC" log -1 --format='%h %cs %s' | cut -c1-80)"

log "configuring (${ISA_FLAGS[*]}, no curl, no OpenSSL)"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${ISA_FLAGS[@]}" -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
  -DLLAMA_BUILD_SERVER=ON >"$CACHE/llama.cpp-configure.log" 2>&1 ||
  { tail -30 "$CACHE/llama.cpp-configure.log" >&2; die "cmake configure failed (log: $CACHE/llama.cpp-configure.log)"; }
log "building ${TARGETS[*]} with $JOBS jobs"
cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" >"$CACHE/llama.cpp-build.log" 2>&1 ||
  { tail -30 "$CACHE/llama.cpp-build.log" >&2; die "build failed (log: $CACHE/llama.cpp-build.log)"; }
for t in "${TARGETS[@]}"; do [[ -x "$BIN/$t" ]] || die "$BIN/$t was not built"; done
log "done: $BIN/{$(IFS=,; echo "${TARGETS[*]}")}"
