#!/usr/bin/env bash
# Pagoda vs native llama.cpp (bench/peer/build_native.sh), same GGUF files, same threads,
# interleaved rounds, medians: the table of issue 11 in BENCHMARKS.md.
#
#   bench/peer/side_by_side.sh [--rounds N] [--rows ROW,...] [--out DIR] [--threads T] [--isa avx2] [--force]
#
# Rows (default: all): pp512 tg128 pp1900 tg128d1900 batched16 http16 pp512_q8 pp512_q4km tl_q8 tl_q4km g3_pp512
#   g3_tg128 curve
#   pp512, tg128     llama-110m f16: llama-bench -p 512 / -n 128   vs pagoda bench -p 512 / -n 128
#   pp512_q8, pp512_q4km  llama-110m q8_0 / q4_k_m: pp512
#   pp1900           prefill of a 1,900-token prompt
#   tg128d1900       128 decode steps after 1,900 cached tokens (llama-bench -d 1900, pagoda bench --depth 1900)
#   batched16        16 sequences x (64 prompt + 64 generated), in process: llama-batched-bench
#                    -npp 64 -ntg 64 -npl 16 vs build/bin/serving_bench (total seconds)
#   http16           the same workload over HTTP: pagoda bench-serve --concurrency 16 --num-requests 48
#                    --prompt-len 64 --output-len 64 against `pagoda serve` and `llama-server -np 16`
#   tl_q8, tl_q4km   tinyllama-1.1b q8_0 / q4_k_m: pp256 and tg64
#   g3_pp512, g3_tg128  gemma3-270m f16 (Gemma 3 270M's layers, window 512 on 15 of 18, 32000 tokens)
#   curve            decode t/s (tg32) at depths 0, 256, 512, 1024, 1536, 2000 (llama-110m f16), first round only
# Each round runs every row once, one rep each engine after its own warm-up, Pagoda first in odd
# rounds and llama.cpp first in even ones; a row's ratio is the median of the per-round ratios
# (with their min-max), its numbers the medians over rounds. Both use `--threads T` (default 2),
# llama.cpp with -mmp 0 (no mmap) and its default F16 KV cache; Pagoda with --kv-dtype f16
# (PAGODA_KV=... to change); PAGODA_MATMUL=f32 runs Pagoda with --matmul-precision f32 (f16
# weights in f32 on every path, as llama.cpp's CPU backend; default auto: bf16 prefill where the
# CPU has AVX512-BF16); PAGODA_BATCHED_BF16=1 runs Pagoda's batched16 / http16 rows
# with --batched-bf16. Model files go to MODEL_DIR (default /work/models), made once with
# `pagoda make-model`. Raw outputs and table.md go to --out (default /tmp/pagoda-peer/DATE).
# Needs a Release build (BUILD_DIR, default build/) and the native peer (PAGODA_PEER_CACHE,
# default /work/cache). Run it alone on the machine. --isa avx2 pairs `pagoda --isa avx2` with
# the AVX2 build of llama.cpp (build_native.sh --avx2), so the AVX2 table can be measured on an
# AVX-512 host too.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
PEER_BIN="${PAGODA_PEER_CACHE:-/work/cache}/llama.cpp/build/bin"
MODEL_DIR="${MODEL_DIR:-/work/models}"
PAGODA_KV="${PAGODA_KV:-f16}"
PAGODA_BATCHED_BF16="${PAGODA_BATCHED_BF16:-0}"
PAGODA_MATMUL="${PAGODA_MATMUL:-auto}"
BF16_FLAG=()
[[ "$PAGODA_BATCHED_BF16" == 1 ]] && BF16_FLAG=(--batched-bf16)
ROUNDS=3
THREADS=2
ISA=""
ROWS="pp512,tg128,pp1900,tg128d1900,batched16,http16,pp512_q8,pp512_q4km,tl_q8,tl_q4km,g3_pp512,g3_tg128,curve"
OUT=""
FORCE=0
die() { echo "side_by_side: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="${2:?}"; shift 2 ;;
    --rows) ROWS="${2:?}"; shift 2 ;;
    --out) OUT="${2:?}"; shift 2 ;;
    --threads) THREADS="${2:?}"; shift 2 ;;
    --isa) ISA="${2:?}"; shift 2 ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
ISA_FLAG=()
if [[ -n "$ISA" ]]; then
  [[ "$ISA" == avx2 ]] || die "--isa: only avx2 has a like-for-like peer build"
  PEER_BIN="${PAGODA_PEER_CACHE:-/work/cache}/llama.cpp/build-avx2/bin"
  ISA_FLAG=(--isa "$ISA")
fi
PAGODA="$BUILD_DIR/bin/pagoda"
for b in "$PAGODA" "$BUILD_DIR/bin/serving_bench" "$BUILD_DIR/bin/membw_bench" "$BUILD_DIR/bin/peak_flops_bench"; do
  [[ -x "$b" ]] || die "$b not found: make build first"
done
for b in llama-bench llama-batched-bench llama-server; do
  [[ -x "$PEER_BIN/$b" ]] || die "$PEER_BIN/$b not found: run bench/peer/build_native.sh first"
done
if (( ! FORCE )); then  # pgrep -x matches names of at most 15 characters: one name at a time
  for p in cc1 cc1plus ld ninja make cmake; do
    if pgrep -x "$p" >/dev/null; then die "a build is running ($p): results would be noise (--force to run anyway)"; fi
  done
fi
OUT="${OUT:-/tmp/pagoda-peer/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT" "$MODEL_DIR"
log "results in $OUT"

model() {  # shape dtype -> path (made once)
  local f="$MODEL_DIR/$1-$2.gguf"
  if [[ ! -s "$f" ]]; then
    log "making $f"
    "$PAGODA" make-model --shape "$1" --dtype "$2" -o "$f.tmp" --quiet >&2 && mv "$f.tmp" "$f"
  fi
  echo "$f"
}
M110="$(model llama-110m f16)"
has_row() { [[ ",$ROWS," == *",$1,"* ]]; }
if has_row pp512_q8; then M110Q8="$(model llama-110m q8_0)"; fi
if has_row pp512_q4km; then M110Q4="$(model llama-110m q4_k_m)"; fi
if has_row tl_q8; then TLQ8="$(model tinyllama-1.1b q8_0)"; fi
if has_row tl_q4km; then TLQ4="$(model tinyllama-1.1b q4_k_m)"; fi
if has_row g3_pp512 || has_row g3_tg128; then G3="$(model gemma3-270m f16)"; fi

{
  echo "{\"cpu\": \"$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)\","
  echo " \"pagoda_commit\": \"$(git -C "$REPO" rev-parse --short HEAD)\","
  echo " \"llama_cpp_commit\": \"$(git -C "$PEER_BIN/../.." rev-parse --short HEAD 2>/dev/null || echo unknown)\","
  echo " \"isa\": \"${ISA:-best}\", \"threads\": $THREADS, \"rounds\": $ROUNDS, \"pagoda_kv\": \"$PAGODA_KV\", \"batched_bf16\": $PAGODA_BATCHED_BF16, \"matmul_precision\": \"$PAGODA_MATMUL\", \"date\": \"$(date -u +%FT%TZ)\"}"
} > "$OUT/meta.json"
"$BUILD_DIR/bin/membw_bench" --json --threads 2 > "$OUT/membw.json" 2>/dev/null || true
"$BUILD_DIR/bin/peak_flops_bench" "$THREADS" --json > "$OUT/peak.json" || true

pg() { "$PAGODA" bench --threads "$THREADS" --kv-dtype "$PAGODA_KV" --matmul-precision "$PAGODA_MATMUL" "${ISA_FLAG[@]}" -r 1 --json --quiet "$@"; }
lb() { "$PEER_BIN/llama-bench" -t "$THREADS" -mmp 0 -r 1 -o json "$@" 2>/dev/null; }

BASE_PORT="${PORT:-18383}"
PORT="$BASE_PORT"
SERVER_PID=""
stop_server() {
  [[ -n "$SERVER_PID" ]] || return 0
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
  for _ in $(seq 1 120); do ss -Hltn "sport = :$PORT" 2>/dev/null | grep -q . || break; sleep 0.5; done
}
trap stop_server EXIT
serve_bench() {  # serve_bench OUTFILE CMD...: start a server on $PORT, wait for /health, warm up, bench-serve, stop
  local o="$1"; shift
  "$@" >"$o.server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then log "server exited; see $o.server.log"; SERVER_PID=""; return 0; fi
    sleep 0.5
  done
  "$PAGODA" bench-serve --url "http://127.0.0.1:$PORT" --num-requests 2 --prompt-len 8 --output-len 4 --json >/dev/null 2>&1 || true
  "$PAGODA" bench-serve --url "http://127.0.0.1:$PORT" --seed 1 --json --workload random --concurrency 16 \
    --num-requests 48 --prompt-len 64 --output-len 64 >"$o" 2>"$o.log" || log "bench-serve failed: $o.log"
  stop_server
}

run_half() {  # row round side: one engine's run of a row
  local row="$1" r="$2" side="$3" o="$OUT/$1.r$2"
  local pg_side=0; [[ "$side" == pagoda ]] && pg_side=1
  case "$row" in
    pp512)  if ((pg_side)); then pg -m "$M110" -p 512 -n 0 > "$o.pagoda.json"; else lb -m "$M110" -p 512 -n 0 > "$o.llama.json"; fi ;;
    tg128)  if ((pg_side)); then pg -m "$M110" -p 0 -n 128 > "$o.pagoda.json"; else lb -m "$M110" -p 0 -n 128 > "$o.llama.json"; fi ;;
    pp1900) if ((pg_side)); then pg -m "$M110" -p 1900 -n 0 > "$o.pagoda.json"; else lb -m "$M110" -p 1900 -n 0 > "$o.llama.json"; fi ;;
    tg128d1900)
      if ((pg_side)); then pg -m "$M110" -p 0 -n 128 --depth 1900 > "$o.pagoda.json"
      else lb -m "$M110" -p 0 -n 128 -d 1900 > "$o.llama.json"; fi ;;
    batched16)  # serving_bench has no warm-up of its own: a small untimed run first
      if ((pg_side)); then
        "$BUILD_DIR/bin/serving_bench" "$M110" 4 16 4 "$THREADS" 512 0 100 "$PAGODA_BATCHED_BF16" "$PAGODA_KV" "${ISA:-best}" "$PAGODA_MATMUL" > /dev/null
        "$BUILD_DIR/bin/serving_bench" "$M110" 16 64 64 "$THREADS" 512 0 100 "$PAGODA_BATCHED_BF16" "$PAGODA_KV" "${ISA:-best}" "$PAGODA_MATMUL" > "$o.pagoda.txt"
      else
        "$PEER_BIN/llama-batched-bench" -m "$M110" -t "$THREADS" --no-mmap -c 4096 -b 2048 -ub 512 \
          -npp 64 -ntg 64 -npl 16 --output-format jsonl 2>/dev/null > "$o.llama.jsonl"
      fi ;;
    http16)  # a fresh port per server: the previous one's connections linger in TIME_WAIT
      if ((pg_side)); then
        PORT=$(( BASE_PORT + 2 * r ))
        serve_bench "$o.pagoda.json" "$PAGODA" serve -m "$M110" --port "$PORT" --threads "$THREADS" --kv-dtype "$PAGODA_KV" \
          --matmul-precision "$PAGODA_MATMUL" "${ISA_FLAG[@]}" --http-threads 256 \
          "${BF16_FLAG[@]}"
      else
        PORT=$(( BASE_PORT + 2 * r + 1 ))
        serve_bench "$o.llama.json" "$PEER_BIN/llama-server" -m "$M110" --host 127.0.0.1 --port "$PORT" -t "$THREADS" \
          --no-mmap -np 16 -c 8192
      fi ;;
    pp512_q8|pp512_q4km)
      local f="$M110Q8"; [[ "$row" == pp512_q4km ]] && f="$M110Q4"
      if ((pg_side)); then pg -m "$f" -p 512 -n 0 > "$o.pagoda.json"; else lb -m "$f" -p 512 -n 0 > "$o.llama.json"; fi ;;
    tl_q8|tl_q4km)
      local f="$TLQ8"; [[ "$row" == tl_q4km ]] && f="$TLQ4"
      if ((pg_side)); then pg -m "$f" -p 256 -n 64 > "$o.pagoda.json"; else lb -m "$f" -p 256 -n 64 > "$o.llama.json"; fi ;;
    g3_pp512) if ((pg_side)); then pg -m "$G3" -p 512 -n 0 > "$o.pagoda.json"; else lb -m "$G3" -p 512 -n 0 > "$o.llama.json"; fi ;;
    g3_tg128) if ((pg_side)); then pg -m "$G3" -p 0 -n 128 > "$o.pagoda.json"; else lb -m "$G3" -p 0 -n 128 > "$o.llama.json"; fi ;;
    curve)  # first round only: one run per depth and engine
      (( r == 1 )) || return 0
      for d in 0 256 512 1024 1536 2000; do
        if ((pg_side)); then pg -m "$M110" -p 0 -n 32 --depth "$d" > "$o.d$d.pagoda.json"
        else lb -m "$M110" -p 0 -n 32 -d "$d" > "$o.d$d.llama.json"; fi
      done ;;
    *) die "unknown row $row" ;;
  esac
}

run_row() {  # row round: odd rounds Pagoda first, even rounds llama.cpp first
  if (( $2 % 2 )); then run_half "$1" "$2" pagoda; run_half "$1" "$2" llama
  else run_half "$1" "$2" llama; run_half "$1" "$2" pagoda; fi
}

IFS=',' read -r -a rows <<< "$ROWS"
for ((r = 1; r <= ROUNDS; ++r)); do
  for row in "${rows[@]}"; do
    log "round $r/$ROUNDS: $row"
    run_row "$row" "$r"
  done
done
python3 "$REPO/bench/peer/side_by_side_table.py" "$OUT" | tee "$OUT/table.md"
