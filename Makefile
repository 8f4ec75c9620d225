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

# CUDA kernel images for this machine's GPUs when it has any, else for one architecture: without
# a GPU the CUDA code is only compiled (the same source for every architecture), and each more
# architecture would compile every kernel again. CMakeLists.txt's default, four architectures
# plus PTX, is for builds run elsewhere: cmake without this Makefile, or
# make CUDA_ARCHS='80-real;86-real;89-real;90'.
CUDA_ARCHS ?= $(if $(shell nvidia-smi -L 2>/dev/null),native,90)

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  $(if $(CUDA_ARCHS),-DCMAKE_CUDA_ARCHITECTURES="$(CUDA_ARCHS)") $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build sim
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)
	$(MAKE) --no-print-directory test-sim

# kernels/cuda/*.cu compiled as C++ and run on the CPU, with AddressSanitizer and UBSan on
# everything: the cuda tests on 2 simulated devices, a block's threads first in order, then in
# a seeded shuffle at every barrier (a missing __syncthreads changes the result). The shuffled
# run leaves out the tests it cannot change: the communication tests (their kernels are the ones
# the other tests run, and the order of their host threads does not depend on the schedule), and
# those that launch no kernel with a barrier or a warp shuffle (copies, the runtime, random
# draws, safetensors, the DataLoader) or repeat another test's kernels (conv2d's repeat), and
# record-only mode, which runs no kernel.
SHUFFLE_EXCLUDE ?= ^nccl|^cuda local|^cuda deterministic ddp|^cuda 1f1b|copies|memory_stats|caching allocator|\
  empty_cache|ops follow|device properties|logical devices|threads driving|wrong devices|MG_CUDA_CHECK|\
  CPU draw|successive draws|safetensors|DataLoader|pinned batch|repeats bit for bit|^record only
# Then the tests that cross devices once more on one simulated GPU, which cuda_main.cpp's two
# logical devices (MG_CUDA_LOGICAL_DEVICES) share: same-GPU copies, two devices' streams and
# allocators on one GPU, and NCCL refusing two ranks there.
LOGICAL_TESTS ?= logical devices|threads driving|^cuda local|^cuda deterministic ddp|^cuda 1f1b|^nccl refuses
sim: deps
ifeq ($(CUDA_HEADERS),)
	@echo "sim: skipped: no CUDA toolkit headers (cuda_runtime.h) to build the simulated CUDA configuration"
else
	cmake -S . -B $(SIM_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMG_CUDA_SIM=ON \
	  -DMG_SANITIZE=address,undefined -DMG_BUILD_BENCHMARKS=OFF $(CMAKE_ARGS)
	cmake --build $(SIM_DIR) -j $(JOBS) --target mg_cuda_tests multigrad_cli
endif

test-sim:
ifeq ($(CUDA_HEADERS),)
	@echo "test-sim: skipped: no CUDA toolkit headers; the cuda tests did not run"
else
	ctest --test-dir $(SIM_DIR) -L cuda --output-on-failure -j $(JOBS)
	MG_CUDA_SIM_SCHEDULE=shuffle:1 ctest --test-dir $(SIM_DIR) -L cuda -E '$(SHUFFLE_EXCLUDE)' --output-on-failure -j $(JOBS)
	MG_CUDA_SIM_DEVICES=1 ctest --test-dir $(SIM_DIR) -L cuda -R '$(LOGICAL_TESTS)' --output-on-failure -j $(JOBS)
endif

# The main job: the MLP on Fashion-MNIST for 3 epochs with DistributedDataParallel on every GPU
# (else two CPU devices), ending with test_accuracy, samples_per_s, peak memory, the all-reduce
# overlap and every rank's params_sha256.
train: build
	$(BUILD_DIR)/multigrad train --parallel ddp --devices auto

clean:
	rm -rf $(BUILD_DIR) $(SIM_DIR)
