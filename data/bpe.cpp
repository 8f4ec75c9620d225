// data/bpe.cpp — BpeTokenizer (data/data.h): byte-level byte-pair encoding, trained on a corpus.
//
// Training (Sennrich et al.'s BPE over bytes, as GPT-2 and minbpe): the text's chunks are
// counted once, each distinct chunk kept as a list of ids with its count. Every round takes the
// adjacent pair with the largest total count, gives it the next id and rewrites the chunks that
// hold it, updating the pair counts of those chunks only. Encoding a chunk replays the merges:
// while some adjacent pair has a merge, the pair whose merge came first is replaced everywhere
// in the chunk, as training did.
#include <charconv>
#include <limits>
#include <sstream>
#include <string_view>

#include "multigrad/data/data.h"

namespace mg::data {
namespace {

constexpr int64_t kBytes = ByteTokenizer::kVocabSize;
constexpr std::string_view kHeader = "multigrad-bpe 1";

enum class Kind { Letter, Digit, Space, Other };

Kind kind_of(char ch) {
  const auto c = static_cast<unsigned char>(ch);
  if (c >= 128 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Kind::Letter;
  if (c >= '0' && c <= '9') return Kind::Digit;
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') return Kind::Space;
  return Kind::Other;
}

// The chunks of data.h's comment, in order; together they are the text.
std::vector<std::string_view> split_chunks(std::string_view text) {
  std::vector<std::string_view> chunks;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    if (text[i] == ' ' && i + 1 < text.size() && kind_of(text[i + 1]) != Kind::Space) ++j;  // " word"
    const Kind kind = kind_of(text[j]);
    while (j < text.size() && kind_of(text[j]) == kind) ++j;
    // A whitespace run leaves its last space to the visible run after it.
    if (kind == Kind::Space && j < text.size() && j - i > 1 && text[j - 1] == ' ') --j;
    chunks.push_back(text.substr(i, j - i));
    i = j;
  }
  return chunks;
}

uint64_t pair_key(int64_t left, int64_t right) { return uint64_t(left) << 32 | uint64_t(right); }

// Replaces every (left, right) in ids, left to right, by `id`.
void merge_pair(std::vector<int64_t>& ids, int64_t left, int64_t right, int64_t id) {
  size_t out = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + 1 < ids.size() && ids[i] == left && ids[i + 1] == right) {
      ids[out++] = id;
      ++i;
    } else {
      ids[out++] = ids[i];
    }
  }
  ids.resize(out);
}

}  // namespace

BpeTokenizer::BpeTokenizer(std::vector<std::pair<int64_t, int64_t>> merges) : merges_(std::move(merges)) {
  for (int64_t b = 0; b < kBytes; ++b) pieces_.emplace_back(1, static_cast<char>(static_cast<unsigned char>(b)));
  for (size_t k = 0; k < merges_.size(); ++k) {
    const auto [left, right] = merges_[k];
    pieces_.push_back(pieces_[size_t(left)] + pieces_[size_t(right)]);
    rank_.emplace(pair_key(left, right), int64_t(k));
  }
}

BpeTokenizer BpeTokenizer::train(const std::string& text, int64_t vocab_size,
                                 const std::function<void(int64_t vocab)>& progress) {
  MG_CHECK(vocab_size >= kBytes && vocab_size <= std::numeric_limits<int32_t>::max(), "BpeTokenizer::train: vocab_size ",
           vocab_size, " must be at least ", kBytes, " (the bytes) and below 2^31");
  std::unordered_map<std::string_view, int64_t> chunk_counts;
  for (std::string_view chunk : split_chunks(text)) ++chunk_counts[chunk];
  struct Word {
    std::vector<int64_t> ids;
    int64_t count;
  };
  std::vector<Word> words;
  words.reserve(chunk_counts.size());
  for (const auto& [chunk, count] : chunk_counts) {
    Word w{{}, count};
    for (char c : chunk) w.ids.push_back(int64_t(static_cast<unsigned char>(c)));
    words.push_back(std::move(w));
  }
  // Pair counts, summed over the words (integers: the word order cannot change them).
  std::unordered_map<uint64_t, int64_t> pair_counts;
  auto count_pairs = [&](const Word& w, int64_t sign) {
    for (size_t i = 0; i + 1 < w.ids.size(); ++i) {
      const auto it = pair_counts.try_emplace(pair_key(w.ids[i], w.ids[i + 1]), 0).first;
      if ((it->second += sign * w.count) == 0) pair_counts.erase(it);
    }
  };
  for (const Word& w : words) count_pairs(w, +1);

  std::vector<std::pair<int64_t, int64_t>> merges;
  while (kBytes + int64_t(merges.size()) < vocab_size) {
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [key, count] : pair_counts)
      if (count > best_count || (count == best_count && key < best)) best = key, best_count = count;
    if (best_count < 2) break;  // nothing left that a merge would shorten twice
    const int64_t left = int64_t(best >> 32), right = int64_t(best & 0xFFFFFFFFu);
    const int64_t id = kBytes + int64_t(merges.size());
    merges.emplace_back(left, right);
    for (Word& w : words) {
      bool holds = false;
      for (size_t i = 0; i + 1 < w.ids.size() && !holds; ++i) holds = w.ids[i] == left && w.ids[i + 1] == right;
      if (!holds) continue;
      count_pairs(w, -1);
      merge_pair(w.ids, left, right, id);
      count_pairs(w, +1);
    }
    if (progress) progress(kBytes + int64_t(merges.size()));
  }
  return BpeTokenizer(std::move(merges));
}

std::string BpeTokenizer::to_text() const {
  std::ostringstream out;
  out << kHeader << "\n";
  for (const auto& [left, right] : merges_) out << left << " " << right << "\n";
  return out.str();
}

BpeTokenizer BpeTokenizer::from_text(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string line;
  MG_CHECK(std::getline(in, line) && line == kHeader, source, ": not a multigrad BPE tokenizer (its first line is '",
           line.substr(0, 40), "', expected '", kHeader, "')");
  std::vector<std::pair<int64_t, int64_t>> merges;
  std::unordered_map<uint64_t, size_t> seen;
  for (int64_t number = 2; std::getline(in, line); ++number) {
    const int64_t id = kBytes + int64_t(merges.size());
    int64_t left = -1, right = -1;
    const char* end = line.data() + line.size();
    auto [p, e1] = std::from_chars(line.data(), end, left);
    const bool space = e1 == std::errc() && p < end && *p == ' ';
    auto [q, e2] = space ? std::from_chars(p + 1, end, right) : std::from_chars_result{p, std::errc::invalid_argument};
    MG_CHECK(space && e2 == std::errc() && q == end, source, ": line ", number, " '", line.substr(0, 40),
             "' is not a merge (two ids, 'left right')");
    MG_CHECK(left >= 0 && left < id && right >= 0 && right < id, source, ": line ", number, ": merge ", left, " ",
             right, " makes id ", id, " from an id outside [0, ", id, ")");
    const auto [it, fresh] = seen.emplace(pair_key(left, right), merges.size());
    MG_CHECK(fresh, source, ": line ", number, ": merge ", left, " ", right, " repeats the merge of line ",
             it->second + 2);
    merges.emplace_back(left, right);
  }
  return BpeTokenizer(std::move(merges));
}

std::vector<int64_t> BpeTokenizer::encode_chunk(std::string_view chunk) const {
  std::vector<int64_t> ids;
  ids.reserve(chunk.size());
  for (char c : chunk) ids.push_back(int64_t(static_cast<unsigned char>(c)));
  while (ids.size() > 1) {
    int64_t first = std::numeric_limits<int64_t>::max();
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto it = rank_.find(pair_key(ids[i], ids[i + 1]));
      if (it != rank_.end()) first = std::min(first, it->second);
    }
    if (first == std::numeric_limits<int64_t>::max()) break;
    const auto [left, right] = merges_[size_t(first)];
    merge_pair(ids, left, right, kBytes + first);
  }
  return ids;
}

std::vector<int64_t> BpeTokenizer::encode(const std::string& text) const {
  std::unordered_map<std::string_view, std::vector<int64_t>> seen;  // a chunk encodes the same everywhere
  std::vector<int64_t> ids;
  for (std::string_view chunk : split_chunks(text)) {
    auto it = seen.find(chunk);
    if (it == seen.end()) it = seen.emplace(chunk, encode_chunk(chunk)).first;
    ids.insert(ids.end(), it->second.begin(), it->second.end());
  }
  return ids;
}

const std::string& BpeTokenizer::bytes_of(int64_t id) const {
  MG_CHECK(id >= 0 && id < vocab_size(), "BpeTokenizer: id ", id, " is outside the vocabulary [0, ", vocab_size(), ")");
  return pieces_[size_t(id)];
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids) text += bytes_of(id);
  return text;
}

}  // namespace mg::data
