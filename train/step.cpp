// train/step.cpp — the step of train/step.h.
#include "multigrad/train/step.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/core/ledger.h"
#include "multigrad/io/sha256.h"
#include "multigrad/optim/clip_grad.h"
#include "multigrad/parallel/comm/agree.h"
#include "multigrad/parallel/data/grad_norm.h"
#include "multigrad/parallel/data/micro_batches.h"
#include "multigrad/parallel/tensor/tensor_parallel.h"

namespace mg::train {

void Metrics::add(const Tensor& predicted, const Tensor& targets, const Tensor& mean_loss) {
  NoGradGuard no_grad;
  const int64_t n = targets.size(0);
  const Tensor loss = mul(mean_loss.detach().to(DType::Float64), double(n));
  const Tensor correct = sum(eq(predicted, targets));
  loss_sum_ = loss_sum_.defined() ? mg::add(loss_sum_, loss.to(loss_sum_.device())) : loss;
  correct_ = correct_.defined() ? mg::add(correct_, correct.to(correct_.device())) : correct;
  host_.predictions += targets.numel();
  host_.samples += n;
}

void Metrics::add(const Totals& host) {
  host_.loss_sum += host.loss_sum, host_.correct += host.correct;
  host_.predictions += host.predictions, host_.samples += host.samples;
}

Totals Metrics::totals() const {
  Totals out = host_;
  if (loss_sum_.defined()) out.loss_sum += loss_sum_.item<double>(), out.correct += correct_.item<int64_t>();
  return out;
}

Totals sum_over_ranks(const Totals& mine, parallel::Communicator* comm) {
  if (comm == nullptr) return mine;
  Tensor t = Tensor::empty({4}, {DType::Float64, Device("cpu:0")});
  double* v = t.data<double>();
  v[0] = mine.loss_sum, v[1] = double(mine.correct), v[2] = double(mine.predictions), v[3] = double(mine.samples);
  t = t.to(comm->device());
  comm->all_reduce(t)->wait();
  const std::vector<double> all = t.to_vector<double>();
  return {all[0], int64_t(all[1]), int64_t(all[2]), int64_t(all[3])};
}

namespace {

// A pipeline's step: this pipeline's part of the batch (with dp), its losses scaled by their share
// of all b rows; then the stage's gradients summed over the pipelines (in rank order with
// deterministic collectives: DDP's sum, after each pipeline accumulated its micro-batches in order).
void run_pipeline_batch(ParallelModel& m, const data::Batch& batch, Metrics& metrics) {
  const int64_t b = batch.inputs.size(0);
  parallel::Communicator* dp = m.groups.dp;
  const auto part = dp ? parallel::split_batch(b, dp->size())[size_t(dp->rank())] : parallel::MicroBatch{0, b};
  const StepPhase phase("pipeline");  // the schedule's forwards and backwards, its sends and receives
  const parallel::PipelineStepResult r =
      m.pipeline->step(m.input(batch.inputs.slice(0, part.begin, part.end)),
                       batch.targets.slice(0, part.begin, part.end), m.scaler ? m.scaler->get_scale() : 1.0, b);
  metrics.add(Totals{r.loss_sum, r.correct, r.predictions, r.samples});
  if (!dp) return;
  std::vector<std::shared_ptr<parallel::Work>> reductions;  // queued at once, in the same order on every rank
  for (const Tensor& p : m.model.net->parameters())
    if (p.grad().defined()) reductions.push_back(dp->all_reduce(p.grad()));
  for (const auto& r : reductions) r->wait();
}

}  // namespace

void run_batch(ParallelModel& m, const data::Batch& batch, int64_t grad_accum, Metrics& metrics) {
  if (m.pipeline) return run_pipeline_batch(m, batch, metrics);
  const int64_t b = batch.inputs.size(0);
  parallel::MicroBatch mine{0, b};
  if (m.groups.dp) {  // a rank of data parallelism (ddp, zero): it computes its part
    const auto parts = parallel::split_batch(b, m.groups.dp->size());
    if (size_t(m.groups.dp->rank()) >= parts.size()) {
      // Fewer examples than ranks (an epoch's last batch): this rank still joins the reduction,
      // with an exactly zero gradient from one example.
      const StepPhase phase("backward");
      mul(m.loss(m.forward(batch.inputs.slice(0, 0, 1)), batch.targets.slice(0, 0, 1)), 0.0).backward();
      return;
    }
    mine = parts[size_t(m.groups.dp->rank())];
  }
  const auto micro = parallel::split_batch(mine.size(), grad_accum);
  for (size_t k = 0; k < micro.size(); ++k) {
    const int64_t begin = mine.begin + micro[k].begin, end = mine.begin + micro[k].end;
    // All but the last micro-batch only accumulate.
    std::optional<parallel::DistributedDataParallel::NoSync> no_sync;
    std::optional<parallel::ZeroOptimizer::NoSync> zero_no_sync;
    if (m.ddp && k + 1 < micro.size()) no_sync.emplace(*m.ddp);
    if (m.zero && k + 1 < micro.size()) zero_no_sync.emplace(*m.zero);
    std::optional<StepPhase> phase(std::in_place, "forward");  // then "backward", below
    const Tensor logits = m.forward(batch.inputs.slice(0, begin, end));
    // DataParallel computed its rows on several devices: each device's rows are a piece.
    const auto pieces = m.dp ? parallel::split_batch(end - begin, int64_t(m.dp->devices().size()))
                             : std::vector<parallel::MicroBatch>{{0, end - begin}};
    Tensor loss;
    for (const auto& piece : pieces) {
      const Tensor piece_logits = logits.slice(0, piece.begin, piece.end);
      const Tensor targets = batch.targets.slice(0, begin + piece.begin, begin + piece.end);
      const Tensor piece_loss = m.loss(piece_logits, targets);
      metrics.add(m.predicted(piece_logits), targets, piece_loss);
      const Tensor scaled = mul(piece_loss, double(piece.size()) / double(b));
      loss = loss.defined() ? add(loss, scaled) : scaled;
    }
    phase.emplace("backward");
    (m.scaler ? m.scaler->scale(loss) : loss).backward();
  }
}

void clip_gradients(ParallelModel& m, optim::Optimizer& optimizer, double max_norm) {
  const std::vector<Tensor> params = m.model.net->parameters();
  // Tensor parallelism: every rank's shards count, the parameters whole on every rank once (tp
  // rank 0's), in the optimizer's order.
  std::vector<bool> counted(optimizer.params().size(), true);
  if (m.whole) {
    const std::vector<parallel::TensorParallelSplit> splits = parallel::tensor_parallel_splits(*m.tp_layers());
    for (size_t i = 0; i < counted.size(); ++i) {
      const size_t k = size_t(std::find_if(params.begin(), params.end(), [&](const Tensor& p) {
                                return p.is_same(optimizer.params()[i]);
                              }) - params.begin());
      counted[i] = splits.at(k).dim >= 0 || m.groups.tp->rank() == 0;
    }
  }
  if (m.zero) {  // ZeRO's shards: over the dp ranks, and with tp (a mesh) every rank
    if (m.whole) {
      m.zero->clip_grad_norm(max_norm, *m.groups.world, counted);
    } else {
      m.zero->clip_grad_norm(max_norm);
    }
    return;
  }
  if (!(m.pipeline && m.groups.world) && !m.whole) {
    optim::clip_grad_norm(params, max_norm);
    return;
  }
  // A pipeline: this stage's gradients (the other stages' parameters have none here); tensor
  // parallelism: the counted ones; both (a mesh's tp x pp): each stage's counted ones, summed over
  // every rank.
  std::vector<Tensor> grads, counted_grads;
  for (size_t i = 0; i < counted.size(); ++i) {
    const Tensor grad = optimizer.params()[i].grad();
    if (!grad.defined()) continue;
    grads.push_back(grad);
    if (counted[i]) counted_grads.push_back(grad);
  }
  // Pipelines across a mesh's dp all hold the summed gradients: the first one's count.
  if (m.pipeline && m.groups.dp && m.groups.dp->rank() != 0) counted_grads.clear();
  parallel::Communicator& over = m.pipeline ? *m.groups.world : *m.groups.tp;
  optim::scale_to_norm(grads, parallel::global_grad_norm(over, optim::squares_of(counted_grads)), max_norm);
}

void train_step(ParallelModel& m, optim::Optimizer& optimizer, const data::Batch& batch, const StepOptions& options,
                Metrics& metrics, int64_t step_number) {
  const double tp_ms_before = m.tp_counter ? m.tp_counter->ms() : 0;
  {
    const StepPhase phase("zero_grad");
    optimizer.zero_grad();
  }
  run_batch(m, batch, options.grad_accum, metrics);
  // A NaN or infinite loss stops the run before the step it would poison: the parameters (and the
  // last checkpoint) stay as they were.
  std::optional<StepPhase> phase(std::in_place, "loss_check");  // then "clip", "optimizer"
  const double loss_sum = metrics.totals().loss_sum;
  MG_CHECK(std::isfinite(loss_sum), "the training loss is ", loss_sum, " at step ", step_number,
           ": stopped before its optimizer step (try a lower --lr; --detect-anomaly names the op that made it)");
  if (options.clip_grad_norm > 0) {
    phase.emplace("clip");
    if (m.scaler) m.scaler->unscale(optimizer);  // clipping measures the true gradients
    clip_gradients(m, optimizer, options.clip_grad_norm);
  }
  phase.emplace("optimizer");
  if (m.scaler) {  // the step, unless a gradient overflowed on any rank
    parallel::Communicator* world = m.groups.world;
    m.scaler->step(optimizer, [world](bool mine) { return world ? parallel::any_rank(*world, mine) : mine; });
    m.scaler->update();
  } else {
    optimizer.step();
  }
  if (m.tp_counter) m.tp_comm_ms += m.tp_counter->ms() - tp_ms_before, ++m.tp_steps;
}

Totals evaluate(ParallelModel& m, data::DataLoader& loader) {
  m.model.net->eval();
  NoGradGuard no_grad;
  Metrics metrics;
  loader.start_epoch(0);
  while (std::optional<data::Batch> batch = loader.next()) {
    const Tensor logits = m.predict(batch->inputs);
    const Tensor targets = batch->targets.to(logits.device());
    metrics.add(m.predicted(logits), targets, m.loss(logits, targets));
  }
  m.model.net->train();
  return metrics.totals();
}

std::string params_sha256(const nn::Module& net) {
  io::Sha256 hash;
  for (const Tensor& param : net.parameters()) {
    const Tensor host = param.detach().to(Device("cpu:0")).contiguous();
    hash.update(host.data_ptr(), size_t(host.numel()) * host.element_size());
  }
  return hash.hex_digest();
}

int64_t parameter_count(const nn::Module& net) {
  int64_t count = 0;
  for (const Tensor& param : net.parameters()) count += param.numel();
  return count;
}

}  // namespace mg::train
