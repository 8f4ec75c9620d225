// tests/cuda/test_cuda_parallel.cpp — the local backend, DataParallel and DDP on CUDA devices
// (cuda:0 and cuda:1, logical devices on one GPU by default: cuda_main.cpp), against the CPU:
// every collective against the same collective on CPU devices, and the deterministic
// equivalence of DP, DDP and 1F1B and interleaved pipelines (over rendezvous sends) with
// `--grad-accum` on one GPU.
#include "core/cpu_devices_guard.h"
#include "cuda/cuda_test_util.h"
#include "parallel/parallel_test_util.h"

using mg::Device;
using mg::DType;
using mg::Tensor;
using mg::parallel::Communicator;
using mg::parallel::ReduceOp;
using mg::parallel::run_ranks;
using namespace mg::test;

namespace {

// Runs `collective` on 2 ranks of `devices`; rank r's input is cpu_input(shape, dtype, seed r + 1).
// Returns each rank's tensor afterwards, on the CPU.
std::vector<Tensor> run_collective(const std::vector<Device>& devices, const mg::Shape& shape, DType dtype,
                                   const std::function<void(Communicator&, const Tensor&)>& collective) {
  std::vector<Tensor> results(devices.size());
  run_ranks(devices, [&](Communicator& comm) {
    Tensor t = cpu_input(shape, dtype, uint64_t(comm.rank()) + 1).to(comm.device());
    collective(comm, t);
    results[size_t(comm.rank())] = t.to(Device("cpu:0"));
  });
  return results;
}

}  // namespace

TEST_CASE("cuda local all_reduce, broadcast, send/recv and send_recv match the CPU devices", "[cuda][parallel]") {
  CpuDevicesGuard guard(2);
  const std::vector<std::pair<std::string, std::function<void(Communicator&, const Tensor&)>>> collectives{
      {"all_reduce sum", [](Communicator& c, const Tensor& t) { c.all_reduce(t)->wait(); }},
      {"all_reduce avg", [](Communicator& c, const Tensor& t) { c.all_reduce(t, ReduceOp::Avg)->wait(); }},
      {"all_reduce max", [](Communicator& c, const Tensor& t) { c.all_reduce(t, ReduceOp::Max)->wait(); }},
      {"broadcast", [](Communicator& c, const Tensor& t) { c.broadcast(t, 1)->wait(); }},
      {"send/recv",
       [](Communicator& c, const Tensor& t) {
         if (c.rank() == 0) c.send(t, 1)->wait();
         if (c.rank() == 1) c.recv(t, 0)->wait();
       }},
      {"send_recv",
       [](Communicator& c, const Tensor& t) {
         const int peer = 1 - c.rank();
         c.send_recv(t.clone(), peer, t, peer)->wait();  // both ranks at once; t is overwritten
       }},
  };
  for (bool deterministic : {false, true}) {
    DeterministicScope scope(deterministic);
    for (const auto& [name, collective] : collectives) {
      for (int64_t numel : {int64_t(1), int64_t(7), int64_t((1 << 20) + 3)}) {
        INFO(name << ", " << numel << " elements, deterministic " << deterministic);
        const auto want = run_collective(cpu_devices(2), {numel}, DType::Float32, collective);
        const auto got = run_collective(cuda_devices(2), {numel}, DType::Float32, collective);
        for (size_t r = 0; r < 2; ++r) expect_close(got[r], want[r]);
      }
    }
  }
}

TEST_CASE("cuda local all_gather and reduce_scatter match the CPU devices", "[cuda][parallel]") {
  CpuDevicesGuard guard(2);
  for (const std::vector<Device>& devices : {cpu_devices(2), cuda_devices(2)}) {
    std::vector<Tensor> gathered(2), scattered(2);
    run_ranks(devices, [&](Communicator& comm) {
      const Tensor in = cpu_input({4, 3}, DType::Float64, uint64_t(comm.rank()) + 1).to(comm.device());
      Tensor all = Tensor::empty({8, 3}, {DType::Float64, comm.device()});
      comm.all_gather(all, in)->wait();
      Tensor part = Tensor::empty({2, 3}, {DType::Float64, comm.device()});
      comm.reduce_scatter(part, in, ReduceOp::Sum)->wait();
      gathered[size_t(comm.rank())] = all.to(Device("cpu:0"));
      scattered[size_t(comm.rank())] = part.to(Device("cpu:0"));
    });
    const Tensor a = cpu_input({4, 3}, DType::Float64, 1), b = cpu_input({4, 3}, DType::Float64, 2);
    for (int r = 0; r < 2; ++r) {
      expect_equal(gathered[size_t(r)], mg::cat({a, b}, 0));
      expect_close(scattered[size_t(r)], mg::add(a, b).slice(0, 2 * r, 2 * r + 2), 1e-12, 0);
    }
  }
}

TEST_CASE("cuda deterministic ddp and dp on two GPUs equal --grad-accum 2 on one", "[cuda][parallel]") {
  DeterministicScope deterministic(true);
  for (ModelKind kind : {ModelKind::Mlp, ModelKind::CnnWithBatchNorm}) {
    INFO(model_name(kind));
    const auto batches = make_batches(kind, 3, 10);
    const std::vector<Batch> on_gpu = batches_on(batches, gpu());
    const auto want = parameter_bytes(*reference_model(kind, batches, 2, gpu()));

    auto dp_model = make_model(kind, 1);
    dp_model->to(gpu());
    mg::parallel::DataParallel dp(dp_model, cuda_devices(2));
    mg::optim::SGD sgd = make_sgd(dp);
    for (const Batch& b : on_gpu) {
      sgd.zero_grad();
      const Tensor logits = dp.forward(b.inputs);
      Tensor loss;
      for (const auto& c : mg::parallel::split_batch(10, 2)) {
        const Tensor part = scaled_loss(logits.slice(0, c.begin, c.end), b.targets.slice(0, c.begin, c.end), 10);
        loss = loss.defined() ? mg::add(loss, part) : part;
      }
      loss.backward();
      sgd.step();
    }
    CHECK(parameter_bytes(*dp_model) == want);

    const auto models = train_ddp(run_ranks, cuda_devices(2), kind, batches);
    CHECK(parameter_bytes(*models[0]) == want);
    CHECK(parameter_bytes(*models[1]) == want);
  }
}

TEST_CASE("cuda 1f1b and interleaved pipelines (also a GPT) over rendezvous sends on two devices equal --grad-accum on one", "[cuda][parallel]") {
  // The local backend with NCCL's send semantics (LocalOptions::rendezvous_sends) on logical
  // devices, which share one GPU; NCCL itself needs a GPU per stage (test_cuda_nccl.cpp).
  DeterministicScope deterministic(true);
  constexpr int m = 4;
  const auto batches = make_batches(ModelKind::Mlp, 3, 10);
  const auto reference = reference_model(ModelKind::Mlp, batches, m, gpu());
  const auto model = train_pipeline(ModelKind::Mlp, cuda_devices(2), batches,
                                    {.schedule = "1f1b", .micro_batches = m, .run_ranks = run_ranks_rendezvous});
  CHECK(parameter_bytes(*model) == parameter_bytes(*reference));
  // Interleaved, 2 chunks per device: the deep MLP's 9 layers in 4 pieces.
  const auto deep_reference = reference_model(ModelKind::DeepMlp, batches, m, gpu());
  const auto interleaved = train_pipeline(
      ModelKind::DeepMlp, cuda_devices(2), batches,
      {.schedule = "interleaved", .micro_batches = m, .chunks = 2, .run_ranks = run_ranks_rendezvous});
  CHECK(parameter_bytes(*interleaved) == parameter_bytes(*deep_reference));
  // A GPT: its head, on cuda:1, is tied to the token embedding on cuda:0.
  const auto gpt_batches = make_batches(ModelKind::Gpt, 2, 8);
  const auto gpt_reference = reference_model(ModelKind::Gpt, gpt_batches, m, gpu());
  const auto gpt = train_pipeline(ModelKind::Gpt, cuda_devices(2), gpt_batches,
                                  {.schedule = "1f1b", .micro_batches = m, .run_ranks = run_ranks_rendezvous});
  CHECK(parameter_bytes(*gpt) == parameter_bytes(*gpt_reference));
}
