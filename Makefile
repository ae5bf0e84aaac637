# `make run` and `make test` do everything on a fresh Debian 12 machine.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
PAGODA_TEST_DATA ?= $(abspath ../shared)
export PAGODA_TEST_DATA

.PHONY: all deps configure build run test bench clean asan-test fuzz fuzz-seeds sanitize soak

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

# Include-direction check, the parser tests under AddressSanitizer, every fuzz harness over its
# corpus and for FUZZ_CI_SECONDS, every test, then the soak with tiers, Redis and faults for
# SOAK_CI_MINUTES (bench/soak.py --faults: fails on any wrong token, leak or unexpected status).
FUZZ_CI_SECONDS ?= 5
SOAK_CI_MINUTES ?= 2
test: build
	@bash scripts/check_includes.sh
	@JOBS=$(JOBS) bash scripts/asan_parser_tests.sh
	@JOBS=$(JOBS) bash scripts/fuzz.sh --seconds $(FUZZ_CI_SECONDS)
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	python3 bench/soak.py --minutes $(SOAK_CI_MINUTES) --faults --bin $(BUILD_DIR)/bin/pagoda

# libFuzzer harnesses (FUZZING.md): each over its corpus, then SECONDS of fuzzing each.
SECONDS ?= 60
fuzz:
	@JOBS=$(JOBS) bash scripts/fuzz.sh --seconds $(SECONDS)

# Regenerates the seed corpora (fuzz/corpus/*/seed-*) from fuzz/make_seeds.cpp.
fuzz-seeds:
	@JOBS=$(JOBS) bash scripts/fuzz.sh --seconds 0 --make-seeds

# The unit suite under ASan + UBSan and the threaded modules' tests under TSan (scripts/sanitize.sh).
sanitize: deps
	@JOBS=$(JOBS) bash scripts/sanitize.sh

# bench/soak.sh for MINUTES minutes against a loopback server (SOAK_ARGS=--faults: tiers, Redis, faults).
MINUTES ?= 2
soak: build
	bench/soak.sh --minutes $(MINUTES) $(SOAK_ARGS)

clean:
	rm -rf $(BUILD_DIR) build-asan build-fuzz build-tsan
