#!/usr/bin/env bash
# Prints the folder holding llama.cpp's tokenizer test set (ggml-vocab-*.gguf with their .inp and
# .out files), unpacking it once from the llama.cpp git bundle inside the node-llama-cpp package
# (installed here by `npm ci`, scripts/install_deps.sh). Safe to run concurrently.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bundle="$here/node_modules/node-llama-cpp/llama/gitRelease.bundle"
out="$here/node_modules/.pagoda-vocabs"
if [ ! -f "$bundle" ]; then
  echo "missing $bundle: run npm ci in $here (scripts/install_deps.sh does)" >&2
  exit 1
fi
exec 9>"$here/node_modules/.pagoda-vocabs.lock"
flock 9
if [ ! -f "$out/.done" ] || [ "$bundle" -nt "$out/.done" ]; then
  rm -rf "$out" "$out.tmp"
  git clone -q --no-checkout "$bundle" "$out.tmp/repo"
  git -C "$out.tmp/repo" -c advice.detachedHead=false checkout -q HEAD -- models
  mkdir -p "$out"
  cp "$out.tmp"/repo/models/ggml-vocab-* "$out/"
  rm -rf "$out.tmp"
  touch "$out/.done"
fi
echo "$out"
