// tests/io/test_checkpoint.cpp — io/checkpoint: round trips of model and optimizer state, step
// and RNG state; validation of what makes a file a checkpoint; and a writer killed mid-write
// (fork, MG_TEST_PAUSE_WRITE, SIGKILL) leaving the previous checkpoint intact.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "test_util.h"
#include "core/cpu_devices_guard.h"
#include "multigrad/io/checkpoint.h"
#include "multigrad/io/safetensors.h"
#include "multigrad/io/sha256.h"
#include "io_test_util.h"

using mg::Device;
using mg::DType;
using mg::Tensor;
using mg::io::Checkpoint;
using mg::io::load_checkpoint;
using mg::io::save_checkpoint;
using mg::test::read_bytes;
using mg::test::require_error;
using mg::test::TempDir;
using mg::test::tensor_bytes;

namespace {

using StateMap = std::map<std::string, Tensor>;

void require_same_state(const StateMap& got, const StateMap& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [key, t] : want) {
    INFO("key " << key);
    REQUIRE(got.count(key) == 1);
    CHECK(got.at(key).dtype() == t.dtype());
    CHECK(got.at(key).shape() == t.shape());
    CHECK(tensor_bytes(got.at(key)) == tensor_bytes(t));
  }
}

// A small model and optimizer state, as Module::state_dict() and Adam::state_dict() shape them.
StateMap model_state() {
  mg::manual_seed(11);
  return {{"0.weight", mg::randn({4, 3})}, {"0.bias", mg::randn({4})},
          {"1.running_mean", mg::zeros({4}, {.dtype = DType::Float64})},
          {"1.num_batches_tracked", mg::full({}, 5, {.dtype = DType::Int64})}};
}
StateMap optimizer_state() {
  return {{"0.exp_avg", mg::full({4, 3}, 0.25)}, {"0.step", mg::full({}, 17, {.dtype = DType::Int64})},
          {"mask", mg::ones({2}, {.dtype = DType::Bool})}};
}

// Writes a safetensors file with the given metadata and one model tensor, for the validation tests.
std::string write_with_metadata(const TempDir& dir, const mg::io::Metadata& metadata,
                                const std::string& tensor_name = "model.w") {
  const std::string path = dir.file("meta.safetensors");
  mg::io::save_safetensors(path, {{tensor_name, mg::ones({1})}}, metadata);
  return path;
}

mg::io::Metadata good_metadata() {
  return {{"format", "multigrad-checkpoint"}, {"format_version", "1"}, {"step", "3"},
          {"rng_seed", "1"}, {"rng_offset", "2"}};
}

}  // namespace

TEST_CASE("checkpoint round-trips model state, optimizer state and options, step and RNG state", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  const std::map<std::string, double> options = {
      {"lr", 0.1}, {"betas0", 0.9}, {"eps", 1e-8}, {"weight_decay", 0.0}, {"tiny", 4.9406564584124654e-324},
      {"third", 1.0 / 3.0}, {"neg", -1.7976931348623157e308}, {"nesterov", 1.0}};
  const Checkpoint saved{model_state(), optimizer_state(), options, 123456789012345,
                         {0xfedcba9876543210ull, 0xffffffffffffffffull}};
  save_checkpoint(path, saved);
  Checkpoint ck = load_checkpoint(path);
  require_same_state(ck.model_state, saved.model_state);
  require_same_state(ck.optimizer_state, saved.optimizer_state);
  CHECK(ck.optimizer_options == options);  // exact: the text reads back to the same doubles
  CHECK(ck.step == 123456789012345);
  CHECK(ck.rng.seed == saved.rng.seed);
  CHECK(ck.rng.offset == saved.rng.offset);
}

TEST_CASE("checkpoint records the current RNG state by default and resumes the same draws", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  const StateMap model = model_state();
  mg::manual_seed(42);
  mg::randn({10});  // advance the offset past 0
  const mg::PhiloxState at_save = mg::get_rng_state();
  save_checkpoint(path, model, {}, 7);
  mg::set_rng_state(at_save);
  const std::vector<float> expected = mg::randn({5}).to_vector<float>();

  mg::manual_seed(999);
  Checkpoint ck = load_checkpoint(path);
  CHECK(ck.rng.seed == 42);
  CHECK(ck.rng.offset == at_save.offset);
  CHECK(mg::get_rng_state().seed == 999);  // loading leaves the global state alone
  mg::set_rng_state(ck.rng);
  CHECK(mg::randn({5}).to_vector<float>() == expected);
}

TEST_CASE("a checkpoint is a plain safetensors file with prefixed keys and its metadata", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  save_checkpoint(path, Checkpoint{{{"w", mg::ones({2})}}, {{"w.momentum", mg::zeros({2})}}, {{"lr", 0.25}}, 5, {9, 4},
                                   {{"model", "gpt"}, {"note", "any text: 0.25, {}"}}});
  auto file = mg::io::load_safetensors(path);
  CHECK(file.tensors.count("model.w") == 1);
  CHECK(file.tensors.count("optim.w.momentum") == 1);
  // Each tensor's SHA-256, of its little-endian bytes: ones(2) in float32 is 00 00 80 3f twice.
  const unsigned char ones_bytes[] = {0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f};
  CHECK(file.metadata.at("sha256.model.w") == mg::io::sha256_hex(ones_bytes, sizeof(ones_bytes)));
  CHECK(file.metadata.at("sha256.optim.w.momentum") == mg::io::sha256_hex(std::vector<char>(8, 0).data(), 8));
  file.metadata.erase("sha256.model.w");
  file.metadata.erase("sha256.optim.w.momentum");
  CHECK(file.metadata == mg::io::Metadata{{"format", "multigrad-checkpoint"}, {"format_version", "1"},
                                          {"step", "5"}, {"rng_seed", "9"}, {"rng_offset", "4"},
                                          {"optim_option.lr", "0.25"}, {"info.model", "gpt"},
                                          {"info.note", "any text: 0.25, {}"}});
  CHECK(load_checkpoint(path).info == std::map<std::string, std::string>{{"model", "gpt"}, {"note", "any text: 0.25, {}"}});
}

TEST_CASE("a flipped bit in a checkpoint is an error naming the file and the tensor", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  save_checkpoint(path, model_state(), optimizer_state(), 3);
  CHECK(load_checkpoint(path).checked);
  std::string bytes = read_bytes(path);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  // The data section starts with the tensor first in name order: model.0.bias.
  bytes[8 + header] ^= 0x40;
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  require_error([&] { load_checkpoint(path); }, {path, "tensor 'model.0.bias'", "checksum", "corrupt"});
}

TEST_CASE("a checkpoint without checksums (an older multigrad's) loads, marked unchecked, a partial set is an error",
          "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  save_checkpoint(path, model_state(), optimizer_state(), 3);
  auto file = mg::io::load_safetensors(path);
  mg::io::Metadata without;
  for (const auto& [key, value] : file.metadata)
    if (!key.starts_with("sha256.")) without.emplace(key, value);
  mg::io::save_safetensors(path, file.tensors, without);
  const Checkpoint old = load_checkpoint(path);
  CHECK_FALSE(old.checked);
  require_same_state(old.model_state, model_state());

  mg::io::Metadata partial = file.metadata;
  partial.erase("sha256.optim.mask");
  mg::io::save_safetensors(path, file.tensors, partial);
  require_error([&] { load_checkpoint(path); }, {path, "tensor 'optim.mask'", "no checksum"});
  partial = file.metadata;
  partial["sha256.model.gone"] = partial.at("sha256.optim.mask");
  mg::io::save_safetensors(path, file.tensors, partial);
  require_error([&] { load_checkpoint(path); }, {path, "'sha256.model.gone'", "does not hold"});
}

TEST_CASE("checkpoint loads onto another CPU device and keeps empty states empty", "[io][checkpoint]") {
  mg::test::CpuDevicesGuard guard(2);
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  save_checkpoint(path, model_state(), {}, 0);
  Checkpoint ck = load_checkpoint(path, Device("cpu:1"));
  CHECK(ck.optimizer_state.empty());
  CHECK(ck.step == 0);
  for (const auto& [key, t] : ck.model_state) CHECK(t.device() == Device("cpu:1"));
  require_same_state(ck.model_state, model_state());
}

TEST_CASE("save_checkpoint rejects a negative step", "[io][checkpoint]") {
  TempDir dir;
  require_error([&] { save_checkpoint(dir.file("ck"), {}, {}, -1); }, {"step is -1, expected >= 0"});
  Checkpoint negative;
  negative.step = -2;
  require_error([&] { save_checkpoint(dir.file("ck"), negative); }, {"step is -2"});
  CHECK_FALSE(std::filesystem::exists(dir.file("ck")));
}

TEST_CASE("load_checkpoint rejects safetensors files that are not multigrad checkpoints", "[io][checkpoint]") {
  TempDir dir;
  std::string path = write_with_metadata(dir, {});
  require_error([&] { load_checkpoint(path); }, {path, "metadata 'format' is missing", "multigrad-checkpoint"});
  auto meta = good_metadata();
  meta["format"] = "other";
  path = write_with_metadata(dir, meta);
  require_error([&] { load_checkpoint(path); }, {"metadata 'format' is 'other'"});
  meta = good_metadata();
  meta["format_version"] = "2";
  path = write_with_metadata(dir, meta);
  require_error([&] { load_checkpoint(path); }, {"metadata 'format_version' is '2'"});
  path = write_with_metadata(dir, good_metadata(), "w");
  require_error([&] { load_checkpoint(path); }, {"tensor 'w' belongs to neither the model", "model."});
  path = write_with_metadata(dir, good_metadata());
  CHECK(load_checkpoint(path).model_state.count("w") == 1);
}

TEST_CASE("load_checkpoint rejects step and RNG fields that are not decimal integers", "[io][checkpoint]") {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"step", "12x"}, {"step", ""}, {"step", " 1"}, {"step", "+1"}, {"step", "99999999999999999999"},
      {"rng_seed", "-1"}, {"rng_seed", "18446744073709551616"}, {"rng_offset", "0x10"}};
  for (const auto& [key, value] : bad) {
    INFO(key << " = '" << value << "'");
    auto meta = good_metadata();
    meta[key] = value;
    const std::string path = write_with_metadata(dir, meta);
    require_error([&] { load_checkpoint(path); }, {"metadata '" + key + "' is '" + value + "', expected a decimal integer"});
  }
  auto meta = good_metadata();
  meta["step"] = "-4";
  std::string path = write_with_metadata(dir, meta);
  require_error([&] { load_checkpoint(path); }, {"metadata 'step' is -4, expected >= 0"});
  meta = good_metadata();
  meta["optim_option.lr"] = "0.1.2";
  path = write_with_metadata(dir, meta);
  require_error([&] { load_checkpoint(path); }, {"metadata 'optim_option.lr' is '0.1.2', expected a number"});
  meta = good_metadata();
  meta.erase("rng_offset");
  path = write_with_metadata(dir, meta);
  require_error([&] { load_checkpoint(path); }, {"the metadata has no 'rng_offset'"});
}

TEST_CASE("a checkpoint write killed midway leaves the previous checkpoint loadable and byte-identical", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  const std::string pause = dir.file("writer_paused");
  const StateMap old_model = model_state();
  save_checkpoint(path, Checkpoint{old_model, optimizer_state(), {}, 100, {1, 2}, {}});
  const std::string before = read_bytes(path);

  // 16 MB of new state, made before fork so the child only writes.
  const StateMap big = {{"w", mg::full({4 << 20}, 3.0)}};
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::setenv("MG_TEST_PAUSE_WRITE", pause.c_str(), 1);
    try {
      save_checkpoint(path, big, {}, 200);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);  // not reached while the test works: the parent kills the paused writer
  }

  // Wait for the writer to reach the middle of its data, then kill it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int status = 0;
  bool exited_early = false;
  while (!std::filesystem::exists(pause) && std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(child, &status, WNOHANG) == child) {
      exited_early = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!exited_early) {
    ::kill(child, SIGKILL);
    REQUIRE(::waitpid(child, &status, 0) == child);
  }
  INFO("child status " << status);
  REQUIRE_FALSE(exited_early);
  REQUIRE(std::filesystem::exists(pause));
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);

  // The target is untouched; the half-written temp file is beside it and is not a valid file.
  CHECK((read_bytes(path) == before));  // parenthesised: a failure must not print 16 MB
  Checkpoint ck = load_checkpoint(path);
  CHECK(ck.step == 100);
  CHECK(ck.rng.seed == 1);
  require_same_state(ck.model_state, old_model);
  const std::string temp = path + ".tmp." + std::to_string(child);
  REQUIRE(std::filesystem::exists(temp));
  const auto temp_size = std::filesystem::file_size(temp);
  CHECK(temp_size > 8 * 1024 * 1024);  // about half of the 16 MB data is out
  CHECK(temp_size < 16 * 1024 * 1024);
  require_error([&] { load_checkpoint(temp); }, {temp, "end past the data section"});

  // A later writer (another pid) replaces the checkpoint; the stale temp file stays out of its way.
  save_checkpoint(path, big, {}, 200);
  CHECK(load_checkpoint(path).step == 200);
  CHECK(std::filesystem::exists(temp));
}

TEST_CASE("a model's state_dict round-trips through safetensors bit for bit", "[io][checkpoint]") {
  mg::test::TempDir dir;
  mg::manual_seed(3);
  auto model = mg::nn::fashion_cnn();
  model->forward(mg::randn({2, 1, 28, 28}));  // training-mode forward: non-trivial running stats
  const mg::nn::StateDict state = model->state_dict();
  const std::string path = dir.file("cnn.safetensors");
  mg::io::save_safetensors(path, state);

  mg::manual_seed(4);
  auto restored = mg::nn::fashion_cnn();  // other initial values
  restored->load_state_dict(mg::io::load_safetensors(path).tensors);
  const mg::nn::StateDict again = restored->state_dict();
  REQUIRE(again.size() == state.size());
  for (const auto& [name, t] : state) {
    INFO(name);
    const mg::Tensor& u = again.at(name);
    REQUIRE(u.dtype() == t.dtype());
    REQUIRE(u.shape() == t.shape());
    const size_t bytes = size_t(t.numel()) * t.element_size();
    CHECK(std::memcmp(u.contiguous().data_ptr(), t.contiguous().data_ptr(), bytes) == 0);
  }
}
