// tests/parallel/comm/test_counting.cpp — CountingCommunicator (parallel/comm/counting.cpp): each
// operation's bytes by the ring accounting, its time once waited for, and a step's bytes for DDP
// and ZeRO stages 1 and 2 against the ZeRO paper's 2 (n-1)/n of the parameters' bytes (with each
// mode's padding).
#include "core/cpu_devices_guard.h"
#include "parallel/parallel_test_util.h"

using mg::Tensor;
using mg::parallel::Communicator;
using mg::parallel::CountingCommunicator;
using mg::parallel::run_ranks;
using namespace mg::test;

TEST_CASE("CountingCommunicator counts each operation's bytes per rank as the ring algorithms move them",
          "[parallel][counting]") {
  CpuDevicesGuard guard(4);
  std::vector<std::map<std::string, mg::parallel::CommCounts>> counts(4);
  run_ranks(cpu_devices(4), [&](Communicator& inner) {
    CountingCommunicator comm(inner);
    const Tensor t = mg::zeros({1000}, {.device = comm.device()});  // 4000 bytes
    comm.all_reduce(t)->wait();
    comm.broadcast(t, 0)->wait();
    comm.all_gather(t, t.slice(0, 0, 250))->wait();
    comm.reduce_scatter(t.slice(0, 0, 250).clone(), t)->wait();
    const int next = (comm.rank() + 1) % 4, prev = (comm.rank() + 3) % 4;
    comm.send(t, next)->wait();
    comm.recv(t, prev)->wait();
    comm.barrier()->wait();
    counts[size_t(comm.rank())] = comm.counts();
  });
  for (const auto& c : counts) {
    CHECK(c.at("all_reduce").bytes == 6000);  // 2 (n - 1) / n of 4000
    CHECK(c.at("broadcast").bytes == 4000);
    CHECK(c.at("all_gather").bytes == 3000);
    CHECK(c.at("reduce_scatter").bytes == 3000);
    CHECK(c.at("send").bytes == 4000);
    CHECK(c.at("recv").bytes == 0);
    CHECK((c.at("barrier").calls == 1 && c.at("barrier").bytes == 0));
  }
}

// Time: an operation's counts once it has been waited for (a 4 MB all-reduce takes a while), and
// once only however often it is waited for; none before.
TEST_CASE("CountingCommunicator times each operation once it is waited for", "[parallel][counting]") {
  CpuDevicesGuard guard(2);
  std::vector<double> issued(2), waited(2), again(2);
  run_ranks(cpu_devices(2), [&](Communicator& inner) {
    CountingCommunicator comm(inner);
    const Tensor t = mg::ones({1 << 20}, {.device = comm.device()});
    const auto work = comm.all_reduce(t);
    issued[size_t(comm.rank())] = comm.ms();
    work->wait();
    waited[size_t(comm.rank())] = comm.counts().at("all_reduce").ms;
    work->wait();
    again[size_t(comm.rank())] = comm.ms();
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(issued[size_t(r)] == 0);
    CHECK(waited[size_t(r)] > 0);
    CHECK(again[size_t(r)] == waited[size_t(r)]);
  }
}

TEST_CASE("a step of DDP, ZeRO-1 and ZeRO-2 moves 2 (n-1)/n of the parameters' bytes, ZeRO-3 3 (n-1)/n, padding "
          "included",
          "[parallel][counting]") {
  CpuDevicesGuard guard(4);
  const Batch batch = make_batches(ModelKind::Mlp, 1, 8)[0];
  std::vector<int64_t> numels;
  for (const Tensor& p : make_model(ModelKind::Mlp, 1)->parameters()) numels.push_back(p.numel());
  for (int n : {2, 4}) {
    // DDP: one bucket (1 MiB first bucket), each slot rounded up to 64 bytes. ZeRO: one unit of
    // the parameters padded to a multiple of n.
    int64_t ddp_bytes = 0, total = 0;
    for (int64_t numel : numels) ddp_bytes += (numel + 15) / 16 * 64, total += numel;
    const int64_t zero_bytes = (total + n - 1) / n * n * 4;
    // ZeRO-3: a unit per layer (weight and bias), each padded.
    int64_t zero3_bytes = 0;
    for (size_t k = 0; k < numels.size(); k += 2) zero3_bytes += (numels[k] + numels[k + 1] + n - 1) / n * n * 4;
    const double share = 2.0 * (n - 1) / n;
    for (const std::string mode : {"ddp", "zero1", "zero2", "zero3"}) {
      INFO(mode << " on " << n << " ranks");
      std::vector<double> bytes(static_cast<size_t>(n));
      std::vector<std::map<std::string, mg::parallel::CommCounts>> counts(static_cast<size_t>(n));
      std::vector<std::shared_ptr<mg::nn::Module>> models;
      for (int r = 0; r < n; ++r) models.push_back(make_model(ModelKind::Mlp, 1));
      run_ranks(cpu_devices(n), [&](Communicator& inner) {
        CountingCommunicator comm(inner);
        auto model = models[size_t(comm.rank())];
        model->to(comm.device());
        std::shared_ptr<mg::nn::Module> net = model;
        std::unique_ptr<mg::optim::Optimizer> opt;
        if (mode == "ddp") {
          net = std::make_shared<mg::parallel::DistributedDataParallel>(model, comm);
          opt = std::make_unique<mg::optim::SGD>(net->parameters(), mg::optim::SGDOptions{.lr = 0.1});
        } else {
          const int stage = mode[4] - '0';
          auto zero = std::make_unique<mg::parallel::ZeroOptimizer>(
              std::vector<mg::optim::ParamGroup>{{.params = model->parameters()}}, comm, ZeroSetup{}.make,
              mg::parallel::ZeroOptions{.stage = stage},
              stage == 3 ? std::dynamic_pointer_cast<mg::nn::Sequential>(model) : nullptr);
          if (stage == 3) net = std::shared_ptr<mg::nn::Module>(model, &zero->model());  // zero owns it
          opt = std::move(zero);
        }
        comm.reset();  // what construction sent (the broadcast of rank 0's parameters) aside
        opt->zero_grad();
        backward_rank_part(comm, batch, *net);
        opt->step();
        bytes[size_t(comm.rank())] = comm.bytes();
        counts[size_t(comm.rank())] = comm.counts();
      });
      const double want = mode == "zero3" ? 1.5 * share * double(zero3_bytes)
                                          : share * double(mode == "ddp" ? ddp_bytes : zero_bytes);
      for (int r = 0; r < n; ++r) {
        CHECK(bytes[size_t(r)] == Approx(want).epsilon(1e-12));
        CHECK(counts[size_t(r)].count(mode == "ddp" ? "all_reduce" : "reduce_scatter") == 1);
      }
    }
  }
}
