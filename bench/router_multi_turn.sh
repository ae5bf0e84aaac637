#!/usr/bin/env bash
# KV-aware routing benchmark: two `pagoda serve` workers (KV events on) behind `pagoda router`,
# driven by `pagoda bench-serve --workload multi-turn` with more sessions than workers; the same
# run with --policy kv-aware and with --policy round-robin (the only difference), alternating,
# each on freshly started workers (empty caches). Prints one markdown table (medians of --runs).
#
#   bench/router_multi_turn.sh --model FILE.gguf [--runs 3] [--sessions 8] [--turns 6]
#       [--prompt-len 48] [--output-len 24] [--concurrency 4 | --rate SESSIONS_PER_S]
#       [--kv-cache-mem 192M] [--kv-dtype f16]
#       [--threads 1] [--port 18300] [--out DIR]
#
# Each worker gets --threads compute threads and its own core (taskset) when the machine has
# enough; the router and the client share what is left. --kv-cache-mem is per worker: small
# enough that one worker cannot hold every session (round-robin spreads each session over both
# workers, so each must hold them all; kv-aware keeps a session on one). The prefix hit rate is
# the workers' own (pagoda_prefix_cache_hit_tokens_total / ..._queried_tokens_total, summed),
# next to bench-serve's cached/prompt tokens. Raw JSON goes to --out (default
# bench/results/DATE-router/). Needs a Release build (BUILD_DIR, default build/).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
PAGODA="$BUILD_DIR/bin/pagoda"
MODEL=""
RUNS=3
SESSIONS=8
TURNS=6
PROMPT_LEN=48
OUTPUT_LEN=24
CONCURRENCY=4
RATE=0
KV_MEM=192M
KV_DTYPE=f16
THREADS=1
PORT=18300
OUT=""
SEED=1

die() { echo "router_multi_turn: $*" >&2; exit 1; }
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
    --rate) RATE="${2:?}"; shift 2 ;;
    --kv-cache-mem) KV_MEM="${2:?}"; shift 2 ;;
    --kv-dtype) KV_DTYPE="${2:?}"; shift 2 ;;
    --threads) THREADS="${2:?}"; shift 2 ;;
    --port) PORT="${2:?}"; shift 2 ;;
    --out) OUT="${2:?}"; shift 2 ;;
    --seed) SEED="${2:?}"; shift 2 ;;
    -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ -n "$MODEL" && -f "$MODEL" ]] || die "--model FILE.gguf is required (and must exist)"
[[ -x "$PAGODA" ]] || die "$PAGODA not found: build first (cmake --build build)"
command -v python3 >/dev/null || die "python3 is needed to summarize"
OUT="${OUT:-$REPO/bench/results/$(date +%Y-%m-%d)-router}"
mkdir -p "$OUT"
CORES=$(nproc)

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

pin() {  # the worker's core, when there are enough
  if [[ "$CORES" -ge 2 ]]; then echo "taskset -c $1"; fi
}

one_run() {  # POLICY RUN
  local policy="$1" run="$2" w1=$((PORT + 1)) w2=$((PORT + 2))
  local events='{"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:*","replay_endpoint":"tcp://127.0.0.1:*"}'
  $(pin 0) "$PAGODA" serve -m "$MODEL" --port "$w1" -t "$THREADS" --kv-cache-mem "$KV_MEM" --kv-dtype "$KV_DTYPE" --kv-events-config "$events" \
    >"$OUT/worker1-$policy-$run.log" 2>&1 &
  PIDS+=($!)
  $(pin 1) "$PAGODA" serve -m "$MODEL" --port "$w2" -t "$THREADS" --kv-cache-mem "$KV_MEM" --kv-dtype "$KV_DTYPE" --kv-events-config "$events" \
    >"$OUT/worker2-$policy-$run.log" 2>&1 &
  PIDS+=($!)
  wait_for "http://127.0.0.1:$w1" /health
  wait_for "http://127.0.0.1:$w2" /health
  "$PAGODA" router -m "$MODEL" --port "$PORT" --policy "$policy" \
    --worker "http://127.0.0.1:$w1" --worker "http://127.0.0.1:$w2" >"$OUT/router-$policy-$run.log" 2>&1 &
  PIDS+=($!)
  wait_for "http://127.0.0.1:$PORT" /health
  "$PAGODA" bench-serve --url "http://127.0.0.1:$PORT" --workload multi-turn --sessions "$SESSIONS" --turns "$TURNS" \
    --prompt-len "$PROMPT_LEN" --output-len "$OUTPUT_LEN" $LOAD --seed "$SEED" --json \
    >"$OUT/bench-$policy-$run.json" 2>"$OUT/bench-$policy-$run.txt"
  for w in "$w1" "$w2"; do curl -s "http://127.0.0.1:$w/metrics" >"$OUT/metrics-$policy-$run-$w.txt"; done
  curl -s "http://127.0.0.1:$PORT/metrics" >"$OUT/router-metrics-$policy-$run.txt"
  cleanup
}

if [[ "$RATE" != 0 ]]; then LOAD="--rate $RATE"; else LOAD="--concurrency $CONCURRENCY"; fi
for run in $(seq "$RUNS"); do
  for policy in kv-aware round-robin; do
    log "run $run: $policy"
    one_run "$policy" "$run"
  done
done

python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys, glob, re
out, runs = sys.argv[1], int(sys.argv[2])
def worker_hits(policy, run):
    hit = queried = 0
    for f in glob.glob(f"{out}/metrics-{policy}-{run}-*.txt"):
        text = open(f).read()
        hit += float(re.search(r"^pagoda_prefix_cache_hit_tokens_total (\S+)", text, re.M).group(1))
        queried += float(re.search(r"^pagoda_prefix_cache_queried_tokens_total (\S+)", text, re.M).group(1))
    return hit / queried if queried else 0.0
rows = {}
for policy in ("kv-aware", "round-robin"):
    cells = []
    for run in range(1, runs + 1):
        s = json.load(open(f"{out}/bench-{policy}-{run}.json"))["summary"]
        cells.append({"hit": worker_hits(policy, run), "usage_hit": s["prefix_cache_hit_rate"],
                      "ttft50": s["ttft_ms"]["p50"], "ttft99": s["ttft_ms"]["p99"], "rps": s["requests_per_s"],
                      "failed": s["failed"], "requests": s["requests"]})
    rows[policy] = {k: statistics.median(c[k] for c in cells) for k in cells[0]}
kv, rr = rows["kv-aware"], rows["round-robin"]
table = ["| policy | prefix hit rate (workers) | cached/prompt tokens (usage) | TTFT p50 ms | TTFT p99 ms | requests/s | rejected |",
         "|---|---|---|---|---|---|---|"]
for name, r in rows.items():
    table.append(f"| {name} | {r['hit']:.3f} | {r['usage_hit']:.3f} | {r['ttft50']:.1f} | {r['ttft99']:.1f} | {r['rps']:.3f} | {int(r['failed'])} of {int(r['requests'])} |")
ratio = lambda a, b: a / b if b else float("inf")
table.append(f"| **kv-aware / round-robin** | **{ratio(kv['hit'], rr['hit']):.2f}x** | {ratio(kv['usage_hit'], rr['usage_hit']):.2f}x | "
             f"**{ratio(rr['ttft50'], kv['ttft50']):.2f}x** better | {ratio(rr['ttft99'], kv['ttft99']):.2f}x better | "
             f"{ratio(kv['rps'], rr['rps']):.2f}x | |")
text = "\n".join(table)
open(f"{out}/table.md", "w").write(text + "\n")
print(text)
PY
