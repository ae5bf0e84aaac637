#!/usr/bin/env bash
# Starts Redis for benchmarks and by-hand runs, on free loopback ports, with no persistence:
#   scripts/redis_test_env.sh start DIR single [redis-server args...]   prints redis://127.0.0.1:PORT
#   scripts/redis_test_env.sh start DIR cluster                         3 masters; prints redis+cluster://...
#   scripts/redis_test_env.sh stop DIR                                  stops what DIR's start started
# (The C++ tests start their own servers: tests/store/redis_test_env.h.)
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?folder for the servers\' files}
free_port() {  # a port with nothing listening on it, nor on port + 10000 (cluster bus)
  python3 - <<'PY'
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p + 10000 > 65535: continue
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 10000)); t.close(); print(p); break
    except OSError:
        t.close()
PY
}
start_one() {  # PORT EXTRA... ; waits until it answers PING
  local port=$1; shift
  mkdir -p "$dir/$port"
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/$port" \
    --protected-mode no --daemonize yes --pidfile "$dir/$port/redis.pid" --logfile "$dir/$port/redis.log" "$@"
  for _ in $(seq 1 200); do
    redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && return 0
    sleep 0.05
  done
  echo "redis-server on port $port did not start; see $dir/$port/redis.log" >&2
  return 1
}
case "$cmd" in
  start)
    mode=${3:-single}
    shift 3 || true
    mkdir -p "$dir"
    if [ "$mode" = single ]; then
      port=$(free_port)
      start_one "$port" "$@"
      echo "redis://127.0.0.1:$port"
    else
      hosts=()
      for _ in 1 2 3; do
        port=$(free_port)
        start_one "$port" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 "$@"
        hosts+=("127.0.0.1:$port")
      done
      redis-cli --cluster create "${hosts[@]}" --cluster-replicas 0 --cluster-yes > "$dir/create.log"
      for _ in $(seq 1 200); do
        ok=1
        for h in "${hosts[@]}"; do
          redis-cli -p "${h##*:}" CLUSTER INFO | grep -q cluster_state:ok || ok=0
        done
        [ "$ok" = 1 ] && break
        sleep 0.05
      done
      echo "redis+cluster://${hosts[0]}"
    fi
    ;;
  stop)
    for pidfile in "$dir"/*/redis.pid; do
      [ -e "$pidfile" ] || continue
      kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    ;;
  *) echo "usage: $0 start DIR single|cluster | stop DIR" >&2; exit 2 ;;
esac
