# Thin wrapper over scripts/ and CMake. `make run` and `make test` work on a fresh machine:
# they install what is missing (Debian packages), configure, build and then run or test.
BUILD      ?= build
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build test run bench format clean

all: build

deps:
	@scripts/install-deps.sh

# Configure once; afterwards ninja re-runs CMake by itself when a CMakeLists.txt changes.
$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS)

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

run: build
	@scripts/run-demo.sh $(BUILD)

# Benchmarks (not part of the tests); see docs/BENCHMARKS.md.
bench: build
	$(BUILD)/bin/bench_trace_store --benchmark_counters_tabular=true
	$(BUILD)/bin/bench_sqlite

format:
	find core profiler agents plots app tests bench -name '*.h' -o -name '*.cpp' -o -name '*.cu' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
