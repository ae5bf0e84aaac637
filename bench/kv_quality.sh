#!/usr/bin/env bash
# Quality and capacity of every KV dtype on one model: perplexity, mean KL divergence and
# top-1 agreement against an f32 KV cache (`pagoda perplexity`), and bytes per token
# (`pagoda kvcalc`). Prints one markdown table.
#   bench/kv_quality.sh MODEL.gguf TEXT [CTX=128]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PAGODA="${PAGODA:-$REPO/build/bin/pagoda}"
MODEL="${1:?usage: bench/kv_quality.sh MODEL.gguf TEXT [CTX]}"
TEXT="${2:?usage: bench/kv_quality.sh MODEL.gguf TEXT [CTX]}"
CTX="${3:-128}"
echo "| KV dtype | bytes/token | capacity vs f32 | perplexity | Δ perplexity vs f32 KV | mean KL vs f32 KV | top-1 agreement |"
echo "|---|---:|---:|---:|---:|---:|---:|"
f32_bytes=$("$PAGODA" kvcalc "$MODEL" --kv-dtype f32 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["bytes_per_token"])')
for dtype in f32 f16 bf16 fp8-e4m3 fp8-e5m2 int8 int4; do
  bytes=$("$PAGODA" kvcalc "$MODEL" --kv-dtype "$dtype" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["bytes_per_token"])')
  "$PAGODA" perplexity -m "$MODEL" -f "$TEXT" -c "$CTX" --kv-dtype "$dtype" --json | python3 -c "
import json, sys
d = json.load(sys.stdin)
base = d.get('perplexity_f32_kv', d['perplexity'])
kl = d.get('mean_kl_divergence', 0.0)
top1 = d.get('top1_agreement', 1.0)
print(f\"| $dtype | {float('$bytes'):.0f} | {float('$f32_bytes') / float('$bytes'):.2f}x | {d['perplexity']:.4f} | {d['perplexity'] - base:+.4f} | {kl:.6f} | {100 * top1:.2f}% |\")"
done
