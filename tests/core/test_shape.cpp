// tests/core/test_shape.cpp — shape utilities and the messages of MG_CHECK / mg::Error.
#include "test_util.h"

using mg::Shape;
using mg::test::require_error;

TEST_CASE("numel_of multiplies the sizes and a 0-d shape has one element", "[core][shape]") {
  CHECK(mg::numel_of({}) == 1);
  CHECK(mg::numel_of({7}) == 7);
  CHECK(mg::numel_of({2, 3, 4}) == 24);
  CHECK(mg::numel_of({2, 0, 4}) == 0);
  CHECK(mg::numel_of({int64_t(1) << 62, 0, int64_t(1) << 62}) == 0);  // empty, however large the rest
  CHECK(mg::numel_of({int64_t(1) << 31, int64_t(1) << 31}) == int64_t(1) << 62);
  require_error([] { mg::numel_of({int64_t(1) << 62, 8}); }, {"shape [4611686018427387904, 8]", "int64"});
}

TEST_CASE("a view with more elements than int64 counts is an error, not a wrong sum", "[core][shape]") {
  require_error([] { mg::ones({1}).expand({int64_t(1) << 62, 8}); }, {"[4611686018427387904, 8]", "int64"});
}

TEST_CASE("contiguous_strides are row-major and skip size-0 dims", "[core][shape]") {
  CHECK(mg::contiguous_strides({}) == mg::Strides{});
  CHECK(mg::contiguous_strides({5}) == mg::Strides{1});
  CHECK(mg::contiguous_strides({2, 3, 4}) == mg::Strides{12, 4, 1});
  CHECK(mg::contiguous_strides({2, 1, 3}) == mg::Strides{3, 3, 1});
  CHECK(mg::contiguous_strides({2, 0, 3}) == mg::Strides{3, 3, 1});
}

TEST_CASE("wrap_dim maps negative dims from the end", "[core][shape]") {
  CHECK(mg::wrap_dim(0, 3, "sum") == 0);
  CHECK(mg::wrap_dim(2, 3, "sum") == 2);
  CHECK(mg::wrap_dim(-1, 3, "sum") == 2);
  CHECK(mg::wrap_dim(-3, 3, "sum") == 0);
}

TEST_CASE("wrap_dim errors name the op, the dim and the number of dims", "[core][shape]") {
  require_error([] { mg::wrap_dim(3, 2, "sum"); }, {"sum: dim 3 is out of range for a tensor of 2 dims"});
  require_error([] { mg::wrap_dim(-3, 2, "softmax"); }, {"softmax: dim -3", "2 dims", "-2 to 1"});
  require_error([] { mg::wrap_dim(1, 1, "mean"); }, {"mean: dim 1", "tensor of 1 dim "});
  require_error([] { mg::wrap_dim(0, 0, "max"); }, {"max: dim 0", "0 dims"});
}

TEST_CASE("broadcast_shapes follows NumPy rules", "[core][shape]") {
  CHECK(mg::broadcast_shapes({2, 3}, {2, 3}, "add") == Shape{2, 3});
  CHECK(mg::broadcast_shapes({2, 3}, {3}, "add") == Shape{2, 3});
  CHECK(mg::broadcast_shapes({4, 1, 3}, {5, 1}, "add") == Shape{4, 5, 3});
  CHECK(mg::broadcast_shapes({}, {2, 2}, "add") == Shape{2, 2});
  CHECK(mg::broadcast_shapes({1}, {}, "add") == Shape{1});
  CHECK(mg::broadcast_shapes({0, 1}, {1, 5}, "add") == Shape{0, 5});
  CHECK(mg::broadcast_shapes({1, 0}, {3, 1}, "add") == Shape{3, 0});
}

TEST_CASE("broadcast_shapes errors name the op and both shapes", "[core][shape]") {
  require_error([] { mg::broadcast_shapes({2, 3}, {4}, "add"); },
                {"add: shapes [2, 3] and [4] cannot be broadcast"});
  require_error([] { mg::broadcast_shapes({2, 0}, {2, 3}, "where"); }, {"where:", "[2, 0]", "[2, 3]"});
}

TEST_CASE("shapes print in brackets, comma-separated", "[core][shape]") {
  CHECK(mg::to_string({2, 3}) == "[2, 3]");
  CHECK(mg::to_string({}) == "[]");
  CHECK(mg::to_string({-1}) == "[-1]");
  CHECK(mg::detail::str_cat("shape ", Shape{4, 5, 6}, ", dim ", 2) == "shape [4, 5, 6], dim 2");
}

TEST_CASE("MG_CHECK throws mg::Error carrying the values and passing checks do nothing", "[core][error]") {
  Shape a{2, 3}, b{2, 3};
  MG_CHECK(a == b, "never shown");
  auto fail = [&] { MG_CHECK(a != b, "matmul: shapes cannot be multiplied (", a, " and ", b, ")"); };
  require_error(fail, {"matmul: shapes cannot be multiplied ([2, 3] and [2, 3])"});
  try {
    fail();
  } catch (const std::runtime_error& e) {  // mg::Error is a std::runtime_error
    CHECK(std::string(e.what()).rfind("matmul:", 0) == 0);  // the message leads, no prefix
  }
  require_error([] { MG_ERROR("io: bad file '", "x.bin", "' at byte ", 17); }, {"io: bad file 'x.bin' at byte 17"});
}
