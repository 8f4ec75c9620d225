// tests/data/test_text.cpp — read_text (files, folders, fortune separators, errors), the byte
// tokenizer, and TokenWindows (inputs and next tokens, strides, batches, a DataLoader over them).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "multigrad/data/data.h"
#include "io/io_test_util.h"
#include "test_util.h"

using namespace mg;
using mg::test::require_error;

namespace {

namespace fs = std::filesystem;
using mg::test::TempDir;

void write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.file(name)) << text;
}

std::vector<int64_t> as_ids(const Tensor& t) { return t.to_vector<int64_t>(); }

}  // namespace

TEST_CASE("read_text: a folder's files in name order, without links, .dat or checkpoints, separators as blank lines",
          "[data]") {
  TempDir dir;
  write(dir, "b", "second\n%\nthird\n");
  write(dir, "a", "first\n");
  write(dir, "b.dat", "\x01\x02index");
  write(dir, "epoch-1.safetensors", "\x08\0\0\0\0\0\0\0{}      ");
  write(dir, "epoch-2.safetensors.tmp.4242", "half a checkpoint");
  fs::create_symlink(dir.file("a"), dir.file("a.u8"));
  CHECK(data::read_text(dir.path()) == "first\nsecond\n\nthird\n");
  CHECK(data::read_text(dir.file("b")) == "second\n\nthird\n");
}

TEST_CASE("read_text: a missing path, a device or a folder without text is an error naming it", "[data]") {
  TempDir dir;
  require_error([&] { data::read_text(dir.file("none")); }, {"none", "does not exist", "fortunes"});
  require_error([&] { data::read_text(dir.path()); }, {"no text in", dir.path()});
  require_error([&] { data::read_text("/dev/zero"); }, {"/dev/zero", "not a regular file"});
}

TEST_CASE("read_text: the fortunes corpus that install-deps installs", "[data]") {
  const std::string text = data::read_text(data::kFortunesRoot);
  CHECK(text.size() > 2'000'000);
  CHECK(text.find("\n%\n") == std::string::npos);
}

TEST_CASE("ByteTokenizer: bytes in, bytes out, and ids that are not bytes are errors", "[data]") {
  data::ByteTokenizer tok;
  const std::string text = "Caf\xc3\xa9 %\n";
  const std::vector<int64_t> ids = tok.encode(text);
  CHECK(ids == std::vector<int64_t>{67, 97, 102, 195, 169, 32, 37, 10});
  CHECK(tok.decode(ids) == text);
  require_error([&] { tok.decode({65, 256}); }, {"id 256", "0 to 255"});
  require_error([&] { tok.decode({-1}); }, {"id -1"});
}

TEST_CASE("TokenWindows: inputs and their next tokens, every start or every T-th", "[data]") {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 10; ++i) tokens.push_back(100 + i);
  data::TokenWindows every(tokens, 4);
  REQUIRE(every.size() == 6);  // starts 0..5: the last window's target ends at token 9
  data::Example e = every.get(5);
  CHECK(as_ids(e.input) == std::vector<int64_t>{105, 106, 107, 108});
  CHECK(as_ids(e.target) == std::vector<int64_t>{106, 107, 108, 109});
  data::TokenWindows disjoint(tokens, 4, 4);
  REQUIRE(disjoint.size() == 2);  // starts 0 and 4
  data::Example batch = disjoint.get_batch({1, 0});
  CHECK(batch.input.shape() == Shape{2, 4});
  CHECK(as_ids(batch.input) == std::vector<int64_t>{104, 105, 106, 107, 100, 101, 102, 103});
  CHECK(as_ids(batch.target) == std::vector<int64_t>{105, 106, 107, 108, 101, 102, 103, 104});
  require_error([&] { every.get(6); }, {"index 6", "size 6"});
  require_error([&] { data::TokenWindows(tokens, 10); }, {"10 tokens", "no window of 10"});
  require_error([&] { data::TokenWindows(tokens, 4, 0); }, {"stride 0"});
}

TEST_CASE("TokenWindows through a shuffled DataLoader: (B, T) Int64 batches, the same for any worker count",
          "[data]") {
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 50; ++i) tokens.push_back(i);
  auto windows = std::make_shared<data::TokenWindows>(tokens, 8);
  std::vector<std::vector<int64_t>> seen[2];
  for (int workers : {0, 2}) {
    data::DataLoader loader(windows, {.batch_size = 5, .shuffle = true, .num_workers = workers, .seed = 3});
    loader.start_epoch(0);
    while (auto b = loader.next()) {
      REQUIRE(b->inputs.shape()[1] == 8);
      REQUIRE(b->inputs.dtype() == DType::Int64);
      const std::vector<int64_t> in = as_ids(b->inputs), next = as_ids(b->targets);
      for (size_t k = 0; k < in.size(); ++k) REQUIRE(next[k] == in[k] + 1);
      seen[workers == 0 ? 0 : 1].push_back(in);
    }
  }
  CHECK(seen[0].size() == 9);  // 42 windows in batches of 5
  CHECK(seen[0] == seen[1]);
}
