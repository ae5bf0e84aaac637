#!/usr/bin/env bash
# The A/B of 2026-12-06: main before this session (0dc597f, built in a worktree at $OLD) against
# this session's build ($NEW), interleaved rounds, llama-110m f16, 2 threads, KV f16. Records
# what was run; the old binary is whatever $OLD points at.
#   OLD=/work/base/build/bin NEW=build/bin ab.sh [ROUNDS] > ab.txt
set -euo pipefail
OLD="${OLD:-/work/base/build/bin}"
NEW="${NEW:-build/bin}"
M="${MODEL:-/work/models/llama-110m-f16.gguf}"
ROUNDS="${1:-3}"
pg() { "$1/pagoda" bench -m "$M" -t 2 --kv-dtype f16 --quiet "${@:2}" 2>/dev/null | grep -E '\| (pp|tg)[0-9]+ ' | awk -F'|' '{print $5 $6}' | tr '\n' ' '; }
for ((r = 1; r <= ROUNDS; ++r)); do
  for side in old new; do
    bin="$OLD"; [[ "$side" == new ]] && bin="$NEW"
    echo "round $r $side pp512: $(pg "$bin" -p 512 -n 0 -r 3)"
    echo "round $r $side pp1900: $(pg "$bin" -p 1900 -n 0 -r 2)"
    echo "round $r $side tg128: $(pg "$bin" -p 0 -n 128 -r 3)"
    echo "round $r $side tg128 depth 1900: $(pg "$bin" -p 0 -n 128 --depth 1900 -r 2)"
    echo "round $r $side serving_bench 16x(64+64): $("$bin/serving_bench" "$M" 16 64 64 2 512 0 100 | grep '^16 ' | awk '{print $2 " s"}')"
    if [[ "$side" == new ]]; then
      echo "round $r new --batched-bf16 serving_bench 16x(64+64): $("$bin/serving_bench" "$M" 16 64 64 2 512 0 100 1 | grep '^16 ' | awk '{print $2 " s"}')"
    fi
  done
done
