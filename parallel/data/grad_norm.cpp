// parallel/data/grad_norm.cpp — global_grad_norm and any_rank (see grad_norm.h).
#include "multigrad/parallel/data/grad_norm.h"

#include <cmath>

#include "multigrad/autograd/factory.h"

namespace mg::parallel {

double global_grad_norm(Communicator& comm, const optim::SquareSum& mine) {
  const std::vector<int64_t> words = mine.words();
  const Tensor all = tensor(words, {int64_t(words.size())}, {.dtype = DType::Int64}).to(comm.device());
  comm.all_reduce(all)->wait();
  return std::sqrt(optim::SquareSum::from_words(all.to_vector<int64_t>()).value());
}

bool any_rank(Communicator& comm, bool mine) {
  Tensor flag = full({1}, mine ? 1.0 : 0.0, {DType::Float64, comm.device()});
  comm.all_reduce(flag, ReduceOp::Max)->wait();
  return flag.item<double>() > 0;
}

}  // namespace mg::parallel
