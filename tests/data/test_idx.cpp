// tests/data/test_idx.cpp — read_idx: raw and gzip files read exactly, and the corruption matrix
// (each damaged file an mg::Error naming the file, the field and both values).
#include "test_util.h"
#include "multigrad/data/data.h"
#include "data_test_util.h"
#include "io/io_test_util.h"

using mg::data::read_idx;
using mg::test::counting_bytes;
using mg::test::idx_bytes;
using mg::test::require_error;
using mg::test::TempDir;
using mg::test::write_bytes;
using mg::test::write_gzip;

namespace {

std::vector<uint8_t> as_bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

TEST_CASE("read_idx reads a raw 1-d file exactly", "[data]") {
  TempDir dir;
  std::string data = counting_bytes(7);
  write_bytes(dir.file("a.idx"), idx_bytes({7}, data));
  auto a = read_idx(dir.file("a.idx"));
  CHECK(a.dims == mg::Shape{7});
  CHECK(a.data == as_bytes(data));
}

TEST_CASE("read_idx reads a gzip 3-d file exactly", "[data]") {
  TempDir dir;
  std::string data = counting_bytes(3 * 4 * 5);
  write_gzip(dir.file("a.gz"), idx_bytes({3, 4, 5}, data));
  auto a = read_idx(dir.file("a.gz"));
  CHECK(a.dims == mg::Shape{3, 4, 5});
  CHECK(a.data == as_bytes(data));
}

TEST_CASE("read_idx reads a 4-d file with a zero dim", "[data]") {
  TempDir dir;
  write_gzip(dir.file("a.gz"), idx_bytes({2, 0, 3, 1}, ""));
  auto a = read_idx(dir.file("a.gz"));
  CHECK(a.dims == mg::Shape{2, 0, 3, 1});
  CHECK(a.data.empty());
}

TEST_CASE("read_idx rejects a header cut inside the magic", "[data]") {
  TempDir dir;
  write_gzip(dir.file("a.gz"), std::string("\0\0\x08", 3));
  require_error([&] { read_idx(dir.file("a.gz")); }, {dir.file("a.gz"), "truncated header", "4", "has 3"});
}

TEST_CASE("read_idx rejects a header cut inside the dims", "[data]") {
  TempDir dir;
  std::string full = idx_bytes({2, 3, 4}, "");
  write_bytes(dir.file("a.idx"), full.substr(0, 4 + 8));
  require_error([&] { read_idx(dir.file("a.idx")); }, {dir.file("a.idx"), "truncated header", "16", "has 12"});
}

TEST_CASE("read_idx rejects truncated data with both byte counts", "[data]") {
  TempDir dir;
  write_bytes(dir.file("a.idx"), idx_bytes({4, 5}, counting_bytes(19)));
  require_error([&] { read_idx(dir.file("a.idx")); },
                {dir.file("a.idx"), "truncated data", "[4, 5]", "need 20", "has 19"});
  write_gzip(dir.file("b.gz"), idx_bytes({4, 5}, counting_bytes(3)));
  require_error([&] { read_idx(dir.file("b.gz")); }, {dir.file("b.gz"), "truncated data", "need 20", "has 3"});
}

TEST_CASE("read_idx rejects dims whose product exceeds the file", "[data]") {
  TempDir dir;
  write_bytes(dir.file("a.idx"), idx_bytes({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, "abc"));
  require_error([&] { read_idx(dir.file("a.idx")); }, {dir.file("a.idx"), "truncated data", "more bytes than a size_t", "has 3"});
}

TEST_CASE("read_idx rejects trailing bytes with both byte counts", "[data]") {
  TempDir dir;
  write_gzip(dir.file("a.gz"), idx_bytes({4, 5}, counting_bytes(21)));
  require_error([&] { read_idx(dir.file("a.gz")); },
                {dir.file("a.gz"), "trailing bytes", "need 20", "has 21"});
}

TEST_CASE("read_idx rejects a bad magic", "[data]") {
  TempDir dir;
  std::string bytes = idx_bytes({2}, "ab");
  bytes[1] = char(0x07);
  write_bytes(dir.file("a.idx"), bytes);
  require_error([&] { read_idx(dir.file("a.idx")); }, {dir.file("a.idx"), "bad magic", "0x00 0x00", "0x07"});
}

TEST_CASE("read_idx rejects a type code other than unsigned byte", "[data]") {
  TempDir dir;
  write_gzip(dir.file("a.gz"), idx_bytes({2}, "abcdefgh", 0x0d));
  require_error([&] { read_idx(dir.file("a.gz")); }, {dir.file("a.gz"), "type code", "0x08", "0x0d"});
}

TEST_CASE("read_idx rejects ndim 0 and ndim 5", "[data]") {
  TempDir dir;
  write_bytes(dir.file("zero.idx"), idx_bytes({}, "x"));
  require_error([&] { read_idx(dir.file("zero.idx")); }, {dir.file("zero.idx"), "ndim", "1 to 4", "got 0"});
  write_bytes(dir.file("five.idx"), idx_bytes({1, 1, 1, 1, 1}, "x"));
  require_error([&] { read_idx(dir.file("five.idx")); }, {dir.file("five.idx"), "ndim", "got 5"});
}

TEST_CASE("read_idx rejects a corrupt gzip stream", "[data]") {
  TempDir dir;
  write_gzip(dir.file("a.gz"), idx_bytes({64, 64}, counting_bytes(64 * 64)));
  std::string gz = mg::test::read_bytes(dir.file("a.gz"));
  // Past the 10-byte gzip header: the deflate data and the CRC no longer agree.
  for (size_t i = 12; i < gz.size() - 8; i += 3) gz[i] = char(~gz[i]);
  write_bytes(dir.file("a.gz"), gz);
  require_error([&] { read_idx(dir.file("a.gz")); }, {dir.file("a.gz"), "gzip"});
}

TEST_CASE("read_idx rejects a cut gzip stream", "[data]") {
  TempDir dir;
  write_gzip(dir.file("a.gz"), idx_bytes({64, 64}, counting_bytes(64 * 64)));
  std::string gz = mg::test::read_bytes(dir.file("a.gz"));
  write_bytes(dir.file("a.gz"), gz.substr(0, gz.size() / 2));
  require_error([&] { read_idx(dir.file("a.gz")); }, {dir.file("a.gz"), "truncated gzip stream"});
}

TEST_CASE("read_idx names a missing file", "[data]") {
  TempDir dir;
  require_error([&] { read_idx(dir.file("nope.gz")); }, {dir.file("nope.gz"), "cannot open"});
}

TEST_CASE("read_idx names a path it cannot read", "[data]") {
  TempDir dir;
  require_error([&] { read_idx(dir.path()); }, {dir.path(), "cannot read", "directory"});
}
