#!/usr/bin/env bash
# Cross-check of the k-quant files `pagoda make-model` writes: llama.cpp (node-llama-cpp, the
# side-by-side peer) must load each file and generate the same greedy tokens as Pagoda from
# the same prompt token ids. Not a CI test (it needs the npm peer and minutes of CPU).
#
#   bench/kquant_crosscheck.sh [--models SHAPE:TYPE,...] [-n TOKENS] [--prompt TEXT]
#
# Default models: default:q4_k_m, default:q4_k, default:q5_k, default:q6_k, default:q5_k_m,
# llama-110m:q4_k_m (tinyllama-1.1b:q4_k_m takes a few minutes to make; add it with --models).
# Files go to $MODEL_DIR (default /tmp/pagoda-bench). Prints one line per model: SAME (identical
# greedy tokens), AGREE (they part at a near-tie, but llama.cpp scoring Pagoda's tokens agrees:
# argmax equal at >= 75% of steps, relative probability gaps < 0.1), or DISAGREE; exits 1 on
# any DISAGREE. Needs a build (build/bin/pagoda; BUILD_DIR=... to change).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
MODEL_DIR="${MODEL_DIR:-/tmp/pagoda-bench}"
MODELS="default:q4_k_m,default:q4_k,default:q5_k,default:q6_k,default:q5_k_m,llama-110m:q4_k_m"
N=16
PROMPT="Once upon a time"

die() { echo "kquant_crosscheck: $*" >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) MODELS="${2:?--models needs SHAPE:TYPE,...}"; shift 2 ;;
    -n) N="${2:?-n needs a number}"; shift 2 ;;
    --prompt) PROMPT="${2:?--prompt needs text}"; shift 2 ;;
    -h|--help) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

PAGODA="$BUILD_DIR/bin/pagoda"
PEER="$REPO/bench/peer"
[[ -x "$PAGODA" ]] || die "$PAGODA not found: build Pagoda first"
command -v node >/dev/null || die "node (>= 20) is not installed"
if [[ ! -d "$PEER/node_modules/node-llama-cpp" ]]; then
  (cd "$PEER" && NODE_LLAMA_CPP_POSTINSTALL=skip npm ci --no-audit --no-fund >&2)
fi
mkdir -p "$MODEL_DIR"

json_field() {  # $1 = JSON text, $2 = field: prints the array as comma-separated ids
  node -e 'const o = JSON.parse(process.argv[1]); process.stdout.write(o[process.argv[2]].join(","))' "$1" "$2"
}

differ=0
IFS=',' read -r -a specs <<< "$MODELS"
for spec in "${specs[@]}"; do
  shape="${spec%%:*}"
  type="${spec#*:}"
  file="$MODEL_DIR/$shape-$type.gguf"
  if [[ ! -s "$file" ]]; then
    "$PAGODA" make-model --shape "$shape" --dtype "$type" -o "$file.tmp" >&2
    mv "$file.tmp" "$file"
  fi
  pagoda_json="$("$PAGODA" run -m "$file" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos --json)"
  prompt_ids="$(json_field "$pagoda_json" prompt_token_ids)"
  pagoda_ids="$(json_field "$pagoda_json" token_ids)"
  peer_json="$(node "$PEER/greedy_llama_cpp.mjs" --model "$file" --prompt-ids "$prompt_ids" --n "$N")"
  peer_ids="$(json_field "$peer_json" token_ids)"
  if [[ "$pagoda_ids" == "$peer_ids" ]]; then
    echo "SAME      $shape:$type  $N tokens: $pagoda_ids"
    continue
  fi
  # Random-weight models have near-uniform next-token distributions, so free-running greedy
  # runs part at the first near-tie (f16 vs f32 KV, where activations are quantized). Then
  # judge with teacher forcing: llama.cpp scores Pagoda's tokens; at each step its argmax and
  # the relative probability gap (p_argmax - p_pagoda) / p_argmax. A misread format gives
  # gaps near 1 at almost every step; rounding gives a few steps with gaps of a few percent.
  forced="$(node "$PEER/greedy_llama_cpp.mjs" --model "$file" --prompt-ids "$prompt_ids" --follow-ids "$pagoda_ids")"
  verdict="$(node -e '
    const o = JSON.parse(process.argv[1]);
    const same = o.argmax_ids.filter((t, i) => t === o.followed_ids[i]).length;
    const worst = Math.max(...o.relative_gaps);
    const ok = worst < 0.1 && same >= 0.75 * o.followed_ids.length;
    console.log(`${ok ? "AGREE   " : "DISAGREE"}|argmax equal at ${same}/${o.followed_ids.length} steps, ` +
                `largest relative probability gap ${worst}`);
  ' "$forced")"
  echo "${verdict%%|*}  $shape:$type  free-running tokens part at a near-tie; teacher-forced: ${verdict#*|}"
  echo "  pagoda:    $pagoda_ids"
  echo "  llama.cpp: $peer_ids"
  [[ "$verdict" == AGREE* ]] || differ=1
done
exit "$differ"
