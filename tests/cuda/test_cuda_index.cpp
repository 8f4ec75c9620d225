// CUDA against the CPU for kernels/index.h through the functional API: index_select, index_add,
// gather, scatter_add, cumsum, sort and topk, forward and backward, bit for bit (both devices
// add in the same order and sort to the same total order); bad indices name their position.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "cuda/cuda_test_util.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("cuda: index_select and index_add match the CPU bit for bit, repeated indices included", "[cuda]") {
  // n = 1, at and above a power of two (the sort's padding), and one row taking every index.
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t n : {1, 64, 1025, 300}) {
      for (int64_t dim : {0, 1, 2}) {
        INFO(dtype << ", n = " << n << ", dim " << dim);
        const Shape shape{3, 20, 5};
        Shape source_shape = shape;
        source_shape[size_t(dim)] = n;
        std::vector<int64_t> idx = indices_below(n, shape[size_t(dim)], 40 + uint64_t(n));
        if (n == 300) std::fill(idx.begin(), idx.end(), 1);
        Tensor x = cpu_input(shape, dtype, 41), source = cpu_input(source_shape, dtype, 42);
        x.requires_grad_();
        source.requires_grad_();
        const Tensor index = int64s(idx, {n});
        check_forward_backward([&](const TensorList& in) { return index_select(in[0], dim, in[1]); }, {x, index}, 0, 0);
        check_forward_backward([&](const TensorList& in) { return index_add(in[0], dim, in[1], in[2]); },
                               {x, index, source}, 0, 0);
      }
    }
  }
  check_exact([](const TensorList& in) { return index_add(in[0], 0, in[1], in[0] * 3.0); },
              {int64s({1, 2, 3}, {3}), int64s({2, 2, 0}, {3})});
}

TEST_CASE("cuda: gather and scatter_add match the CPU bit for bit along every dim", "[cuda]") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t dim : {0, 1, 2}) {
      INFO(dtype << ", dim " << dim);
      const Shape shape{4, 9, 6};
      Shape index_shape = shape;
      index_shape[size_t(dim)] = 33;  // many repeats per destination
      int64_t count = 1;
      for (int64_t s : index_shape) count *= s;
      const Tensor index = int64s(indices_below(count, shape[size_t(dim)], 50 + uint64_t(dim)), index_shape);
      Tensor x = cpu_input(shape, dtype, 51), source = cpu_input(index_shape, dtype, 52);
      x.requires_grad_();
      source.requires_grad_();
      check_forward_backward([&](const TensorList& in) { return gather(in[0], dim, in[1]); }, {x, index}, 0, 0);
      check_forward_backward([&](const TensorList& in) { return scatter_add(in[0], dim, in[1], in[2]); },
                             {x, index, source}, 0, 0);
      // An index smaller than the input outside dim, a source larger than the index.
      Shape part_shape = index_shape;
      for (size_t k = 0; k < 3; ++k) part_shape[k] -= k == size_t(dim) ? 0 : 1;
      const Tensor part = int64s(indices_below(numel_of(part_shape), shape[size_t(dim)], 53), part_shape);
      check_forward_backward([&](const TensorList& in) { return gather(in[0], dim, in[1]); }, {x, part}, 0, 0);
      check_forward_backward([&](const TensorList& in) { return scatter_add(in[0], dim, in[1], in[2]); },
                             {x, part, source}, 0, 0);
    }
  }
}

TEST_CASE("cuda: cumsum matches the CPU bit for bit, forward and backward", "[cuda]") {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t dim : {0, 1, 2}) {
      INFO(dtype << ", dim " << dim);
      Tensor x = cpu_input({5, 300, 7}, dtype, 60);
      x.requires_grad_();
      check_forward_backward([&](const TensorList& in) { return cumsum(in[0], dim); }, {x}, 0, 0);
    }
  }
  check_exact([](const TensorList& in) { return cumsum(in[0], 0); }, {int64s({3, -1, 4, 1, -5}, {5})});
}

TEST_CASE("cuda: sort, argsort and topk match the CPU: ties by position, NaN above every number", "[cuda]") {
  // Row lengths below, at and above a power of two; values rounded so that ties are common.
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (int64_t len : {1, 7, 64, 100}) {
      for (bool descending : {false, true}) {
        INFO(dtype << ", length " << len << (descending ? ", descending" : ", ascending"));
        std::vector<double> v = pseudo_random(size_t(3 * len * 4), 70 + uint64_t(len));
        for (double& e : v) e = std::round(e * 4.0);
        Tensor x = tensor(v, {3, len, 4}, {.dtype = dtype, .requires_grad = true});
        check_forward_backward([&](const TensorList& in) { return sort(in[0], 1, descending).values; }, {x}, 0, 0);
        check_exact([&](const TensorList& in) { return argsort(in[0], 1, descending); }, {x.detach()});
        const int64_t k = (len + 1) / 2;
        check_forward_backward([&](const TensorList& in) { return topk(in[0], k, 1, !descending).values; }, {x}, 0,
                               0);
        check_exact([&](const TensorList& in) { return topk(in[0], k, 1, !descending).indices; }, {x.detach()});
      }
    }
  }
  const double nan = std::nan("");
  const Tensor with_nan = tensor({2.0, nan, -0.0, 0.0, nan, -3.0}, {6}, {.dtype = DType::Float64});
  for (bool descending : {false, true})
    check_exact([&](const TensorList& in) { return argsort(in[0], 0, descending); }, {with_nan});
  check_exact([](const TensorList& in) { return sort(in[0], 0).values; }, {int64s({5, -2, 5, 0}, {4})});
}

TEST_CASE("cuda: index ops name the first bad index and its position", "[cuda]") {
  std::vector<int64_t> idx = indices_below(5000, 7, 80);
  idx[4000] = 7;
  idx[4500] = -1;
  const Tensor x = zeros({2, 7}, {.device = gpu()});
  const Tensor index = int64s(idx, {5000}, gpu());
  require_error([&] { index_select(x, 1, index); }, {"index_select", "index 7", "position 4000", "[0, 7)"});
  require_error([&] { index_add(x, 1, index, zeros({2, 5000}, {.device = gpu()})); },
                {"index_add", "index 7", "position 4000", "[0, 7)"});
  const Tensor index2d = int64s(std::vector<int64_t>(idx.begin(), idx.begin() + 4), {2, 2}, gpu());
  const Tensor bad2d = int64s({0, 1, 9, 2}, {2, 2}, gpu());
  CHECK(gather(x, 1, index2d).device() == gpu());
  require_error([&] { gather(x, 1, bad2d); }, {"gather", "index 9", "position 2", "[0, 7)"});
  require_error([&] { scatter_add(x, 1, bad2d, zeros({2, 2}, {.device = gpu()})); },
                {"scatter_add", "index 9", "position 2"});
  CHECK(values(x.to(Device("cpu"))) == std::vector<double>(14, 0.0));  // the input is untouched
  // Nothing to copy (a size-0 dim before the indexed one), yet the indices are checked, as on the CPU.
  require_error([&] { index_select(zeros({0, 7}, {.device = gpu()}), 1, int64s({1, 8}, {2}, gpu())); },
                {"index_select", "index 8", "position 1"});
}

TEST_CASE("cuda: nonzero matches the CPU", "[cuda]") {
  std::vector<double> v = pseudo_random(3 * 50 * 7, 90);
  for (double& e : v) e = e > 0.3 ? e : 0.0;
  check_exact([](const TensorList& in) { return nonzero(in[0]); }, {tensor(v, {3, 50, 7})});
  check_exact([](const TensorList& in) { return nonzero(in[0]); }, {zeros({5})});
}
