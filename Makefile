# The two commands of README.md, plus build and clean. Everything builds into build/.
BUILD_DIR ?= build
JOBS      ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build test train clean

all: build

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# The main job: the MLP on Fashion-MNIST for 3 epochs with DistributedDataParallel on every GPU
# (else two CPU devices), ending with test_accuracy, samples_per_s, peak memory, the all-reduce
# overlap and every rank's params_sha256.
train: build
	$(BUILD_DIR)/multigrad train --parallel ddp --devices auto

clean:
	rm -rf $(BUILD_DIR)
