// parallel/pipeline.cpp — the pipeline runtime (see pipeline.h for the model).
#include "parallel/pipeline.h"

#include <algorithm>
#include <limits>
#include <map>

#include "autograd/factory.h"
#include "autograd/nn_ops.h"
#include "autograd/ops.h"
#include "autograd/tape.h"
#include "core/error.h"
#include "parallel/local.h"
#include "parallel/micro_batches.h"

namespace mg::parallel {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMaxDims = 8;  // of an activation sent between stages

// A tensor between stages: a header (dtype, ndim, dims) so the receiver can allocate, then the
// data. Both sends return at once on the local backend (the message is a copy).
void send_tensor(Communicator& comm, const Tensor& t, int dst) {
  MG_CHECK(t.dim() <= kMaxDims, "pipeline: an activation of ", t.dim(), " dims (", t.shape(),
           ") has more than the ", kMaxDims, " a stage can send");
  Tensor header = zeros({2 + kMaxDims}, {.dtype = DType::Int64});
  int64_t* h = header.data<int64_t>();
  h[0] = int64_t(t.dtype()), h[1] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
  comm.send(header.to(comm.device()), dst)->wait();
  comm.send(t.contiguous(), dst)->wait();
}

Tensor recv_tensor(Communicator& comm, int src) {
  Tensor header = Tensor::empty({2 + kMaxDims}, {DType::Int64, comm.device()});
  comm.recv(header, src)->wait();
  const std::vector<int64_t> h = header.to(Device("cpu:0")).to_vector<int64_t>();
  const Shape shape(h.begin() + 2, h.begin() + 2 + h[1]);
  Tensor t = Tensor::empty(shape, {DType(h[0]), comm.device()});
  comm.recv(t, src)->wait();
  return t;
}

int64_t parameter_count(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

const char* action_label(ActionKind kind) {
  switch (kind) {
    case ActionKind::RecvActivation: return "recv activation ";
    case ActionKind::Forward: return "F";
    case ActionKind::SendActivation: return "send activation ";
    case ActionKind::RecvGrad: return "recv grad ";
    case ActionKind::Backward: return "B";
    case ActionKind::SendGrad: return "send grad ";
  }
  return "?";
}

}  // namespace

std::vector<size_t> balanced_cuts(const nn::Sequential& model, int stages) {
  const size_t n = model.size();
  MG_CHECK(stages >= 1, "pipeline: needs at least one stage (got ", stages, ")");
  MG_CHECK(n >= size_t(stages), "pipeline: the model has ", n, " layers, fewer than the ", stages, " stages");
  std::vector<int64_t> prefix(n + 1, 0);  // parameters in layers [0, i)
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + parameter_count(*model.at(i));
  // best[s][i]: for layers [0, i) in s stages, the smallest (largest stage's count, sum of the
  // stages' squared counts) — the second breaks ties toward even stages; from[s][i]: where the
  // last of them begins. Small n and p: the O(p n^2) table is the clearest way.
  using Cost = std::pair<int64_t, double>;
  const Cost none{std::numeric_limits<int64_t>::max(), 0};
  std::vector<std::vector<Cost>> best(size_t(stages) + 1, std::vector<Cost>(n + 1, none));
  std::vector<std::vector<size_t>> from(size_t(stages) + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = {0, 0};
  for (size_t s = 1; s <= size_t(stages); ++s) {
    for (size_t i = s; i <= n; ++i) {
      for (size_t j = s - 1; j < i; ++j) {
        if (best[s - 1][j] == none) continue;
        const int64_t stage = prefix[i] - prefix[j];
        const Cost cost{std::max(best[s - 1][j].first, stage), best[s - 1][j].second + double(stage) * double(stage)};
        if (cost < best[s][i]) best[s][i] = cost, from[s][i] = j;
      }
    }
  }
  std::vector<size_t> cuts;
  for (size_t s = size_t(stages), i = n; s > 1; --s) {
    i = from[s][i];
    cuts.insert(cuts.begin(), i);
  }
  return cuts;
}

Pipeline::Pipeline(std::shared_ptr<nn::Sequential> model, std::vector<Device> devices, PipelineOptions options)
    : Pipeline(std::move(model), std::move(devices), std::move(options), nullptr) {}

Pipeline::Pipeline(std::shared_ptr<nn::Sequential> model, Communicator& comm, PipelineOptions options)
    : Pipeline(std::move(model), std::vector<Device>(size_t(comm.size()), comm.device()), std::move(options), &comm) {}

Pipeline::Pipeline(std::shared_ptr<nn::Sequential> model, std::vector<Device> devices, PipelineOptions options,
                   Communicator* comm)
    : model_(std::move(model)), comm_(comm), devices_(std::move(devices)), options_(std::move(options)) {
  MG_CHECK(model_ != nullptr, "pipeline: model is null");
  const int p = int(devices_.size());
  MG_CHECK(p >= 1, "pipeline: needs at least one device");
  MG_CHECK(options_.micro_batches >= 1, "pipeline: micro_batches must be at least 1 (got ", options_.micro_batches,
           ")");
  make_schedule(options_.schedule, p, options_.micro_batches);  // checks the name
  for (size_t s = 0; s < devices_.size(); ++s) {
    check_device_exists(devices_[s]);
    for (size_t t = 0; t < s && comm_ == nullptr; ++t) {  // one process per stage: all on its device
      MG_CHECK(devices_[s] != devices_[t], "pipeline: ", devices_[s], " is listed twice");
    }
  }
  const size_t n = model_->size();
  MG_CHECK(n >= size_t(p), "pipeline: the model has ", n, " layers, fewer than the ", p, " stages");
  std::vector<size_t> cuts = options_.cuts.empty() ? balanced_cuts(*model_, p) : options_.cuts;
  MG_CHECK(cuts.size() == size_t(p - 1), "pipeline: ", p, " stages need ", p - 1, " cut indices (got ", cuts.size(),
           ")");
  size_t begin = 0;
  for (int s = 0; s < p; ++s) {
    const size_t end = s + 1 < p ? cuts[size_t(s)] : n;
    MG_CHECK(end > begin && end <= n, "pipeline: cut indices must increase within (0, ", n,
             ") so that every stage has a layer (stage ", s, " would be layers [", begin, ", ", end, "))");
    stages_.push_back(model_->slice(begin, end));
    stages_.back()->to(devices_[size_t(s)]);
    layers_.emplace_back(begin, end);
    begin = end;
  }
}

PipelineStepResult Pipeline::step(const Tensor& inputs, const Tensor& targets) {
  const int p = stages(), m = options_.micro_batches;
  MG_CHECK(inputs.dim() >= 1 && targets.dim() == 1 && targets.size(0) == inputs.size(0),
           "pipeline: expected inputs (B, ...) and targets (B), got ", inputs.shape(), " and ", targets.shape());
  MG_CHECK(inputs.size(0) >= m, "pipeline: a batch of ", inputs.size(0), " rows does not split into ", m,
           " micro-batches");
  const Schedule schedule = make_schedule(options_.schedule, p, m);

  PipelineStepResult result;
  events_.clear();
  if (comm_ != nullptr) {  // this process is one stage
    run_stage(*comm_, schedule, inputs, targets, result, events_);
    // The last stage counted the examples; every rank reports the same.
    const int last = p - 1;
    Tensor counts = tensor(std::vector<double>{result.loss_sum, double(result.correct), double(result.samples)}, {3},
                           {.dtype = DType::Float64})
                        .to(comm_->device());
    comm_->broadcast(counts, last)->wait();
    const std::vector<double> c = counts.to_vector<double>();
    result = {c[0], int64_t(c[1]), int64_t(c[2])};
  } else {
    std::vector<std::vector<TimelineEvent>> lanes(static_cast<size_t>(p));
    std::vector<PipelineStepResult> results(static_cast<size_t>(p));
    run_ranks(devices_, [&](Communicator& comm) {
      run_stage(comm, schedule, inputs, targets, results[size_t(comm.rank())], lanes[size_t(comm.rank())]);
    });
    result = results.back();
    for (auto& l : lanes) events_.insert(events_.end(), l.begin(), l.end());
  }

  // Busy time, and each stage's span, from this process's lanes.
  std::map<std::string, std::pair<Clock::time_point, Clock::time_point>> spans;
  for (const TimelineEvent& e : events_) {
    auto [it, added] = spans.emplace(e.lane, std::make_pair(e.start, e.end));
    if (!added) it->second = {std::min(it->second.first, e.start), std::max(it->second.second, e.end)};
    if (e.name[0] == 'F' || e.name[0] == 'B') busy_seconds_ += std::chrono::duration<double>(e.end - e.start).count();
  }
  // The step's span: from the first stage's first action to the last one's end.
  auto first = events_.front().start, last = events_.front().end;
  for (const auto& [lane, span] : spans) first = std::min(first, span.first), last = std::max(last, span.second);
  stage_seconds_ += double(spans.size()) * std::chrono::duration<double>(last - first).count();
  return result;
}

// Stage comm.rank() runs its list of the schedule for one batch (pipeline.h: "A step").
void Pipeline::run_stage(Communicator& comm, const Schedule& schedule, const Tensor& inputs, const Tensor& targets,
                         PipelineStepResult& result, std::vector<TimelineEvent>& lane_events) {
  comm.set_timeout(options_.timeout);
  const int p = stages(), m = options_.micro_batches, s = comm.rank();
  const int64_t b = inputs.size(0);
  const std::vector<MicroBatch> chunks = split_batch(b, m);
  const Device device = comm.device();
  nn::Sequential& stage = *stages_[size_t(s)];
  const std::string lane = detail::str_cat("stage ", s, " (", device, ")");
  // Per micro-batch, while in flight: the stage's input (a leaf on later stages), its output
  // with the graph behind it, the gradient of that output, and the last stage's scaled loss.
  std::vector<Tensor> in(static_cast<size_t>(m)), out(in), grad(in), loss(in);
  for (const Action& a : schedule[size_t(s)]) {
    const size_t k = size_t(a.micro_batch);
    const MicroBatch& rows = chunks[k];
    const auto start = Clock::now();
    switch (a.kind) {
      case ActionKind::RecvActivation:
        in[k] = recv_tensor(comm, s - 1).requires_grad_(true);
        break;
      case ActionKind::Forward:
        if (s == 0) in[k] = inputs.slice(0, rows.begin, rows.end).to(device);
        out[k] = stage.forward(in[k]);
        if (s == p - 1) {
          const Tensor y = targets.slice(0, rows.begin, rows.end).to(device);
          const Tensor l = cross_entropy(out[k], y);
          {
            NoGradGuard no_grad;
            result.loss_sum += l.item<double>() * double(rows.size());
            result.correct += sum(eq(argmax(out[k], 1), y)).item<int64_t>();
            result.samples += rows.size();
          }
          loss[k] = mul(l, double(rows.size()) / double(b));
        }
        break;
      case ActionKind::SendActivation:
        send_tensor(comm, out[k].detach(), s + 1);
        break;
      case ActionKind::RecvGrad:
        grad[k] = recv_tensor(comm, s + 1);
        break;
      case ActionKind::Backward:
        if (s == p - 1) {
          loss[k].backward();
        } else if (out[k].requires_grad()) {  // a first stage without parameters has nothing to do
          mg::backward({out[k]}, {grad[k]});
        }
        out[k] = loss[k] = grad[k] = Tensor();
        break;
      case ActionKind::SendGrad: {
        const Tensor g = in[k].grad();
        send_tensor(comm, g.defined() ? g : zeros_like(in[k]), s - 1);
        in[k] = Tensor();
        break;
      }
    }
    lane_events.push_back({lane, detail::str_cat(action_label(a.kind), k), start, Clock::now()});
  }
}

void Pipeline::synchronize_parameters() {
  if (comm_ == nullptr) return;
  NoGradGuard no_grad;
  for (size_t s = 0; s < stages_.size(); ++s) {
    for (const Tensor& t : stages_[s]->parameters()) comm_->broadcast(t.detach(), int(s))->wait();
    for (const Tensor& t : stages_[s]->buffers()) comm_->broadcast(t, int(s))->wait();
  }
}

Tensor Pipeline::forward(const Tensor& inputs) {
  NoGradGuard no_grad;
  if (comm_ != nullptr) return model_->forward(inputs.to(comm_->device()));  // every layer is here
  Tensor x = inputs;
  for (size_t s = 0; s < stages_.size(); ++s) x = stages_[s]->forward(x.to(devices_[s]));
  return x;
}

double Pipeline::measured_bubble() {
  double busy = busy_seconds_, total = stage_seconds_;
  if (comm_ != nullptr) {  // every stage's figures
    Tensor sums = tensor(std::vector<double>{busy, total}, {2}, {.dtype = DType::Float64}).to(comm_->device());
    comm_->all_reduce(sums)->wait();
    const std::vector<double> v = sums.to_vector<double>();
    busy = v[0], total = v[1];
  }
  return total > 0 ? 1.0 - busy / total : 0;
}

double Pipeline::formula_bubble() const {
  const double p = stages(), m = options_.micro_batches;
  return (p - 1) / (m + p - 1);
}

}  // namespace mg::parallel
