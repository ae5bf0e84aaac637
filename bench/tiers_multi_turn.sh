#!/usr/bin/env bash
# Tiered KV cache benchmark: one `pagoda serve` with a small block pool, driven by
# `pagoda bench-serve --workload multi-turn` whose sessions' working set is several times the
# pool; the same run with tiers below the pool (--kv-host-mem, --kv-disk-dir) and without
# (pool only), alternating, each on a fresh server (empty caches, an emptied disk directory).
# Prints one markdown table (medians of --runs): prefix hit rate, TTFT p50/p99, requests/s.
#
#   bench/tiers_multi_turn.sh --model FILE.gguf [--runs 3] [--sessions 16] [--turns 6]
#       [--prompt-len 64] [--output-len 16] [--concurrency 2] [--kv-cache-mem 64M]
#       [--kv-host-mem 1G] [--kv-disk-dir DIR] [--kv-disk-mem 4G] [--kv-dtype f16]
#       [--threads 2] [--port 18400] [--out DIR] [--no-interleave]
#
# Sessions take turns (bench-serve --interleave): a session's next turn is sent after every
# other session has had its turn, as users of a chat service do, so the pool only keeps the
# newest few histories and the working set between a session's turns is all the sessions'.
# (--no-interleave: each of the --concurrency workers runs one session to its end; only
# `concurrency` sessions are alive at once and a small pool keeps them: not a tier test.)
# The hit rate is the server's own (pagoda_prefix_cache_hit_tokens_total over
# ..._queried_tokens_total: with tiers it counts the tokens loaded from them), next to
# bench-serve's cached/prompt tokens from the usage field. Needs a Release build (BUILD_DIR).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
PAGODA="$BUILD_DIR/bin/pagoda"
MODEL=""
RUNS=3
SESSIONS=16
TURNS=6
PROMPT_LEN=64
OUTPUT_LEN=16
CONCURRENCY=2
KV_MEM=64M
HOST_MEM=1G
DISK_DIR=""
DISK_MEM=4G
KV_DTYPE=f16
THREADS=2
PORT=18400
OUT=""
SEED=1
INTERLEAVE=--interleave

die() { echo "tiers_multi_turn: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="${2:?}"; shift 2 ;;
    --runs) RUNS="${2:?}"; shift 2 ;;
    --sessions) SESSIONS="${2:?}"; shift 2 ;;
    --turns) TURNS="${2:?}"; shift 2 ;;
    --prompt-len) PROMPT_LEN="${2:?}"; shift 2 ;;
    --output-len) OUTPUT_LEN="${2:?}"; shift 2 ;;
    --concurrency) CONCURRENCY="${2:?}"; shift 2 ;;
    --kv-cache-mem) KV_MEM="${2:?}"; shift 2 ;;
    --kv-host-mem) HOST_MEM="${2:?}"; shift 2 ;;
    --kv-disk-dir) DISK_DIR="${2:?}"; shift 2 ;;
    --kv-disk-mem) DISK_MEM="${2:?}"; shift 2 ;;
    --kv-dtype) KV_DTYPE="${2:?}"; shift 2 ;;
    --threads) THREADS="${2:?}"; shift 2 ;;
    --port) PORT="${2:?}"; shift 2 ;;
    --out) OUT="${2:?}"; shift 2 ;;
    --seed) SEED="${2:?}"; shift 2 ;;
    --no-interleave) INTERLEAVE=""; shift ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ -n "$MODEL" && -f "$MODEL" ]] || die "--model FILE.gguf is required (and must exist)"
[[ -x "$PAGODA" ]] || die "$PAGODA not found: build first (cmake --build build)"
command -v python3 >/dev/null || die "python3 is needed to summarize"
OUT="${OUT:-$REPO/bench/results/$(date +%Y-%m-%d)-tiers}"
mkdir -p "$OUT"
DISK_DIR="${DISK_DIR:-$OUT/disk}"

PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
}
trap cleanup EXIT

wait_for() {  # URL PATH: until it answers 200 (60 s at most)
  for _ in $(seq 600); do
    curl -sf "$1$2" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  die "$1$2 did not come up"
}

one_run() {  # MODE RUN
  local mode="$1" run="$2" tiers=""
  if [[ "$mode" == tiers ]]; then
    rm -rf "$DISK_DIR" && mkdir -p "$DISK_DIR"
    tiers="--kv-host-mem $HOST_MEM --kv-disk-dir $DISK_DIR --kv-disk-mem $DISK_MEM"
  fi
  # shellcheck disable=SC2086
  "$PAGODA" serve -m "$MODEL" --port "$PORT" -t "$THREADS" --kv-cache-mem "$KV_MEM" --kv-dtype "$KV_DTYPE" $tiers \
    >"$OUT/serve-$mode-$run.log" 2>&1 &
  PIDS+=($!)
  wait_for "http://127.0.0.1:$PORT" /health
  "$PAGODA" bench-serve --url "http://127.0.0.1:$PORT" --workload multi-turn --sessions "$SESSIONS" --turns "$TURNS" \
    --prompt-len "$PROMPT_LEN" --output-len "$OUTPUT_LEN" --concurrency "$CONCURRENCY" --seed "$SEED" ${INTERLEAVE:+"$INTERLEAVE"} --json \
    >"$OUT/bench-$mode-$run.json" 2>"$OUT/bench-$mode-$run.txt"
  curl -s "http://127.0.0.1:$PORT/metrics" >"$OUT/metrics-$mode-$run.txt"
  cleanup
}

for run in $(seq "$RUNS"); do
  for mode in tiers pool-only; do
    log "run $run: $mode"
    one_run "$mode" "$run"
  done
done

python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys, re
out, runs = sys.argv[1], int(sys.argv[2])
def server(mode, run):
    text = open(f"{out}/metrics-{mode}-{run}.txt").read()
    get = lambda name: float(re.search(rf"^{name} (\S+)", text, re.M).group(1))
    q = get("pagoda_prefix_cache_queried_tokens_total")
    return get("pagoda_prefix_cache_hit_tokens_total") / q if q else 0.0
rows = {}
for mode in ("tiers", "pool-only"):
    cells = []
    for run in range(1, runs + 1):
        s = json.load(open(f"{out}/bench-{mode}-{run}.json"))["summary"]
        cells.append({"hit": server(mode, run), "usage_hit": s["prefix_cache_hit_rate"], "ttft50": s["ttft_ms"]["p50"],
                      "ttft99": s["ttft_ms"]["p99"], "rps": s["requests_per_s"], "failed": s["failed"],
                      "requests": s["requests"]})
    rows[mode] = {k: statistics.median(c[k] for c in cells) for k in cells[0]}
t, p = rows["tiers"], rows["pool-only"]
ratio = lambda a, b: a / b if b else float("inf")
table = ["| KV | prefix hit rate (server) | cached/prompt tokens (usage) | TTFT p50 ms | TTFT p99 ms | requests/s | failed |",
         "|---|---|---|---|---|---|---|"]
for name, r in rows.items():
    table.append(f"| {name} | {r['hit']:.3f} | {r['usage_hit']:.3f} | {r['ttft50']:.1f} | {r['ttft99']:.1f} | {r['rps']:.3f} | {int(r['failed'])} of {int(r['requests'])} |")
table.append(f"| **tiers / pool only** | **{ratio(t['hit'], p['hit']):.2f}x** | {ratio(t['usage_hit'], p['usage_hit']):.2f}x | "
             f"**{ratio(p['ttft50'], t['ttft50']):.2f}x** better | {ratio(p['ttft99'], t['ttft99']):.2f}x better | "
             f"{ratio(t['rps'], p['rps']):.2f}x | |")
text = "\n".join(table)
open(f"{out}/table.md", "w").write(text + "\n")
print(text)
PY
