// examples/mesh_dp_tp.cpp — a 2 x 2 device mesh: four ranks in a grid, tensor parallelism along one
// dimension, data parallelism (DDP) along the other.
//
//   build/examples/mesh_dp_tp              # exits 1 if any rank's model differs from the reference
//
// parallel::DeviceMesh(world, {{"dp", 2}, {"tp", 2}}) lays the ranks out row-major, the last
// dimension fastest: ranks 0 and 1 form a tp group, and so do 2 and 3; ranks 0 and 2 (and 1 and 3)
// a dp group. Each rank gets a communicator along each dimension, and train::mesh_groups hands
// them to parallelize in their roles: the model is sliced across tp (as
// examples/tensor_parallel_mlp.cpp), then each slice is wrapped in DDP across dp, so the two
// tp groups each take half of every batch and all-reduce their slices' gradients.
//
// The contract here: tensor parallelism's split sums round differently from one device's, but
// data parallelism over tp groups changes nothing else. So the four ranks end with the bits of
// ONE tp group that runs each batch as 2 micro-batches (--grad-accum 2), the reference below.
// On the CLI: multigrad train --model gpt --mesh dp=2,tp=2 --deterministic.
#include <cstdio>
#include <string>
#include <vector>

#include "example.h"  // the MLP, the batches, the loop (example::train) and the comparison

namespace {

// Trains the MLP on `n` rank threads laid out as the mesh `dims`; every rank's digest, by rank.
std::vector<std::string> train_mesh(int n, const mg::parallel::MeshDims& dims, const mg::train::Plan& plan,
                                    int64_t grad_accum, const std::vector<mg::data::Batch>& batches) {
  std::vector<mg::Device> devices;
  std::vector<std::shared_ptr<mg::nn::Module>> nets;  // built here: the global generator is not for threads
  for (int r = 0; r < n; ++r) {
    devices.push_back(mg::Device("cpu:" + std::to_string(r)));
    nets.push_back(example::mlp());
  }
  std::vector<std::string> digests(static_cast<size_t>(n));
  mg::parallel::run_ranks(devices, [&](mg::parallel::Communicator& comm) {
    const mg::parallel::DeviceMesh mesh(comm, dims);
    if (comm.rank() == 0) std::printf("  mesh %s\n", mesh.str().c_str());
    const mg::train::Groups groups = mg::train::mesh_groups(mesh, comm);  // .dp, .tp along the dimensions
    const size_t r = size_t(comm.rank());
    digests[r] = example::train(nets[r], batches, groups, {comm.device()}, plan, grad_accum);
  });
  return digests;
}

}  // namespace

int main() {
  mg::set_cpu_device_count(4);
  mg::set_deterministic(true);  // collectives add the ranks' tensors in rank order
  const std::vector<mg::data::Batch> batches = example::random_batches();

  std::puts("one tp group of 2 ranks, each batch as 2 micro-batches:");
  const std::vector<std::string> tp = train_mesh(2, {{"tp", 2}}, {}, 2, batches);
  if (tp[0] != tp[1]) {
    std::puts("the tp group's two ranks DIFFER");
    return 1;
  }

  std::puts("a dp=2 x tp=2 mesh of 4 ranks, DDP across dp:");
  const std::vector<std::string> mesh = train_mesh(4, {{"dp", 2}, {"tp", 2}}, {.data = "ddp"}, 1, batches);
  return example::compare("one tp group, grad-accum 2", tp[0], "dp x tp", mesh);
}
