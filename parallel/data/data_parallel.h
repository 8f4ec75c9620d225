// parallel/data/data_parallel.h — DataParallel: one process, one replica per device (docs/design.md).
//
// forward(input), as torch.nn.DataParallel:
//   replicate: devices[0] runs the module itself; every other device a replica (made once,
//     then refreshed each forward with the module's current parameters and buffers), so
//     in-place buffer updates (BatchNorm statistics) persist from devices[0] only;
//   scatter:  the batch is cut along dim 0 as parallel/data/micro_batches.h cuts it (sizes differ by
//     at most one, larger first — not torch.chunk's ceil-sized pieces, so that DataParallel over
//     n devices reproduces `--grad-accum n`), and piece i is copied to devices[i];
//   run:      each replica's forward on a thread of its own, recording on that thread's tape;
//   gather:   the outputs concatenated on devices[0], as one autograd node.
// Backward through that node scatters the output gradient to the devices, runs the replicas'
// backward passes in parallel (replica 0's accumulates straight into the module's .grad), then
// adds the other replicas' gradients into the module's, in device order — so the module's
// gradient is grad + g_0 + g_1 + ..., the order of `--grad-accum` on one device. The input's
// gradient, when it requires one, is gathered back too.
//
// Random draws (dropout): each replica draws the numbers the module's forward on the whole batch
// would at its rows (core/random.h's DrawSliceScope, from the caller's generator state), and the
// caller's generator then continues past the whole batch's draws. So DataParallel's dropout masks
// are one device's on the whole batch, whatever the device count. A draw inside the module whose
// first dimension is not the replica's rows is an error.
//
// A batch smaller than the device count uses only as many devices as it has rows. The module's
// own grad-ready hooks fire during replica 0's backward, before the other replicas' gradients
// are added: do not combine DataParallel with DistributedDataParallel.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "multigrad/nn/module.h"

namespace mg::parallel {

class DataParallel : public nn::Module {
 public:
  // The module must be on devices[0]; devices must be distinct.
  DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices);

  Tensor forward(const Tensor& input) override;
  std::string name() const override;
  nn::Module& module() const { return *module_; }
  const std::vector<Device>& devices() const { return devices_; }

 private:
  std::shared_ptr<nn::Module> shallow_copy() const override;
  // Copies the module's parameters and buffers into replica i (i >= 1).
  void refresh_replica(size_t i);

  std::shared_ptr<nn::Module> module_;
  std::vector<Device> devices_;
  std::vector<std::shared_ptr<nn::Module>> replicas_;  // [0] is module_ itself
};

}  // namespace mg::parallel
