// tests/core/test_tensor.cpp — the storage-level Tensor members: empty, sizes and strides,
// contiguity, typed data access, strided views and printing.
#include "test_util.h"
#include "cpu_devices_guard.h"

using mg::Device;
using mg::DType;
using mg::Shape;
using mg::Strides;
using mg::Tensor;
using mg::test::CpuDevicesGuard;
using mg::test::require_error;

TEST_CASE("Tensor::empty makes a contiguous tensor of the asked shape, dtype and device", "[core][tensor]") {
  CpuDevicesGuard guard(2);
  Tensor t = Tensor::empty({2, 3, 4}, {.dtype = DType::Float64, .device = "cpu:1"});
  CHECK(t.defined());
  CHECK(t.dim() == 3);
  CHECK(t.shape() == Shape{2, 3, 4});
  CHECK(t.strides() == Strides{12, 4, 1});
  CHECK(t.offset() == 0);
  CHECK(t.numel() == 24);
  CHECK(t.dtype() == DType::Float64);
  CHECK(t.element_size() == 8);
  CHECK(t.device() == Device("cpu:1"));
  CHECK(t.storage()->nbytes() == 24 * 8);
  CHECK(t.is_contiguous());
  CHECK_FALSE(t.requires_grad());
  CHECK(Tensor::empty({2}, {.requires_grad = true}).requires_grad());
}

TEST_CASE("Tensor::empty counts its bytes on its device", "[core][tensor]") {
  Device cpu("cpu:0");
  int64_t before = mg::memory_stats(cpu).allocated;
  {
    Tensor t = Tensor::empty({16, 16}, {.dtype = DType::Int64});  // 2048 bytes: a whole block
    CHECK(mg::memory_stats(cpu).allocated == before + 2048);
    Tensor alias = t;  // copies the handle, not the memory
    CHECK(alias.is_same(t));
    CHECK(mg::memory_stats(cpu).allocated == before + 2048);
  }
  CHECK(mg::memory_stats(cpu).allocated == before);
}

TEST_CASE("Tensor::empty handles 0-d and empty shapes", "[core][tensor]") {
  Tensor scalar = Tensor::empty({});
  CHECK(scalar.dim() == 0);
  CHECK(scalar.numel() == 1);
  CHECK(scalar.storage()->nbytes() == 4);
  Tensor none = Tensor::empty({3, 0}, {.dtype = DType::Bool});
  CHECK(none.numel() == 0);
  CHECK(none.storage()->nbytes() == 0);
  CHECK(none.is_contiguous());
}

TEST_CASE("Tensor::empty rejects negative sizes and missing devices", "[core][tensor]") {
  require_error([] { Tensor::empty({2, -1}); }, {"empty: negative size in shape [2, -1]"});
  CpuDevicesGuard guard(2);
  require_error([] { Tensor::empty({2}, {.device = "cpu:5"}); }, {"cpu:5: no such device"});
  require_error([] { Tensor::empty({2}, {.device = mg::Device(mg::DeviceType::CUDA, 7 + mg::device_count(mg::DeviceType::CUDA))}); },
                {"no such device"});
  require_error([] { Tensor::empty({int64_t(1) << 40, int64_t(1) << 40}); }, {"empty: shape", "Float32", "size_t"});
}

TEST_CASE("size and stride accept negative dims and name bad ones", "[core][tensor]") {
  Tensor t = Tensor::empty({2, 3, 4});
  CHECK(t.size(0) == 2);
  CHECK(t.size(-1) == 4);
  CHECK(t.stride(-3) == 12);
  CHECK(t.stride(1) == 4);
  require_error([&] { t.size(3); }, {"size: dim 3", "3 dims"});
  require_error([&] { t.stride(-4); }, {"stride: dim -4"});
}

TEST_CASE("data<T> checks the dtype and data_ptr includes the offset", "[core][tensor]") {
  Tensor t = Tensor::empty({4}, {.dtype = DType::Float32});
  float* p = t.data<float>();
  CHECK(static_cast<void*>(p) == t.storage()->data());
  require_error([&] { t.data<double>(); }, {"data<T>: tensor has dtype Float32, asked for Float64"});
  require_error([&] { t.data<int64_t>(); }, {"Float32", "Int64"});
  Tensor tail = t.as_strided({2}, {1}, 2);
  CHECK(tail.data<float>() == p + 2);
  CHECK(tail.data_ptr() == static_cast<char*>(t.data_ptr()) + 8);
}

TEST_CASE("as_strided views share storage with their base", "[core][tensor]") {
  Tensor base = Tensor::empty({2, 3}, {.dtype = DType::Int64});
  int64_t* b = base.data<int64_t>();
  for (int i = 0; i < 6; ++i) b[i] = i;  // [[0, 1, 2], [3, 4, 5]]
  Tensor transposed = base.as_strided({3, 2}, {1, 3}, 0);
  CHECK(transposed.storage() == base.storage());
  CHECK(transposed.shape() == Shape{3, 2});
  CHECK_FALSE(transposed.is_same(base));
  // transposed[2][1] is base[1][2]
  int64_t* tp = transposed.data<int64_t>();
  CHECK(tp[2 * transposed.stride(0) + 1 * transposed.stride(1)] == 5);
  tp[1 * transposed.stride(0) + 0 * transposed.stride(1)] = 42;  // writes base[0][1]
  CHECK(b[1] == 42);
}

TEST_CASE("is_contiguous: row-major order, size-1 strides ignored", "[core][tensor]") {
  Tensor base = Tensor::empty({24});
  CHECK(base.as_strided({2, 3, 4}, {12, 4, 1}, 0).is_contiguous());
  CHECK(base.as_strided({3, 2}, {1, 3}, 0).is_contiguous() == false);  // a transpose
  CHECK(base.as_strided({2, 2}, {4, 1}, 0).is_contiguous() == false);  // rows with gaps
  CHECK(base.as_strided({2, 1, 3}, {3, 99, 1}, 0).is_contiguous());    // size-1 stride is free
  CHECK(base.as_strided({1, 1}, {7, 5}, 0).is_contiguous());
  CHECK(base.as_strided({4}, {2}, 0).is_contiguous() == false);
  CHECK(base.as_strided({3}, {0}, 0).is_contiguous() == false);  // an expanded view
  CHECK(base.as_strided({0, 3}, {5, 7}, 0).is_contiguous());     // empty: nothing to step over
  CHECK(base.as_strided({}, {}, 23).is_contiguous());
}

TEST_CASE("as_strided rejects views that leave the storage", "[core][tensor]") {
  Tensor base = Tensor::empty({2, 3});  // 6 elements
  base.as_strided({2, 3}, {3, 1}, 0);
  base.as_strided({3}, {2}, 1);          // elements 1, 3, 5
  base.as_strided({0}, {1}, 6);          // empty, at the end
  require_error([&] { base.as_strided({3}, {2}, 2); },
                {"as_strided: shape [3], strides [2] and offset 2 reach element 6 of a storage of 6 elements"});
  require_error([&] { base.as_strided({2, 4}, {4, 1}, 0); }, {"[2, 4]", "reach element 7"});
  require_error([&] { base.as_strided({0}, {1}, 7); }, {"offset 7"});
  require_error([&] { base.as_strided({2}, {1}, -1); }, {"negative offset -1"});
  require_error([&] { base.as_strided({2}, {-1}, 1); }, {"negative strides are not supported", "[-1]"});
  require_error([&] { base.as_strided({2, 2}, {1}, 0); }, {"[2, 2]", "[1]", "differ in length"});
  require_error([&] { base.as_strided({-2}, {1}, 0); }, {"negative size"});
}

TEST_CASE("str describes shape, dtype and device", "[core][tensor]") {
  CHECK(Tensor::empty({2, 3}).str() == "Tensor(shape=[2, 3], dtype=Float32, device=cpu:0)");
  CHECK(Tensor::empty({}, {.dtype = DType::BFloat16}).str() == "Tensor(shape=[], dtype=BFloat16, device=cpu:0)");
  CHECK(Tensor().str() == "Tensor(undefined)");
}

TEST_CASE("an undefined tensor throws instead of crashing", "[core][tensor]") {
  Tensor t;
  CHECK_FALSE(t.defined());
  require_error([&] { t.shape(); }, {"undefined"});
  require_error([&] { t.dim(); }, {"undefined"});
  require_error([&] { t.data_ptr(); }, {"undefined"});
  require_error([&] { t.is_contiguous(); }, {"undefined"});
}
