// parallel/data/data_parallel.cpp — DataParallel (see data_parallel.h for the model).
#include "multigrad/parallel/data/data_parallel.h"

#include <exception>
#include <optional>
#include <thread>
#include <utility>

#include "multigrad/autograd/autocast.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/core/random.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/parallel/data/micro_batches.h"

namespace mg::parallel {
namespace {

// Runs fn(i) for i in [0, n): i = 0 on the calling thread, the others on threads of their own
// that inherit its grad, anomaly and autocast modes. Rethrows the lowest i's exception after all
// ended.
void run_per_device(size_t n, const std::function<void(size_t)>& fn) {
  const bool grad = is_grad_enabled();
  const bool anomaly = is_anomaly_enabled();
  const Precision precision = autocast_precision();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) {
    threads.emplace_back([&, i] {
      set_grad_enabled(grad);
      AutocastGuard autocast(precision);
      std::optional<DetectAnomalyGuard> detect;
      if (anomaly) detect.emplace();
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  try {
    fn(0);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// slot += g on slot's device (slot is a leaf's gradient; an undefined one takes a copy).
void add_gradient(const Tensor& param, const Tensor& g) {
  const Tensor here = g.device() == param.device() ? g : mg::to(g, param.device());
  const Tensor grad = param.grad();
  if (!grad.defined()) {
    param.set_grad(here.clone());
  } else {
    kernels::binary(kernels::BinaryOp::Add, grad, here, grad);
  }
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices)
    : module_(std::move(module)), devices_(std::move(devices)) {
  MG_CHECK(module_ != nullptr, "DataParallel: module is null");
  MG_CHECK(!devices_.empty(), "DataParallel: needs at least one device");
  for (size_t i = 0; i < devices_.size(); ++i) {
    check_device_exists(devices_[i]);
    for (size_t j = 0; j < i; ++j) {
      MG_CHECK(devices_[i] != devices_[j], "DataParallel: device ", devices_[i], " is listed twice");
    }
  }
  for (const auto& [name, t] : module_->state_dict()) {
    MG_CHECK(t.device() == devices_[0], "DataParallel: '", name, "' is on ", t.device(),
             " but the module must be on devices[0] = ", devices_[0]);
  }
  register_module("module", module_);
  replicas_.push_back(module_);
}

void DataParallel::refresh_replica(size_t i) {
  if (replicas_.size() <= i) {
    std::shared_ptr<nn::Module> replica = module_->clone();
    replica->to(devices_[i]);
    replicas_.push_back(std::move(replica));
  }
  replicas_[i]->train(module_->is_training());
  replicas_[i]->load_state_dict(module_->state_dict());
}

Tensor DataParallel::forward(const Tensor& input) {
  MG_CHECK(input.defined() && input.dim() >= 1 && input.size(0) > 0,
           "DataParallel: the input must have a non-empty batch dimension (got ",
           input.defined() ? input.shape() : Shape{}, ")");
  const std::vector<MicroBatch> chunks = split_batch(input.size(0), int64_t(devices_.size()));
  const size_t k = chunks.size();
  const bool input_grad = is_grad_enabled() && input.requires_grad();

  // Replicate and scatter. A piece is a leaf of its own when the input needs a gradient.
  std::vector<Tensor> pieces(k);
  {
    NoGradGuard no_grad;
    for (size_t i = 1; i < k; ++i) refresh_replica(i);
    for (size_t i = 0; i < k; ++i) {
      const Tensor rows = input.detach().slice(0, chunks[i].begin, chunks[i].end);
      pieces[i] = rows.device() == devices_[i] ? rows : mg::to(rows, devices_[i]);
      if (input_grad) {
        if (pieces[i].device() == input.device()) pieces[i] = pieces[i].clone();  // not a view of the input
        pieces[i].requires_grad_(true);
      }
    }
  }

  // Each replica draws its rows of the batch's draws (data_parallel.h), from the caller's state.
  const int64_t batch = input.size(0);
  const PhiloxState rng = get_rng_state();
  std::vector<Tensor> outputs(k);
  PhiloxState rng_after;  // replica 0's: every replica drew the whole batch's blocks
  run_per_device(k, [&](size_t i) {
    ThreadGenerator generator(rng);
    DrawSliceScope draws({0, chunks[i].begin, batch}, chunks[i].end - chunks[i].begin);
    outputs[i] = replicas_[i]->forward(pieces[i]);
    if (i == 0) rng_after = get_rng_state();
  });
  set_rng_state(rng_after);

  Tensor gathered;
  bool any_grad = false;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> on_first;
    for (size_t i = 0; i < k; ++i) {
      on_first.push_back(outputs[i].device() == devices_[0] ? outputs[i] : mg::to(outputs[i], devices_[0]));
      any_grad = any_grad || outputs[i].requires_grad();
    }
    gathered = k == 1 ? on_first[0].detach() : cat(on_first, 0);
  }
  if (!any_grad || !is_grad_enabled()) return gathered;

  // The gather node: its backward runs the replicas' backward passes (data_parallel.h).
  std::vector<std::shared_ptr<nn::Module>> replicas(replicas_.begin(), replicas_.begin() + ptrdiff_t(k));
  TensorList node_inputs;
  if (input_grad) node_inputs.push_back(input);
  record("data_parallel_gather", {gathered}, node_inputs,
         [outputs, pieces, chunks, replicas, devices = devices_, input_device = input.device(), input_grad,
          batch](const TensorList& grads) -> TensorList {
           const Tensor& grad = grads[0];  // (batch, ...) on devices[0]
           run_per_device(outputs.size(), [&](size_t i) {
             if (!outputs[i].requires_grad()) return;
             // A recomputed forward (autograd/checkpoint.h) replays its draws: the same rows of them.
             DrawSliceScope draws({0, chunks[i].begin, batch}, chunks[i].end - chunks[i].begin);
             const Tensor rows = grad.slice(0, chunks[i].begin, chunks[i].end);
             mg::backward({outputs[i]}, {mg::to(rows, devices[i]).contiguous()});
           });
           const std::vector<Tensor> params = replicas[0]->parameters();
           for (size_t i = 1; i < replicas.size(); ++i) {
             const std::vector<Tensor> theirs = replicas[i]->parameters();
             for (size_t p = 0; p < params.size(); ++p) {
               const Tensor g = theirs[p].grad();
               if (!g.defined()) continue;
               add_gradient(params[p], g);
               theirs[p].set_grad(Tensor());  // the replica starts the next backward at zero
             }
           }
           if (!input_grad) return {};
           std::vector<Tensor> parts;
           for (const Tensor& piece : pieces) {
             const Tensor g = piece.grad().defined() ? piece.grad() : zeros(piece.shape(), piece.options());
             parts.push_back(mg::to(g, input_device));
           }
           return {cat(parts, 0)};
         });
  return gathered;
}

std::string DataParallel::name() const {
  return detail::str_cat("DataParallel(", devices_.size(), " devices, ", module_->name(), ")");
}

std::shared_ptr<nn::Module> DataParallel::shallow_copy() const {
  MG_ERROR("DataParallel cannot be cloned: clone its module() and wrap the copy");
}

}  // namespace mg::parallel
