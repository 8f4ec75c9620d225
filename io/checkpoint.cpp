// io/checkpoint.cpp — checkpoints as one safetensors file; the layout is in io/checkpoint.h.
#include "multigrad/io/checkpoint.h"

#include <charconv>
#include <string_view>
#include <type_traits>

#include "multigrad/io/safetensors.h"

namespace mg::io {
namespace {

constexpr const char* kFormat = "multigrad-checkpoint";
constexpr const char* kFormatVersion = "1";
constexpr std::string_view kModelPrefix = "model.";
constexpr std::string_view kOptimPrefix = "optim.";
constexpr std::string_view kOptionPrefix = "optim_option.";
constexpr std::string_view kInfoPrefix = "info.";

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
  save_safetensors(path, tensors, metadata);
}

void save_checkpoint(const std::string& path, const std::map<std::string, Tensor>& model_state,
                     const std::map<std::string, Tensor>& optimizer_state, int64_t step) {
  save_checkpoint(path, Checkpoint{model_state, optimizer_state, {}, step, get_rng_state(), {}});
}

Checkpoint load_checkpoint(const std::string& path, const Device& device) {
  SafetensorsFile file = load_safetensors(path, device);
  const Metadata& meta = file.metadata;
  check_metadata(path, meta, "format", kFormat, " (is this a multigrad checkpoint?)");
  check_metadata(path, meta, "format_version", kFormatVersion, ", the version this multigrad reads");

  Checkpoint out;
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
      out.model_state.emplace(name.substr(kModelPrefix.size()), std::move(t));
    else if (key.starts_with(kOptimPrefix))
      out.optimizer_state.emplace(name.substr(kOptimPrefix.size()), std::move(t));
    else
      MG_ERROR("load_checkpoint: '", path, "': tensor '", name, "' belongs to neither the model ('",
               kModelPrefix, "') nor the optimizer ('", kOptimPrefix, "')");
  }
  return out;
}

}  // namespace mg::io
