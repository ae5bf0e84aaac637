#!/usr/bin/env bash
# Builds model_tests with AddressSanitizer + UBSan in its own build dir (build-asan) and runs
# the GGUF and llama2.c parser tests (truncation, corruption and random-mutation cases), so
# that an out-of-bounds read or undefined behaviour on a hostile file fails `make test`.
# Exits non-zero on a build failure, a test failure or any sanitizer report.
#   JOBS=N                  parallel build jobs (default: nproc)
#   PAGODA_ASAN_BUILD_DIR   build directory (default: <repo>/build-asan)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${PAGODA_ASAN_BUILD_DIR:-$root/build-asan}"
jobs="${JOBS:-$(nproc)}"

cmake -S "$root" -B "$build" -DPAGODA_ASAN=ON -DCMAKE_BUILD_TYPE=Debug
cmake --build "$build" --target model_tests -j "$jobs"

# Any sanitizer finding aborts the process, so it cannot pass silently.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
echo "asan_parser_tests: running $build/bin/model_tests --gtest_filter='Gguf*:Llama2c*:Tokenizer*:BpeTokenizer*:PreTokenizer*:ByteLevel*:HfTokenizerErrors*'"
"$build/bin/model_tests" --gtest_filter='Gguf*:Llama2c*:Tokenizer*:BpeTokenizer*:PreTokenizer*:ByteLevel*:HfTokenizerErrors*'
