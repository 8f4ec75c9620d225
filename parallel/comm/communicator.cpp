// parallel/comm/communicator.cpp — what every backend shares: the names of the reduce ops, split's
// groups, and texts gathered from every rank.
#include "multigrad/parallel/comm/communicator.h"

#include <algorithm>
#include <cstring>

namespace mg::parallel {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

namespace {

// Every rank's `mine` (the same count on each), gathered: rank r's words are [r count, (r + 1) count).
std::vector<int64_t> all_gather_words(Communicator& comm, const std::vector<int64_t>& mine) {
  const auto count = int64_t(mine.size());
  Tensor input = Tensor::empty({count}, {DType::Int64, Device("cpu:0")});
  std::copy(mine.begin(), mine.end(), input.data<int64_t>());
  input = input.to(comm.device());
  const Tensor output = Tensor::empty({count * comm.size()}, {DType::Int64, comm.device()});
  comm.all_gather(output, input)->wait();
  return output.to_vector<int64_t>();
}

}  // namespace

std::vector<int> split_members(Communicator& comm, int color, int key) {
  const std::vector<int64_t> all = all_gather_words(comm, {color, key});
  if (color < 0) return {};
  std::vector<std::pair<int64_t, int>> order;  // (key, rank) of the ranks of this color
  for (int r = 0; r < comm.size(); ++r)
    if (all[size_t(2 * r)] == color) order.emplace_back(all[size_t(2 * r + 1)], r);
  std::sort(order.begin(), order.end());
  std::vector<int> members;
  for (const auto& [k, r] : order) members.push_back(r);
  return members;
}

std::vector<std::string> all_gather_text(Communicator& comm, const std::string& mine) {
  const std::vector<int64_t> lengths = all_gather_words(comm, {int64_t(mine.size())});
  const auto longest = size_t(*std::max_element(lengths.begin(), lengths.end()));
  const size_t words = std::max<size_t>(1, (longest + sizeof(int64_t) - 1) / sizeof(int64_t));
  std::vector<int64_t> padded(words, 0);
  std::memcpy(padded.data(), mine.data(), mine.size());
  const std::vector<int64_t> all = all_gather_words(comm, padded);
  std::vector<std::string> texts;
  for (size_t r = 0; r < lengths.size(); ++r)
    texts.emplace_back(reinterpret_cast<const char*>(all.data() + r * words), size_t(lengths[r]));
  return texts;
}

}  // namespace mg::parallel
