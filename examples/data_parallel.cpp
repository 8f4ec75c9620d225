// examples/data_parallel.cpp — the contract in a page of research code: DDP, or ZeRO-1, 2 or 3,
// over two devices, composed by the train layer, ends with the bits of one device accumulating
// the same two micro-batches. Run by ctest for each mode (label examples).
//
//   build/examples/data_parallel [ddp|zero1|zero2|zero3]   # prints the digests; exits 1 if they differ
//
// The one line that picks the mode is the Plan's `data`; ZeRO's optimizer wraps the factory's
// (train::make_optimizer), and ZeRO-3's model is the one train::parallelize returns.
//
// The devices are CPU virtual devices (cpu:0, cpu:1), the ranks threads of this process (the
// local backend); on GPUs the same code runs over run_ranks_nccl, under mpirun over mpi_world.
#include <cstdio>
#include <string>
#include <vector>

#include "multigrad/multigrad.h"

namespace {

constexpr int kSteps = 5;
constexpr int64_t kBatch = 64;

std::vector<mg::optim::ParamGroup> one_group(std::vector<mg::Tensor> params) { return {{.params = std::move(params)}}; }
std::unique_ptr<mg::optim::Optimizer> sgd(std::vector<mg::optim::ParamGroup> groups) {
  return std::make_unique<mg::optim::SGD>(std::move(groups), mg::optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
}

// The batches of every run: random inputs, each with a random class of 8.
std::vector<mg::data::Batch> make_batches() {
  mg::manual_seed(1);
  std::vector<mg::data::Batch> out;
  for (int s = 0; s < kSteps; ++s)
    out.push_back({mg::randn({kBatch, 32}), mg::to(mg::mul(mg::rand({kBatch}), 8.0), mg::DType::Int64), {}});
  return out;
}

// Trains the MLP (seed 0) laid out by `plan` over `groups` on `device`, and returns the digest of
// the one-device model its parameters make up.
std::string train(std::shared_ptr<mg::nn::Module> net, const std::vector<mg::data::Batch>& batches,
                  const mg::train::Groups& groups, const mg::Device& device, const mg::train::Plan& plan,
                  int64_t grad_accum) {
  const auto m = mg::train::parallelize({net}, {device}, groups, plan);
  const auto optimizer = mg::train::make_optimizer(*m, plan, one_group, sgd);
  mg::train::Metrics metrics;
  int64_t step = 0;
  for (const mg::data::Batch& b : batches) {
    mg::train::train_step(*m, *optimizer, {b.inputs.to(device), b.targets.to(device), {}},
                          {.grad_accum = grad_accum}, metrics, ++step);
  }
  std::printf("  loss %.4f over %lld examples\n", metrics.totals().loss(), (long long)metrics.totals().samples);
  m->gather_parameters();  // ZeRO-3 keeps only shards between steps: gathered (collective) for the digest
  return mg::train::params_sha256(m->one_device_model());
}

std::shared_ptr<mg::nn::Module> mlp() {
  mg::manual_seed(0);
  return mg::nn::mlp({32, 64, 8});
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ddp";
  if (mode != "ddp" && mode != "zero1" && mode != "zero2" && mode != "zero3") {
    std::fprintf(stderr, "data_parallel: the mode is ddp, zero1, zero2 or zero3, not '%s'\n", mode.c_str());
    return 2;
  }
  mg::set_cpu_device_count(2);
  mg::set_deterministic(true);  // the all-reduce adds the ranks' gradients in rank order

  const std::vector<mg::data::Batch> batches = make_batches();  // made here: the global RNG is not for threads
  std::puts("one device, each batch as 2 micro-batches:");
  const std::string one = train(mlp(), batches, {}, mg::Device("cpu:0"), {}, 2);

  std::vector<std::shared_ptr<mg::nn::Module>> nets = {mlp(), mlp()};  // rank 0's and rank 1's replica
  std::vector<std::string> ranks(2);
  std::printf("%s over cpu:0 and cpu:1, each rank half of each batch:\n", mode.c_str());
  mg::parallel::run_ranks({mg::Device("cpu:0"), mg::Device("cpu:1")}, [&](mg::parallel::Communicator& comm) {
    ranks[size_t(comm.rank())] =
        train(nets[size_t(comm.rank())], batches, {.world = &comm, .dp = &comm}, comm.device(), {.data = mode}, 1);
  });

  std::printf("params_sha256, one device: %s\nparams_sha256, %s rank 0: %s\nparams_sha256, %s rank 1: %s\n", one.c_str(),
              mode.c_str(), ranks[0].c_str(), mode.c_str(), ranks[1].c_str());
  const bool equal = ranks[0] == one && ranks[1] == one;
  std::puts(equal ? "bit-identical" : "DIFFERENT");
  return equal ? 0 : 1;
}
