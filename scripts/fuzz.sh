#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, clang + ASan + UBSan, build dir build-fuzz) and runs
# each one: first over its whole corpus (fuzz/corpus/<harness>: seeds and crash reproducers),
# then fuzzing for --seconds S starting from that corpus. New inputs go to a scratch corpus
# (build-fuzz/corpus/<harness>), not into the repo. A crash, a sanitizer report, a leak, a
# timeout (an input over 10 s) or an out-of-memory (2 GB) fails the run, leaving the input at
# build-fuzz/artifacts/<harness>/ and printing how to reproduce it.
#   scripts/fuzz.sh [--seconds S] [--make-seeds] [HARNESS...]   (default: every harness, S = 60)
#   JOBS=N                  parallel build jobs (default: nproc)
#   PAGODA_FUZZ_BUILD_DIR   build directory (default: <repo>/build-fuzz)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PAGODA_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${JOBS:-$(nproc)}"
seconds=60
make_seeds=0
harnesses=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --make-seeds) make_seeds=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
all=(gguf llama2c safetensors hf_config hf_tokenizer tokenizer chat_template openai_request block_record grammar)
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all[@]}")

if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DPAGODA_FUZZ=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
targets=()
for h in "${harnesses[@]}"; do targets+=("${h}_fuzz"); done
[ "$make_seeds" = 0 ] || targets+=(make_seeds)
cmake --build "$build" -j "$jobs" --target "${targets[@]}" -- -k

if [ "$make_seeds" = 1 ]; then
  "$build/bin/make_seeds" "$root/fuzz/corpus"
  echo "fuzz: seeds written under fuzz/corpus/"
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
dict_for() {  # the JSON-reading harnesses share a dictionary of JSON syntax and field names
  case "$1" in hf_config|hf_tokenizer|openai_request) echo "-dict=$root/fuzz/json.dict" ;; esac
}
# One harness: its corpus, then fuzzing from it; prints one line (ok, or FAILED with the log tail).
run_harness() {
  local h="$1" corpus="$root/fuzz/corpus/$1" scratch="$build/corpus/$1" artifacts="$build/artifacts/$1"
  local log="$build/$1.log"
  mkdir -p "$scratch" "$artifacts"
  local flags=(-timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts/" -print_final_stats=1 $(dict_for "$h"))
  # The corpus alone (every seed and every past crash), then fuzzing from it.
  if ! "$build/bin/${h}_fuzz" "${flags[@]}" -runs=0 "$corpus" >"$log" 2>&1 ||
     { [ "$seconds" -gt 0 ] &&
       ! "$build/bin/${h}_fuzz" "${flags[@]}" -max_total_time="$seconds" "$scratch" "$corpus" >>"$log" 2>&1; }; then
    { echo "fuzz: $h FAILED (log: $log)"
      tail -40 "$log"
      for a in "$artifacts"/*; do
        [ -e "$a" ] && echo "fuzz: reproduce with $build/bin/${h}_fuzz $a; keep it as fuzz/corpus/$h/crash-<what>"
      done; } >"$build/$h.result"
    return 1
  fi
  echo "fuzz: $h ok, $(ls "$corpus" | wc -l) corpus inputs + ${seconds}s: $(grep -E 'stat::number_of_executed_units' "$log" | tail -1 | awk '{print $2}') execs, $(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)" >"$build/$h.result"
}
# JOBS harnesses at a time (each is one process: libFuzzer without -jobs), results in harness order.
for h in "${harnesses[@]}"; do
  rm -f "$build/$h.result"
  run_harness "$h" &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
done
wait || true
failed=()
for h in "${harnesses[@]}"; do
  if [ -f "$build/$h.result" ]; then cat "$build/$h.result"; else echo "fuzz: $h FAILED (no result)"; fi
  grep -q "^fuzz: $h ok" "$build/$h.result" 2>/dev/null || failed+=("$h")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
