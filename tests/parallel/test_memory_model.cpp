// tests/parallel/test_memory_model.cpp — parallel::state_bytes (parallel/memory_model.h) against
// the allocator: what a rank holds after two Adam steps of the MLP (235,146 parameters) under
// DDP and ZeRO-1, -2 and -3 on 1, 2 and 4 ranks, less what its device held before the model came.
#include <map>

#include "core/cpu_devices_guard.h"
#include "parallel/memory_model.h"
#include "parallel/parallel_test_util.h"
#include "parallel/zero.h"

using mg::Tensor;
using mg::parallel::Communicator;
using namespace mg::test;

TEST_CASE("state_bytes predicts what a rank holds between steps: ddp and zero1-3 on 1, 2 and 4 ranks",
          "[parallel][memory]") {
  CpuDevicesGuard guard(5);
  const auto make = [] {
    mg::manual_seed(3);
    return mg::nn::mlp({784, 256, 128, 10});
  };
  int64_t params = 0;
  for (const Tensor& p : make()->parameters()) params += p.numel();
  mg::manual_seed(4);
  const Batch batch = {mg::randn({8, 784}), mg::argmax(mg::randn({8, 10}), 1)};
  const auto adam = [](std::vector<mg::optim::ParamGroup> g) -> std::unique_ptr<mg::optim::Optimizer> {
    return std::make_unique<mg::optim::Adam>(std::move(g), mg::optim::AdamOptions{});
  };
  for (int ranks : {1, 2, 4}) {
    // Ranks on cpu:1.. (the models are made on cpu:0): a device holds only its rank's tensors.
    std::vector<mg::Device> devices;
    for (int r = 1; r <= ranks; ++r) devices.emplace_back(mg::DeviceType::CPU, r);
    for (const std::string mode : {"ddp", "zero1", "zero2", "zero3"}) {
      INFO(mode << " on " << ranks << " ranks");
      std::vector<std::shared_ptr<mg::nn::Sequential>> models;
      for (int r = 0; r < ranks; ++r) models.push_back(make());
      std::vector<int64_t> held(size_t(ranks), 0), first_unit(size_t(ranks), 0);
      size_t units = 1;
      mg::parallel::run_ranks(devices, [&](Communicator& comm) {
        const auto layers = models[size_t(comm.rank())];
        const int64_t before = mg::memory_stats(comm.device()).allocated;
        layers->to(comm.device());
        std::shared_ptr<mg::nn::Module> net = layers;
        std::unique_ptr<mg::optim::Optimizer> opt;
        if (mode == "ddp") {
          net = std::make_shared<mg::parallel::DistributedDataParallel>(layers, comm);
          opt = adam({{.params = net->parameters()}});
        } else {
          const int stage = mode.back() - '0';
          auto zero = std::make_unique<mg::parallel::ZeroOptimizer>(
              std::vector<mg::optim::ParamGroup>{{.params = layers->parameters()}}, comm, adam,
              mg::parallel::ZeroOptions{.stage = stage}, stage == 3 ? layers : nullptr);
          if (stage == 3) net = std::shared_ptr<mg::nn::Module>(layers, &zero->model());  // zero owns it
          const auto unit_params = zero->unit_params();
          units = unit_params.size();
          for (size_t k : unit_params[0]) first_unit[size_t(comm.rank())] += layers->parameters()[k].numel();
          opt = std::move(zero);
        }
        for (int step = 0; step < 2; ++step) {
          opt->zero_grad();
          backward_rank_part(comm, batch, *net);
          opt->step();
        }
        held[size_t(comm.rank())] = mg::memory_stats(comm.device()).allocated - before;
        comm.barrier()->wait();
      });
      const bool keeps_first_unit = mode == "zero2" || mode == "zero3";
      const int64_t want =
          mg::parallel::state_bytes(mode, params, ranks, 2, keeps_first_unit ? first_unit[0] : 0).total();
      // Not in the formula: the allocator's rounding of each tensor to 512 bytes (core/allocator.cpp;
      // at most 6 parameters or 3 units, as many gradient buckets or buffers, 3 reduced shards, and
      // per segment, at most 9, two moments and a step count: 40 tensors), and each unit's padding
      // to a multiple of the ranks in its parameters, buffers and state.
      const int64_t slack = 512 * 40 + int64_t(units) * (ranks - 1) * 4 * 6;
      for (int r = 0; r < ranks; ++r) {
        INFO("rank " << r << ": holds " << held[size_t(r)] << " bytes, the formula " << want);
        CHECK(std::abs(held[size_t(r)] - want) <= slack);
      }
    }
  }
}

TEST_CASE("state_bytes: the formulas of ZeRO's paper, and a bad mode", "[parallel][memory]") {
  // Adam (K = 2) in float32 on 4 ranks, 1000 parameters: 16 bytes a parameter for DDP.
  CHECK(mg::parallel::state_bytes("ddp", 1000, 4, 2).total() == 16000);
  CHECK(mg::parallel::state_bytes("zero1", 1000, 4, 2).total() == 4000 + 5000 + 2000);
  CHECK(mg::parallel::state_bytes("zero2", 1000, 4, 2, 100).total() == 4000 + 1400 + 2000);
  CHECK(mg::parallel::state_bytes("zero3", 1000, 4, 2, 100).total() == 1000 + 1400 + 2000);
  CHECK_THROWS_WITH(mg::parallel::state_bytes("fsdp", 1000, 4, 2),
                    Catch::Contains("state_bytes: no mode 'fsdp' (ddp, zero1, zero2, zero3)"));
}
