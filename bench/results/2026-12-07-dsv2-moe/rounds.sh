#!/usr/bin/env bash
# DeepSeek-V2-Lite-shaped MoE (dsv2-lite-moe, q4_k_m) decode vs native llama.cpp, interleaved
# rounds alternating which engine goes first, one warm-up each: tg64 at depth 0, and 32 tokens
# decoded after an untimed 4,096-token prompt (depth 4096). One row at a time, nothing else running.
#   bench/results/2026-12-07-dsv2-moe/rounds.sh [ROUNDS_TG=5] [ROUNDS_DEPTH=3]
set -euo pipefail
M=${M:-/tmp/dsv2-lite-moe-q4_k_m.gguf}
OUT=$(cd "$(dirname "$0")" && pwd)
P=${P:-/work/main/build/bin/pagoda}
L=${L:-/work/cache/llama.cpp/build-avx2/bin/llama-bench}
RT=${1:-5}
RD=${2:-3}
run_p() { $P bench -m $M -p 0 -n 64 -r 1 --threads 2 --json 2>/dev/null > $OUT/pagoda.tg.$1.json; }
run_l() { $L -m $M -p 0 -n 64 -t 2 -mmp 0 -r 1 -o json 2>/dev/null > $OUT/llama.tg.$1.json; }
run_pd() { $P bench -m $M -p 0 -n 32 -d 4096 -c 4200 -r 1 --threads 2 --json 2>/dev/null > $OUT/pagoda.d4096.$1.json; }
run_ld() { $L -m $M -p 0 -n 32 -d 4096 -t 2 -mmp 0 -r 1 -o json 2>/dev/null > $OUT/llama.d4096.$1.json; }
run_p 0; run_l 0   # warm-up
for r in $(seq 1 $RT); do
  if (( r % 2 )); then run_p $r; run_l $r; else run_l $r; run_p $r; fi
  echo "tg round $r" >&2
done
for r in $(seq 1 $RD); do
  if (( r % 2 )); then run_pd $r; run_ld $r; else run_ld $r; run_pd $r; fi
  echo "depth round $r" >&2
done
