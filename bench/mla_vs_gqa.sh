#!/usr/bin/env bash
# MLA (deepseek2 with DeepSeek-V2-Lite's attention: 16 heads, kv_lora_rank 512, rope 64, nope
# 128, v 128) vs the equivalent GQA llama model (same width, heads and FFN; 4 kv heads of 128).
#  * capacity: KV bytes per token and 4k-token sequences in 8 GiB of KV, for the full 27-layer
#    models (`pagoda kvcalc` on their config.json, written here);
#  * speed: decode tokens/s at 1k and 4k context (`pagoda bench --decode-context`, median of REPS
#    runs after a warm-up) on 4-layer versions (make-model dsv2-mini / dsv2-mini-gqa, q8_0
#    weights): per layer the same attention work as the full models.
#   bench/mla_vs_gqa.sh [REPS=2] [THREADS=2]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PAGODA="${PAGODA:-$REPO/build/bin/pagoda}"
REPS="${1:-2}"
THREADS="${2:-2}"
DIR="${TMPDIR:-/tmp}/pagoda-mla-bench"
mkdir -p "$DIR/mla" "$DIR/gqa"
common='"hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16, "intermediate_size": 1408, "vocab_size": 32000, "max_position_embeddings": 4096'
echo "{\"model_type\": \"deepseek_v2\", $common, \"num_key_value_heads\": 16, \"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64, \"qk_nope_head_dim\": 128, \"v_head_dim\": 128}" > "$DIR/mla/config.json"
echo "{\"model_type\": \"llama\", $common, \"num_key_value_heads\": 4, \"head_dim\": 128}" > "$DIR/gqa/config.json"
for shape in dsv2-mini dsv2-mini-gqa; do
  [ -f "$DIR/$shape.gguf" ] || "$PAGODA" make-model --shape "$shape" --dtype q8_0 -q -o "$DIR/$shape.gguf" >/dev/null
done
echo "| model | attention | KV bytes/token (f16, 27 layers) | 4k-token sequences in 8 GiB of KV (f16) | decode tok/s @1k (4 layers) | decode tok/s @4k (4 layers) |"
echo "|---|---|---:|---:|---:|---:|"
for kind in mla gqa; do
  shape=dsv2-mini; [ "$kind" = gqa ] && shape=dsv2-mini-gqa
  plan=$("$PAGODA" kvcalc "$DIR/$kind/config.json" --kv-dtype f16 --mem 8G --weights 0 --overhead 0 --context 4096 --json)
  bpt=$(echo "$plan" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["bytes_per_token"])')
  seqs=$(echo "$plan" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["max_sequences"])')
  att=$(echo "$plan" | python3 -c 'import json,sys; print(json.load(sys.stdin)["model"]["attention"])')
  tps=()
  for ctx in 1024 4096; do
    tps+=("$("$PAGODA" bench -m "$DIR/$shape.gguf" -p 0 -n 16 -r "$REPS" -t "$THREADS" --decode-context "$ctx" \
             --kv-dtype f16 -q --json | python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["decode_tps"])')")
  done
  echo "| $shape | $att | $bpt | $seqs | ${tps[0]} | ${tps[1]} |"
done
