#!/usr/bin/env bash
# KV transfer bandwidth against its limit: Pagoda's pulls (build/bin/kv_transfer_bench: whole
# P/D pulls of 64 x 1 MiB blocks, confirm included) next to `ucx_perftest` (Debian ucx-utils)
# on the same transports with 1 MiB messages, server and client as two processes on loopback.
#
#   bench/pd_transfer_bw.sh [--iters 20] [--port 18500]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build}"
ITERS=20
PORT=18500
while [[ $# -gt 0 ]]; do
  case "$1" in
    --iters) ITERS="${2:?}"; shift 2 ;;
    --port) PORT="${2:?}"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 1 ;;
  esac
done
perftest() {  # $1 test, $2.. env; prints the final MB/s column of the client
  local test="$1"; shift
  # Bounded: a server whose client failed to connect would otherwise wait for good.
  env "$@" timeout 60 ucx_perftest -t "$test" -s 1048576 -n 2000 -p "$PORT" -f >/dev/null 2>&1 &
  local server=$!
  sleep 1
  local out
  # -f: the final line only; its columns are iterations, latency (typical, average, overall) in
  # usec, bandwidth (average, overall) in MB/s, message rate (average, overall).
  out=$(env "$@" timeout 60 ucx_perftest 127.0.0.1 -t "$test" -s 1048576 -n 2000 -p "$PORT" -f 2>&1 | tail -1 | awk '{print $(NF-2)}')
  wait "$server" || true
  PORT=$((PORT + 1))
  echo "${out:-n/a}"
}
echo "| transport | ucx_perftest ucp_get 1 MiB (MB/s) | ucx_perftest tag_bw 1 MiB (MB/s) |"
echo "|---|---|---|"
echo "| UCX_TLS=tcp,self UCX_NET_DEVICES=lo | $(perftest ucp_get UCX_TLS=tcp,self UCX_NET_DEVICES=lo) | $(perftest tag_bw UCX_TLS=tcp,self UCX_NET_DEVICES=lo) |"
echo "| UCX_TLS=sm,self | $(perftest ucp_get UCX_TLS=sm,self) | $(perftest tag_bw UCX_TLS=sm,self) |"
echo
"$BUILD_DIR/bin/kv_transfer_bench" --blocks 64 --block-kib 1024 --iters "$ITERS"
