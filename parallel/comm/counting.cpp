// parallel/comm/counting.cpp — CountingCommunicator (see counting.h).
#include "multigrad/parallel/comm/counting.h"

#include <chrono>
#include <optional>
#include <utility>

namespace mg::parallel {
namespace {

double bytes_of(const Tensor& t) { return double(t.numel()) * double(t.element_size()); }

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// A Work whose wait() adds the operation's time to `ms` once.
class TimedWork final : public Work {
 public:
  TimedWork(std::shared_ptr<Work> inner, std::function<void(double)> add_ms)
      : inner_(std::move(inner)), add_ms_(std::move(add_ms)), called_(Clock::now()) {}
  void wait() override {
    inner_->wait();
    if (added_) return;
    added_ = true;
    const std::optional<WorkTiming> t = inner_->timing();
    add_ms_(t ? ms_between(t->start, t->end) : ms_between(called_, Clock::now()));
  }
  std::optional<WorkTiming> timing() const override { return inner_->timing(); }

 private:
  std::shared_ptr<Work> inner_;
  std::function<void(double)> add_ms_;
  Clock::time_point called_;
  bool added_ = false;
};

}  // namespace

CountingCommunicator::CountingCommunicator(Communicator& inner, std::function<void(const std::string& op)> on_call)
    : inner_(inner), on_call_(std::move(on_call)) {}

void CountingCommunicator::count(const std::string& op, double bytes) {
  CommCounts& c = counts_[op];
  ++c.calls;
  c.bytes += bytes;
  if (on_call_) on_call_(op);
}

std::shared_ptr<Work> CountingCommunicator::timed(const std::string& op, std::shared_ptr<Work> work) {
  return std::make_shared<TimedWork>(std::move(work), [this, op](double ms) { counts_[op].ms += ms; });
}

double CountingCommunicator::bytes() const {
  double total = 0;
  for (const auto& [op, c] : counts_) total += c.bytes;
  return total;
}

double CountingCommunicator::ms() const {
  double total = 0;
  for (const auto& [op, c] : counts_) total += c.ms;
  return total;
}

std::shared_ptr<Work> CountingCommunicator::all_reduce(const Tensor& t, ReduceOp op) {
  const double n = size();
  count("all_reduce", 2 * (n - 1) / n * bytes_of(t));
  return timed("all_reduce", inner_.all_reduce(t, op));
}

std::shared_ptr<Work> CountingCommunicator::broadcast(const Tensor& t, int root) {
  count("broadcast", size() > 1 ? bytes_of(t) : 0);
  return timed("broadcast", inner_.broadcast(t, root));
}

std::shared_ptr<Work> CountingCommunicator::all_gather(const Tensor& output, const Tensor& input) {
  const double n = size();
  count("all_gather", (n - 1) / n * bytes_of(output));
  return timed("all_gather", inner_.all_gather(output, input));
}

std::shared_ptr<Work> CountingCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  const double n = size();
  count("reduce_scatter", (n - 1) / n * bytes_of(input));
  return timed("reduce_scatter", inner_.reduce_scatter(output, input, op));
}

std::shared_ptr<Work> CountingCommunicator::send(const Tensor& t, int dst) {
  count("send", bytes_of(t));
  return timed("send", inner_.send(t, dst));
}

std::shared_ptr<Work> CountingCommunicator::recv(const Tensor& t, int src) {
  count("recv", 0);
  return timed("recv", inner_.recv(t, src));
}

std::shared_ptr<Work> CountingCommunicator::send_recv(const Tensor& send_t, int dst, const Tensor& recv_t, int src) {
  count("send_recv", bytes_of(send_t));
  return timed("send_recv", inner_.send_recv(send_t, dst, recv_t, src));
}

std::shared_ptr<Work> CountingCommunicator::barrier() {
  count("barrier", 0);
  return timed("barrier", inner_.barrier());
}

std::unique_ptr<Communicator> CountingCommunicator::split(int color, int key) {
  count("split", 0);
  return inner_.split(color, key);
}

}  // namespace mg::parallel
