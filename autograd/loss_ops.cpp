// autograd/loss_ops.cpp — the losses of nn_ops.h: cross_entropy (fused kernel, kernels/loss.h)
// and mse_loss (composed from primitives, so its backward comes from theirs).
//
// cross_entropy, for logits x (N, C) and Int64 targets t (N), mean reduction as PyTorch's
// CrossEntropyLoss:
//   forward   loss = (1/N) sum_n (lse_n - x[n, t_n]),  lse_n = log sum_c exp(x[n, c])
//   backward  dL/dx[n, c] = (softmax(x)[n, c] - [c == t_n]) * g / N
// The forward saves the contiguous logits and lse (N), so the backward is one elementwise pass;
// under create_graph it is the same formula from differentiable ops (softmax, sub, mul).
// N = 0 gives NaN (a mean over nothing), as in PyTorch; its gradient is an empty (0, C) tensor.
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/kernels/loss.h"

namespace mg {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  detail::check_defined(logits, "cross_entropy");
  detail::check_defined(targets, "cross_entropy");
  MG_CHECK(logits.dim() == 2, "cross_entropy: expected logits of shape (N, C), got ", logits.shape());
  MG_CHECK(logits.dtype() == DType::Float32 || logits.dtype() == DType::Float64,
           "cross_entropy: expected Float32 or Float64 logits, got ", logits.dtype());
  MG_CHECK(targets.dtype() == DType::Int64, "cross_entropy: expected Int64 targets, got ", targets.dtype());
  MG_CHECK(targets.shape() == Shape{logits.size(0)}, "cross_entropy: targets of shape ", targets.shape(),
           " do not match logits of shape ", logits.shape(), " (expected [", logits.size(0), "])");
  detail::check_same_device(logits, targets, "cross_entropy");

  const Tensor x = detail::contiguous_as(logits, logits.dtype());  // (N, C)
  const Tensor t = detail::contiguous_as(targets, DType::Int64);   // (N)
  const Tensor losses = Tensor::empty({x.size(0)}, x.options());   // (N)
  const Tensor lse = Tensor::empty({x.size(0)}, x.options());      // (N)
  kernels::cross_entropy_fwd(x, t, losses, lse);
  Tensor loss = mean(losses);
  if (any_requires_grad({&logits})) {
    record("cross_entropy", {loss}, {logits, targets}, [x, t, lse](const TensorList& grads) -> TensorList {
      if (!grads[0].defined()) return {Tensor(), Tensor()};
      if (is_grad_enabled()) {  // create_graph: the formula above as differentiable ops on the live logits
        const int64_t n = x.size(0), c = x.size(1);
        const Tensor classes = arange(c, {DType::Int64, x.device()}).view({1, c});
        const Tensor one_hot = to(eq(classes, t.view({n, 1})), x.dtype());
        return {mul(softmax(live_input(x, 0), 1) - one_hot, div(to(grads[0], x.dtype()), double(n))), Tensor()};
      }
      const Tensor grad_logits = Tensor::empty(x.shape(), x.options());
      kernels::cross_entropy_bwd(x, t, lse, detail::contiguous_as(grads[0], x.dtype()), grad_logits);
      return {grad_logits, Tensor()};
    }, Saves::InputsAndOutputs, true);
  }
  return loss;
}

Tensor cross_entropy_flat(const Tensor& logits, const Tensor& targets) {
  detail::check_defined(logits, "cross_entropy");
  detail::check_defined(targets, "cross_entropy");
  if (logits.dim() == 2) return cross_entropy(logits, targets);
  MG_CHECK(logits.dim() >= 1, "cross_entropy: expected logits (..., C), got a scalar");
  const Shape positions(logits.shape().begin(), logits.shape().end() - 1);
  MG_CHECK(targets.shape() == positions, "cross_entropy: targets of shape ", targets.shape(),
           " do not match logits of shape ", logits.shape(), " (expected ", positions, ")");
  return cross_entropy(logits.reshape({targets.numel(), logits.size(-1)}), targets.reshape({targets.numel()}));
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  detail::check_defined(input, "mse_loss");
  detail::check_defined(target, "mse_loss");
  MG_CHECK(input.shape() == target.shape(), "mse_loss: input shape ", input.shape(), " differs from target shape ",
           target.shape());
  MG_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), "mse_loss: expected floating tensors, got ",
           input.dtype(), " and ", target.dtype());
  const Tensor diff = input - target;
  return mean(diff * diff);
}

}  // namespace mg
