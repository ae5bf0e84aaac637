# `make run` and `make test` do everything on a fresh Debian 12 machine.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
PAGODA_TEST_DATA ?= $(abspath ../shared)
export PAGODA_TEST_DATA

.PHONY: all deps configure build run test bench clean fuzz fuzz-seeds sanitize soak

all: build

deps:
	@bash scripts/install_deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The OpenAI-compatible server on the built-in default model; it prints its URL and a curl line.
PORT ?= 8080
run: build
	$(BUILD_DIR)/bin/pagoda serve --port $(PORT)

# `make test` builds its own tree, build-asan, with AddressSanitizer + UBSan (-O1, line tables):
# every test below runs instrumented, so an out-of-bounds access, a use after free, a leak at a
# process's exit or undefined behaviour anywhere fails the test that ran into it (FUZZING.md).
# Then: the include-direction check, every fuzz harness over its corpus and for FUZZ_CI_SECONDS,
# every test, and the soak with tiers, Redis and faults for SOAK_CI_MINUTES (bench/soak.py
# --faults: fails on any wrong token, leak or unexpected status). Under ASan the soak's leak check
# is LeakSanitizer at the server's SIGTERM exit; its resident-memory bound is 25% there, not 10%
# (ASan's allocation-stack depot and allocator caches grow with the first minutes of traffic).
TEST_BUILD_DIR ?= build-asan
FUZZ_CI_SECONDS ?= 5
SOAK_CI_MINUTES ?= 2
SANITIZER_ENV = ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
                UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

$(TEST_BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(TEST_BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DPAGODA_ASAN=ON

test: deps $(TEST_BUILD_DIR)/CMakeCache.txt
	cmake --build $(TEST_BUILD_DIR) -j $(JOBS)
	@bash scripts/check_includes.sh
	@JOBS=$(JOBS) bash scripts/fuzz.sh --seconds $(FUZZ_CI_SECONDS)
	cd $(TEST_BUILD_DIR) && $(SANITIZER_ENV) ctest --output-on-failure -j $(JOBS)
	$(SANITIZER_ENV) python3 bench/soak.py --minutes $(SOAK_CI_MINUTES) --faults --bin $(TEST_BUILD_DIR)/bin/pagoda \
	  --max-rss-growth 25

# libFuzzer harnesses (FUZZING.md): each over its corpus, then SECONDS of fuzzing each.
SECONDS ?= 60
fuzz:
	@JOBS=$(JOBS) bash scripts/fuzz.sh --seconds $(SECONDS)

# Regenerates the seed corpora (fuzz/corpus/*/seed-*) from fuzz/make_seeds.cpp.
fuzz-seeds:
	@JOBS=$(JOBS) bash scripts/fuzz.sh --seconds 0 --make-seeds

# The threaded modules' tests under ThreadSanitizer (scripts/sanitize.sh; `make test` already runs
# everything under ASan + UBSan).
sanitize: deps
	@JOBS=$(JOBS) bash scripts/sanitize.sh

# bench/soak.sh for MINUTES minutes against a loopback server (SOAK_ARGS=--faults: tiers, Redis, faults).
MINUTES ?= 2
soak: build
	bench/soak.sh --minutes $(MINUTES) $(SOAK_ARGS)

clean:
	rm -rf $(BUILD_DIR) build-asan build-fuzz build-tsan
