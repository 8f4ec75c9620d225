// parallel/tensor/operators.cpp — the operators of operators.h, as ops on the tape.
#include "multigrad/parallel/tensor/operators.h"

#include "multigrad/autograd/tape.h"
#include "multigrad/core/error.h"

namespace mg::parallel {
namespace {

// The sum of t over the ranks, in a new tensor.
Tensor summed(const Tensor& t, Communicator& comm) {
  Tensor out = t.clone();
  comm.all_reduce(out)->wait();
  return out;
}

// Sequence parallelism's collectives along dimension 1 of (B, T, *): the communicator gathers and
// scatters along dimension 0, so the positions go first, (T, B, *), and back.
Tensor positions_first(const Tensor& x) {
  MG_CHECK(x.dim() >= 2, "sequence parallelism: expected (B, T, ...) activations, got ", x.shape());
  return x.transpose(0, 1).contiguous();
}

int64_t positions_here(int64_t length, const Communicator& comm) {
  MG_CHECK(length % comm.size() == 0, "sequence parallelism: ", length, " positions do not split among ",
           comm.size(), " ranks");
  return length / comm.size();
}

// (B, T/N, *) on each rank -> (B, T, *), rank r's positions at [r T/N, (r+1) T/N).
Tensor all_gather_positions(const Tensor& x, Communicator& comm) {
  NoGradGuard no_grad;
  const Tensor mine = positions_first(x.detach());
  Shape shape = mine.shape();
  shape[0] *= comm.size();
  const Tensor all = Tensor::empty(shape, mine.options());
  comm.all_gather(all, mine)->wait();
  return all.transpose(0, 1).contiguous();
}

// (B, T, *) on each rank -> this rank's positions (B, T/N, *) summed over the ranks.
Tensor reduce_scatter_positions(const Tensor& x, Communicator& comm) {
  NoGradGuard no_grad;
  const Tensor all = positions_first(x.detach());
  Shape shape = all.shape();
  shape[0] = positions_here(shape[0], comm);
  const Tensor mine = Tensor::empty(shape, all.options());
  comm.reduce_scatter(mine, all)->wait();
  return mine.transpose(0, 1).contiguous();
}

// This rank's positions (B, T/N, *) of (B, T, *).
Tensor positions_of_rank(const Tensor& x, const Communicator& comm) {
  MG_CHECK(x.dim() >= 2, "sequence parallelism: expected (B, T, ...) activations, got ", x.shape());
  const int64_t here = positions_here(x.size(1), comm);
  return x.slice(1, comm.rank() * here, (comm.rank() + 1) * here).contiguous();
}

}  // namespace

Tensor copy_to_tensor_parallel(const Tensor& input, Communicator& comm) {
  const Tensor out = input.detach();
  if (any_requires_grad({&input})) {
    Communicator* c = &comm;
    record("copy_to_tensor_parallel", {out}, {input},
           [c](const TensorList& grads) -> TensorList { return {summed(grads[0], *c)}; }, Saves::None);
  }
  return out;
}

Tensor reduce_from_tensor_parallel(const Tensor& input, Communicator& comm) {
  const Tensor out = summed(input.detach(), comm);
  if (any_requires_grad({&input}))
    record("reduce_from_tensor_parallel", {out}, {input}, [](const TensorList& grads) { return grads; }, Saves::None);
  return out;
}

Tensor scatter_to_sequence_parallel(const Tensor& input, Communicator& comm) {
  const Tensor out = positions_of_rank(input.detach(), comm);
  if (any_requires_grad({&input})) {
    Communicator* c = &comm;
    record("scatter_to_sequence_parallel", {out}, {input},
           [c](const TensorList& grads) -> TensorList { return {all_gather_positions(grads[0], *c)}; }, Saves::None);
  }
  return out;
}

Tensor gather_from_sequence_parallel(const Tensor& input, Communicator& comm, bool reduce_scatter_backward) {
  const Tensor out = all_gather_positions(input, comm);
  if (any_requires_grad({&input})) {
    Communicator* c = &comm;
    record("gather_from_sequence_parallel", {out}, {input},
           [c, reduce_scatter_backward](const TensorList& grads) -> TensorList {
             return {reduce_scatter_backward ? reduce_scatter_positions(grads[0], *c)
                                             : positions_of_rank(grads[0], *c)};
           },
           Saves::None);
  }
  return out;
}

Tensor reduce_scatter_to_sequence_parallel(const Tensor& input, Communicator& comm) {
  const Tensor out = reduce_scatter_positions(input, comm);
  if (any_requires_grad({&input})) {
    Communicator* c = &comm;
    record("reduce_scatter_to_sequence_parallel", {out}, {input},
           [c](const TensorList& grads) -> TensorList { return {all_gather_positions(grads[0], *c)}; }, Saves::None);
  }
  return out;
}

}  // namespace mg::parallel
