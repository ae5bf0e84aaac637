#!/usr/bin/env bash
# Pagoda vs llama.cpp, side by side, on the same GGUF files: prints the BENCHMARKS.md table.
#
#   bench/run_side_by_side.sh [--out DIR] [--reps N] [--models SHAPE:DTYPE,...] [--remake] [--force]
#     DTYPE: any `pagoda make-model --dtype` (f32, f16, q8_0, q4_k, ..., or the llama.cpp mix q4_k_m)
#   bench/run_side_by_side.sh --table-only DIR [--models ...]   # re-print a saved run's table
#
# Needs a Release build (build/bin/pagoda, build/bin/membw_bench; BUILD_DIR=... to change) and
# Node >= 20 (bench/peer is installed with `npm ci` if its node_modules is missing).
# Steps: measure memory bandwidth; then for each model: make the file with
# `pagoda make-model` (kept in /tmp/pagoda-bench between runs; --remake to redo), run
# `pagoda bench` on it, then bench/peer/bench_llama_cpp.mjs (llama.cpp, best of 1 and 2 threads)
# on the same file, so the two engines alternate model by model. Raw results go to --out
# (default /tmp/pagoda-bench/results-DATE); the table is printed and saved there as table.md.
#
# Run it on an otherwise idle machine: never during a build or another benchmark (it refuses
# when a compiler is running, unless --force). A full run takes tens of minutes on 2 cores.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
MODEL_DIR="${MODEL_DIR:-/tmp/pagoda-bench}"
PROMPT_TOKENS="${PROMPT_TOKENS:-512}"
GEN_TOKENS="${GEN_TOKENS:-128}"
DECODE_PROMPT_TOKENS="${DECODE_PROMPT_TOKENS:-16}"  # llama.cpp: untimed prompt before decoding
PAGODA_THREADS="${PAGODA_THREADS:-2}"
PEER_THREADS="${PEER_THREADS:-1,2}"
REPS=5
MODELS="llama-110m:f32,llama-110m:f16,tinyllama-1.1b:f16,tinyllama-1.1b:q8_0,tinyllama-1.1b:q4_k_m"
OUT=""
TABLE_ONLY=""
REMAKE=0
FORCE=0

die() { echo "run_side_by_side: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) OUT="${2:?--out needs a folder}"; shift 2 ;;
    --reps) REPS="${2:?--reps needs a number}"; shift 2 ;;
    --models) MODELS="${2:?--models needs SHAPE:DTYPE,...}"; shift 2 ;;
    --table-only) TABLE_ONLY="${2:?--table-only needs a folder}"; shift 2 ;;
    --remake) REMAKE=1; shift ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"

PEER="$REPO/bench/peer"
command -v node >/dev/null || die "node (>= 20) is not installed"
node_major="$(node -p 'process.versions.node.split(".")[0]')"
(( node_major >= 20 )) || die "node >= 20 is needed, found $(node --version)"

print_table() {  # $1 = results folder
  node "$PEER/side_by_side_table.mjs" --dir "$1" --models "$MODELS"
}

if [[ -n "$TABLE_ONLY" ]]; then
  [[ -d "$TABLE_ONLY" ]] || die "no such folder: $TABLE_ONLY"
  print_table "$TABLE_ONLY"
  exit $?
fi

PAGODA="$BUILD_DIR/bin/pagoda"
MEMBW="$BUILD_DIR/bin/membw_bench"
[[ -x "$PAGODA" ]] || die "$PAGODA not found: build Pagoda first (make build)"
[[ -x "$MEMBW" ]] || die "$MEMBW not found: build the benchmarks first (make build)"
if [[ ! -d "$PEER/node_modules/node-llama-cpp" ]]; then
  command -v npm >/dev/null || die "npm is not installed"
  log "installing bench/peer (npm ci)"
  # The prebuilt CPU binary is an npm dependency; the package's postinstall (which may try a
  # source build) is not needed.
  (cd "$PEER" && NODE_LLAMA_CPP_POSTINSTALL=skip npm ci --no-audit --no-fund >&2)
fi

if (( ! FORCE )) && pgrep -x 'cc1|cc1plus|ld|ninja|make|cmake|clang|clang\+\+|nvcc' >/dev/null; then
  die "a build seems to be running (pgrep found a compiler or build tool): results would be noise; --force to run anyway"
fi

OUT="${OUT:-$MODEL_DIR/results-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$MODEL_DIR" "$OUT"
log "results in $OUT"

cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
commit="$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  commit="$commit (dirty)"
fi
node -e 'process.stdout.write(JSON.stringify({
  cpu: process.argv[1], nproc: Number(process.argv[2]), pagoda_commit: process.argv[3],
  pagoda_threads: Number(process.argv[4]), peer_threads: process.argv[5],
  prompt_tokens: Number(process.argv[6]), gen_tokens: Number(process.argv[7]),
  reps: Number(process.argv[8]), date: new Date().toISOString().slice(0, 10)}) + "\n")' \
  "$cpu" "$(nproc)" "$commit" "$PAGODA_THREADS" "$PEER_THREADS" "$PROMPT_TOKENS" "$GEN_TOKENS" "$REPS" \
  > "$OUT/meta.json"

log "memory bandwidth (membw_bench)"
"$MEMBW" --json > "$OUT/membw.json"

failed=0
IFS=',' read -r -a model_specs <<< "$MODELS"
for spec in "${model_specs[@]}"; do
  shape="${spec%%:*}"
  dtype="${spec#*:}"
  [[ -n "$shape" && -n "$dtype" && "$spec" == *:* ]] || die "bad model \"$spec\": expected SHAPE:DTYPE"
  key="$shape-$dtype"
  file="$MODEL_DIR/$key.gguf"
  if (( REMAKE )) || [[ ! -s "$file" ]]; then
    log "$key: making $file"
    rm -f "$file"
    "$PAGODA" make-model --shape "$shape" --dtype "$dtype" -o "$file.tmp" >&2
    mv "$file.tmp" "$file"
  fi
  node "$PEER/gguf_info.mjs" "$file" > "$OUT/$key.gguf.json"

  log "$key: pagoda bench (--threads $PAGODA_THREADS)"
  if ! "$PAGODA" bench -m "$file" -p "$PROMPT_TOKENS" -n "$GEN_TOKENS" -r "$REPS" \
      --threads "$PAGODA_THREADS" --json > "$OUT/$key.pagoda.json"; then
    log "$key: pagoda bench FAILED"
    failed=1
  fi

  log "$key: llama.cpp (threads $PEER_THREADS)"
  if ! node "$PEER/bench_llama_cpp.mjs" --model "$file" --prompt-tokens "$PROMPT_TOKENS" \
      --gen-tokens "$GEN_TOKENS" --decode-prompt-tokens "$DECODE_PROMPT_TOKENS" --reps "$REPS" --threads "$PEER_THREADS" --json \
      > "$OUT/$key.llama_cpp.json"; then
    log "$key: llama.cpp bench FAILED"
    failed=1
  fi
done

status=0
print_table "$OUT" | tee "$OUT/table.md" || status=1
(( failed == 0 && status == 0 )) || die "some measurements failed; see the log above and $OUT"
