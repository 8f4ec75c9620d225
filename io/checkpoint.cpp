// io/checkpoint.cpp — checkpoints as one safetensors file; the layout is in io/checkpoint.h.
#include "multigrad/io/checkpoint.h"

#include <charconv>
#include <string_view>
#include <type_traits>

#include "multigrad/io/safetensors.h"
#include "multigrad/io/sha256.h"

namespace mg::io {
namespace {

constexpr const char* kFormat = "multigrad-checkpoint";
constexpr const char* kFormatVersion = "1";
constexpr std::string_view kModelPrefix = "model.";
constexpr std::string_view kOptimPrefix = "optim.";
constexpr std::string_view kOptionPrefix = "optim_option.";
constexpr std::string_view kInfoPrefix = "info.";
constexpr std::string_view kSha256Prefix = "sha256.";

// The SHA-256 of t's bytes as a safetensors file stores them (contiguous, on the host).
std::string tensor_sha256(const Tensor& t) {
  const Tensor host = t.to(Device("cpu")).contiguous();
  return sha256_hex(host.data_ptr(), size_t(host.numel()) * host.element_size());
}

// `text` as a number of type T (integers in decimal; doubles as std::from_chars reads them),
// or an error naming the metadata key.
template <class T>
T parse_number(const std::string& path, const std::string& key, const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  MG_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(), "load_checkpoint: '", path,
           "': metadata '", key, "' is '", text, "', expected ",
           std::is_integral_v<T> ? "a decimal integer" : "a number");
  return value;
}

template <class T>
T metadata_number(const std::string& path, const Metadata& metadata, const std::string& key) {
  const auto it = metadata.find(key);
  MG_CHECK(it != metadata.end(), "load_checkpoint: '", path, "': the metadata has no '", key, "'");
  return parse_number<T>(path, key, it->second);
}

// The shortest text that std::from_chars reads back to exactly `value`.
std::string double_text(double value) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, end);
}

// The metadata value `key` is `expected`, or an error saying what it is.
void check_metadata(const std::string& path, const Metadata& metadata, const std::string& key,
                    const std::string& expected, const char* hint) {
  const auto it = metadata.find(key);
  MG_CHECK(it != metadata.end() && it->second == expected, "load_checkpoint: '", path, "': metadata '", key,
           "' is ", it == metadata.end() ? "missing" : "'" + it->second + "'", ", expected '", expected, "'",
           hint);
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  MG_CHECK(checkpoint.step >= 0, "save_checkpoint: '", path, "': step is ", checkpoint.step, ", expected >= 0");
  TensorMap tensors;
  for (const auto& [key, t] : checkpoint.model_state) tensors.emplace(std::string(kModelPrefix) + key, t);
  for (const auto& [key, t] : checkpoint.optimizer_state) tensors.emplace(std::string(kOptimPrefix) + key, t);
  Metadata metadata = {
      {"format", kFormat},
      {"format_version", kFormatVersion},
      {"step", std::to_string(checkpoint.step)},
      {"rng_seed", std::to_string(checkpoint.rng.seed)},
      {"rng_offset", std::to_string(checkpoint.rng.offset)},
  };
  for (const auto& [name, value] : checkpoint.optimizer_options)
    metadata.emplace(std::string(kOptionPrefix) + name, double_text(value));
  for (const auto& [key, text] : checkpoint.info) metadata.emplace(std::string(kInfoPrefix) + key, text);
  for (const auto& [name, t] : tensors) metadata.emplace(std::string(kSha256Prefix) + name, tensor_sha256(t));
  save_safetensors(path, tensors, metadata);
}

void save_checkpoint(const std::string& path, const std::map<std::string, Tensor>& model_state,
                     const std::map<std::string, Tensor>& optimizer_state, int64_t step) {
  save_checkpoint(path, Checkpoint{model_state, optimizer_state, {}, step, get_rng_state(), {}});
}

namespace {

// Every tensor of `file` against its checksum, when the file has them (else returns false): an
// error names the file and the first tensor whose bytes differ, or that has no checksum.
bool check_sha256(const std::string& path, const SafetensorsFile& file) {
  size_t sums = 0;
  for (const auto& [key, value] : file.metadata) {
    if (!std::string_view(key).starts_with(kSha256Prefix)) continue;
    ++sums;
    MG_CHECK(file.tensors.count(key.substr(kSha256Prefix.size())) == 1, "load_checkpoint: '", path,
             "': metadata '", key, "' is the checksum of a tensor the file does not hold");
  }
  if (sums == 0) return false;
  for (const auto& [name, t] : file.tensors) {
    const auto sum = file.metadata.find(std::string(kSha256Prefix) + name);
    MG_CHECK(sum != file.metadata.end(), "load_checkpoint: '", path, "': tensor '", name,
             "' has no checksum, though the others have");
    MG_CHECK(tensor_sha256(t) == sum->second, "load_checkpoint: '", path, "': tensor '", name, "' (", t.shape(), ", ",
             t.dtype(), ") does not match its checksum: the file is corrupt (a flipped bit, a bad copy)");
  }
  return true;
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path, const Device& device) {
  SafetensorsFile file = load_safetensors(path, Device("cpu"));  // checked on the host, then moved
  const Metadata& meta = file.metadata;
  check_metadata(path, meta, "format", kFormat, " (is this a multigrad checkpoint?)");
  check_metadata(path, meta, "format_version", kFormatVersion, ", the version this multigrad reads");

  Checkpoint out;
  out.checked = check_sha256(path, file);
  out.step = metadata_number<int64_t>(path, meta, "step");
  MG_CHECK(out.step >= 0, "load_checkpoint: '", path, "': metadata 'step' is ", out.step, ", expected >= 0");
  out.rng.seed = metadata_number<uint64_t>(path, meta, "rng_seed");
  out.rng.offset = metadata_number<uint64_t>(path, meta, "rng_offset");
  for (const auto& [key, value] : meta) {
    if (std::string_view(key).starts_with(kOptionPrefix))
      out.optimizer_options.emplace(key.substr(kOptionPrefix.size()), parse_number<double>(path, key, value));
    else if (std::string_view(key).starts_with(kInfoPrefix))
      out.info.emplace(key.substr(kInfoPrefix.size()), value);
  }
  for (auto& [name, t] : file.tensors) {
    const std::string_view key(name);
    if (key.starts_with(kModelPrefix))
      out.model_state.emplace(name.substr(kModelPrefix.size()), t.to(device));
    else if (key.starts_with(kOptimPrefix))
      out.optimizer_state.emplace(name.substr(kOptimPrefix.size()), t.to(device));
    else
      MG_ERROR("load_checkpoint: '", path, "': tensor '", name, "' belongs to neither the model ('",
               kModelPrefix, "') nor the optimizer ('", kOptimPrefix, "')");
  }
  return out;
}

}  // namespace mg::io
