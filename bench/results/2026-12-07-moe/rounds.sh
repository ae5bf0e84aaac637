#!/usr/bin/env bash
set -euo pipefail
M=/tmp/qwen3moe-1b-q8_0.gguf
OUT=/work/main/bench/results/2026-12-07-moe
P=/work/main/build/bin/pagoda
L=/work/cache/llama.cpp/build-avx2/bin/llama-bench
run_p() { $P bench -m $M -p 512 -n 64 -r 1 --threads 2 --json 2>/dev/null > $OUT/pagoda.$1.json; }
run_l() { $L -m $M -p 512 -n 64 -t 2 -mmp 0 -r 1 -o json 2>/dev/null > $OUT/llama.$1.json; }
run_p 0; run_l 0   # warm-up
for r in 1 2 3 4 5; do
  if (( r % 2 )); then run_p $r; run_l $r; else run_l $r; run_p $r; fi
  echo "round $r" >&2
done
