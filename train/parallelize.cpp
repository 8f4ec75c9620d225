// train/parallelize.cpp — the layout of train/parallelize.h: tp, then pp, then dp.
#include "multigrad/train/parallelize.h"

#include <algorithm>

#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/core/error.h"
#include "multigrad/nn/gpt.h"
#include "multigrad/parallel/tensor/tensor_parallel.h"

namespace mg::train {

Groups mesh_groups(const parallel::DeviceMesh& mesh, parallel::Communicator& world) {
  Groups groups{.world = &world};
  for (const auto& [name, size] : mesh.dims()) {
    MG_CHECK(name == "dp" || name == "tp" || name == "pp", "mesh_groups: the mesh ", mesh.str(), " has a dimension '",
             name, "': the roles are dp, tp and pp");
    (name == "dp" ? groups.dp : name == "tp" ? groups.tp : groups.pp) = &mesh.comm(name);
  }
  return groups;
}

bool sharded(const Plan& plan) { return plan.data == "zero1" || plan.data == "zero2" || plan.data == "zero3"; }

Tensor ParallelModel::forward(const Tensor& inputs) {
  if (dp) return dp->forward(input(inputs));
  if (ddp) return ddp->forward(input(inputs));
  if (zero && zero->stage() == 3) return zero->model().forward(input(inputs));
  return model.net->forward(input(inputs));
}

Tensor ParallelModel::predict(const Tensor& inputs) {
  return pipeline ? pipeline->forward(input(inputs)) : model.net->forward(input(inputs));
}

Tensor ParallelModel::loss(const Tensor& logits, const Tensor& targets) const {
  if (!vocab) return cross_entropy_flat(logits, targets);
  return parallel::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.flatten(), *vocab);
}

Tensor ParallelModel::predicted(const Tensor& logits) const {
  return vocab ? parallel::vocab_parallel_argmax(logits, *vocab) : argmax(logits, -1);
}

void ParallelModel::gather_parameters() {
  if (zero) zero->gather_parameters();
  if (pipeline) pipeline->synchronize_parameters();
}

std::shared_ptr<nn::Sequential> ParallelModel::tp_layers() const {
  return std::dynamic_pointer_cast<nn::Sequential>(model.net);
}

nn::StateDict ParallelModel::model_state() const {
  if (!whole) return model.net->state_dict();
  whole_layers->load_state_dict(parallel::gather_tensor_parallel_state(*tp_layers(), *groups.tp));
  return whole->state_dict();
}

void ParallelModel::load_model_state(const nn::StateDict& state) {
  gather_parameters();
  if (whole) {  // the state is the one-device model's: this rank's shards of it
    whole->load_state_dict(state);
    parallel::load_tensor_parallel_state(*tp_layers(), whole_layers->state_dict(), *groups.tp);
  } else {
    model.net->load_state_dict(state);
  }
  if (zero) zero->scatter_parameters();
}

optim::OptimizerState ParallelModel::optimizer_state(optim::Optimizer& optimizer) const {
  optim::OptimizerState state = optimizer.state_dict();
  if (pipeline) state = pipeline->synchronize_optimizer_state(optimizer.params(), std::move(state));
  if (whole) state = parallel::gather_tensor_parallel_state(*tp_layers(), optimizer.params(), state, *groups.tp);
  return state;
}

void ParallelModel::load_optimizer_state(optim::Optimizer& optimizer, optim::OptimizerState state) {
  if (whole) state = parallel::shard_tensor_parallel_state(*tp_layers(), optimizer.params(), state, *groups.tp);
  optimizer.load_state_dict(state);
}

std::unique_ptr<ParallelModel> parallelize(Model model, const std::vector<Device>& devices, Groups groups,
                                           const Plan& plan) {
  MG_CHECK(!devices.empty(), "parallelize: no devices");
  MG_CHECK(plan.data == "none" || plan.data == "dp" || plan.data == "ddp" || sharded(plan), "parallelize: data '",
           plan.data, "' is not one of none, dp, ddp, zero1, zero2, zero3");
  MG_CHECK(plan.data == "none" || plan.data == "dp" || groups.dp != nullptr, "parallelize: data '", plan.data,
           "' needs the ranks that split the batch (groups.dp)");
  MG_CHECK(plan.data != "dp" || (!groups.dp && !groups.tp && !plan.pipeline), "parallelize: data 'dp' ",
           "(DataParallel over this process's devices) composes with no other mode");
  MG_CHECK(!sharded(plan) || !plan.pipeline, "parallelize: ", plan.data, " does not compose with a pipeline");
  auto m = std::make_unique<ParallelModel>();
  m->model = std::move(model);
  m->groups = groups;
  const auto gpt = std::dynamic_pointer_cast<nn::GPT>(m->model.net);

  // 1. Tensor parallelism: this rank's shards of the one-device model, its collectives counted.
  if (groups.tp) {
    m->tp_counter = std::make_unique<parallel::CountingCommunicator>(*groups.tp);
    m->groups.tp = m->tp_counter.get();
    m->whole = m->model.net;
    if (gpt) {  // the layers share the GPT's position embedding and norms, which stay whole
      m->whole_layers = gpt->layers();
      // The token embedding and the head split by the vocabulary (Megatron's): no rank holds the
      // (B, T, V) logits.
      m->model.net = parallel::tensor_parallel_gpt(
          *gpt, *m->groups.tp, {.sequence_parallel = plan.sequence_parallel, .vocab_parallel = true});
      m->vocab = m->groups.tp;
    } else {
      m->whole_layers = std::dynamic_pointer_cast<nn::Sequential>(m->whole);
      MG_CHECK(m->whole_layers, "parallelize: tensor parallelism needs an nn::Sequential or an nn::GPT");
      m->model.net = parallel::tensor_parallel_mlp(*m->whole_layers, *m->groups.tp);
    }
  }
  // 2. Pipeline stages: a GPT is cut by its layers (nn::GPT::layers: the embeddings, each block,
  // ln_f, the tied head; tensor_parallel_gpt's are those too).
  if (plan.pipeline) {
    const auto layers = gpt && !m->whole ? gpt->layers() : std::dynamic_pointer_cast<nn::Sequential>(m->model.net);
    MG_CHECK(layers, "parallelize: a pipeline needs an nn::Sequential or an nn::GPT");
    parallel::PipelineOptions options = plan.pipeline_options;
    if (m->vocab) {  // the last stage's loss and predictions over the tp ranks' columns
      ParallelModel* self = m.get();
      options.loss = [self](const Tensor& logits, const Tensor& targets) { return self->loss(logits, targets); };
      options.predict = [self](const Tensor& logits) { return self->predicted(logits); };
    }
    m->pipeline = groups.pp ? std::make_shared<parallel::Pipeline>(layers, *groups.pp, options)
                            : std::make_shared<parallel::Pipeline>(layers, devices, options);
  } else {
    m->model.net->to(devices.front());
  }
  // 3. Data parallelism (ZeRO is the optimizer's: make_optimizer).
  if (plan.data == "dp") m->dp = std::make_shared<parallel::DataParallel>(m->model.net, devices);
  if (plan.data == "ddp" && !m->pipeline) {
    parallel::DDPOptions options{.reduce_op = parallel::ReduceOp::Sum};  // losses scaled by their share
    if (plan.bucket_cap_mb) {  // the first bucket no larger than the others
      options.bucket_cap_mb = *plan.bucket_cap_mb;
      options.first_bucket_mb = std::min(options.first_bucket_mb, *plan.bucket_cap_mb);
    }
    m->ddp = std::make_shared<parallel::DistributedDataParallel>(m->model.net, *groups.dp, options);
  }
  if (plan.loss_scaling) m->scaler.emplace(*plan.loss_scaling);
  return m;
}

std::unique_ptr<optim::Optimizer> make_optimizer(ParallelModel& m, const Plan& plan, const ParamGroupsOf& param_groups,
                                                 const OptimizerOf& make) {
  const std::shared_ptr<nn::Module>& net = m.model.net;
  if (!sharded(plan)) return make(param_groups(net->parameters()));
  const int stage = plan.data.back() - '0';
  std::shared_ptr<nn::Sequential> layers;  // zero3's: the model's, or a GPT's (nn::GPT::layers)
  if (stage == 3) {
    const auto gpt = std::dynamic_pointer_cast<nn::GPT>(net);
    layers = gpt ? gpt->layers() : std::dynamic_pointer_cast<nn::Sequential>(net);
    MG_CHECK(layers, "make_optimizer: zero3 needs an nn::Sequential or an nn::GPT");
  }
  parallel::ZeroOptions options{.stage = stage, .reduce_op = parallel::ReduceOp::Sum};
  if (plan.bucket_cap_mb) options.bucket_cap_mb = *plan.bucket_cap_mb;
  auto optimizer = std::make_unique<parallel::ZeroOptimizer>(param_groups(net->parameters()), *m.groups.dp, make,
                                                              options, layers);
  m.zero = optimizer.get();
  return optimizer;
}

}  // namespace mg::train
