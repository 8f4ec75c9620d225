// examples/layouts.cpp — the contract in a page of research code: one model laid out over two
// devices by the train layer, in any of its layouts, ends with the bits of one device
// accumulating the same two micro-batches. ctest runs every layout (label examples).
//
//   build/examples/layouts [dp|ddp|zero1|zero2|zero3|gpipe|1f1b]   # exits 1 if the bits differ
//
// What picks the layout is the Plan (train/parallelize.h):
//   dp              DataParallel: replicas on cpu:0 and cpu:1, driven by this thread
//   ddp, zero1..3   a rank per device (threads of this process, the local backend), each with its
//                   half of every batch; ZeRO's optimizer wraps the factory's (make_optimizer)
//   gpipe, 1f1b     a pipeline: the MLP's layers cut into 2 stages, a thread per stage, each
//                   batch as 2 micro-batches run by the schedule
// On GPUs the ranks run over run_ranks_nccl, under mpirun over mpi_world: the same calls.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "example.h"  // the MLP, the batches, the loop (example::train) and the comparison

int main(int argc, char** argv) {
  const std::string layout = argc > 1 ? argv[1] : "ddp";
  const std::vector<std::string> known = {"dp", "ddp", "zero1", "zero2", "zero3", "gpipe", "1f1b"};
  if (std::find(known.begin(), known.end(), layout) == known.end()) {
    std::fprintf(stderr, "layouts: the layout is dp, ddp, zero1, zero2, zero3, gpipe or 1f1b, not '%s'\n",
                 layout.c_str());
    return 2;
  }
  mg::set_cpu_device_count(2);
  mg::set_deterministic(true);  // collectives add the ranks' tensors in rank order
  const std::vector<mg::Device> devices = {mg::Device("cpu:0"), mg::Device("cpu:1")};
  const std::vector<mg::data::Batch> batches = example::random_batches();

  std::puts("one device, each batch as 2 micro-batches:");
  const std::string reference = example::train(example::mlp(), batches, {}, {devices[0]}, {}, 2);

  std::printf("%s over cpu:0 and cpu:1:\n", layout.c_str());
  std::vector<std::string> digests;
  if (layout == "dp") {
    digests.push_back(example::train(example::mlp(), batches, {}, devices, {.data = "dp"}, 1));
  } else if (layout == "gpipe" || layout == "1f1b") {
    const mg::train::Plan plan{.pipeline = true, .pipeline_options = {.schedule = layout, .micro_batches = 2}};
    digests.push_back(example::train(example::mlp(), batches, {}, devices, plan, 1));
  } else {  // a rank per device
    std::vector<std::shared_ptr<mg::nn::Module>> nets = {example::mlp(), example::mlp()};  // each rank's replica
    digests.resize(2);
    mg::parallel::run_ranks(devices, [&](mg::parallel::Communicator& comm) {
      const size_t r = size_t(comm.rank());
      digests[r] = example::train(nets[r], batches, {.world = &comm, .dp = &comm}, {comm.device()}, {.data = layout}, 1);
    });
  }

  return example::compare("one device", reference, layout, digests);
}
