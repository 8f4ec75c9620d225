// parallel/pipeline/pipeline.cpp — the pipeline runtime (see pipeline.h for the model).
#include "multigrad/parallel/pipeline/pipeline.h"

#include <algorithm>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include "multigrad/autograd/autocast.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/parallel/comm/local.h"
#include "multigrad/parallel/data/micro_batches.h"

namespace mg::parallel {
namespace {

// Stage s's generator for a step that starts at `step` (pipeline.h: another Philox key per stage).
PhiloxState stage_rng(PhiloxState step, int stage) {
  return {step.seed + uint64_t(stage) * 0x9E3779B97F4A7C15ull, step.offset};
}

using Clock = std::chrono::steady_clock;
constexpr int64_t kMaxDims = 8;  // of an activation sent between stages

// A tensor between stages travels as two messages: a header (dtype, ndim, dims), from which the
// receiver allocates, then the data. On the local backend a send returns at once (the message
// is a copy); over NCCL it waits for its receiver (see "Exchanges" in pipeline.h).
constexpr int64_t kHeaderWords = 2 + kMaxDims;

Tensor header_of(const Tensor& t, const Device& device) {
  MG_CHECK(t.dim() <= kMaxDims, "pipeline: an activation of ", t.dim(), " dims (", t.shape(),
           ") has more than the ", kMaxDims, " a stage can send");
  Tensor header = zeros({kHeaderWords}, {.dtype = DType::Int64});
  int64_t* h = header.data<int64_t>();
  h[0] = int64_t(t.dtype()), h[1] = t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) h[2 + d] = t.size(d);
  return header.to(device);
}

Tensor empty_header(const Device& device) { return Tensor::empty({kHeaderWords}, {DType::Int64, device}); }

// The tensor a received header announces, on the header's device.
Tensor tensor_for(const Tensor& header) {
  const std::vector<int64_t> h = header.to(Device("cpu:0")).to_vector<int64_t>();
  const Shape shape(h.begin() + 2, h.begin() + 2 + h[1]);
  return Tensor::empty(shape, {DType(h[0]), header.device()});
}

void send_tensor(Communicator& comm, const Tensor& t, int dst) {
  comm.send(header_of(t, comm.device()), dst)->wait();
  comm.send(t.contiguous(), dst)->wait();
}

Tensor recv_tensor(Communicator& comm, int src) {
  const Tensor header = empty_header(comm.device());
  comm.recv(header, src)->wait();
  Tensor t = tensor_for(header);
  comm.recv(t, src)->wait();
  return t;
}

// Sends t to dst and returns the tensor src sends: the headers as one send_recv, then the data as
// another, so that no send waits for a receive that this stage has yet to post.
Tensor exchange_tensors(Communicator& comm, const Tensor& t, int dst, int src) {
  const Tensor header = empty_header(comm.device());
  comm.send_recv(header_of(t, comm.device()), dst, header, src)->wait();
  Tensor received = tensor_for(header);
  comm.send_recv(t.contiguous(), dst, received, src)->wait();
  return received;
}

// Clears the stand-ins (nn::TiedLinear) of the ties whose user runs on `rank` (of `stages`; -1:
// every tie) when it goes out of scope: a stand-in serves one step or one forward, however it ends.
template <class Ties>
struct ClearStandIns {
  const Ties& ties;
  int rank = -1, stages = 1;
  ~ClearStandIns() {
    for (const auto& t : ties)
      if (rank < 0 || t.user % stages == rank) t.linear->set_stand_in(Tensor());
  }
};

// Every TiedLinear in m's tree.
void find_tied(const std::shared_ptr<nn::Module>& m, std::vector<std::shared_ptr<nn::TiedLinear>>& out) {
  if (auto tied = std::dynamic_pointer_cast<nn::TiedLinear>(m)) out.push_back(std::move(tied));
  for (const auto& child : m->children()) find_tied(child, out);
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

// A timeline event's name: "F3", "send activation 3", with chunks "F3.1" (micro-batch 3, chunk 1).
std::string event_name(const Action& a, int chunks) {
  const std::string chunk = chunks > 1 ? detail::str_cat(".", a.chunk) : "";
  return detail::str_cat(action_label(a.kind), a.micro_batch, chunk);
}

}  // namespace

std::vector<size_t> balanced_cuts(const nn::Sequential& model, int stages) {
  const size_t n = model.size();
  MG_CHECK(stages >= 1, "pipeline: needs at least one stage (got ", stages, ")");
  MG_CHECK(n >= size_t(stages), "pipeline: the model has ", n, n == 1 ? " layer" : " layers", ", fewer than the ",
           stages, " stages");
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
  const int v = options_.chunks;
  make_schedule(options_.schedule, p, options_.micro_batches, v);  // checks the name, chunks and m
  for (size_t s = 0; s < devices_.size(); ++s) {
    check_device_exists(devices_[s]);
    for (size_t t = 0; t < s && comm_ == nullptr; ++t) {  // one process per stage: all on its device
      MG_CHECK(devices_[s] != devices_[t], "pipeline: ", devices_[s], " is listed twice");
    }
  }
  const size_t layers = model_->size();
  const int n = p * v;  // virtual stages
  const std::string pieces =
      v == 1 ? detail::str_cat(p, " stages") : detail::str_cat(n, " virtual stages (", p, " stages x ", v, " chunks)");
  MG_CHECK(layers >= size_t(n), "pipeline: the model has ", layers, layers == 1 ? " layer" : " layers",
           ", fewer than the ", pieces);
  std::vector<size_t> cuts = options_.cuts.empty() ? balanced_cuts(*model_, n) : options_.cuts;
  MG_CHECK(cuts.size() == size_t(n - 1), "pipeline: ", pieces, " need ", n - 1, " cut indices (got ", cuts.size(), ")");
  size_t begin = 0;
  for (int j = 0; j < n; ++j) {
    const size_t end = j + 1 < n ? cuts[size_t(j)] : layers;
    MG_CHECK(end > begin && end <= layers, "pipeline: cut indices must increase within (0, ", layers,
             ") so that every stage has a layer (", v == 1 ? "stage " : "virtual stage ", j, " would be layers [",
             begin, ", ", end, "))");
    stages_.push_back(model_->slice(begin, end));
    stages_.back()->to(devices_[size_t(j % p)]);
    layers_.emplace_back(begin, end);
    begin = end;
  }
  for (int j = 0; j < n; ++j) {
    std::vector<std::shared_ptr<nn::TiedLinear>> found;
    find_tied(stages_[size_t(j)], found);
    for (auto& linear : found) {
      int owner = -1;
      for (int i = 0; i < n && owner < 0; ++i)
        for (const Tensor& param : stages_[size_t(i)]->parameters())
          if (param.is_same(linear->owner_weight())) owner = i;
      MG_CHECK(owner >= 0, "pipeline: ", linear->name(), " in ", v == 1 ? "stage " : "virtual stage ", j,
               " ties to a weight that no stage holds");
      if (owner != j) ties_.push_back({std::move(linear), owner, j});
    }
  }
}

PipelineStepResult Pipeline::step(const Tensor& inputs, const Tensor& targets, double loss_scale,
                                  int64_t batch_rows) {
  const int p = stages(), m = options_.micro_batches;
  MG_CHECK(inputs.dim() >= 1 && targets.dim() >= 1 && targets.size(0) == inputs.size(0),
           "pipeline: expected inputs (B, ...) and targets (B, ...), got ", inputs.shape(), " and ", targets.shape());
  MG_CHECK(inputs.size(0) >= m, "pipeline: a batch of ", inputs.size(0), " rows does not split into ", m,
           " micro-batches");
  MG_CHECK(batch_rows == 0 || batch_rows >= inputs.size(0), "pipeline: a batch of ", inputs.size(0),
           " rows cannot be part of one of ", batch_rows);
  if (batch_rows == 0) batch_rows = inputs.size(0);
  const Schedule schedule = make_schedule(options_.schedule, p, m, options_.chunks);

  PipelineStepResult result;
  events_.clear();
  const PhiloxState step_rng = get_rng_state();  // each stage's generator starts here (pipeline.h)
  uint64_t drawn = 0;                           // the most blocks a stage drew
  if (comm_ != nullptr) {  // this process is one stage
    {
      ThreadGenerator generator(stage_rng(step_rng, comm_->rank()));
      run_stage(*comm_, schedule, inputs, targets, loss_scale, batch_rows, result, events_);
      drawn = get_rng_state().offset - step_rng.offset;
    }
    Tensor most = tensor(std::vector<double>{double(drawn)}, {1}, {.dtype = DType::Float64}).to(comm_->device());
    comm_->all_reduce(most, ReduceOp::Max)->wait();  // exact: far fewer than 2^53 blocks
    drawn = uint64_t(most.to_vector<double>()[0]);
    // The last stage counted the examples; every rank reports the same.
    const int last = p - 1;
    Tensor counts = tensor(std::vector<double>{result.loss_sum, double(result.correct), double(result.samples),
                                               double(result.predictions)},
                           {4}, {.dtype = DType::Float64})
                        .to(comm_->device());
    comm_->broadcast(counts, last)->wait();
    const std::vector<double> c = counts.to_vector<double>();
    result = {c[0], int64_t(c[1]), int64_t(c[2]), int64_t(c[3])};
  } else {
    std::vector<std::vector<TimelineEvent>> lanes(static_cast<size_t>(p));
    std::vector<PipelineStepResult> results(static_cast<size_t>(p));
    std::vector<uint64_t> stage_drawn(static_cast<size_t>(p));
    const Precision precision = autocast_precision();  // the stages' threads compute as this one
    const auto stage = [&](Communicator& comm) {
      AutocastGuard autocast(precision);
      ThreadGenerator generator(stage_rng(step_rng, comm.rank()));
      const size_t r = size_t(comm.rank());
      run_stage(comm, schedule, inputs, targets, loss_scale, batch_rows, results[r], lanes[r]);
      stage_drawn[r] = get_rng_state().offset - step_rng.offset;
    };
    if (options_.run_ranks) {
      options_.run_ranks(devices_, stage);
    } else {
      run_ranks(devices_, stage);
    }
    result = results.back();
    for (auto& l : lanes) events_.insert(events_.end(), l.begin(), l.end());
    drawn = *std::max_element(stage_drawn.begin(), stage_drawn.end());
  }
  set_rng_state({step_rng.seed, step_rng.offset + drawn});

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
                         double loss_scale, int64_t batch_rows, PipelineStepResult& result,
                         std::vector<TimelineEvent>& lane_events) {
  comm.set_timeout(options_.timeout);
  const int p = stages(), v = chunks(), m = options_.micro_batches, s = comm.rank();
  const int last = p * v - 1;  // the last virtual stage
  const int64_t b = inputs.size(0);
  const std::vector<MicroBatch> micro = split_batch(b, m);
  const Device device = comm.device();
  const std::string lane = detail::str_cat("stage ", s, " (", device, ")");
  // Per chunk and micro-batch (index chunk * m + k), while in flight: the chunk's input (a leaf
  // after virtual stage 0), its output with the graph behind it, the gradient of that output,
  // and the last virtual stage's scaled loss.
  std::vector<Tensor> in(static_cast<size_t>(v * m)), out(in), grad(in), loss(in);
  const auto at = [&](const Action& a) { return size_t(a.chunk * m + a.micro_batch); };

  // Tied weights (pipeline.h): the user's stand-in arrives from the owner's rank; each side keeps
  // its gradient of the weight per micro-batch until the step's end.
  struct TiedGrads {
    Tensor stand_in;                  // the user's rank: the leaf its TiedLinear multiplies by
    std::vector<Tensor> owner, user;  // per micro-batch: the owner's, and the stand-in's, gradient
  };
  std::vector<TiedGrads> tied(ties_.size());
  const auto rank_of = [&](int virtual_stage) { return virtual_stage % p; };
  const ClearStandIns<std::vector<Tie>> clear_stand_ins{ties_, s, p};
  for (size_t t = 0; t < ties_.size(); ++t) {
    const Tie& tie = ties_[t];
    const int owner = rank_of(tie.owner), user = rank_of(tie.user);
    tied[t].owner.resize(size_t(m)), tied[t].user.resize(size_t(m));
    Tensor weight;
    if (s == owner) {
      weight = tie.linear->owner_weight().detach();
      if (user != owner) send_tensor(comm, weight, user);
    }
    if (s == user) {
      if (user != owner) weight = recv_tensor(comm, owner);
      tied[t].stand_in = weight.requires_grad_(true);
      tie.linear->set_stand_in(tied[t].stand_in);
    }
  }

  // What a send action sends: the output, or the input's gradient (the input is then done with).
  const auto outgoing = [&](const Action& a) {
    const size_t i = at(a);
    if (a.kind == ActionKind::SendActivation) return out[i].detach();
    const Tensor g = in[i].grad();
    const Tensor sent = g.defined() ? g : zeros_like(in[i]);  // a first chunk without parameters
    in[i] = Tensor();
    return sent;
  };
  // Where a receive action's tensor goes.
  const auto incoming = [&](const Action& a, Tensor t) {
    const size_t i = at(a);
    if (a.kind == ActionKind::RecvActivation) {
      in[i] = t.requires_grad_(true);
    } else {
      grad[i] = std::move(t);
    }
  };
  const auto compute = [&](const Action& a) {
    const size_t i = at(a);
    const int j = a.chunk * p + s;
    const MicroBatch& rows = micro[size_t(a.micro_batch)];
    if (a.kind == ActionKind::Forward) {
      if (j == 0) in[i] = inputs.slice(0, rows.begin, rows.end).to(device);
      out[i] = stages_[size_t(j)]->forward(in[i]);
      if (j == last) {
        const Tensor y = targets.slice(0, rows.begin, rows.end).to(device);
        const Tensor l = options_.loss ? options_.loss(out[i], y) : cross_entropy_flat(out[i], y);
        {
          NoGradGuard no_grad;
          result.loss_sum += l.item<double>() * double(rows.size());
          const Tensor predicted = options_.predict ? options_.predict(out[i]) : argmax(out[i], -1);
          result.correct += sum(eq(predicted, y)).item<int64_t>();
          result.samples += rows.size();
          result.predictions += y.numel();
        }
        loss[i] = mul(l, double(rows.size()) / double(batch_rows));
        if (loss_scale != 1.0) loss[i] = mul(loss[i], loss_scale);  // as GradScaler::scale after the share
      }
      return;
    }
    // An owner's gradient of its tied weight from this micro-batch alone: the one before is set
    // aside meanwhile.
    std::vector<Tensor> before(ties_.size());
    for (size_t t = 0; t < ties_.size(); ++t) {
      if (ties_[t].owner != j) continue;
      const Tensor& w = ties_[t].linear->owner_weight();
      before[t] = w.grad();
      w.set_grad(Tensor());
    }
    if (j == last) {
      loss[i].backward();
    } else if (out[i].requires_grad()) {  // a first chunk without parameters has nothing to do
      mg::backward({out[i]}, {grad[i]});
    }
    out[i] = loss[i] = grad[i] = Tensor();
    for (size_t t = 0; t < ties_.size(); ++t) {
      const size_t k = size_t(a.micro_batch);
      if (ties_[t].owner == j) {
        const Tensor& w = ties_[t].linear->owner_weight();
        tied[t].owner[k] = w.grad();
        w.set_grad(before[t]);
      }
      if (ties_[t].user == j) {
        tied[t].user[k] = tied[t].stand_in.grad();
        MG_CHECK(tied[t].user[k].defined(), "pipeline: no gradient reached ", ties_[t].linear->name(),
                 " in micro-batch ", k);
        tied[t].stand_in.set_grad(Tensor());
      }
    }
  };
  const auto peer = [&](const Action& a) { return other_end(a, s, p, v).stage; };

  const std::vector<Action>& actions = schedule[size_t(s)];
  const std::vector<bool> exchanges = find_exchanges(schedule, v)[size_t(s)];
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    const auto start = Clock::now();
    std::string name = event_name(a, v);
    if (exchanges[i]) {
      const Action& reply = actions[++i];
      incoming(reply, exchange_tensors(comm, outgoing(a), peer(a), peer(reply)));
      name += " + " + event_name(reply, v);
    } else if (is_send(a.kind)) {
      send_tensor(comm, outgoing(a), peer(a));
    } else if (is_recv(a.kind)) {
      incoming(a, recv_tensor(comm, peer(a)));
    } else {
      compute(a);
    }
    lane_events.push_back({lane, std::move(name), start, Clock::now()});
  }

  // Tied weights: the user's gradients go to the owner, which sums each micro-batch's two as one
  // device's backward pass does and adds the sums in micro-batch order (pipeline.h).
  for (size_t t = 0; t < ties_.size(); ++t) {
    const int owner = rank_of(ties_[t].owner), user = rank_of(ties_[t].user);
    if (s == user && user != owner)
      for (const Tensor& g : tied[t].user) send_tensor(comm, g, owner);
    if (s != owner) continue;
    const Tensor& w = ties_[t].linear->owner_weight();
    Tensor total = w.grad();
    for (size_t k = 0; k < size_t(m); ++k) {
      const Tensor user_grad = user == owner ? tied[t].user[k] : recv_tensor(comm, user);
      const Tensor& owner_grad = tied[t].owner[k];
      const Tensor pass = owner_grad.defined() ? add(user_grad, owner_grad) : user_grad;
      total = total.defined() ? add(total, pass) : pass;
    }
    w.set_grad(total);
  }
}

void Pipeline::synchronize_parameters() {
  if (comm_ == nullptr) return;
  NoGradGuard no_grad;
  for (size_t j = 0; j < stages_.size(); ++j) {  // virtual stage j is trained by rank j mod p
    const int root = int(j % devices_.size());
    for (const Tensor& t : stages_[j]->parameters()) comm_->broadcast(t.detach(), root)->wait();
    for (const Tensor& t : stages_[j]->buffers()) comm_->broadcast(t, root)->wait();
  }
}

optim::OptimizerState Pipeline::synchronize_optimizer_state(const std::vector<Tensor>& params,
                                                            optim::OptimizerState mine) {
  if (comm_ == nullptr) return mine;
  NoGradGuard no_grad;
  std::vector<int> owner(params.size(), -1);  // the rank that trains params[i]
  for (size_t j = 0; j < stages_.size(); ++j) {
    for (const Tensor& t : stages_[j]->parameters()) {
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i].is_same(t)) owner[i] = int(j % devices_.size());
    }
  }
  // This rank's entries, a line each: "<key> <dtype> <sizes...>".
  std::string lines;
  for (const auto& [key, t] : mine.tensors) {
    const size_t i = optim::split_state_key(key).first;
    MG_CHECK(i < params.size() && owner[i] >= 0, "pipeline: optimizer state '", key, "' is for parameter ", i,
             ", which no stage trains (", params.size(), " parameters)");
    if (owner[i] != comm_->rank()) continue;
    lines += detail::str_cat(key, " ", int(t.dtype()));
    for (const int64_t d : t.shape()) lines += detail::str_cat(" ", d);
    lines += "\n";
  }
  const std::vector<std::string> all = all_gather_text(*comm_, lines);
  optim::OptimizerState out{{}, std::move(mine.options)};
  for (int r = 0; r < comm_->size(); ++r) {  // rank r's entries, broadcast from it
    std::istringstream text(all[size_t(r)]);
    for (std::string line; std::getline(text, line);) {
      std::istringstream words(line);
      std::string key;
      int dtype = 0;
      words >> key >> dtype;
      Shape shape;
      for (int64_t d = 0; words >> d;) shape.push_back(d);
      Tensor t = r == comm_->rank() ? mine.tensors.at(key).to(comm_->device()).contiguous()
                                    : Tensor::empty(shape, {DType(dtype), comm_->device()});
      comm_->broadcast(t, r)->wait();
      out.tensors[key] = t;
    }
  }
  return out;
}

Tensor Pipeline::forward(const Tensor& inputs) {
  NoGradGuard no_grad;
  if (comm_ != nullptr) return model_->forward(inputs.to(comm_->device()));  // every layer is here
  // A tied weight's user reads a copy on its own device for this pass.
  const ClearStandIns<std::vector<Tie>> clear_stand_ins{ties_};
  const size_t p = devices_.size();
  for (const Tie& t : ties_) t.linear->set_stand_in(t.linear->owner_weight().detach().to(devices_[size_t(t.user) % p]));
  Tensor x = inputs;
  for (size_t j = 0; j < stages_.size(); ++j) x = stages_[j]->forward(x.to(devices_[j % p]));
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
  return parallel::formula_bubble(stages(), options_.micro_batches, chunks());
}

}  // namespace mg::parallel
