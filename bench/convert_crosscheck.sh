#!/usr/bin/env bash
# Does llama.cpp load what `pagoda convert DIR -o OUT.gguf` writes, and generate what Pagoda
# generates from the Hugging Face folder itself? llama.cpp (node-llama-cpp, the side-by-side peer)
# loads OUT.gguf and generates greedily from the prompt's token ids; Pagoda generates from DIR.
# Not a CI test: it needs the npm peer's prebuilt llama.cpp binary and a model folder.
#
#   bench/convert_crosscheck.sh DIR [-n TOKENS] [--prompt TEXT]
#
# Prints SAME (identical greedy tokens) or DIFFER with both lists; exits 1 on DIFFER. OUT.gguf
# goes to $MODEL_DIR (default /tmp/pagoda-bench). Needs a build (build/bin/pagoda).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
MODEL_DIR="${MODEL_DIR:-/tmp/pagoda-bench}"
N=16
PROMPT="Once upon a time"
die() { echo "convert_crosscheck: $*" >&2; exit 2; }
[[ $# -ge 1 ]] || die "usage: bench/convert_crosscheck.sh DIR [-n TOKENS] [--prompt TEXT]"
DIR="$1"; shift
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) N="${2:?-n needs a number}"; shift 2 ;;
    --prompt) PROMPT="${2:?--prompt needs text}"; shift 2 ;;
    *) die "unknown argument: $1" ;;
  esac
done
PAGODA="$BUILD_DIR/bin/pagoda"
PEER="$REPO/bench/peer"
[[ -x "$PAGODA" ]] || die "$PAGODA not found: build Pagoda first"
[[ -f "$DIR/config.json" ]] || die "$DIR is not a Hugging Face folder (no config.json)"
if [[ ! -d "$PEER/node_modules/node-llama-cpp" ]]; then
  (cd "$PEER" && NODE_LLAMA_CPP_POSTINSTALL=skip npm ci --no-audit --no-fund >&2)
fi
mkdir -p "$MODEL_DIR"
OUT="$MODEL_DIR/$(basename "$DIR")-converted.gguf"
"$PAGODA" convert "$DIR" -o "$OUT" --quiet >&2
pagoda_json=$("$PAGODA" run -m "$DIR" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos --json -t 1 2>/dev/null)
prompt_ids=$(node -e 'const j=JSON.parse(process.argv[1]); console.log(j.prompt_token_ids.join(","))' "$pagoda_json")
ours=$(node -e 'const j=JSON.parse(process.argv[1]); console.log(j.token_ids.join(","))' "$pagoda_json")
theirs=$(node "$PEER/greedy_llama_cpp.mjs" --model "$OUT" --prompt-ids "$prompt_ids" --n "$N" |
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).token_ids.join(",")))')
if [[ "$ours" == "$theirs" ]]; then
  echo "SAME  $(basename "$DIR"): llama.cpp on the converted GGUF = Pagoda on the folder ($N tokens)"
else
  echo "DIFFER $(basename "$DIR")"; echo "  pagoda (folder): $ours"; echo "  llama.cpp (gguf): $theirs"; exit 1
fi
