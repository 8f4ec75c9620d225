// tests/io/test_safetensors.cpp — io/safetensors: bit-exact round trips of every dtype and
// layout, the exact byte layout against a hand-written file, and the corruption matrix (each
// damaged file an mg::Error naming the file and the field).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"
#include "core/cpu_devices_guard.h"
#include "multigrad/io/safetensors.h"
#include "io_test_util.h"

using mg::Device;
using mg::DType;
using mg::Shape;
using mg::Tensor;
using mg::io::load_safetensors;
using mg::io::save_safetensors;
using mg::test::read_bytes;
using mg::test::require_error;
using mg::test::safetensors_bytes;
using mg::test::TempDir;
using mg::test::tensor_bytes;
using mg::test::u64_le;
using mg::test::write_bytes;

namespace {

// A host tensor holding exactly these bit patterns (T is the storage type of `dtype`).
template <class T>
Tensor from_bits(const std::vector<T>& bits, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, {.dtype = dtype});
  REQUIRE(size_t(t.numel()) * t.element_size() == bits.size() * sizeof(T));
  if (!bits.empty()) std::memcpy(t.data_ptr(), bits.data(), bits.size() * sizeof(T));
  return t;
}

// Saves, loads, and requires the same names, dtypes, shapes and bytes.
void require_round_trip(const mg::io::TensorMap& tensors, const Device& device = Device("cpu")) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  save_safetensors(path, tensors);
  mg::io::SafetensorsFile loaded = load_safetensors(path, device);
  REQUIRE(loaded.tensors.size() == tensors.size());
  for (const auto& [name, want] : tensors) {
    INFO("tensor " << name);
    REQUIRE(loaded.tensors.count(name) == 1);
    const Tensor& got = loaded.tensors.at(name);
    CHECK(got.dtype() == want.dtype());
    CHECK(got.shape() == want.shape());
    CHECK(got.device() == device);
    CHECK(got.is_contiguous());
    CHECK(tensor_bytes(got) == tensor_bytes(want.to(Device("cpu"))));
  }
}

// Writes `bytes` as a file and requires load_safetensors to fail naming the file and `parts`.
void require_load_error(const std::string& bytes, std::vector<std::string> parts) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  parts.push_back(path);
  require_error([&] { load_safetensors(path); }, parts);
}

// A valid one-tensor header and its data: "x", F32, shape [2], 8 bytes.
const std::string kGoodEntry = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string kGoodData(8, '\1');

}  // namespace

// ---- round trips ----

TEST_CASE("safetensors round-trips Float32 bit-exactly, NaN payloads, infinities and -0 included", "[io][safetensors]") {
  const std::vector<uint32_t> bits = {0x3f800000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00001u,
                                      0xffbfffffu, 0x00000001u, 0x7f7fffffu, 0x12345678u};
  require_round_trip({{"f", from_bits(bits, {3, 3}, DType::Float32)}});
}

TEST_CASE("safetensors round-trips Float64 bit-exactly", "[io][safetensors]") {
  const std::vector<uint64_t> bits = {0x3ff0000000000000ull, 0x8000000000000000ull, 0x7ff0000000000001ull,
                                      0x0000000000000001ull, 0x7fefffffffffffffull, 0x0123456789abcdefull};
  require_round_trip({{"d", from_bits(bits, {2, 3}, DType::Float64)}});
}

TEST_CASE("safetensors round-trips Int64 including its extremes", "[io][safetensors]") {
  const std::vector<int64_t> v = {std::numeric_limits<int64_t>::min(), -1, 0, 1, std::numeric_limits<int64_t>::max()};
  require_round_trip({{"i", from_bits(v, {5}, DType::Int64)}});
}

TEST_CASE("safetensors round-trips BFloat16 bit patterns", "[io][safetensors]") {
  const std::vector<uint16_t> bits = {0x3f80, 0x8000, 0x7f80, 0xff80, 0x7fc1, 0x0001, 0x7f7f};
  require_round_trip({{"h", from_bits(bits, {7}, DType::BFloat16)}});
}

TEST_CASE("safetensors round-trips Float16 bit patterns as F16", "[io][safetensors]") {
  const std::vector<uint16_t> bits = {0x3c00, 0x8000, 0x7c00, 0xfc00, 0x7e01, 0x0001, 0x7bff, 0x03ff};
  require_round_trip({{"h", from_bits(bits, {8}, DType::Float16)}});
}

TEST_CASE("safetensors round-trips Bool tensors", "[io][safetensors]") {
  const std::vector<uint8_t> bits = {1, 0, 0, 1, 1, 1};
  require_round_trip({{"b", from_bits(bits, {2, 3}, DType::Bool)}});
}

TEST_CASE("safetensors round-trips 0-d and empty tensors next to others", "[io][safetensors]") {
  const std::vector<double> one = {2.5};
  require_round_trip({
      {"scalar", from_bits(one, {}, DType::Float64)},
      {"empty", Tensor::empty({0}, {.dtype = DType::Float32})},
      {"empty2d", Tensor::empty({3, 0}, {.dtype = DType::Int64})},
      {"empty_bool", Tensor::empty({0, 5}, {.dtype = DType::Bool})},
      {"z", mg::arange(4, {.dtype = DType::Int64})},
  });
}

TEST_CASE("safetensors round-trips an empty map and metadata alone", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  save_safetensors(path, {}, {{"note", "nothing here"}, {"unicode", "\xc3\xa9t\xc3\xa9"}});
  auto loaded = load_safetensors(path);
  CHECK(loaded.tensors.empty());
  CHECK(loaded.metadata == mg::io::Metadata{{"note", "nothing here"}, {"unicode", "\xc3\xa9t\xc3\xa9"}});
  save_safetensors(path, {});
  CHECK(read_bytes(path) == safetensors_bytes("{}      ", ""));
}

TEST_CASE("safetensors saves non-contiguous tensors as their row-major values", "[io][safetensors]") {
  Tensor base = mg::arange(12, {.dtype = DType::Float32}).reshape({3, 4});
  Tensor transposed = base.transpose(0, 1);     // (4, 3), strides (1, 4)
  Tensor strided = base.slice(1, 0, 4, 2);      // (3, 2), every other column
  REQUIRE_FALSE(transposed.is_contiguous());
  REQUIRE_FALSE(strided.is_contiguous());
  TempDir dir;
  const std::string path = dir.file("views.safetensors");
  save_safetensors(path, {{"t", transposed}, {"s", strided}});
  auto loaded = load_safetensors(path);
  CHECK(loaded.tensors.at("t").shape() == Shape{4, 3});
  CHECK(loaded.tensors.at("t").to_vector<float>() ==
        std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(loaded.tensors.at("s").to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10});
}

TEST_CASE("safetensors saves tensors that require grad and loads plain tensors", "[io][safetensors]") {
  Tensor w = mg::full({2, 3}, 0.5, {.requires_grad = true});
  TempDir dir;
  save_safetensors(dir.file("w"), {{"w", w}, {"wt", w.transpose(0, 1)}});
  auto loaded = load_safetensors(dir.file("w"));
  CHECK_FALSE(loaded.tensors.at("w").requires_grad());
  CHECK(loaded.tensors.at("wt").to_vector<float>() == std::vector<float>(6, 0.5f));
}

TEST_CASE("safetensors saves tensors from cpu:1 and loads onto cpu:1", "[io][safetensors]") {
  mg::test::CpuDevicesGuard guard(2);
  Tensor t = mg::arange(6, {.dtype = DType::Float64, .device = Device("cpu:1")}).reshape({2, 3});
  require_round_trip({{"w", t}}, Device("cpu:0"));
  require_round_trip({{"w", t}}, Device("cpu:1"));
  require_error([] { load_safetensors("/nonexistent", Device("cpu:5")); }, {"cpu:5"});
}

TEST_CASE("safetensors round-trips names and metadata with JSON-special and non-ASCII characters", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("names.safetensors");
  const std::string odd = "layer.0/\"w\"\\n\t\xe2\x88\x82";
  save_safetensors(path, {{odd, mg::ones({2})}}, {{"k\"ey", "va\nlue"}});
  auto loaded = load_safetensors(path);
  REQUIRE(loaded.tensors.count(odd) == 1);
  CHECK(loaded.metadata.at("k\"ey") == "va\nlue");
}

// ---- the exact layout ----

TEST_CASE("safetensors writes exactly the bytes of a hand-written file", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  const std::vector<int64_t> seven = {7};
  save_safetensors(path, {{"b", mg::tensor({1.0f, -2.0f}, {2})}, {"a", from_bits(seven, {}, DType::Int64)}},
                   {{"k", "v"}});
  // 132 bytes of JSON padded with 4 spaces to 136 = 0x88; then a (I64 7) and b (F32 1, -2).
  const std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}    )";
  const std::string expected = std::string("\x88\0\0\0\0\0\0\0", 8) + header +
                               std::string("\x07\0\0\0\0\0\0\0", 8) +      // a = 7
                               std::string("\0\0\x80\x3f\0\0\0\xc0", 8);   // b = 1.0f, -2.0f
  CHECK(header.size() == 136);
  CHECK(read_bytes(path) == expected);
}

TEST_CASE("safetensors output is deterministic and the header keeps the data 8-byte aligned", "[io][safetensors]") {
  TempDir dir;
  mg::manual_seed(3);
  mg::io::TensorMap tensors = {{"zeta", mg::randn({3, 5})}, {"alpha", mg::ones({1}, {.dtype = DType::BFloat16})},
                               {"mid", mg::zeros({2, 2}, {.dtype = DType::Bool})}};
  save_safetensors(dir.file("1"), tensors, {{"a", "b"}});
  save_safetensors(dir.file("2"), tensors, {{"a", "b"}});
  const std::string bytes = read_bytes(dir.file("1"));
  CHECK(bytes == read_bytes(dir.file("2")));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  // Data in name order: alpha (2 bytes), mid (4), zeta (60).
  const std::string header = bytes.substr(8, n);
  CHECK(header.find(R"("alpha":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]})") != std::string::npos);
  CHECK(header.find(R"("mid":{"dtype":"BOOL","shape":[2,2],"data_offsets":[2,6]})") != std::string::npos);
  CHECK(header.find(R"("zeta":{"dtype":"F32","shape":[3,5],"data_offsets":[6,66]})") != std::string::npos);
  CHECK(bytes.size() == 8 + n + 66);
}

TEST_CASE("safetensors overwrites an existing file and leaves no temp file behind", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  save_safetensors(path, {{"a", mg::ones({100})}});
  save_safetensors(path, {{"b", mg::zeros({3})}});
  auto loaded = load_safetensors(path);
  CHECK(loaded.tensors.size() == 1);
  CHECK(loaded.tensors.count("b") == 1);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++files;
  }
  CHECK(files == 1);
}

TEST_CASE("remove_stale_temp_files removes the temp files of writers that are gone, and only those",
          "[io][safetensors]") {
  TempDir dir;
  // Above Linux's largest pid (2^22), so no process has it.
  const std::string gone = "epoch-1.safetensors.tmp.999999999";
  const std::string alive = "epoch-2.safetensors.tmp." + std::to_string(getppid());
  const std::string mine = "epoch-3.safetensors.tmp." + std::to_string(getpid());
  for (const std::string& name : {gone, alive, mine, std::string("notes.tmp.txt"), std::string("epoch-1.safetensors")})
    write_bytes(dir.file(name), "x");
  std::vector<std::string> removed = mg::io::remove_stale_temp_files(dir.path());
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{dir.file(gone), dir.file(mine)});
  for (const std::string& kept : {alive, std::string("notes.tmp.txt"), std::string("epoch-1.safetensors")})
    CHECK(std::filesystem::exists(dir.file(kept)));
  CHECK(mg::io::remove_stale_temp_files(dir.file("missing")).empty());
}

// ---- writer errors ----

TEST_CASE("save_safetensors rejects empty, reserved and undefined entries", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  require_error([&] { save_safetensors(path, {{"", mg::ones({1})}}); }, {path, "name is empty"});
  require_error([&] { save_safetensors(path, {{"__metadata__", mg::ones({1})}}); }, {"__metadata__", "reserved"});
  require_error([&] { save_safetensors(path, {{"u", Tensor()}}); }, {"tensor 'u' is undefined"});
  require_error([&] { save_safetensors(path, {{std::string("bad\xff", 4), mg::ones({1})}}); }, {"UTF-8"});
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("save_safetensors into a missing or unwritable folder names the temp file and the cause", "[io][safetensors]") {
  TempDir dir;
  const std::string missing = dir.file("no/such/folder/x.safetensors");
  require_error([&] { save_safetensors(missing, {{"a", mg::ones({1})}}); },
                {"cannot create the temp file", missing + ".tmp.", "No such file or directory"});
  write_bytes(dir.file("plain"), "x");
  require_error([&] { save_safetensors(dir.file("plain/x.safetensors"), {{"a", mg::ones({1})}}); },
                {"Not a directory"});
  if (::geteuid() != 0) {  // root writes anywhere, so only a normal user can check permissions
    std::filesystem::create_directory(dir.file("ro"));
    std::filesystem::permissions(dir.file("ro"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    require_error([&] { save_safetensors(dir.file("ro/x.safetensors"), {{"a", mg::ones({1})}}); },
                  {"Permission denied"});
  }
  std::filesystem::create_directory(dir.file("target_is_dir"));
  require_error([&] { save_safetensors(dir.file("target_is_dir"), {{"a", mg::ones({1})}}); },
                {"cannot rename", "target_is_dir"});
  CHECK_FALSE(std::filesystem::exists(dir.file("target_is_dir") + ".tmp." + std::to_string(::getpid())));
}

// ---- reader errors: the file ----

TEST_CASE("load_safetensors of a missing file or a folder says so", "[io][safetensors]") {
  TempDir dir;
  require_error([&] { load_safetensors(dir.file("missing.safetensors")); },
                {"missing.safetensors", "cannot open", "No such file or directory"});
  require_error([&] { load_safetensors(dir.path()); }, {dir.path(), "is a folder"});
}

TEST_CASE("load_safetensors rejects files shorter than the length field", "[io][safetensors]") {
  require_load_error("", {"the file has 0 bytes, fewer than the 8 of the header length"});
  require_load_error(std::string(7, '\0'), {"the file has 7 bytes"});
}

TEST_CASE("load_safetensors rejects a file truncated at every section boundary and inside the data", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("full.safetensors");
  save_safetensors(path, {{"a", mg::ones({3})}, {"b", mg::ones({2, 2}, {.dtype = DType::Float64})}}, {{"k", "v"}});
  const std::string full = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, full.data(), 8);
  const size_t data_start = 8 + n;
  // Inside the length field, after it, inside the header, at the end of the header, inside
  // tensor a, at the a/b boundary, inside b, one byte short.
  const std::vector<size_t> cuts = {4, 8, 8 + n / 2, data_start, data_start + 5, data_start + 12,
                                    data_start + 20, full.size() - 1};
  for (size_t cut : cuts) {
    INFO("cut at byte " << cut << " of " << full.size());
    const char* field = cut < 8 ? "fewer than the 8" : cut < data_start ? "header length" : "end past the data section";
    require_load_error(full.substr(0, cut), {field});
  }
  REQUIRE(load_safetensors(path).tensors.size() == 2);
}

TEST_CASE("load_safetensors rejects a header length past the end of the file", "[io][safetensors]") {
  const std::string header = "{" + kGoodEntry + "}";
  require_load_error(u64_le(header.size() + 9) + header + kGoodData,
                     {"header length " + std::to_string(header.size() + 9), "exceeds the " + std::to_string(header.size() + 8)});
}

TEST_CASE("load_safetensors rejects absurd header lengths without overflow", "[io][safetensors]") {
  const std::string rest = "{}" + std::string(14, ' ');
  require_load_error(u64_le(uint64_t(1) << 63) + rest, {"header length 9223372036854775808", "exceeds the 16 bytes"});
  require_load_error(u64_le(~uint64_t(0)) + rest, {"header length 18446744073709551615"});
  require_load_error(u64_le(~uint64_t(0) - 7) + rest, {"header length 18446744073709551608"});
}

TEST_CASE("load_safetensors refuses a header longer than the Python package allows", "[io][safetensors]") {
  // A sparse file: 200 MB of apparent size, no disk blocks.
  TempDir dir;
  const std::string path = dir.file("huge.safetensors");
  const uint64_t length = 150'000'000;
  write_bytes(path, u64_le(length));
  std::filesystem::resize_file(path, 200'000'000);
  require_error([&] { load_safetensors(path); }, {path, "header length 150000000", "limit of 100000000"});
}

// ---- reader errors: the JSON ----

TEST_CASE("load_safetensors rejects malformed JSON and headers that are not objects", "[io][safetensors]") {
  require_load_error(safetensors_bytes(R"({"x":{"dtype":"F32",)", ""), {"not valid JSON"});
  require_load_error(safetensors_bytes("\xff\xfe{}", ""), {"not valid JSON"});
  require_load_error(safetensors_bytes("", ""), {"not valid JSON"});
  require_load_error(safetensors_bytes("[1, 2]  ", ""), {"the header is a JSON array, expected an object"});
  require_load_error(safetensors_bytes(R"({"x": [1]})", ""), {"tensor 'x' is a JSON array, expected an object"});
}

TEST_CASE("load_safetensors rejects duplicate tensor names and duplicate fields", "[io][safetensors]") {
  require_load_error(safetensors_bytes("{" + kGoodEntry + "," + kGoodEntry + "}", kGoodData),
                     {"the header names 'x' twice"});
  require_load_error(
      safetensors_bytes(R"({"x":{"dtype":"F32","dtype":"I64","shape":[1],"data_offsets":[0,8]}})", kGoodData),
      {"names 'dtype' twice"});
  require_load_error(safetensors_bytes(R"({"__metadata__":{"a":"1","a":"2"}})", ""), {"names 'a' twice"});
}

TEST_CASE("load_safetensors rejects unknown dtypes", "[io][safetensors]") {
  require_load_error(safetensors_bytes(R"({"x":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", kGoodData),
                     {"tensor 'x'", "dtype \"F8_E4M3\" is not one of F32, F64, I64, BF16, F16, BOOL"});
  require_load_error(safetensors_bytes(R"({"x":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", kGoodData),
                     {"dtype \"f32\""});
  require_load_error(safetensors_bytes(R"({"x":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", kGoodData),
                     {"dtype 7"});
}

TEST_CASE("load_safetensors rejects shapes that are not lists of non-negative integers", "[io][safetensors]") {
  auto with_shape = [](const std::string& shape) {
    return safetensors_bytes(R"({"x":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,8]}})", kGoodData);
  };
  require_load_error(with_shape("[-2]"), {"tensor 'x': shape [-2] dimension 0 is -2, expected a non-negative integer"});
  require_load_error(with_shape("[1,-1]"), {"dimension 1 is -1"});
  require_load_error(with_shape("[2.0]"), {"dimension 0 is 2.0"});
  require_load_error(with_shape("[\"2\"]"), {"dimension 0 is \"2\""});
  require_load_error(with_shape("2"), {"shape 2 is not a list"});
  require_load_error(with_shape("[9223372036854775808]"), {"larger than 9223372036854775807"});
}

TEST_CASE("load_safetensors rejects shapes whose byte count overflows", "[io][safetensors]") {
  require_load_error(
      safetensors_bytes(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", kGoodData),
      {"tensor 'x': shape [4294967296, 4294967296] of F32 overflows 64 bits"});
  require_load_error(
      safetensors_bytes(R"({"x":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", kGoodData),
      {"overflows 64 bits"});
}

TEST_CASE("load_safetensors rejects data_offsets that are not two ordered integers inside the data", "[io][safetensors]") {
  auto with_offsets = [](const std::string& offsets) {
    return safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":)" + offsets + "}}", kGoodData);
  };
  require_load_error(with_offsets("[0]"), {"tensor 'x': data_offsets [0] is not a list of two integers"});
  require_load_error(with_offsets("[0,8,16]"), {"not a list of two integers"});
  require_load_error(with_offsets("\"0,8\""), {"not a list of two integers"});
  require_load_error(with_offsets("[-1,8]"), {"data_offsets begin is -1"});
  require_load_error(with_offsets("[0,8.5]"), {"data_offsets end is 8.5"});
  require_load_error(with_offsets("[8,0]"), {"data_offsets [8, 0] begin after end"});
  require_load_error(with_offsets("[0,16]"), {"data_offsets [0, 16] end past the data section (8 bytes)"});
  require_load_error(with_offsets("[0,18446744073709551615]"), {"end past the data section"});
}

TEST_CASE("load_safetensors rejects a byte range that differs from shape times dtype size", "[io][safetensors]") {
  require_load_error(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kGoodData),
                     {"tensor 'x': data_offsets [0, 8] span 8 bytes, but shape [3] of F32 needs 12"});
  require_load_error(safetensors_bytes(R"({"x":{"dtype":"BF16","shape":[],"data_offsets":[0,8]}})", kGoodData),
                     {"shape [] of BF16 needs 2"});
}

TEST_CASE("load_safetensors rejects overlapping tensors", "[io][safetensors]") {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  require_load_error(safetensors_bytes(header, std::string(12, '\0')),
                     {"data_offsets of tensor 'b' [4, 12] overlap tensor 'a' [0, 8]"});
  const std::string same = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  require_load_error(safetensors_bytes(same, kGoodData), {"overlap"});
}

TEST_CASE("load_safetensors rejects gaps between tensors", "[io][safetensors]") {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  require_load_error(safetensors_bytes(header, std::string(12, '\0')),
                     {"gap: bytes [4, 8) before tensor 'b' belong to no tensor"});
  require_load_error(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", kGoodData),
                     {"gap: bytes [0, 4)"});
}

TEST_CASE("load_safetensors rejects trailing bytes after the last tensor", "[io][safetensors]") {
  require_load_error(safetensors_bytes("{" + kGoodEntry + "}", kGoodData + "junk"),
                     {"4 trailing bytes after the last tensor", "cover 8 of 12"});
  require_load_error(safetensors_bytes("{}", "x"), {"1 trailing bytes"});
}

TEST_CASE("load_safetensors accepts offsets in any header order and zero-size tensors anywhere", "[io][safetensors]") {
  // Written by hand in reverse offset order, with an empty tensor between the two.
  const std::string header = R"({"b":{"dtype":"I64","shape":[1],"data_offsets":[4,12]},)"
                             R"("e":{"dtype":"F64","shape":[0,3],"data_offsets":[4,4]},)"
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string data(12, '\0');
  data[0] = '\x00', data[1] = '\x00', data[2] = '\x80', data[3] = '\x3f';  // 1.0f
  data[4] = '\x05';                                                      // 5
  TempDir dir;
  write_bytes(dir.file("ok"), safetensors_bytes(header, data));
  auto loaded = load_safetensors(dir.file("ok"));
  CHECK(loaded.tensors.at("a").item<float>() == 1.0f);
  CHECK(loaded.tensors.at("b").item<int64_t>() == 5);
  CHECK(loaded.tensors.at("e").shape() == Shape{0, 3});
}

TEST_CASE("load_safetensors rejects missing and unknown entry fields", "[io][safetensors]") {
  require_load_error(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2]}})", kGoodData),
                     {"tensor 'x' has no 'data_offsets'"});
  require_load_error(
      safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", kGoodData),
      {"tensor 'x' has an unknown field 'extra'"});
}

TEST_CASE("load_safetensors rejects metadata that is not an object of strings", "[io][safetensors]") {
  require_load_error(safetensors_bytes(R"({"__metadata__":{"step":12}})", ""),
                     {"__metadata__ value of 'step' is 12, expected a string"});
  require_load_error(safetensors_bytes(R"({"__metadata__":{"a":null}})", ""), {"value of 'a' is null"});
  require_load_error(safetensors_bytes(R"({"__metadata__":["a"]})", ""), {"__metadata__ is a JSON array"});
}

TEST_CASE("load_safetensors rejects Bool bytes other than 0 and 1", "[io][safetensors]") {
  require_load_error(safetensors_bytes(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
                                       std::string("\x01\x00\x02", 3)),
                     {"tensor 'm': BOOL element 2 is byte 2, not 0 or 1"});
}
