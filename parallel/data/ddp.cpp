// parallel/data/ddp.cpp — DistributedDataParallel (see ddp.h for the model).
//
// The Reducer owns the buckets and the per-step state; the parameters' grad-ready hooks hold
// it weakly (autograd hooks cannot be removed, and may outlive the DDP object). Everything
// here runs on the thread that calls forward and backward; only the all-reduces themselves run
// elsewhere, asynchronously (a backend's progress thread, or NCCL's stream).
#include "multigrad/parallel/data/ddp.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"
#include "multigrad/kernels/kernels.h"
#include "multigrad/parallel/data/buckets.h"

namespace mg::parallel {
namespace {

using Clock = std::chrono::steady_clock;
// Each gradient's slot starts on a cache line, as the allocator's own tensors do, so that the
// GEMM writing a gradient and the optimizer's vector loops reading it need no split loads.
constexpr int64_t kSlotAlignmentBytes = 64;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Fails on every rank, naming the first parameter where some rank differs from rank 0.
void check_same_parameters(Communicator& comm, const nn::NamedTensors& params) {
  std::string mine;
  for (const auto& [name, p] : params) mine += detail::str_cat("'", name, "' ", p.shape(), " ", p.dtype(), "\n");
  const std::vector<std::string> texts = all_gather_text(comm, mine);
  const std::vector<std::string> reference = lines_of(texts[0]);
  for (int r = 1; r < comm.size(); ++r) {
    const std::vector<std::string> theirs = lines_of(texts[size_t(r)]);
    for (size_t i = 0; i < std::max(reference.size(), theirs.size()); ++i) {
      const std::string a = i < reference.size() ? reference[i] : "nothing";
      const std::string b = i < theirs.size() ? theirs[i] : "nothing";
      MG_CHECK(a == b, "DistributedDataParallel: the ranks hold different models: parameter ", i,
               " is ", a, " on rank 0 but ", b, " on rank ", r, " (", reference.size(), " vs ", theirs.size(),
               " parameters)");
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- the reducer

// A flat buffer (buckets.h) of parameters' indices into Reducer::params_, and its communication.
struct Bucket : FlatLayout {
  Tensor flat;                  // (numel,) on the rank's device, one dtype
  int pending = 0;              // gradients not ready yet in this backward
  std::shared_ptr<Work> work;
};

class Reducer {
 public:
  Reducer(Communicator& comm, const DDPOptions& options, nn::NamedTensors params)
      : comm_(comm), options_(options), params_(std::move(params)), bucket_of_(params_.size()),
        ready_(params_.size(), false) {
    build_buckets();
    // Each gradient's first arrival in a backward goes straight to its bucket slot.
    for (const Bucket& b : buckets_)
      for (size_t j = 0; j < b.params.size(); ++j) set_grad_destination(params_[b.params[j]].second, slot(b, j));
  }

  ~Reducer() {
    for (const auto& [name, p] : params_) set_grad_destination(p, Tensor());
  }
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // After a grad-enabled forward: outside no_sync() the next backward all-reduces; inside, it
  // only accumulates.
  void prepare(const Tensor& output, bool sync) {
    check_previous_step_finished();
    expecting_ = false;
    if (!sync) return;
    std::unordered_set<const TensorImpl*> used;
    for (const Tensor& leaf : reachable_leaves({output})) used.insert(leaf.unsafe_impl());
    std::fill(ready_.begin(), ready_.end(), false);
    for (Bucket& b : buckets_) {
      b.pending = int(b.params.size());
      b.work.reset();
    }
    next_launch_ = 0;
    expecting_ = true;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (used.count(params_[i].second.unsafe_impl())) continue;
      MG_CHECK(options_.find_unused_parameters, "DistributedDataParallel: parameter '", params_[i].first, "' ",
               params_[i].second.shape(), " was not used to compute the output, so it would get no gradient and ",
               "its bucket would never be reduced; pass find_unused_parameters = true if that is intended");
      mark_ready(i, Tensor());  // zero, as PyTorch does
    }
  }

  // The hook: param i's gradient is final in this backward.
  void on_grad_ready(size_t i, const Tensor& grad) {
    if (!expecting_) return;  // a forward under no_sync(), or one that did not go through DDP
    MG_CHECK(!ready_[i], "DistributedDataParallel: parameter '", params_[i].first,
             "' got a gradient twice after one forward (a second backward through the same graph?)");
    mark_ready(i, grad);
    launch_full_buckets();
    if (next_launch_ == buckets_.size()) finish();
  }

  void set_forward_time(Clock::time_point start, Clock::time_point end) {
    forward_start_ = start;
    forward_end_ = end;
  }

  const DDPStats& stats() const { return stats_; }
  const std::vector<TimelineEvent>& events() const { return events_; }

  std::vector<std::vector<std::string>> bucket_names() const {
    std::vector<std::vector<std::string>> names;
    for (const Bucket& b : buckets_) {
      names.emplace_back();
      for (size_t i : b.params) names.back().push_back(params_[i].first);
    }
    return names;
  }

 private:
  // Cut by reverse_buckets and laid out by flat_layout (buckets.h). Slots are aligned
  // (kSlotAlignmentBytes); the padding between them is zero and all-reduced with the rest.
  void build_buckets() {
    std::vector<Tensor> tensors;
    for (const auto& [name, p] : params_) tensors.push_back(p);
    for (const auto& members : reverse_buckets(tensors, options_.first_bucket_mb, options_.bucket_cap_mb)) {
      Bucket& b = buckets_.emplace_back();
      static_cast<FlatLayout&>(b) = flat_layout(tensors, members, kSlotAlignmentBytes, 1);
      for (size_t k : members) bucket_of_[k] = buckets_.size() - 1;
      b.flat = zeros({b.numel}, tensors[members.front()].options());
    }
  }

  Tensor slot(const Bucket& b, size_t j) const {
    const Tensor& p = params_[b.params[j]].second;
    return b.slot(b.flat, j, p).view(p.shape());
  }

  // Puts the gradient (undefined: zero) into its bucket, unless it already lives there: it
  // does, being the parameter's gradient destination, unless .grad was set some other way.
  void mark_ready(size_t i, const Tensor& grad) {
    Bucket& b = buckets_[bucket_of_[i]];
    const size_t j = size_t(std::find(b.params.begin(), b.params.end(), i) - b.params.begin());
    const Tensor place = slot(b, j);
    NoGradGuard no_grad;
    if (!grad.defined()) {
      kernels::fill(place, 0.0);
    } else if (grad.data_ptr() != place.data_ptr()) {
      kernels::copy(grad, place);
    }
    ready_[i] = true;
    --b.pending;
  }

  // Starts the all-reduce of every full bucket, in bucket order only. A group of one rank has
  // nothing to reduce (its bucket is already the sum, average or maximum), so it starts none.
  void launch_full_buckets() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      Bucket& b = buckets_[next_launch_++];
      if (comm_.size() > 1) b.work = comm_.all_reduce(b.flat, options_.reduce_op);
    }
  }

  // Every bucket has started: wait for them in order; the results become the gradients.
  void finish() {
    const Clock::time_point last_ready = Clock::now();
    expecting_ = false;
    double comm = 0, hidden = 0;
    const std::string lane = detail::str_cat("rank ", comm_.rank());
    events_.clear();
    NoGradGuard no_grad;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      Bucket& b = buckets_[i];
      if (b.work) {  // none for one rank
        b.work->wait();
        if (const auto t = b.work->timing()) {
          comm += ms_between(t->start, t->end);
          hidden += std::max(0.0, ms_between(t->start, std::min(t->end, last_ready)));
          events_.push_back({lane + " all-reduce", detail::str_cat("bucket ", i), t->start, t->end});
        }
        b.work.reset();
      }
      // The reduced gradients stay where they are: each parameter's .grad becomes a view of its
      // bucket (PyTorch's gradient_as_bucket_view), so nothing is copied back. A later backward
      // without zero_grad(set_to_none) accumulates into the bucket itself, and then nothing is
      // copied in either.
      for (size_t j = 0; j < b.params.size(); ++j) {
        const Tensor& p = params_[b.params[j]].second;
        const Tensor reduced = slot(b, j);
        if (p.grad().defined() && p.grad().data_ptr() == reduced.data_ptr()) continue;
        p.set_grad(reduced);
      }
    }
    const Clock::time_point done = Clock::now();
    events_.push_back({lane, "forward", forward_start_, forward_end_});
    events_.push_back({lane, "backward", forward_end_, done});
    stats_.steps += 1;
    stats_.forward_ms += ms_between(forward_start_, forward_end_);
    stats_.backward_ms += ms_between(forward_end_, done);
    stats_.comm_ms += comm;
    stats_.hidden_ms += hidden;
  }

  // A forward after a backward that reached some parameters but not all: their buckets never
  // started, so the ranks are out of step. Names the parameters that got no gradient.
  void check_previous_step_finished() const {
    if (!expecting_ || std::none_of(ready_.begin(), ready_.end(), [](bool r) { return r; })) return;
    std::string missing;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ready_[i]) missing += (missing.empty() ? "'" : ", '") + params_[i].first + "'";
    }
    MG_ERROR("DistributedDataParallel: the previous backward gave no gradient to ", missing,
             ", so not every bucket was all-reduced; if parameters can go unused, pass find_unused_parameters = true");
  }

  Communicator& comm_;
  DDPOptions options_;
  nn::NamedTensors params_;         // the module's parameters that require grad, registration order
  std::vector<size_t> bucket_of_;   // per parameter
  std::vector<Bucket> buckets_;     // launch order
  std::vector<bool> ready_;         // per parameter, in this backward
  size_t next_launch_ = 0;
  bool expecting_ = false;          // a forward prepared a reduction that has not finished
  Clock::time_point forward_start_, forward_end_;
  DDPStats stats_;
  std::vector<TimelineEvent> events_;  // of the last all-reduced step
};

// ---------------------------------------------------------------- the module

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, Communicator& comm,
                                                 DDPOptions options)
    : module_(std::move(module)), comm_(comm), options_(options) {
  MG_CHECK(module_ != nullptr, "DistributedDataParallel: module is null");
  MG_CHECK(options_.bucket_cap_mb > 0 && options_.first_bucket_mb > 0,
           "DistributedDataParallel: bucket caps must be positive (bucket_cap_mb ", options_.bucket_cap_mb,
           ", first_bucket_mb ", options_.first_bucket_mb, ")");
  register_module("module", module_);

  nn::NamedTensors params;
  for (const auto& [name, p] : module_->named_parameters()) {
    MG_CHECK(p.device() == comm_.device(), "DistributedDataParallel: parameter '", name, "' is on ", p.device(),
             " but rank ", comm_.rank(), " is on ", comm_.device(), "; move the module there first");
    if (p.requires_grad()) params.emplace_back(name, p);
  }
  check_same_parameters(comm_, params);

  {
    NoGradGuard no_grad;
    for (const Tensor& p : module_->parameters()) comm_.broadcast(p.detach(), 0)->wait();
    for (const Tensor& b : module_->buffers()) comm_.broadcast(b, 0)->wait();
  }

  reducer_ = std::make_shared<Reducer>(comm_, options_, params);
  std::weak_ptr<Reducer> weak = reducer_;
  for (size_t i = 0; i < params.size(); ++i) {
    on_grad_ready(params[i].second, [weak, i](const Tensor& grad) {
      if (auto reducer = weak.lock()) reducer->on_grad_ready(i, grad);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& input) {
  const auto start = Clock::now();
  if (options_.broadcast_buffers && comm_.size() > 1) {
    NoGradGuard no_grad;
    for (const Tensor& b : module_->buffers()) comm_.broadcast(b, 0)->wait();
  }
  Tensor output = module_->forward(input);
  if (is_grad_enabled() && output.requires_grad()) {
    reducer_->prepare(output, sync_);
    reducer_->set_forward_time(start, Clock::now());
  }
  return output;
}

std::string DistributedDataParallel::name() const {
  return detail::str_cat("DistributedDataParallel(rank ", comm_.rank(), " of ", comm_.size(), ", ",
                         module_->name(), ")");
}

const DDPStats& DistributedDataParallel::stats() const { return reducer_->stats(); }

const std::vector<TimelineEvent>& DistributedDataParallel::last_step_events() const { return reducer_->events(); }

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  return reducer_->bucket_names();
}

std::shared_ptr<nn::Module> DistributedDataParallel::shallow_copy() const {
  MG_ERROR("DistributedDataParallel cannot be cloned: clone its module() and wrap the copy");
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) {
  ddp_.sync_ = false;
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.sync_ = previous_; }

}  // namespace mg::parallel
