#!/usr/bin/env bash
# Rejects an #include that points up the module order (../shared/docs/DESIGN.md §1):
#   core < kernels < {model, kvcache} < engine < server < tools;
#   kvcache < {store, transfer, events};  {model, kvcache, events} < router (+ server/http/ only);
#   server/http/ (the HTTP plumbing of server and router) < core only.
#   kvcache < capi (libpagoda_kv.so, with include/pagoda/kv_cache.h).
#   {engine, router, kvcache} < sim (trace replay: never server or sockets) < tools.
#   core < structured (grammars, token masks: never requests, HTTP or the engine) < server.
set -euo pipefail
cd "$(dirname "$0")/.."
allowed() {  # module -> modules it may include
  case "$1" in
    core) echo "core" ;;
    kernels) echo "core kernels" ;;
    model) echo "core kernels model" ;;
    kvcache) echo "core kernels kvcache" ;;
    store|transfer|events) echo "core kernels kvcache $1" ;;
    engine) echo "core kernels model kvcache transfer events engine" ;;
    server) echo "core kernels model kvcache transfer events engine structured server" ;;
    structured) echo "core structured" ;;
    router) echo "core kernels model kvcache events router server/http" ;;
    capi) echo "core kernels kvcache capi pagoda" ;;  # pagoda/: the public C header (include/)
    sim) echo "core kernels model kvcache transfer events engine router sim" ;;
    *) echo "" ;;
  esac
}
bad=0
for dir in src/*/; do
  module=$(basename "$dir")
  ok=" $(allowed "$module") "
  while IFS=: read -r file line inc; do
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$inc")
    # router may use the HTTP plumbing it shares with server (src/server/http/), nothing else of it
    [[ "$module" == router && "$inc" == *'#include "server/http/'* ]] && target="server/http"
    file_ok="$ok"
    # the shared plumbing itself sees core only (server and router both build on it)
    if [[ "$file" == src/server/http/* ]]; then
      file_ok=" core server/http "
      [[ "$inc" == *'#include "server/http/'* ]] && target="server/http"
    fi
    if [[ "$file_ok" != *" $target "* ]]; then
      echo "$file:$line: module '$module' may not include '$target' ($inc)"
      bad=1
    fi
  done < <(grep -rnE '#include "[a-z_]+/' "$dir" || true)
done
if [ "$bad" -ne 0 ]; then
  echo "include check failed: dependencies must point one way"
  exit 1
fi
echo "include check: ok"
