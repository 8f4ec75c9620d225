// data/text.cpp — read_text, ByteTokenizer and TokenWindows (data/data.h).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "multigrad/data/data.h"

namespace mg::data {
namespace {

namespace fs = std::filesystem;

// A fortune file's separator: a line holding only this.
constexpr const char* kFortuneSeparator = "%";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  MG_CHECK(in.good(), "read_text: cannot open ", path.string());
  std::string text, line;
  while (std::getline(in, line)) {
    text += line == kFortuneSeparator ? "" : line;
    if (!in.eof()) text += "\n";  // the line ended with one (a last line may not)
  }
  MG_CHECK(in.eof(), "read_text: error while reading ", path.string());
  return text;
}

}  // namespace

std::string read_text(const std::string& path) {
  MG_CHECK(fs::exists(path), "read_text: ", path, " does not exist (for the fortunes corpus: apt-get install fortunes)");
  if (!fs::is_directory(path)) {
    MG_CHECK(fs::is_regular_file(path), "read_text: ", path, " is not a regular file or a folder (a device or a pipe ",
             "has no end to read to)");
    return read_file(path);
  }
  static const std::regex kSkipped(R"(.*\.(dat|safetensors|safetensors\.tmp\.[0-9]+))");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(path)) {
    if (entry.is_symlink() || !entry.is_regular_file() ||
        std::regex_match(entry.path().filename().string(), kSkipped))
      continue;
    files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const fs::path& f : files) text += read_file(f);
  MG_CHECK(!text.empty(), "read_text: no text in ", path, " (", files.size(), " files)");
  return text;
}

std::vector<int64_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids(text.size());
  std::transform(text.begin(), text.end(), ids.begin(), [](char c) { return int64_t(static_cast<unsigned char>(c)); });
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int64_t id : ids) {
    MG_CHECK(id >= 0 && id < kVocabSize, "ByteTokenizer::decode: id ", id, " is not a byte (0 to 255)");
    text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  return text;
}

TokenWindows::TokenWindows(std::vector<int64_t> tokens, int64_t context, int64_t stride)
    : tokens_(std::move(tokens)), context_(context), stride_(stride) {
  MG_CHECK(context > 0 && stride > 0, "TokenWindows: context ", context, " and stride ", stride, " must be positive");
  MG_CHECK(int64_t(tokens_.size()) > context, "TokenWindows: ", tokens_.size(),
           " tokens hold no window of ", context, " inputs and their next tokens");
}

int64_t TokenWindows::size() const { return (int64_t(tokens_.size()) - context_ - 1) / stride_ + 1; }

Example TokenWindows::get(int64_t index) const {
  Example e = get_batch({index});
  return {e.input.squeeze(0), e.target.squeeze(0)};
}

Example TokenWindows::get_batch(const std::vector<int64_t>& indices) const {
  MG_CHECK(!indices.empty(), "TokenWindows::get_batch: no indices");
  const int64_t b = int64_t(indices.size());
  Tensor inputs = Tensor::empty({b, context_}, {DType::Int64}), targets = Tensor::empty({b, context_}, {DType::Int64});
  int64_t* in = inputs.data<int64_t>();
  int64_t* next = targets.data<int64_t>();
  for (int64_t k = 0; k < b; ++k) {
    const int64_t i = indices[size_t(k)];
    MG_CHECK(i >= 0 && i < size(), "TokenWindows: index ", i, " out of range for size ", size());
    const int64_t* start = tokens_.data() + i * stride_;
    std::copy(start, start + context_, in + k * context_);
    std::copy(start + 1, start + context_ + 1, next + k * context_);
  }
  return {inputs, targets};
}

}  // namespace mg::data
