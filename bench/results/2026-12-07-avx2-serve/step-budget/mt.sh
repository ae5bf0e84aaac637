#!/bin/bash
# multi-turn without prefix cache: default step budget vs none
for budget in 100 0; do
  port=$((18600 + budget % 7))
  build/bin/pagoda serve -m /work/models/llama-110m-f16.gguf --port $port -t 2 --no-prefix-cache --step-budget-ms $budget --quiet > /tmp/mt-$budget.server.log 2>&1 &
  pid=$!
  for i in $(seq 1 100); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 0.3; done
  build/bin/pagoda bench-serve --url http://127.0.0.1:$port --num-requests 2 --prompt-len 8 --output-len 4 --json > /dev/null 2>&1
  build/bin/pagoda bench-serve --url http://127.0.0.1:$port --seed 1 --json --workload multi-turn --sessions 8 --turns 6 --concurrency 8 --system-prompt-len 64 --prompt-len 24 --output-len 64 > /tmp/mt-$budget.json 2>/dev/null
  kill $pid; wait $pid 2>/dev/null
  python3 -c "import json;s=json.load(open('/tmp/mt-$budget.json'))['summary'];print('budget $budget', 'ttft p50', s['ttft_ms']['p50'], 'p99', s['ttft_ms']['p99'], 'tok/s', round(s['output_tokens_per_s'],1), 'itl p99', s['itl_ms']['p99'])"
done
