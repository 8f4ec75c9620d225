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

#include "multigrad/multigrad.h"

namespace {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 64;
const std::vector<mg::Device> kDevices = {mg::Device("cpu:0"), mg::Device("cpu:1")};

std::vector<mg::optim::ParamGroup> one_group(std::vector<mg::Tensor> params) { return {{.params = std::move(params)}}; }
std::unique_ptr<mg::optim::Optimizer> sgd(std::vector<mg::optim::ParamGroup> groups) {
  return std::make_unique<mg::optim::SGD>(std::move(groups), mg::optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
}

std::shared_ptr<mg::nn::Module> mlp() {
  mg::manual_seed(0);  // every replica starts from the same parameters
  return mg::nn::mlp({32, 64, 64, 8});
}

// Random inputs, each with a random class of 8.
std::vector<mg::data::Batch> make_batches() {
  mg::manual_seed(1);
  std::vector<mg::data::Batch> out;
  for (int s = 0; s < kSteps; ++s)
    out.push_back({mg::randn({kBatch, 32}), mg::to(mg::mul(mg::rand({kBatch}), 8.0), mg::DType::Int64), {}});
  return out;
}

// Trains `net` laid out by `plan` over `groups` on `devices`; returns the digest of the one-device
// model its parameters make up (gathered first: ZeRO-3 and the stages keep parts of it).
std::string train(std::shared_ptr<mg::nn::Module> net, const std::vector<mg::data::Batch>& batches,
                  const mg::train::Groups& groups, const std::vector<mg::Device>& devices,
                  const mg::train::Plan& plan, int64_t grad_accum) {
  const auto m = mg::train::parallelize({net}, devices, groups, plan);
  const auto optimizer = mg::train::make_optimizer(*m, plan, one_group, sgd);
  mg::train::Metrics metrics;  // summed on the device, read once below
  int64_t step = 0;
  for (const mg::data::Batch& b : batches) {
    const mg::data::Batch here{b.inputs.to(devices.front()), b.targets.to(devices.front()), {}};
    mg::train::train_step(*m, *optimizer, here, {.grad_accum = grad_accum}, metrics, ++step);
  }
  std::printf("  mean loss %.4f over %lld examples\n", metrics.totals().loss(), (long long)metrics.totals().samples);
  m->gather_parameters();  // collective where the parameters are spread
  return mg::train::params_sha256(m->one_device_model());
}

}  // namespace

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
  const std::vector<mg::data::Batch> batches = make_batches();  // made here: the global RNG is not for threads

  std::puts("one device, each batch as 2 micro-batches:");
  const std::string reference = train(mlp(), batches, {}, {kDevices[0]}, {}, 2);

  std::printf("%s over cpu:0 and cpu:1:\n", layout.c_str());
  std::vector<std::string> digests;
  if (layout == "dp") {
    digests.push_back(train(mlp(), batches, {}, kDevices, {.data = "dp"}, 1));
  } else if (layout == "gpipe" || layout == "1f1b") {
    const mg::train::Plan plan{.pipeline = true, .pipeline_options = {.schedule = layout, .micro_batches = 2}};
    digests.push_back(train(mlp(), batches, {}, kDevices, plan, 1));
  } else {  // a rank per device
    std::vector<std::shared_ptr<mg::nn::Module>> nets = {mlp(), mlp()};  // each rank's replica
    digests.resize(2);
    mg::parallel::run_ranks(kDevices, [&](mg::parallel::Communicator& comm) {
      const size_t r = size_t(comm.rank());
      digests[r] = train(nets[r], batches, {.world = &comm, .dp = &comm}, {comm.device()}, {.data = layout}, 1);
    });
  }

  bool equal = true;
  std::printf("params_sha256, one device: %s\n", reference.c_str());
  for (size_t r = 0; r < digests.size(); ++r) {
    std::printf("params_sha256, %s%s: %s\n", layout.c_str(),
                digests.size() > 1 ? (" rank " + std::to_string(r)).c_str() : "", digests[r].c_str());
    equal = equal && digests[r] == reference;
  }
  std::puts(equal ? "bit-identical" : "DIFFERENT");
  return equal ? 0 : 1;
}
