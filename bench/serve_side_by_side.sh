#!/usr/bin/env bash
# Serving benchmark: Pagoda's HTTP server vs llama.cpp's, measured over HTTP by `pagoda bench-serve`.
# Prints one markdown table of ratios. The peer is native llama-server (bench/peer/build_native.sh,
# in $PAGODA_PEER_CACHE, default /work/cache: -np SLOTS, --no-mmap, --no-cache-prompt for the
# no-prefix-cache runs) unless --peer node (node-llama-cpp's bindings, bench/peer/llama_server.mjs).
#
#   bench/serve_side_by_side.sh --model FILE.gguf [--out DIR] [--only pagoda|llama] [--peer native|node]
#       [--concurrency 1,4,16,64] [--output-len 64] [--prompt-len 32] [--requests-per-client 2] [--min-requests 16]
#       [--sessions 8] [--turns 6] [--turn-len 24] [--system-prompt-len 64] [--threads 2] [--port 18181]
#       [--rounds 1]
#
# Runs, each server started alone, waited for on /health and killed afterwards:
#   pagoda serve                    random workload at each concurrency (closed loop), multi-turn
#   pagoda serve --max-num-seqs 1   random workload at each concurrency (one request at a time)
#   pagoda serve --no-prefix-cache  multi-turn
#   llama_server.mjs --slots 16     random workload at each concurrency, multi-turn
#   llama_server.mjs --slots 16 --no-prefix-cache   multi-turn
#   llama_server.mjs --slots 1      random workload at each concurrency
# Every random run sends concurrency x --requests-per-client requests (at least --min-requests) of
# --output-len tokens (ignore_eos), seeded --seed + concurrency (so a level's prompts are not the
# previous level's, cached). --rounds N repeats all of the above N times (Pagoda's servers first in
# odd rounds, llama.cpp's first in even ones), into OUT/r1 .. OUT/rN; the table gives rates as
# medians over rounds and ratios as medians of per-round ratios (min-max), and says when a cell
# has fewer rounds (a server that died, a failed run). Pagoda serves with --kv-dtype f16
# (PAGODA_KV=... to change), llama-server's default KV format. Raw
# bench-serve JSON goes to --out (default
# bench/results/DATE-serve/), the table to stdout and OUT/table.md. Needs a Release build
# (BUILD_DIR, default build/; SERVE_BIN=... to serve from another pagoda binary) and Node >= 20. Run on an otherwise idle machine.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
PAGODA="$BUILD_DIR/bin/pagoda"
SERVE_BIN="${SERVE_BIN:-$PAGODA}"  # the binary whose `serve` is measured (default: the same build)
PEER="$REPO/bench/peer"
MODEL=""
OUT=""
ONLY="both"
CONCURRENCY="1,4,16,64"
OUTPUT_LEN=64
PROMPT_LEN=32
PER_CLIENT=2
MIN_REQUESTS=16
SESSIONS=8
TURNS=6
TURN_LEN=24
SYSTEM_LEN=64
THREADS=2
PORT=18181
SEED=1
PEER_KIND=native
ROUNDS=1
NATIVE_SERVER="${NATIVE_SERVER:-${PAGODA_PEER_CACHE:-/work/cache}/llama.cpp/build/bin/llama-server}"  # NATIVE_SERVER=... for another build (build-avx2/)

die() { echo "serve_side_by_side: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="${2:?}"; shift 2 ;;
    --out) OUT="${2:?}"; shift 2 ;;
    --only) ONLY="${2:?}"; shift 2 ;;
    --concurrency) CONCURRENCY="${2:?}"; shift 2 ;;
    --output-len) OUTPUT_LEN="${2:?}"; shift 2 ;;
    --prompt-len) PROMPT_LEN="${2:?}"; shift 2 ;;
    --requests-per-client) PER_CLIENT="${2:?}"; shift 2 ;;
    --min-requests) MIN_REQUESTS="${2:?}"; shift 2 ;;
    --sessions) SESSIONS="${2:?}"; shift 2 ;;
    --turns) TURNS="${2:?}"; shift 2 ;;
    --turn-len) TURN_LEN="${2:?}"; shift 2 ;;
    --system-prompt-len) SYSTEM_LEN="${2:?}"; shift 2 ;;
    --threads) THREADS="${2:?}"; shift 2 ;;
    --port) PORT="${2:?}"; shift 2 ;;
    --seed) SEED="${2:?}"; shift 2 ;;
    --peer) PEER_KIND="${2:?}"; shift 2 ;;
    --rounds) ROUNDS="${2:?}"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ -n "$MODEL" ]] || die "--model FILE.gguf is required"
[[ -f "$MODEL" ]] || die "no such model file: $MODEL"
[[ "$ONLY" =~ ^(both|pagoda|llama)$ ]] || die "--only must be pagoda or llama"
[[ -x "$PAGODA" ]] || die "$PAGODA not found: build first (cmake --build build)"
[[ "$PEER_KIND" =~ ^(native|node)$ ]] || die "--peer must be native or node"
if [[ "$PEER_KIND" == native && "$ONLY" != pagoda ]]; then
  [[ -x "$NATIVE_SERVER" ]] || die "$NATIVE_SERVER not found: run bench/peer/build_native.sh first"
fi
command -v node >/dev/null || die "node (>= 20) is not installed"
if [[ "$PEER_KIND" == node && "$ONLY" != pagoda && ! -d "$PEER/node_modules" ]]; then
  log "installing bench/peer (npm ci)"
  (cd "$PEER" && npm ci --silent) || die "npm ci in bench/peer failed"
fi
OUT="${OUT:-$REPO/bench/results/$(date +%Y-%m-%d)-serve}"
mkdir -p "$OUT"
IFS=, read -r -a LEVELS <<<"$CONCURRENCY"
URL="http://127.0.0.1:$PORT"

SERVER_PID=""
stop_server() {
  if [[ -n "$SERVER_PID" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    # llama-server has hung in its shutdown (asleep, port still bound; 2026-12-06): 30 s, then KILL.
    for _ in $(seq 1 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
    # The next server needs the port: wait until nothing listens on it any more.
    for _ in $(seq 1 120); do
      ss -Hltn "sport = :$PORT" 2>/dev/null | grep -q . || break
      sleep 0.5
    done
  fi
}
trap stop_server EXIT

# start_server NAME CMD...: starts it in the background on the next port (PORT, PORT + 1, ...:
# the previous server's connections linger in TIME_WAIT, and llama-server does not bind over
# them), waits for GET /health. CMD reads the port from $PORT when it runs.
NEXT_PORT="$PORT"
start_server() {
  local name="$1"; shift
  PORT="$NEXT_PORT"
  NEXT_PORT=$((NEXT_PORT + 1))
  URL="http://127.0.0.1:$PORT"
  curl -sf "$URL/health" >/dev/null 2>&1 && die "port $PORT is already in use"
  log "starting $name: $*"
  "$@" >"$OUT/$name.server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    curl -sf "$URL/health" >/dev/null 2>&1 && break
    kill -0 "$SERVER_PID" 2>/dev/null || die "$name exited; see $OUT/$name.server.log"
    sleep 0.5
  done
  curl -sf "$URL/health" >/dev/null 2>&1 || die "$name did not become healthy; see $OUT/$name.server.log"
  # Warm-up (not recorded): a couple of short requests.
  "$PAGODA" bench-serve --url "$URL" --num-requests 2 --prompt-len 8 --output-len 4 --json >/dev/null 2>&1 || true
}

bench() {  # bench FILE SEED ARGS...: one bench-serve run, JSON kept in OUT/FILE
  local file="$1" seed="$2"; shift 2
  log "  bench-serve $* -> $file"
  "$PAGODA" bench-serve --url "$URL" --seed "$seed" --json "$@" >"$OUT/$file" 2>"$OUT/${file%.json}.log" ||
    log "  (bench-serve exited non-zero; see $OUT/${file%.json}.log)"
}

random_levels() {  # random_levels PREFIX: the random workload at every concurrency level
  local prefix="$1" c n
  for c in "${LEVELS[@]}"; do
    n=$(( c * PER_CLIENT )); (( n < MIN_REQUESTS )) && n=$MIN_REQUESTS
    bench "$prefix-c$c.json" $((SEED + c)) --workload random --concurrency "$c" --num-requests "$n" \
      --prompt-len "$PROMPT_LEN" --output-len "$OUTPUT_LEN"
  done
}

multi_turn() {  # multi_turn FILE
  bench "$1" "$SEED" --workload multi-turn --sessions "$SESSIONS" --turns "$TURNS" --concurrency "$SESSIONS" \
    --system-prompt-len "$SYSTEM_LEN" --prompt-len "$TURN_LEN" --output-len "$OUTPUT_LEN"
}

pagoda_half() {
    # The same KV element format as llama-server's default (f16) unless PAGODA_KV says otherwise.
    pagoda_serve() { exec "$SERVE_BIN" serve -m "$MODEL" --port "$PORT" --threads "$THREADS" --http-threads 256 \
      --kv-dtype "${PAGODA_KV:-f16}" "$@"; }
    start_server pagoda pagoda_serve
    random_levels pagoda
    multi_turn pagoda-mt-on.json
    stop_server
    start_server pagoda-seq1 pagoda_serve --max-num-seqs 1
    random_levels pagoda-seq1
    stop_server
    start_server pagoda-nocache pagoda_serve --no-prefix-cache
    multi_turn pagoda-mt-off.json
    stop_server
}
llama_half() {
    # llama-server: -c is shared by the slots, 2,048 tokens each: a 6-turn chat's history reaches
    # ~1,100 tokens, which 512 or 1,024 a slot refuse. (A run on 2026-12-06 saw its decode many
    # times slower at 2,048 a slot; re-measured alone the same day, 1 request at a time decodes
    # alike at 512 and 2,048 a slot, 165-175 tok/s.)
    if [[ "$PEER_KIND" == native ]]; then
      llama() { local slots="$1"; shift
        exec "$NATIVE_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -t "$THREADS" --no-mmap -np "$slots" \
          -c $(( slots * 2048 )) "$@"; }
      NOCACHE=--no-cache-prompt
    else
      llama() { local slots="$1"; shift
        exec node "$PEER/llama_server.mjs" --model "$MODEL" --port "$PORT" --threads "$THREADS" --slots "$slots" "$@"; }
      NOCACHE=--no-prefix-cache
    fi
    start_server llama-s16 llama 16
    random_levels llama-s16
    multi_turn llama-mt-on.json
    stop_server
    start_server llama-nocache llama 16 "$NOCACHE"
    multi_turn llama-mt-off.json
    stop_server
    start_server llama-s1 llama 1
    random_levels llama-s1
    stop_server
}

# Odd rounds run Pagoda's servers first, even rounds llama.cpp's: neither side always meets a
# machine fresh from idle (or warm from the other's run).
OUT_BASE="$OUT"
for round in $(seq 1 "$ROUNDS"); do
  if (( ROUNDS > 1 )); then OUT="$OUT_BASE/r$round"; mkdir -p "$OUT"; log "round $round/$ROUNDS"; fi
  if (( round % 2 )); then order="pagoda llama"; else order="llama pagoda"; fi
  for side in $order; do
    if [[ "$side" == pagoda && "$ONLY" != llama ]]; then pagoda_half; fi
    if [[ "$side" == llama && "$ONLY" != pagoda ]]; then llama_half; fi
  done
done
OUT="$OUT_BASE"

node "$PEER/serve_table.mjs" --dir "$OUT" --concurrency "$CONCURRENCY" --model "$(basename "$MODEL")" |
  tee "$OUT/table.md"
log "raw results in $OUT"
