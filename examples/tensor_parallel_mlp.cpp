// examples/tensor_parallel_mlp.cpp — Megatron-LM's tensor parallelism on an MLP: every rank holds a
// slice of each Linear layer and computes its part of every example.
//
//   build/examples/tensor_parallel_mlp      # exits 1 if the two ranks end with different models
//
// Of each pair of Linear layers the first is split by its output features (column-parallel: each
// rank computes its columns of the hidden layer, no communication), the second by its input
// features (row-parallel: each rank's partial product, summed over the ranks by an all-reduce).
// Megatron calls the two collectives f and g: f is the identity forward and an all-reduce of the
// input's gradient backward, g the reverse. parallel/tensor/tensor_parallel.h has the design note.
//
// Unlike the data-parallel layouts this one is not bit-identical to one device: the row-parallel
// layer sums each output in two halves, one per rank, and adds the halves; one device sums the
// whole row at once, rounding elsewhere. The ranks end with the same model (the all-reduce gives
// each the same sums), close to one device's; tests/parallel/tensor/test_tensor_parallel.cpp holds
// every gradient to the rounding bound that splitting the sums allows. With a tp group fixed,
// data parallelism across groups is bit-identical again: examples/mesh_dp_tp.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "example.h"  // the MLP, the batches, the loop (example::train) and the comparison

int main() {
  mg::set_cpu_device_count(2);
  mg::set_deterministic(true);
  const std::vector<mg::Device> devices = {mg::Device("cpu:0"), mg::Device("cpu:1")};
  const std::vector<mg::data::Batch> batches = example::random_batches();

  // What each rank holds: its slices of the one-device model's parameters.
  mg::parallel::run_ranks(devices, [&](mg::parallel::Communicator& comm) {
    const auto whole = example::mlp();
    const auto slices = mg::parallel::tensor_parallel_mlp(*whole, comm);
    if (comm.rank() != 0) return;
    const auto whole_params = whole->named_parameters();
    const auto slice_params = slices->named_parameters();
    std::puts("parameter       one device   rank 0 of 2");
    for (size_t i = 0; i < whole_params.size(); ++i)
      std::printf("%-15s %-12s %s\n", whole_params[i].first.c_str(), mg::to_string(whole_params[i].second.shape()).c_str(),
                  mg::to_string(slice_params[i].second.shape()).c_str());
  });

  std::puts("one device:");
  const auto reference = example::mlp();
  const std::string reference_digest = example::train(reference, batches, {}, {devices[0]}, {}, 1);

  std::puts("tensor parallel over cpu:0 and cpu:1:");
  std::vector<std::shared_ptr<mg::nn::Module>> nets = {example::mlp(), example::mlp()};  // each rank's whole model
  std::vector<std::string> digests(2);
  mg::parallel::run_ranks(devices, [&](mg::parallel::Communicator& comm) {
    const size_t r = size_t(comm.rank());
    digests[r] = example::train(nets[r], batches, {.world = &comm, .tp = &comm}, {comm.device()}, {}, 1);
  });

  // How far the split sums took the model from one device's (nets[0] holds the gathered slices).
  double largest = 0;
  const auto got = nets[0]->parameters(), want = reference->parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    const mg::Tensor difference = mg::abs(mg::sub(got[i].to(mg::Device("cpu")), want[i].to(mg::Device("cpu"))));
    largest = std::max(largest, double(mg::max(difference).item<float>()));
  }
  std::printf("params_sha256, one device: %s\n", reference_digest.c_str());
  for (size_t r = 0; r < digests.size(); ++r) std::printf("params_sha256, tp rank %zu: %s\n", r, digests[r].c_str());
  std::printf("largest |parameter difference| from one device: %.3g (split sums round differently)\n", largest);
  const bool same = digests[0] == digests[1];
  std::puts(same ? "the ranks hold the same model" : "the ranks' models DIFFER");
  return same ? 0 : 1;
}
