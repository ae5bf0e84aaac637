#!/usr/bin/env bash
# Decode speed with attention-score KV selection at a long context: a random llama-shaped
# model with a 4k context (make-model dsv2-mini-gqa: 4 layers, 2048 wide, 16 heads, 4 KV heads
# of 128, q8_0 weights), f16 KV, decode tokens/s after CTX tokens of context (`pagoda bench
# --decode-context`, median of REPS runs after a warm-up): full cache vs H2O / SnapKV with
# budget BUDGET vs a StreamingLLM window of the same size.
#   bench/kvselect_speed.sh [CTX=4000] [BUDGET=512] [REPS=3] [THREADS=2]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PAGODA="${PAGODA:-$REPO/build/bin/pagoda}"
CTX="${1:-4000}"
BUDGET="${2:-512}"
REPS="${3:-3}"
THREADS="${4:-2}"
DIR="${TMPDIR:-/tmp}/pagoda-mla-bench"  # shared with bench/mla_vs_gqa.sh
mkdir -p "$DIR"
[ -f "$DIR/dsv2-mini-gqa.gguf" ] || "$PAGODA" make-model --shape dsv2-mini-gqa --dtype q8_0 -q -o "$DIR/dsv2-mini-gqa.gguf" >/dev/null
run() {  # flags...
  "$PAGODA" bench -m "$DIR/dsv2-mini-gqa.gguf" -p 0 -n 32 -r "$REPS" -t "$THREADS" --decode-context "$CTX" -c 4096 \
    --kv-dtype f16 "$@" -q --json | python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["decode_tps"])'
}
echo "| KV (f16) | KV tokens held | decode tok/s @$CTX | vs full |"
echo "|---|---:|---:|---:|"
full=$(run)
echo "| full cache | $CTX | $full | 1.00x |"
for m in h2o snapkv; do
  t=$(run --kv-select "$m" --kv-budget "$BUDGET")
  echo "| $m budget $BUDGET | $BUDGET | $t | $(python3 -c "print('%.2fx' % ($t / $full))") |"
done
t=$(run --kv-window $((BUDGET - 16)) --kv-sinks 16)
echo "| StreamingLLM 16 + $((BUDGET - 16)) | $BUDGET | $t | $(python3 -c "print('%.2fx' % ($t / $full))") |"
