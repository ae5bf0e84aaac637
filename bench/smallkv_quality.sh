#!/usr/bin/env bash
# Smaller KV at equal memory: StreamingLLM windows (--kv-window/--kv-sinks) vs quantized KV
# formats on one model, against the full f32 cache: KV bytes per sequence at CTX tokens, mean KL
# divergence and top-1 agreement (`pagoda perplexity`, second half of each CTX chunk scored),
# and decode tokens/s after CTX tokens of context (`pagoda bench --decode-context`, median).
#   bench/smallkv_quality.sh MODEL.gguf TEXT [CTX=256] [REPS=3]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PAGODA="${PAGODA:-$REPO/build/bin/pagoda}"
MODEL="${1:?usage: bench/smallkv_quality.sh MODEL.gguf TEXT [CTX] [REPS]}"
TEXT="${2:?usage: bench/smallkv_quality.sh MODEL.gguf TEXT [CTX] [REPS]}"
CTX="${3:-256}"
REPS="${4:-3}"
B=16
bpt() { "$PAGODA" kvcalc "$MODEL" --kv-dtype "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["bytes_per_token"])'; }
echo "| KV | tokens kept of $CTX | KV bytes / sequence | vs full f32 | mean KL vs full f32 | top-1 agreement | decode tok/s @$CTX |"
echo "|---|---:|---:|---:|---:|---:|---:|"
row() {  # label dtype window sinks
  local label="$1" dtype="$2" window="$3" sinks="$4" kept flags=""
  kept=$CTX
  if [ "$window" -gt 0 ]; then flags="--kv-window $window --kv-sinks $sinks"; kept=$((window + sinks)); fi
  local per_token; per_token=$(bpt "$dtype")
  local full; full=$(bpt f32)
  local q; q=$("$PAGODA" perplexity -m "$MODEL" -f "$TEXT" -c "$CTX" --kv-dtype "$dtype" $flags --json -t 1)
  local tps; tps=$("$PAGODA" bench -m "$MODEL" -p 0 -n 64 -r "$REPS" -t 1 --decode-context "$CTX" -c $((CTX + 80)) \
                   --kv-dtype "$dtype" $flags -q --json | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["decode_tps"])')
  python3 -c "
import json
d = json.loads('''$q''')
kl = d.get('mean_kl_divergence', 0.0); top1 = d.get('top1_agreement', 1.0)
b = float('$per_token') * $kept
print(f'| $label | $kept | {b:.0f} | {b / (float(\"$full\") * $CTX) * 100:.0f}% | {kl:.6f} | {100 * top1:.2f}% | $tps |')"
}
row "full f32" f32 0 0
row "full f16" f16 0 0
row "StreamingLLM 16 + 112, f32" f32 112 16
row "full int8" int8 0 0
row "StreamingLLM 16 + 64, f32" f32 64 16
row "full int4" int4 0 0
row "StreamingLLM 16 + 48, f32" f32 48 16
row "StreamingLLM 16 + 112, int8" int8 112 16
