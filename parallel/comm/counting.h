// parallel/comm/counting.h — CountingCommunicator: a Communicator that forwards every call to another
// and counts what each operation moves, so that benchmarks and tests can hold a mode's bytes per
// step against the formulas (ZeRO's paper: DDP and ZeRO-1/2 move 2 (n-1)/n of the parameters'
// bytes per step, ZeRO-3 1.5 times that).
//
// Bytes are per rank, as the ring algorithms move them (the "bus bytes" of nccl-tests), for S the
// bytes of the whole buffer and n ranks: all_reduce 2 (n-1)/n S; reduce_scatter (S its input)
// and all_gather (S its output) (n-1)/n S; broadcast S; a send, or send_recv's send, S; a recv,
// a barrier and a split nothing (split's own all_gather runs on the inner communicator). It is
// the traffic of the operations asked for, whatever algorithm the backend runs (local's
// rank-ordered deterministic mode moves more). Time: each operation's, from its Work's timing()
// where the backend records one, else from the call to its wait() returning (added then: wait
// for an operation before destroying the communicator). Use it from the rank's own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "multigrad/parallel/comm/communicator.h"

namespace mg::parallel {

struct CommCounts {
  int64_t calls = 0;
  double bytes = 0;
  double ms = 0;  // of the operations waited for
};

class CountingCommunicator final : public Communicator {
 public:
  // on_call (may be empty) hears each operation's name as it is called.
  explicit CountingCommunicator(Communicator& inner, std::function<void(const std::string& op)> on_call = {});

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Device device() const override { return inner_.device(); }
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override;
  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                       ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> send(const Tensor& t, int dst) override;
  std::shared_ptr<Work> recv(const Tensor& t, int src) override;
  std::shared_ptr<Work> send_recv(const Tensor& send_t, int dst, const Tensor& recv_t, int src) override;
  std::shared_ptr<Work> barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void set_timeout(std::chrono::milliseconds timeout) override { inner_.set_timeout(timeout); }

  // By operation name ("all_reduce", ...), since construction or reset().
  const std::map<std::string, CommCounts>& counts() const { return counts_; }
  double bytes() const;
  double ms() const;
  void reset() { counts_.clear(); }

 private:
  void count(const std::string& op, double bytes);
  // `work` wrapped so that its wait adds its time to op's.
  std::shared_ptr<Work> timed(const std::string& op, std::shared_ptr<Work> work);

  Communicator& inner_;
  std::function<void(const std::string& op)> on_call_;
  std::map<std::string, CommCounts> counts_;
};

}  // namespace mg::parallel
