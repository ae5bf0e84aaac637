#!/bin/bash
# decode A/B: old kernel (/tmp/pagoda-base, main 4e3a9ec) vs new (build/bin/pagoda), llama-110m f16 weights
cd /work/main
M=/work/models/llama-110m-f16.gguf
for round in 1 2 3; do
  for kv in f16 int8 fp8-e4m3; do
    for d in 0 1024 1900; do
      [[ $kv != f16 && $d == 1024 ]] && continue
      for b in /tmp/pagoda-base build/bin/pagoda; do
        v=$($b bench -m $M -t 2 -p 0 -n 32 -d $d --kv-dtype $kv -r 3 -q --json 2>/dev/null | python3 -c 'import json,sys; j=json.load(sys.stdin); print(round(j["decode_tps"],1))')
        echo "$round $kv $d $(basename $(dirname $(dirname $b)))/$(basename $b) $v"
      done
    done
  done
done
