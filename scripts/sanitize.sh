#!/usr/bin/env bash
# The multi-threaded modules' tests under ThreadSanitizer (`make sanitize`; `make test` already
# runs every test under AddressSanitizer + UBSan): engine (the step thread, the sampler pool, the
# P/D coordinator), server (the HTTP threads and the step thread), kvcache (the disk tier's I/O
# threads), store (the Redis tier's I/O thread) and events (the publisher thread), built in
# build-tsan. Any report aborts its process, so a finding fails the test that ran into it.
#   scripts/sanitize.sh
#   JOBS=N   parallel build and test jobs (default: nproc)
#   CTEST_ARGS="-R X"  extra ctest arguments (e.g. to run a subset)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="${JOBS:-$(nproc)}"
export PAGODA_TEST_DATA="${PAGODA_TEST_DATA:-$(cd "$root/.." && pwd)/shared}"
read -r -a extra <<< "${CTEST_ARGS:-}"

start=$(date +%s)
build="$root/build-tsan"
cmake -S "$root" -B "$build" -DPAGODA_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=(pagoda kvcache_tests events_tests store_tests engine_tests server_tests)
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp}"
# UCX's memory hooks (libucm, loaded by every binary that links the transfer module) intercept
# madvise and take a pthread rwlock from glibc's thread-exit path, which TSan's runtime cannot
# handle there (a segfault in __tsan::MutexPreReadLock when a thread ends, even while only
# listing tests). The agents map their pools once with ucp_mem_map for their whole life, so the
# hooks (registration-cache invalidation) are not needed.
export UCX_MEM_EVENTS=no
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
built=$(date +%s)
# Only the binaries built above (the others' placeholders are NOT_BUILT; the C API is not threaded).
(cd "$build" && ctest --output-on-failure -j "$jobs" -E 'NOT_BUILT|capi' "${extra[@]}")
echo "sanitize: tsan clean (build $((built - start)) s, tests $(($(date +%s) - built)) s)"
