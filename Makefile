# gpufed — developer entry points. On a fresh Debian 12 machine, as root:
#
#   make demo    install packages, build, start a server and three simulated clusters
#   make test    install packages, build, run every test (ctest)
#
# Other targets: deps, build, bench, fuzz, format, format-check, tidy, clean, help.
# Variables (override on the command line, e.g. `make test BUILD_DIR=build-x CTEST_JOBS=1`):

BUILD_DIR  ?= build
BUILD_TYPE ?= RelWithDebInfo
# Compile jobs. The project's machines have two cores.
JOBS       ?= 2
# Tests run in parallel: each one starts its own PostgreSQL and servers on port 0, so they do
# not collide; two at a time keeps a two-core machine busy without starving either.
CTEST_JOBS ?= 2
# Extra ctest arguments, e.g. CTEST_ARGS='-L deploy' or CTEST_ARGS='-R storage'.
CTEST_ARGS ?=

# The fuzz build (tests/fuzz/, docs/fuzzing.md): Debian 12's clang, libFuzzer, ASan and UBSan, in
# a tree of its own. `make fuzz` runs each target FUZZ_SECONDS; `make test` runs each
# FUZZ_TEST_SECONDS after ctest (the short pass CI makes; 0 skips it and the fuzz build).
# FUZZ_TARGETS= picks targets (names as under tests/fuzz/corpus/, e.g.
# FUZZ_TARGETS='workload_rpc topology'); empty means all.
FUZZ_BUILD_DIR    ?= build-fuzz
FUZZ_CXX          ?= clang++-14
FUZZ_SECONDS      ?= 60
FUZZ_TEST_SECONDS ?= 10
FUZZ_TARGETS      ?=

CMAKE ?= cmake
CTEST ?= ctest
CLANG_FORMAT ?= clang-format
CLANG_TIDY ?= clang-tidy

# The three programs the demo needs.
PROGRAMS := gpufed-server gpufed-agent gpufedctl

# Hand-written C++ sources (generated code lives in the build directory and is never formatted).
SOURCE_DIRS := api federation sim storage auth server agent cli tests bench

.DEFAULT_GOAL := help
.PHONY: help deps build configure programs test demo bench fuzz fuzz-build format format-check \
  tidy clean

help:
	@echo "gpufed make targets:"
	@echo "  make demo          deps + build + scripts/demo.sh (server, 3 simulated clusters, a batch)"
	@echo "  make test          deps + build + ctest (needs nothing running) + a short fuzz pass"
	@echo "  make deps          install missing Debian packages (root), or say which are missing"
	@echo "  make build         configure ($(BUILD_DIR), Ninja, $(BUILD_TYPE)) and build everything"
	@echo "  make bench         deps + build + scripts/bench.sh"
	@echo "  make fuzz          deps + build $(FUZZ_BUILD_DIR) + each fuzz target $(FUZZ_SECONDS)s (FUZZ_SECONDS=)"
	@echo "  make format        clang-format -i the sources;  make format-check: report only"
	@echo "  make tidy          clang-tidy over the sources in $(BUILD_DIR)/compile_commands.json"
	@echo "  make clean         remove $(BUILD_DIR), $(FUZZ_BUILD_DIR) and the demo's .demo/ folder"

deps:
	scripts/install-deps.sh

# Re-running configure on an existing tree is cheap and picks up changed options; ccache is used
# when present (CMakeLists.txt sets it as the compiler launcher).
configure:
	$(CMAKE) -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	$(CMAKE) --build $(BUILD_DIR) -j$(JOBS)

# Only what the demo runs: a newcomer should not wait for every test to compile.
programs: configure
	$(CMAKE) --build $(BUILD_DIR) -j$(JOBS) --target $(PROGRAMS)

# Ordered prerequisites: deps must finish before the build starts even under `make -j`.
test:
	$(MAKE) --no-print-directory deps
	$(MAKE) --no-print-directory build
	$(CTEST) --test-dir $(BUILD_DIR) --output-on-failure --no-tests=error -j$(CTEST_JOBS) $(CTEST_ARGS)
ifneq ($(FUZZ_TEST_SECONDS),0)
	$(MAKE) --no-print-directory fuzz-build
	tests/fuzz/run.sh -b $(FUZZ_BUILD_DIR) $(FUZZ_TEST_SECONDS) $(FUZZ_TARGETS)
endif

# Only the libraries the fuzz targets link, instrumented, and the targets (the gpufed_fuzz
# target); tests and benchmarks are off in this tree.
fuzz-build:
	$(CMAKE) -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) -DGPUFED_FUZZ=ON -DGPUFED_BUILD_TESTS=OFF \
	  -DGPUFED_BUILD_BENCH=OFF
	$(CMAKE) --build $(FUZZ_BUILD_DIR) -j$(JOBS) --target gpufed_fuzz

fuzz:
	$(MAKE) --no-print-directory deps
	$(MAKE) --no-print-directory fuzz-build
	tests/fuzz/run.sh -b $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

demo:
	$(MAKE) --no-print-directory deps
	$(MAKE) --no-print-directory programs
	GPUFED_BIN_DIR=$(abspath $(BUILD_DIR))/bin scripts/demo.sh

bench:
	$(MAKE) --no-print-directory deps
	$(MAKE) --no-print-directory build
	GPUFED_BIN_DIR=$(abspath $(BUILD_DIR))/bin scripts/bench.sh

# Tracked and new (not ignored) files when this is a git checkout, else whatever is on disk.
# The patterns are quoted so that git, not the shell, expands them (recursively).
cxx_sources = $(shell { git ls-files --cached --others --exclude-standard -- \
    $(foreach d,$(SOURCE_DIRS),'$(d)/*.cc' '$(d)/*.h') 2>/dev/null \
    || find $(SOURCE_DIRS) \( -name '*.cc' -o -name '*.h' \) 2>/dev/null; } | sort -u)

format:
	@files="$(cxx_sources)"; test -n "$$files" || { echo "format: no sources"; exit 0; }; \
	$(CLANG_FORMAT) -i --style=file $$files && echo "format: $$(echo $$files | wc -w) files"

format-check:
	@files="$(cxx_sources)"; test -n "$$files" || { echo "format-check: no sources"; exit 0; }; \
	$(CLANG_FORMAT) --dry-run --Werror --style=file $$files && echo "format-check: clean"

# clang-tidy needs each file's real compile command, so it runs over the translation units the
# build knows that live in SOURCE_DIRS (generated protobuf code is in the build directory and
# skipped); headers are checked through them. The header filter is anchored at this checkout so
# that generated and system headers are not checked. Every warning counts as an error: `make
# tidy` exits non-zero unless the tree is quiet. One file per clang-tidy, JOBS at a time.
empty :=
space := $(empty) $(empty)
tidy_dirs := $(subst $(space),|,$(SOURCE_DIRS))

tidy: configure
	$(CMAKE) --build $(BUILD_DIR) -j$(JOBS) --target gpufed_proto
	@files=$$(jq -r '.[].file' $(BUILD_DIR)/compile_commands.json \
	  | grep -E '^$(CURDIR)/($(tidy_dirs))/.*\.cc$$' | sort -u); \
	test -n "$$files" || { echo "tidy: no sources under $(CURDIR) in compile_commands.json" >&2; exit 1; }; \
	echo "$$files" | xargs -P$(JOBS) -n1 $(CLANG_TIDY) -p $(BUILD_DIR) --quiet --warnings-as-errors='*' \
	    --header-filter='^$(CURDIR)/($(tidy_dirs))/' \
	  && echo "tidy: clean ($$(echo "$$files" | wc -l) files)" \
	  || { echo "tidy: warnings above (each counts as an error)" >&2; exit 1; }

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_BUILD_DIR) .demo
