// parallel/counting.cpp — CountingCommunicator (see counting.h).
#include "parallel/counting.h"

namespace mg::parallel {
namespace {

double bytes_of(const Tensor& t) { return double(t.numel()) * double(t.element_size()); }

}  // namespace

CountingCommunicator::CountingCommunicator(Communicator& inner, std::function<void(const std::string& op)> on_call)
    : inner_(inner), on_call_(std::move(on_call)) {}

void CountingCommunicator::count(const std::string& op, double bytes) {
  CommCounts& c = counts_[op];
  ++c.calls;
  c.bytes += bytes;
  if (on_call_) on_call_(op);
}

double CountingCommunicator::bytes() const {
  double total = 0;
  for (const auto& [op, c] : counts_) total += c.bytes;
  return total;
}

std::shared_ptr<Work> CountingCommunicator::all_reduce(const Tensor& t, ReduceOp op) {
  const double n = size();
  count("all_reduce", 2 * (n - 1) / n * bytes_of(t));
  return inner_.all_reduce(t, op);
}

std::shared_ptr<Work> CountingCommunicator::broadcast(const Tensor& t, int root) {
  count("broadcast", size() > 1 ? bytes_of(t) : 0);
  return inner_.broadcast(t, root);
}

std::shared_ptr<Work> CountingCommunicator::all_gather(const Tensor& output, const Tensor& input) {
  const double n = size();
  count("all_gather", (n - 1) / n * bytes_of(output));
  return inner_.all_gather(output, input);
}

std::shared_ptr<Work> CountingCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  const double n = size();
  count("reduce_scatter", (n - 1) / n * bytes_of(input));
  return inner_.reduce_scatter(output, input, op);
}

std::shared_ptr<Work> CountingCommunicator::send(const Tensor& t, int dst) {
  count("send", bytes_of(t));
  return inner_.send(t, dst);
}

std::shared_ptr<Work> CountingCommunicator::recv(const Tensor& t, int src) {
  count("recv", 0);
  return inner_.recv(t, src);
}

std::shared_ptr<Work> CountingCommunicator::send_recv(const Tensor& send_t, int dst, const Tensor& recv_t, int src) {
  count("send_recv", bytes_of(send_t));
  return inner_.send_recv(send_t, dst, recv_t, src);
}

std::shared_ptr<Work> CountingCommunicator::barrier() {
  count("barrier", 0);
  return inner_.barrier();
}

std::unique_ptr<Communicator> CountingCommunicator::split(int color, int key) {
  count("split", 0);
  return inner_.split(color, key);
}

}  // namespace mg::parallel
