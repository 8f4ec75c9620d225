// examples/data_parallel.cpp — the steps of PyTorch's first multi-GPU tutorial, in multigrad: count
// the devices, load the data with worker threads, move the model and the batches with .to(device),
// wrap the model in DataParallel, and train it with a loop written by hand; then the same loop on
// one device, each batch as two micro-batches, ends with the same bits.
//
//   build/examples/data_parallel          # exits 1 if the two models differ
//
// What DataParallel does in forward (parallel/data/data_parallel.h): cuts the batch in two along
// its rows, copies each half to a device, runs a replica of the model on each (a thread each) and
// concatenates the outputs on the first device: the loss is one loss over the whole batch. In
// backward it runs the replicas' backward passes and adds their gradients into the model's in
// device order: the sum one device forms accumulating the halves' gradients one after the other.
#include <cstdio>
#include <string>
#include <vector>

#include "multigrad/multigrad.h"

namespace {

constexpr int kEpochs = 2;

std::shared_ptr<mg::nn::Module> model() {
  mg::manual_seed(0);  // both runs start from the same parameters
  return mg::nn::mlp({32, 64, 64, 8});
}

// 512 random examples of 32 features, each with a random class of 8.
std::shared_ptr<mg::data::TensorDataset> dataset() {
  mg::manual_seed(1);
  return std::make_shared<mg::data::TensorDataset>(mg::randn({512, 32}),
                                                   mg::to(mg::mul(mg::rand({512}), 8.0), mg::DType::Int64));
}

// Trains a model on devices[0] with Adam, through DataParallel over `devices` when there are
// several; with one device, each batch runs as `micro_batches` pieces whose gradients accumulate.
std::string train(const std::vector<mg::Device>& devices, int64_t micro_batches) {
  // Two worker threads assemble the next batches while this one trains; pinned host memory lets a
  // batch's copy to a GPU run asynchronously (on CPU devices it changes nothing).
  mg::data::DataLoader loader(dataset(), {.batch_size = 64, .shuffle = true, .num_workers = 2,
                                          .pin_memory = devices[0].is_cuda(), .device = devices[0]});
  auto net = model();
  net->to(devices[0]);
  std::shared_ptr<mg::nn::Module> forward = net;
  if (devices.size() > 1) forward = std::make_shared<mg::parallel::DataParallel>(net, devices);
  mg::optim::Adam optimizer(net->parameters(), {.lr = 1e-3});

  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    loader.start_epoch(epoch);
    double epoch_loss = 0;
    int64_t batches = 0;
    while (std::optional<mg::data::Batch> batch = loader.next()) {
      optimizer.zero_grad();
      const int64_t rows = batch->inputs.size(0) / micro_batches;
      for (int64_t k = 0; k < micro_batches; ++k) {  // each piece's mean loss, scaled by its share
        const mg::Tensor x = batch->inputs.slice(0, k * rows, (k + 1) * rows);
        const mg::Tensor y = batch->targets.slice(0, k * rows, (k + 1) * rows);
        const mg::Tensor loss = mg::mul(mg::cross_entropy(forward->forward(x), y), 1.0 / double(micro_batches));
        loss.backward();  // DataParallel: every replica's gradients added into net's
        epoch_loss += loss.item<float>();
      }
      optimizer.step();
      ++batches;
    }
    std::printf("  epoch %d: mean loss %.4f\n", epoch + 1, epoch_loss / double(batches));
  }
  return mg::train::params_sha256(*net);
}

}  // namespace

int main() {
  // The devices: two GPUs where there are, else two virtual CPU devices.
  const int gpus = mg::device_count(mg::DeviceType::CUDA);
  std::printf("%d CUDA device(s)\n", gpus);
  if (gpus < 2) mg::set_cpu_device_count(2);
  const std::vector<mg::Device> devices =
      gpus >= 2 ? std::vector<mg::Device>{mg::Device("cuda:0"), mg::Device("cuda:1")}
                : std::vector<mg::Device>{mg::Device("cpu:0"), mg::Device("cpu:1")};

  std::printf("DataParallel over %s and %s:\n", devices[0].str().c_str(), devices[1].str().c_str());
  const std::string parallel = train(devices, 1);
  std::printf("one device (%s), each batch as 2 micro-batches:\n", devices[0].str().c_str());
  const std::string one = train({devices[0]}, 2);

  std::printf("params_sha256, one device: %s\nparams_sha256, DataParallel: %s\n", one.c_str(), parallel.c_str());
  std::puts(one == parallel ? "bit-identical" : "DIFFERENT");
  return one == parallel ? 0 : 1;
}
