#!/usr/bin/env bash
# Attention-score KV selection (H2O, SnapKV: --kv-select) against the full f32 cache, next to
# StreamingLLM windows and quantized KV at (about) equal memory: tokens kept of CTX, KV bytes
# per sequence, mean KL divergence and top-1 agreement (`pagoda perplexity`: each CTX chunk's
# first half is the prompt, SnapKV selects once after it; the second half is scored, fed in
# chunks that evict before each, as decoding would).
#   bench/kvselect_quality.sh MODEL.gguf TEXT [CTX=256] [THREADS=1] [CHUNKS=0: all]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PAGODA="${PAGODA:-$REPO/build/bin/pagoda}"
MODEL="${1:?usage: bench/kvselect_quality.sh MODEL.gguf TEXT [CTX] [THREADS] [CHUNKS]}"
TEXT="${2:?usage: bench/kvselect_quality.sh MODEL.gguf TEXT [CTX] [THREADS] [CHUNKS]}"
CTX="${3:-256}"
THREADS="${4:-1}"
CHUNKS="${5:-0}"
extra=""
[ "$CHUNKS" -gt 0 ] && extra="--chunks $CHUNKS"
bpt() { "$PAGODA" kvcalc "$MODEL" --kv-dtype "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["bytes_per_token"])'; }
full=$(bpt f32)
echo "| KV | tokens kept of $CTX | KV bytes / sequence | vs full f32 | mean KL vs full f32 | top-1 agreement |"
echo "|---|---:|---:|---:|---:|---:|"
row() {  # label dtype kept flags...
  local label="$1" dtype="$2" kept="$3"; shift 3
  local per_token; per_token=$(bpt "$dtype")
  local q; q=$("$PAGODA" perplexity -m "$MODEL" -f "$TEXT" -c "$CTX" --kv-dtype "$dtype" "$@" $extra --json -t "$THREADS")
  python3 -c "
import json
d = json.loads('''$q''')
kl = d.get('mean_kl_divergence', 0.0); top1 = d.get('top1_agreement', 1.0)
b = float('$per_token') * $kept
print(f'| $label | $kept | {b:,.0f} | {b / (float(\"$full\") * $CTX) * 100:.0f}% | {kl:.6f} | {100 * top1:.2f}% |')"
}
# Budgets: 10/20/50% of CTX, and the fractions int4 (22%) and int8 (31%) KV take of f32 (equal
# memory to them). StreamingLLM rows: 16 sinks + whole blocks of at least 32 (the window is at
# least two blocks), so its smallest is 48 tokens; it is shown where it fits the budget.
for pct in 10 20 22 31 50; do
  budget=$((CTX * pct / 100))
  row "H2O budget $budget ($pct%), f32" f32 "$budget" --kv-select h2o --kv-budget "$budget"
  row "SnapKV budget $budget ($pct%), f32" f32 "$budget" --kv-select snapkv --kv-budget "$budget"
  win=$(( (budget - 16) / 16 * 16 ))
  if [ "$win" -ge 32 ]; then row "StreamingLLM 16 + $win, f32" f32 $((16 + win)) --kv-window "$win" --kv-sinks 16; fi
done
row "full f16" f16 "$CTX"
row "full int8" int8 "$CTX"
row "full int4" int4 "$CTX"
row "H2O budget $((CTX / 2)), int8" int8 $((CTX / 2)) --kv-select h2o --kv-budget $((CTX / 2))
