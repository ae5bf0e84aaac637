#!/usr/bin/env bash
# Live replay vs simulation (issue 31): the first N requests of a Mooncake-format trace, at
# reduced scale (--replay-block-tokens: tokens per hash id), sent at their timestamps x
# --time-scale through `pagoda router --policy kv-aware` to two `pagoda serve` workers on
# loopback (`bench-serve --workload trace`); then `pagoda replay --instances 2` predicts the
# same run with a step-cost profile measured here (`pagoda bench`: prefill and decode tokens/s
# of the model on one thread, as each worker runs; `serving_bench`: 8 sequences decoding
# together, for the cost of each extra one). Prints TTFT p50/p90 and the prefix
# hit rate of both, and how far the prediction is. Not a CI test.
#
#   bench/trace_live_vs_sim.sh --model FILE.gguf [--trace FILE] [--requests N] [--time-scale X]
#       [--replay-block-tokens B] [--kv-cache-mem 192M] [--out DIR]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PAGODA="${BUILD_DIR:-$REPO/build}/bin/pagoda"
MODEL=""
TRACE="${PAGODA_TEST_DATA:-$REPO/../shared}/traces/mooncake-synthetic.jsonl"
REQUESTS=40
SCALE=4
BLOCK=16
KV_MEM=192M
PORT=18400
OUT=""

die() { echo "trace_live_vs_sim: $*" >&2; exit 1; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="${2:?}"; shift 2 ;;
    --trace) TRACE="${2:?}"; shift 2 ;;
    --requests) REQUESTS="${2:?}"; shift 2 ;;
    --time-scale) SCALE="${2:?}"; shift 2 ;;
    --replay-block-tokens) BLOCK="${2:?}"; shift 2 ;;
    --kv-cache-mem) KV_MEM="${2:?}"; shift 2 ;;
    --port) PORT="${2:?}"; shift 2 ;;
    --out) OUT="${2:?}"; shift 2 ;;
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
[[ -n "$MODEL" && -f "$MODEL" ]] || die "--model FILE.gguf is required (and must exist)"
[[ -f "$TRACE" ]] || die "trace $TRACE not found"
[[ -x "$PAGODA" ]] || die "$PAGODA not found: build first"
OUT="${OUT:-/tmp/pagoda-trace-live-$(date +%s)}"
mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_for() { for _ in $(seq 600); do curl -sf "$1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done; die "$1 did not come up"; }

# The step-cost profile of one worker (1 thread): prefill and single-sequence decode tokens/s.
log "measuring the step-cost profile"
prefill_tps=$("$PAGODA" bench -m "$MODEL" -t 1 -p 512 -n 0 -r 2 --json --quiet | python3 -c 'import json,sys; print(json.load(sys.stdin)["prefill_tps"])')
decode_tps=$("$PAGODA" bench -m "$MODEL" -t 1 -p 0 -n 64 -r 2 --json --quiet | python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_tps"])')
# Each further decoding sequence's share of a decode step: 8 sequences decoding together
# (serving_bench, in process, 1 thread) take 8 / (their tokens/s) per step.
batch_tps=$("${BUILD_DIR:-$REPO/build}/bin/serving_bench" "$MODEL" 8 16 64 1 512 0 100 0 f16 |
  awk '$1 == "8" { print $4 }')
[[ -n "$batch_tps" ]] || die "serving_bench gave no batched tokens/s"
batch_cost=$(python3 -c "import sys; d, b = float(sys.argv[1]), float(sys.argv[2]); print(max(0.0, (8 / b * d - 1) / 7))" \
  "$decode_tps" "$batch_tps")
log "prefill $prefill_tps tok/s, decode $decode_tps tok/s, 8 decoding together $batch_tps tok/s: +$batch_cost per extra sequence"

events='{"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:*","replay_endpoint":"tcp://127.0.0.1:*"}'
for w in 1 2; do
  taskset -c $((w - 1)) "$PAGODA" serve -m "$MODEL" --port $((PORT + w)) -t 1 -c 4096 --kv-cache-mem "$KV_MEM" \
    --kv-events-config "$events" >"$OUT/worker$w.log" 2>&1 &
  PIDS+=($!)
done
wait_for "http://127.0.0.1:$((PORT + 1))"
wait_for "http://127.0.0.1:$((PORT + 2))"
capacity=$(sed -n 's/.*capacity \([0-9]*\) tokens.*/\1/p' "$OUT/worker1.log" | head -n 1)
[[ -n "$capacity" ]] || die "no KV capacity in $OUT/worker1.log"
"$PAGODA" router -m "$MODEL" --port "$PORT" --policy kv-aware --worker "http://127.0.0.1:$((PORT + 1))" \
  --worker "http://127.0.0.1:$((PORT + 2))" >"$OUT/router.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$PORT"
log "live: $REQUESTS requests, arrivals x $SCALE, $BLOCK tokens per hash id, $capacity KV tokens per worker"
"$PAGODA" bench-serve --url "http://127.0.0.1:$PORT" --workload trace --trace "$TRACE" --max-requests "$REQUESTS" \
  --time-scale "$SCALE" --replay-block-tokens "$BLOCK" --timeout 1200 --json >"$OUT/live.json" 2>"$OUT/live.txt"
cleanup
log "simulated"
"$PAGODA" replay --trace "$TRACE" --max-requests "$REQUESTS" --time-scale "$SCALE" --replay-block-tokens "$BLOCK" \
  --instances 2 --policy kv-aware --capacity-tokens "$capacity" --block-size 16 --prefill-tps "$prefill_tps" \
  --decode-tps "$decode_tps" --decode-batch-cost "$batch_cost" --max-num-batched-tokens 512 --step-budget-ms 100 --json >"$OUT/sim.json"
python3 - "$OUT" "$prefill_tps" "$decode_tps" "$batch_cost" <<'PY'
import json, sys
out, ptps, dtps, cost = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
live = json.load(open(f"{out}/live.json"))["summary"]
sim = json.load(open(f"{out}/sim.json"))
rows = [("TTFT p50", live["ttft_ms"]["p50"] / 1e3, sim["ttft_s"]["p50"], "s"),
        ("TTFT p90", live["ttft_ms"]["p90"] / 1e3, sim["ttft_s"]["p90"], "s"),
        ("time between tokens p50", live["itl_ms"]["p50"] / 1e3, sim["tbt_s"]["p50"], "s"),
        ("prefix hit rate", live["prefix_cache_hit_rate"], sim["hit_rate"], "")]
lines = [f"profile: prefill {ptps:.0f} tok/s, decode {dtps:.1f} tok/s (+{cost:.2f} per extra decoding sequence) per worker (1 thread); "
         f"live {live['succeeded']} of {live['requests']} requests succeeded",
         "| | live (2 workers + router) | simulated | simulated ÷ live |", "|---|---:|---:|---:|"]
for name, l, s, unit in rows:
    lines.append(f"| {name} | {l:.3f}{unit} | {s:.3f}{unit} | {s / l if l else float('nan'):.2f} |")
text = "\n".join(lines)
open(f"{out}/table.md", "w").write(text + "\n")
print(text)
PY
