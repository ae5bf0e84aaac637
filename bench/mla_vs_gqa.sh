#!/usr/bin/env bash
# MLA (deepseek2, DeepSeek-V2-Lite's attention geometry) vs the equivalent GQA llama model
# (same width, layers, heads and FFN; 4 kv heads of 128): KV bytes per token, sequences of 4k
# tokens that fit in one pool (`pagoda kvcalc`), and decode tokens/s at 1k and 4k context
# (`pagoda bench --decode-context`, median of REPS runs). Random q8_0 weights.
#   bench/mla_vs_gqa.sh [REPS=3] [THREADS=2]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PAGODA="${PAGODA:-$REPO/build/bin/pagoda}"
REPS="${1:-3}"
THREADS="${2:-2}"
DIR="${TMPDIR:-/tmp}/pagoda-mla-bench"
mkdir -p "$DIR"
for shape in dsv2-lite dsv2-lite-gqa; do
  [ -f "$DIR/$shape.gguf" ] || "$PAGODA" make-model --shape "$shape" --dtype q8_0 -q -o "$DIR/$shape.gguf" >/dev/null
done
echo "| model | attention | KV bytes/token (f16) | 4k-token sequences in 8 GiB of KV (f16) | decode tok/s @1k | decode tok/s @4k |"
echo "|---|---|---:|---:|---:|---:|"
for shape in dsv2-lite dsv2-lite-gqa; do
  m="$DIR/$shape.gguf"
  plan=$("$PAGODA" kvcalc "$m" --kv-dtype f16 --mem 8G --weights 0 --context 4096 --json)
  bpt=$(echo "$plan" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["bytes_per_token"])')
  seqs=$(echo "$plan" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["max_sequences"])')
  kind=$(echo "$plan" | python3 -c 'import json,sys; print(json.load(sys.stdin)["model"]["attention"])')
  tps=()
  for ctx in 1024 4096; do
    tps+=("$("$PAGODA" bench -m "$m" -p 0 -n 16 -r "$REPS" -t "$THREADS" --decode-context "$ctx" --kv-dtype f16 -q --json |
             python3 -c 'import json,sys; print(f"{json.load(sys.stdin)[\"decode_tps\"]:.2f}")')")
  done
  echo "| $shape | $kind | $bpt | $seqs | ${tps[0]} | ${tps[1]} |"
done
