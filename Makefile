# The two commands of README.md, plus build and clean. Everything builds into build/, and the
# simulated CUDA configuration (sim/README.md) into build-sim/.
BUILD_DIR ?= build
SIM_DIR   ?= build-sim
JOBS      ?= $(shell nproc)
CMAKE_ARGS ?=
# The simulator takes the CUDA toolkit's headers (not its compiler or libraries).
CUDA_HEADERS ?= $(firstword $(wildcard /usr/local/cuda/include/cuda_runtime.h /usr/include/cuda_runtime.h))

.PHONY: all deps configure build sim test test-sim train clean

all: build

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build sim
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)
	$(MAKE) --no-print-directory test-sim

# kernels/cuda/*.cu compiled as C++ and run on the CPU, with AddressSanitizer and UBSan on
# everything: the cuda tests on 2 simulated devices, a block's threads first in order, then in
# a seeded shuffle at every barrier (a missing __syncthreads changes the result). The shuffled
# run leaves out the communication tests: their kernels are the ones the other tests run, and
# the order of their host threads does not depend on the schedule.
SHUFFLE_EXCLUDE ?= ^nccl|^cuda local|^cuda deterministic ddp|^cuda 1f1b
sim: deps
ifeq ($(CUDA_HEADERS),)
	@echo "sim: skipped: no CUDA toolkit headers (cuda_runtime.h) to build the simulated CUDA configuration"
else
	cmake -S . -B $(SIM_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMG_CUDA_SIM=ON \
	  -DMG_SANITIZE=address,undefined -DMG_BUILD_BENCHMARKS=OFF $(CMAKE_ARGS)
	cmake --build $(SIM_DIR) -j $(JOBS) --target mg_cuda_tests
endif

test-sim:
ifeq ($(CUDA_HEADERS),)
	@echo "test-sim: skipped: no CUDA toolkit headers; the cuda tests did not run"
else
	ctest --test-dir $(SIM_DIR) -L cuda --output-on-failure -j $(JOBS)
	MG_CUDA_SIM_SCHEDULE=shuffle:1 ctest --test-dir $(SIM_DIR) -L cuda -E '$(SHUFFLE_EXCLUDE)' --output-on-failure -j $(JOBS)
endif

# The main job: the MLP on Fashion-MNIST for 3 epochs with DistributedDataParallel on every GPU
# (else two CPU devices), ending with test_accuracy, samples_per_s, peak memory, the all-reduce
# overlap and every rank's params_sha256.
train: build
	$(BUILD_DIR)/multigrad train --parallel ddp --devices auto

clean:
	rm -rf $(BUILD_DIR) $(SIM_DIR)
