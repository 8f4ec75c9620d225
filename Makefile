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

# `multigrad train` arrives with the data/train issue; until then this target sets up, builds
# and shows the devices a training run would use.
train: build
	@echo "make train: 'multigrad train' arrives with the data/train issue; the build is ready."
	$(BUILD_DIR)/multigrad devices

clean:
	rm -rf $(BUILD_DIR)
