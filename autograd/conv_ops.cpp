// autograd/conv_ops.cpp — conv2d, max_pool2d and avg_pool2d of autograd/nn_ops.h: argument
// checks (PyTorch's rules, messages naming the shapes), output sizes, the kernels of
// kernels/conv.h, and each op's backward beside its forward.
//
// Derivatives (y = conv2d(x, w, b), g = dL/dy):
//   dL/dx = conv2d_backward_input(g, w)     the transposed convolution
//   dL/dw = conv2d_backward_weight(g, x)    correlation of g with x, summed over the batch
//   dL/db = sum of g over N, oH, oW
//   max_pool2d: g flows to the element each window chose (indices saved by the forward);
//   avg_pool2d: each window spreads g / (kH * kW) over its elements.
// Each op records one node (detail::differentiable); the node computes only the gradients its
// inputs need, and saves only what those need. Under create_graph the backwards record too
// (conv2d_input_grad and conv2d_weight_grad, scatter_add, avg_pool2d as its backward's adjoint),
// so second derivatives flow through all three.
// Unbatched (C, H, W) inputs are run as a batch of one (PyTorch accepts them too).
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "multigrad/autograd/autocast.h"
#include "multigrad/autograd/derivatives.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/kernels/conv.h"

namespace mg {
namespace {

using Pair = std::array<int64_t, 2>;

std::string pair_str(const Pair& v) { return detail::str_cat(v[0], " x ", v[1]); }

void check_floating_4d(const Tensor& input, const char* op) {
  detail::check_defined(input, op);
  MG_CHECK(input.dtype() == DType::Float32 || input.dtype() == DType::Float64, op,
           ": expected a Float32 or Float64 input, got ", input.dtype());
  MG_CHECK(input.dim() == 4, op, ": expected a 3-d (C, H, W) or 4-d (N, C, H, W) input, got shape ",
           to_string(input.shape()));
}

// floor((size + 2 pad - extent) / stride) + 1 for each of H and W, where extent is the (dilated)
// window; an error naming every size when a window does not fit.
Pair output_size(const char* op, const Tensor& input, const Pair& extent, const Pair& stride, const Pair& pad) {
  Pair out{};
  for (int d = 0; d < 2; ++d) {
    const int64_t padded = input.size(2 + d) + 2 * pad[size_t(d)];
    MG_CHECK(padded >= extent[size_t(d)], op, ": input ", to_string(input.shape()), " padded by ", pair_str(pad),
             " is ", input.size(2) + 2 * pad[0], " x ", input.size(3) + 2 * pad[1],
             ", smaller than the kernel extent ", pair_str(extent), ": the output would be empty");
    out[size_t(d)] = (padded - extent[size_t(d)]) / stride[size_t(d)] + 1;
  }
  return out;
}

// Runs a 4-d op on an unbatched (C, H, W) input as a batch of one.
template <class Op>
Tensor unbatched(const Tensor& input, const Op& op) {
  return squeeze(op(unsqueeze(input, 0)), 0);
}

// ---- convolution ----

// conv2d's two gradients as recorded ops, for create_graph. Both are bilinear, and with u the
// gradient of their result, <conv2d(x, w), g> = <x, input_grad(g, w)> = <w, weight_grad(g, x)>
// gives their own gradients from conv2d and each other:
//   input_grad(g, w):   dg = conv2d(u, w),  dw = weight_grad(g, u)
//   weight_grad(g, x):  dg = conv2d(x, u),  dx = input_grad(g, u)
Tensor conv2d_input_grad(const Tensor& g, const Tensor& w, const Shape& x_shape, const Conv2dOptions& o);
Tensor conv2d_weight_grad(const Tensor& g, const Tensor& x, const Shape& w_shape, const Conv2dOptions& o);

kernels::Conv2dParams conv_params(const Conv2dOptions& o) { return {o.stride, o.padding, o.dilation, o.groups}; }

Tensor conv2d_input_grad(const Tensor& g, const Tensor& w, const Shape& x_shape, const Conv2dOptions& o) {
  return detail::differentiable("conv2d_input_grad", {&g, &w}, [&] {
    Tensor grad_input = Tensor::empty(x_shape, g.options());
    kernels::conv2d_backward_input(contiguous(g), contiguous(w), grad_input, conv_params(o));
    return grad_input;
  }, [&] {
    return [g, w, o](const Tensor& u, const Tensor&) -> TensorList {
      return {g.requires_grad() ? conv2d(u, w, Tensor(), o) : Tensor(),
              w.requires_grad() ? conv2d_weight_grad(g, u, w.shape(), o) : Tensor()};
    };
  }, Saves::Inputs, true);
}

Tensor conv2d_weight_grad(const Tensor& g, const Tensor& x, const Shape& w_shape, const Conv2dOptions& o) {
  return detail::differentiable("conv2d_weight_grad", {&g, &x}, [&] {
    Tensor grad_weight = Tensor::empty(w_shape, g.options());
    kernels::conv2d_backward_weight(contiguous(g), contiguous(x), grad_weight, conv_params(o));
    return grad_weight;
  }, [&] {
    return [g, x, o](const Tensor& u, const Tensor&) -> TensorList {
      return {g.requires_grad() ? conv2d(x, u, Tensor(), o) : Tensor(),
              x.requires_grad() ? conv2d_input_grad(g, u, x.shape(), o) : Tensor()};
    };
  }, Saves::Inputs, true);
}

Tensor conv2d_4d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  check_floating_4d(input, "conv2d");
  detail::check_defined(weight, "conv2d");
  detail::check_same_device(input, weight, "conv2d");
  MG_CHECK(weight.dtype() == input.dtype(), "conv2d: input and weight dtypes differ (", input.dtype(), " and ",
           weight.dtype(), ")");
  for (int d = 0; d < 2; ++d)
    MG_CHECK(o.stride[size_t(d)] > 0 && o.dilation[size_t(d)] > 0 && o.padding[size_t(d)] >= 0,
             "conv2d: expected stride > 0, dilation > 0 and padding >= 0, got stride ", pair_str(o.stride),
             ", dilation ", pair_str(o.dilation), ", padding ", pair_str(o.padding));
  const int64_t C = input.size(1), groups = o.groups;
  MG_CHECK(groups > 0, "conv2d: expected groups > 0, got ", groups);
  MG_CHECK(C > 0 && C % groups == 0, "conv2d: input channels ", C, " (input ", to_string(input.shape()),
           ") must be a positive multiple of groups ", groups);
  MG_CHECK(weight.dim() == 4 && weight.size(1) == C / groups && weight.size(0) > 0 && weight.size(0) % groups == 0 &&
               weight.size(2) > 0 && weight.size(3) > 0,
           "conv2d: expected weight of shape [O, C/groups, kH, kW] = [O, ", C / groups, ", kH, kW] (O a positive ",
           "multiple of groups) for input ", to_string(input.shape()), " and groups ", groups, ", got ",
           to_string(weight.shape()));
  const int64_t O = weight.size(0);
  if (bias.defined()) {
    detail::check_same_device(input, bias, "conv2d");
    MG_CHECK(bias.dtype() == input.dtype(), "conv2d: input and bias dtypes differ (", input.dtype(), " and ",
             bias.dtype(), ")");
    MG_CHECK(bias.dim() == 1 && bias.size(0) == O, "conv2d: expected bias of shape [", O,
             "] (one per output channel of weight ", to_string(weight.shape()), "), got ", to_string(bias.shape()));
  }
  const Pair extent{o.dilation[0] * (weight.size(2) - 1) + 1, o.dilation[1] * (weight.size(3) - 1) + 1};
  const Pair out_hw = output_size("conv2d", input, extent, o.stride, o.padding);

  const kernels::Conv2dParams p = conv_params(o);
  // The kernels' operands, cut from the tape: this op records itself as one node.
  const Tensor x = contiguous(input.detach());                         // (N, C, H, W)
  const Tensor w = contiguous(weight.detach());                        // (O, C / groups, kH, kW)
  const Tensor b = bias.defined() ? contiguous(bias.detach()) : bias;  // (O) or undefined
  return detail::differentiable(
      "conv2d", {&input, &weight, &bias},
      [&] {
        Tensor out = Tensor::empty({x.size(0), O, out_hw[0], out_hw[1]}, x.options());  // (N, O, oH, oW)
        kernels::conv2d_forward(x, w, b, out, p);
        return out;
      },
      [&] {
        const bool need_x = input.requires_grad(), need_w = weight.requires_grad();
        const bool need_b = bias.defined() && bias.requires_grad();
        // dL/dw may be computed straight into the weight's gradient destination (autograd/tape.h),
        // unless the weight is also the input (conv2d(w, w)): the engine adds the input's
        // gradient to the same leaf after this node returns.
        const Tensor weight_leaf = need_w && !input.is_same(weight) ? weight : Tensor();
        // dL/dx needs w and dL/dw needs x: save only what the needed gradients use.
        return [need_x, need_w, need_b, p, o, weight_leaf, saved_w = need_x ? w : Tensor(),
                saved_x = need_w ? x : Tensor(), x_shape = x.shape(), w_shape = w.shape()](const Tensor& grad,
                                                                                          const Tensor&) {
          TensorList result(3);
          if (is_grad_enabled()) {  // create_graph: recorded gradients, on the live input and weight
            if (need_x) result[0] = conv2d_input_grad(grad, live_input(saved_w, 1), x_shape, o);
            if (need_w) result[1] = conv2d_weight_grad(grad, live_input(saved_x, 0), w_shape, o);
            if (need_b) result[2] = sum(grad, {0, 2, 3});
            return result;
          }
          const Tensor g = contiguous(grad);  // (N, O, oH, oW)
          if (need_x) {
            result[0] = Tensor::empty(x_shape, g.options());
            kernels::conv2d_backward_input(g, saved_w, result[0], p);
          }
          if (need_w) {
            result[1] = weight_leaf.defined() ? grad_destination(weight_leaf) : Tensor();
            if (!result[1].defined()) result[1] = Tensor::empty(w_shape, g.options());
            kernels::conv2d_backward_weight(g, saved_x, result[1], p);
          }
          if (need_b) result[2] = sum(g, {0, 2, 3});
          return result;
        };
      },
      Saves::Inputs, true);
}

// ---- pooling ----

// PyTorch's rules: kernel and stride positive (stride {0, 0} means the kernel size), padding at
// most half the kernel so that every window holds an input element.
kernels::Pool2dParams pool_params(const char* op, const Pool2dOptions& o) {
  const Pair stride = o.stride == Pair{0, 0} ? o.kernel_size : o.stride;
  for (int d = 0; d < 2; ++d) {
    MG_CHECK(o.kernel_size[size_t(d)] > 0 && stride[size_t(d)] > 0, op,
             ": expected kernel_size and stride > 0, got kernel_size ", pair_str(o.kernel_size), " and stride ",
             pair_str(stride));
    MG_CHECK(o.padding[size_t(d)] >= 0 && o.padding[size_t(d)] <= o.kernel_size[size_t(d)] / 2, op,
             ": padding should be at least 0 and at most half of kernel_size, got padding ", pair_str(o.padding),
             " for kernel_size ", pair_str(o.kernel_size));
  }
  return {o.kernel_size, stride, o.padding};
}

// (N, C, oH, oW) for x (N, C, H, W).
Shape pool_output_shape(const char* op, const Tensor& x, const kernels::Pool2dParams& p) {
  const Pair out_hw = output_size(op, x, p.kernel, p.stride, p.padding);
  return {x.size(0), x.size(1), out_hw[0], out_hw[1]};
}

Tensor max_pool2d_4d(const Tensor& input, const Pool2dOptions& options) {
  check_floating_4d(input, "max_pool2d");
  const kernels::Pool2dParams p = pool_params("max_pool2d", options);
  const Tensor x = contiguous(input.detach());  // (N, C, H, W)
  const Shape out_shape = pool_output_shape("max_pool2d", x, p);
  const Tensor indices = Tensor::empty(out_shape, {DType::Int64, x.device()});  // (N, C, oH, oW)
  return detail::differentiable(
      "max_pool2d", {&input},
      [&] {
        Tensor out = Tensor::empty(out_shape, x.options());
        kernels::max_pool2d_forward(x, out, indices, p);
        return out;
      },
      [&] {
        return [indices, p, x_shape = x.shape()](const Tensor& grad, const Tensor&) {
          if (is_grad_enabled()) {  // create_graph: the same sum per plane, as a differentiable scatter_add
            const int64_t planes = x_shape[0] * x_shape[1], plane_in = x_shape[2] * x_shape[3];
            const int64_t plane_out = grad.numel() / std::max<int64_t>(planes, 1);
            const Tensor zero = zeros({planes, plane_in}, grad.options());
            const Tensor grad_input =
                scatter_add(zero, 1, indices.view({planes, plane_out}), reshape(grad, {planes, plane_out}));
            return TensorList{grad_input.view(x_shape)};
          }
          Tensor grad_input = Tensor::empty(x_shape, grad.options());
          kernels::max_pool2d_backward(contiguous(grad), indices, grad_input, p);
          return TensorList{grad_input};
        };
      },
      Saves::None, true);  // the argmax indices only, its own
}

Tensor avg_pool2d_4d(const Tensor& input, const Pool2dOptions& options) {
  check_floating_4d(input, "avg_pool2d");
  const kernels::Pool2dParams p = pool_params("avg_pool2d", options);
  const Tensor x = contiguous(input.detach());  // (N, C, H, W)
  const Shape out_shape = pool_output_shape("avg_pool2d", x, p);
  return detail::differentiable(
      "avg_pool2d", {&input},
      [&] {
        Tensor out = Tensor::empty(out_shape, x.options());
        kernels::avg_pool2d_forward(x, out, p);
        return out;
      },
      [&] {
        return [p, options, x_shape = x.shape()](const Tensor& grad, const Tensor&) {
          const auto pool_backward = [&] {
            Tensor grad_input = Tensor::empty(x_shape, grad.options());
            kernels::avg_pool2d_backward(contiguous(grad), grad_input, p);
            return grad_input;
          };
          if (!is_grad_enabled()) return TensorList{pool_backward()};
          // create_graph: the backward is linear in grad and avg_pool2d is its adjoint, so its
          // own backward.
          return TensorList{detail::differentiable("avg_pool2d_backward", {&grad}, pool_backward, [&] {
            return [options](const Tensor& gg, const Tensor&) { return TensorList{avg_pool2d(gg, options)}; };
          }, Saves::None, true)};
        };
      },
      Saves::None, true);
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  detail::check_defined(input, "conv2d");
  const auto same_op = [&](Precision, const auto&... x) { return conv2d(x..., options); };
  if (auto out = detail::autocast_lower(same_op, input, weight, bias)) return *out;
  if (input.dim() == 3)
    return unbatched(input, [&](const Tensor& x) { return conv2d_4d(x, weight, bias, options); });
  return conv2d_4d(input, weight, bias, options);
}

Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options) {
  detail::check_defined(input, "max_pool2d");
  if (input.dim() == 3) return unbatched(input, [&](const Tensor& x) { return max_pool2d_4d(x, options); });
  return max_pool2d_4d(input, options);
}

Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  detail::check_defined(input, "avg_pool2d");
  if (input.dim() == 3) return unbatched(input, [&](const Tensor& x) { return avg_pool2d_4d(x, options); });
  return avg_pool2d_4d(input, options);
}

}  // namespace mg
