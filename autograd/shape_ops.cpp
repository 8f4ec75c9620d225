// autograd/shape_ops.cpp — views: reshape, view, transpose, permute, slice, expand, squeeze,
// unsqueeze, flatten. Each makes a new TensorImpl over the input's Storage (Tensor::as_strided),
// so writes through one are seen through the other; only reshape may copy, and only when no
// strides can describe the new shape over the old layout. Also split and chunk (nn_ops.h),
// which are slices.
//
// Derivatives: the backward of a view is the inverse view of the gradient (reshape back,
// transpose again, inverse permutation, squeeze <-> unsqueeze); expand sums over the expanded
// dims and slice writes the gradient into zeros.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "multigrad/autograd/derivatives.h"
#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/nn_ops.h"
#include "multigrad/autograd/op_common.h"
#include "multigrad/autograd/ops.h"

namespace mg {

namespace detail {

// PyTorch's computeStride (ATen/TensorUtils.cpp). Walks the old dims from the innermost out,
// grouping them into "chunks" that are contiguous with one another (stride[d] == size[d+1] *
// stride[d+1]); each chunk can be re-split into any new dims whose sizes multiply to the
// chunk's element count, with strides derived from the chunk's innermost stride. A new dim
// that would straddle two chunks makes the view impossible.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides,
                                    const Shape& new_shape) {
  if (old_shape.empty()) return Strides(new_shape.size(), 1);
  const int64_t numel = numel_of(old_shape);
  if (numel == 0) {
    if (old_shape == new_shape) return old_strides;
    // Nothing is addressed: any strides do; take the contiguous ones (size 0 counted as 1).
    Strides strides(new_shape.size());
    int64_t running = 1;
    for (int64_t d = int64_t(new_shape.size()) - 1; d >= 0; --d) {
      strides[d] = running;
      running *= std::max<int64_t>(new_shape[d], 1);
    }
    return strides;
  }

  Strides new_strides(new_shape.size());
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = int64_t(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    bool chunk_ends = tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                                        old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const size_t lead = shape.size() - t.shape().size();
  Strides strides(shape.size(), 0);
  for (size_t d = 0; d < t.shape().size(); ++d)
    if (t.shape()[d] == shape[lead + d]) strides[lead + d] = t.strides()[d];
  return t.as_strided(shape, strides, t.offset());
}

Tensor permute_unchecked(const Tensor& t, const std::vector<int64_t>& perm) {
  Shape shape(perm.size());
  Strides strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    shape[i] = t.shape()[perm[i]];
    strides[i] = t.strides()[perm[i]];
  }
  return t.as_strided(shape, strides, t.offset());
}

}  // namespace detail

namespace {

// The shape `requested` with its one -1 filled in; throws unless it holds x.numel() elements.
Shape infer_shape(const Tensor& x, const Shape& requested, const char* op) {
  int64_t known = 1;
  int64_t infer_at = -1;
  for (size_t d = 0; d < requested.size(); ++d) {
    if (requested[d] == -1) {
      MG_CHECK(infer_at < 0, op, ": only one dim can be -1, got shape ", requested);
      infer_at = int64_t(d);
    } else {
      MG_CHECK(requested[d] >= 0, op, ": invalid size ", requested[d], " in shape ", requested);
      known *= requested[d];
    }
  }
  const int64_t numel = x.numel();
  if (infer_at < 0) {
    MG_CHECK(known == numel, op, ": cannot reshape tensor of shape ", x.shape(), " (", numel,
             " elements) into shape ", requested, " (", known, " elements)");
    return requested;
  }
  MG_CHECK(known != 0 && numel % known == 0, op, ": cannot reshape tensor of shape ", x.shape(), " (", numel,
           " elements) into shape ", requested);
  Shape shape = requested;
  shape[infer_at] = numel / known;
  return shape;
}

// A shape op whose backward is backward(g, x) -> gx. Nothing is recorded when the op returns
// its input unchanged (a no-op transpose or squeeze).
// Every view's backward is made of differentiable ops (slice's, when recorded): twice differentiable.
template <class Forward, class Backward>
Tensor view_differentiable(const char* name, const Tensor& x, Forward forward, Backward backward) {
  // A view's gradient depends on x's shape, not its values.
  return detail::differentiable(name, {&x}, forward, [&] {
    return [x = shell_of(x), backward](const Tensor& g, const Tensor&) -> TensorList { return {backward(g, x)}; };
  }, Saves::None, true);
}

Tensor reshape_back(const Tensor& g, const Tensor& x) { return reshape(g, x.shape()); }

// Python slicing's first index: a negative start counts from the end, then clamps into [0, size].
int64_t slice_start(int64_t start, int64_t size) { return std::clamp<int64_t>(start < 0 ? start + size : start, 0, size); }

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  auto forward = [&] {
    detail::check_defined(x, "reshape");
    Shape target = infer_shape(x, shape, "reshape");
    if (auto strides = detail::view_strides(x.shape(), x.strides(), target))
      return x.as_strided(target, *strides, x.offset());
    Tensor copy = contiguous(x);
    return copy.as_strided(target, contiguous_strides(target), copy.offset());
  };
  return view_differentiable("reshape", x, forward, reshape_back);
}

Tensor view(const Tensor& x, const Shape& shape) {
  auto forward = [&] {
    detail::check_defined(x, "view");
    Shape target = infer_shape(x, shape, "view");
    auto strides = detail::view_strides(x.shape(), x.strides(), target);
    MG_CHECK(strides.has_value(), "view: shape ", target, " is not compatible with the input's size ",
             x.shape(), " and strides ", x.strides(), "; use reshape");
    return x.as_strided(target, *strides, x.offset());
  };
  return view_differentiable("view", x, forward, reshape_back);
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  auto forward = [&] {
    detail::check_defined(x, "transpose");
    d0 = wrap_dim(d0, x.dim(), "transpose");
    d1 = wrap_dim(d1, x.dim(), "transpose");
    if (d0 == d1) return x;
    Shape shape = x.shape();
    Strides strides = x.strides();
    std::swap(shape[d0], shape[d1]);
    std::swap(strides[d0], strides[d1]);
    return x.as_strided(shape, strides, x.offset());
  };
  return view_differentiable("transpose", x, forward,
                             [d0, d1](const Tensor& g, const Tensor&) { return transpose(g, d0, d1); });
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  detail::check_defined(x, "permute");
  const int64_t ndim = x.dim();
  MG_CHECK(int64_t(dims.size()) == ndim, "permute: expected ", ndim, " dims for shape ", x.shape(), ", got ",
           dims);
  std::vector<int64_t> perm(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    perm[i] = wrap_dim(dims[i], ndim, "permute");
    MG_CHECK(!seen[perm[i]], "permute: dim ", perm[i], " appears more than once in ", dims);
    seen[perm[i]] = true;
  }
  return view_differentiable("permute", x, [&] { return detail::permute_unchecked(x, perm); },
                             [perm](const Tensor& g, const Tensor&) {
                               std::vector<int64_t> inverse(perm.size());
                               for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = int64_t(i);
                               return detail::permute_unchecked(g, inverse);
                             });
}

// The gradient is zero outside the slice: a zero tensor of x's shape with g written into the
// same slice of it.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  auto forward = [&] {
    detail::check_defined(x, "slice");
    MG_CHECK(step > 0, "slice: step must be positive, got ", step);
    const int64_t d = wrap_dim(dim, x.dim(), "slice");
    const int64_t size = x.shape()[d];
    int64_t first = slice_start(start, size);
    int64_t last = end < 0 ? end + size : end;
    last = std::clamp<int64_t>(last, first, size);
    Shape shape = x.shape();
    Strides strides = x.strides();
    shape[d] = (last - first + step - 1) / step;
    strides[d] *= step;
    // An empty slice keeps the input's offset: first * stride may lie past the storage's end.
    const int64_t offset = shape[d] > 0 ? x.offset() + first * x.strides()[d] : x.offset();
    return x.as_strided(shape, strides, offset);
  };
  return view_differentiable("slice", x, forward, [dim, start, end, step](const Tensor& g, const Tensor& x) {
    Tensor grad = zeros(x.shape(), {.dtype = g.dtype(), .device = g.device()});
    if (g.requires_grad()) {  // create_graph: g added at its positions by a differentiable op
      const int64_t d = wrap_dim(dim, x.dim(), "slice");
      const int64_t first = slice_start(start, x.shape()[d]);
      const Tensor positions = add(mul(arange(g.shape()[d], {.dtype = DType::Int64, .device = g.device()}),
                                       double(step)), double(first));
      if (g.dtype() == DType::Float32 || g.dtype() == DType::Float64)
        return detail::index_add_unchecked(grad, d, positions, g);
      // bf16 and fp16 through Float32, which the index kernels take.
      return to(detail::index_add_unchecked(to(grad, DType::Float32), d, positions, to(g, DType::Float32)), g.dtype());
    }
    copy_(slice(grad, dim, start, end, step), g);
    return grad;
  });
}

Tensor expand(const Tensor& x, const Shape& shape) {
  auto forward = [&] {
    detail::check_defined(x, "expand");
    const size_t ndim = x.shape().size();
    MG_CHECK(shape.size() >= ndim, "expand: the target shape ", shape, " has fewer dims than the tensor's ",
             x.shape());
    const size_t lead = shape.size() - ndim;
    Shape sizes(shape.size());
    Strides strides(shape.size(), 0);
    for (size_t d = 0; d < lead; ++d) {
      MG_CHECK(shape[d] >= 0, "expand: size ", shape[d], " is not allowed in the new leading dim ", d,
               " (target ", shape, ")");
      sizes[d] = shape[d];
    }
    for (size_t d = 0; d < ndim; ++d) {
      const int64_t have = x.shape()[d];
      const int64_t want = shape[lead + d] == -1 ? have : shape[lead + d];
      sizes[lead + d] = want;
      if (want == have) {
        strides[lead + d] = x.strides()[d];
        continue;
      }
      MG_CHECK(have == 1 && want >= 0, "expand: the expanded size ", want, " must match the existing size ",
               have, " at non-singleton dim ", lead + d, " (target ", shape, ", tensor ", x.shape(), ")");
    }
    return x.as_strided(sizes, strides, x.offset());
  };
  return view_differentiable("expand", x, forward,
                             [](const Tensor& g, const Tensor& x) { return detail::sum_to(g, x.shape()); });
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  detail::check_defined(x, "squeeze");
  if (x.dim() == 0) {
    wrap_dim(dim, 1, "squeeze");  // a 0-d tensor accepts dim 0 and -1, as in PyTorch
    return x;
  }
  const int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.shape()[d] != 1) return x;
  auto forward = [&] {
    Shape shape = x.shape();
    Strides strides = x.strides();
    shape.erase(shape.begin() + d);
    strides.erase(strides.begin() + d);
    return x.as_strided(shape, strides, x.offset());
  };
  return view_differentiable("squeeze", x, forward, [d](const Tensor& g, const Tensor&) { return unsqueeze(g, d); });
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  detail::check_defined(x, "unsqueeze");
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  auto forward = [&] {
    Shape shape = x.shape();
    Strides strides = x.strides();
    // The new dim's stride only needs to be consistent with contiguity checks: size * stride of
    // the dim it lands before, or 1 at the end.
    const int64_t stride = d < x.dim() ? shape[d] * strides[d] : 1;
    shape.insert(shape.begin() + d, 1);
    strides.insert(strides.begin() + d, stride);
    return x.as_strided(shape, strides, x.offset());
  };
  return view_differentiable("unsqueeze", x, forward, [d](const Tensor& g, const Tensor&) { return squeeze(g, d); });
}

// A reshape: differentiable through it.
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  detail::check_defined(x, "flatten");
  if (x.dim() == 0) return reshape(x, {1});
  const int64_t start = wrap_dim(start_dim, x.dim(), "flatten");
  const int64_t end = wrap_dim(end_dim, x.dim(), "flatten");
  MG_CHECK(start <= end, "flatten: start_dim ", start, " comes after end_dim ", end, " (shape ", x.shape(),
           ")");
  if (start == end) return x;
  const Shape& old = x.shape();
  Shape shape(old.begin(), old.begin() + start);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= old[d];
  shape.push_back(merged);
  shape.insert(shape.end(), old.begin() + end + 1, old.end());
  return reshape(x, shape);
}

// torch.split / torch.chunk: views made by slice, so each piece is differentiable through it.
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  detail::check_defined(x, "split");
  MG_CHECK(x.dim() > 0, "split: expected a tensor with at least one dim, got a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t size = x.shape()[d];
  MG_CHECK(split_size > 0 || (split_size == 0 && size == 0), "split: split_size must be positive, got ",
           split_size, " for dim ", d, " of size ", size);
  if (size == 0) return {x};
  std::vector<Tensor> pieces;
  for (int64_t at = 0; at < size; at += split_size) pieces.push_back(slice(x, d, at, at + split_size));
  return pieces;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  detail::check_defined(x, "split");
  MG_CHECK(x.dim() > 0, "split: expected a tensor with at least one dim, got a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    MG_CHECK(s >= 0, "split: sizes must be >= 0, got ", s);
    total += s;
  }
  MG_CHECK(total == x.shape()[d], "split: sizes add up to ", total, " but dim ", d, " of ", x.shape(), " has ",
           x.shape()[d]);
  std::vector<Tensor> pieces;
  int64_t at = 0;
  for (int64_t s : sizes) {
    pieces.push_back(slice(x, d, at, at + s));
    at += s;
  }
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  detail::check_defined(x, "chunk");
  MG_CHECK(chunks > 0, "chunk: expected a positive number of chunks, got ", chunks);
  MG_CHECK(x.dim() > 0, "chunk: expected a tensor with at least one dim, got a 0-d tensor");
  const int64_t size = x.shape()[wrap_dim(dim, x.dim(), "chunk")];
  return split(x, (size + chunks - 1) / chunks, dim);
}

}  // namespace mg
