#!/usr/bin/env bash
# Installs the Debian 12 packages Pagoda needs, only when something is missing (idempotent),
# then the npm packages of the test clients (tests/npm/*/, from their lock files).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  build-essential cmake pkg-config
  libopenblas-dev nlohmann-json3-dev libcli11-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev libicu-dev libutf8proc-dev
  libxxhash-dev liburing-dev   # block record checksums; the SSD tier's asynchronous I/O
  libssl-dev                   # SHA-256 block hashes (--kv-hash sha256)
  clang libclang-rt-14-dev     # the libFuzzer harnesses (fuzz/, scripts/fuzz.sh): clang 14 and its libFuzzer runtime
  libzmq3-dev libmsgpack-cxx-dev  # KV events: ZeroMQ PUB/ROUTER/SUB, msgpack in vLLM's layout
  libhiredis-dev liblz4-dev libzstd-dev   # the Redis tier's client and its record compression
  redis-server redis-tools     # the Redis tier's tests start their own servers and clusters
  libucx-dev ucx-utils         # P/D disaggregation: KV blocks over UCX; ucx_perftest for the benchmark
  prometheus   # promtool validates /metrics; a live Prometheus scrapes the server in a test
  curl         # the serve test runs the curl line `pagoda serve` prints
  chromium fonts-dejavu-core   # the dashboard test drives headless Chromium (puppeteer-core)
  python3      # the C API test drives libpagoda_kv.so through ctypes
  git          # unpacks llama.cpp's vocab test set from node-llama-cpp's source bundle
)
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Test clients (the openai package, reference tokenizers): one folder each, versions locked.
for lock in tests/npm/*/package-lock.json; do
  [ -e "$lock" ] || continue
  dir=$(dirname "$lock")
  if [ ! -d "$dir/node_modules" ] || [ "$lock" -nt "$dir/node_modules/.package-lock.json" ]; then
    echo "npm ci in $dir"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
done
