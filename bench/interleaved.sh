#!/usr/bin/env bash
# Pagoda vs llama.cpp on one GGUF, interleaved: ROUNDS rounds, each running `pagoda bench`
# (one timed rep after its warm-up) and then the llama.cpp peer (one rep per thread count,
# best of 1 and 2 threads), so both engines see the same moments of a noisy shared machine.
# Prints the median tokens/s of each and the median of the per-round ratios.
#
#   bench/interleaved.sh MODEL.gguf [ROUNDS=5] [PROMPT=512] [GEN=128]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${1:?usage: bench/interleaved.sh MODEL.gguf [ROUNDS] [PROMPT] [GEN]}"
ROUNDS="${2:-5}"
PROMPT="${3:-512}"
GEN="${4:-128}"
PAGODA="${PAGODA:-$REPO/build/bin/pagoda}"
[ -x "$PAGODA" ] || { echo "build first: $PAGODA missing" >&2; exit 1; }
[ -d "$REPO/bench/peer/node_modules" ] || (cd "$REPO/bench/peer" && npm ci --silent)
OUT="$(mktemp -d)"
for r in $(seq 1 "$ROUNDS"); do
  "$PAGODA" bench -m "$MODEL" -p "$PROMPT" -n "$GEN" -r 1 --threads 2 --json > "$OUT/pagoda.$r.json"
  node "$REPO/bench/peer/bench_llama_cpp.mjs" --model "$MODEL" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" \
    --reps 1 --threads 1,2 --json > "$OUT/peer.$r.json" 2>/dev/null
  echo "round $r/$ROUNDS done" >&2
done
python3 - "$OUT" "$ROUNDS" "$MODEL" <<'PY'
import json, statistics, sys, os
out, rounds, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = []
for r in range(1, rounds + 1):
    p = json.load(open(f"{out}/pagoda.{r}.json"))
    q = json.load(open(f"{out}/peer.{r}.json"))["best"]
    rows.append((p["prefill_tps"], q["prefill_tps"], p["decode_tps"], q["decode_tps"]))
med = lambda xs: statistics.median(xs)
pp, qp, pd, qd = (med([row[i] for row in rows]) for i in range(4))
rp = med([row[0] / row[1] for row in rows])
rd = med([row[2] / row[3] for row in rows])
print(json.dumps({"model": os.path.basename(model), "rounds": rounds, "pagoda_prefill_tps": pp, "llama_cpp_prefill_tps": qp,
                  "prefill_ratio": rp, "pagoda_decode_tps": pd, "llama_cpp_decode_tps": qd, "decode_ratio": rd,
                  "per_round": rows}))
PY
