#!/usr/bin/env bash
# The test suite under sanitizers (`make sanitize`; too long for `make test`, see README):
#   asan  every unit test binary built with AddressSanitizer + UBSan (build-asan) and run by
#         ctest, leaks included;
#   tsan  the multi-threaded modules' tests (engine: the step thread; server: the HTTP threads
#         and the step thread; kvcache: the disk tier's I/O threads; store, events) built with
#         ThreadSanitizer (build-tsan).
# Any sanitizer report aborts its process, so a finding fails the test that ran into it.
#   scripts/sanitize.sh [asan] [tsan]      (default: both)
#   JOBS=N   parallel build and test jobs (default: nproc)
#   CTEST_ARGS="-R X"  extra ctest arguments (e.g. to run a subset)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="${JOBS:-$(nproc)}"
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(asan tsan)
export PAGODA_TEST_DATA="${PAGODA_TEST_DATA:-$(cd "$root/.." && pwd)/shared}"
read -r -a extra <<< "${CTEST_ARGS:-}"

for mode in "${modes[@]}"; do
  start=$(date +%s)
  case "$mode" in
    asan)
      build="$root/build-asan"
      cmake -S "$root" -B "$build" -DPAGODA_ASAN=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
      targets=(pagoda core_tests kernels_tests model_tests kvcache_tests events_tests store_tests engine_tests
               server_tests router_tests tools_tests)
      export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}"
      export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
      ;;
    tsan)
      build="$root/build-tsan"
      cmake -S "$root" -B "$build" -DPAGODA_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
      targets=(pagoda kvcache_tests events_tests store_tests engine_tests server_tests)
      export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp}"
      # UCX's memory hooks (libucm, loaded by every binary that links the transfer module)
      # intercept madvise and take a pthread rwlock from glibc's thread-exit path, which TSan's
      # runtime cannot handle there (a segfault in __tsan::MutexPreReadLock when a thread ends,
      # even while only listing tests). The agents map their pools once with ucp_mem_map for their
      # whole life, so the hooks (registration-cache invalidation) are not needed.
      export UCX_MEM_EVENTS=no
      ;;
    *) echo "sanitize: unknown mode $mode (asan|tsan)"; exit 2 ;;
  esac
  cmake --build "$build" -j "$jobs" --target "${targets[@]}"
  built=$(date +%s)
  # Only the binaries built above (the others' placeholders are NOT_BUILT); the dashboard's
  # browser test and the C API's (a shared library loaded by Python) are left out.
  (cd "$build" && ctest --output-on-failure -j "$jobs" -E 'NOT_BUILT|Dashboard|capi' "${extra[@]}")
  echo "sanitize: $mode clean (build $((built - start)) s, tests $(($(date +%s) - built)) s)"
done
