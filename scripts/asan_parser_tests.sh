#!/usr/bin/env bash
# Runs the GGUF, llama2.c, safetensors, HF folder and tokenizer parser tests (truncation,
# corruption and random-mutation cases) under AddressSanitizer + UBSan, so that an out-of-bounds
# read or undefined behaviour on a hostile file fails `make test`. The test binary (parser_tests)
# is built in the libFuzzer build dir (clang, ASan + UBSan, build-fuzz: fuzz/CMakeLists.txt), so
# CI compiles the instrumented parser libraries once for these tests and the fuzz harnesses.
# Exits non-zero on a build failure, a test failure or any sanitizer report.
#   JOBS=N                  parallel build jobs (default: nproc)
#   PAGODA_FUZZ_BUILD_DIR   build directory (default: <repo>/build-fuzz, shared with scripts/fuzz.sh)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PAGODA_FUZZ_BUILD_DIR:-$root/build-fuzz}"
jobs="${JOBS:-$(nproc)}"

if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DPAGODA_FUZZ=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --target parser_tests -j "$jobs"

# Any sanitizer finding aborts the process, so it cannot pass silently.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
echo "asan_parser_tests: running $build/bin/parser_tests"
"$build/bin/parser_tests"
