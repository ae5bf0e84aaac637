#!/usr/bin/env bash
# Rejects an #include that points up the module order (../shared/docs/DESIGN.md §1):
#   core < kernels < {model, kvcache} < engine < server < tools;  kvcache < store.
set -euo pipefail
cd "$(dirname "$0")/.."
allowed() {  # module -> modules it may include
  case "$1" in
    core) echo "core" ;;
    kernels) echo "core kernels" ;;
    model) echo "core kernels model" ;;
    kvcache) echo "core kernels kvcache" ;;
    store) echo "core kernels kvcache store" ;;
    engine) echo "core kernels model kvcache store engine" ;;
    server) echo "core kernels model kvcache store engine server" ;;
    *) echo "" ;;
  esac
}
bad=0
for dir in src/*/; do
  module=$(basename "$dir")
  ok=" $(allowed "$module") "
  while IFS=: read -r file line inc; do
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$inc")
    if [[ "$ok" != *" $target "* ]]; then
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
