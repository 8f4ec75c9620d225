// tests/data/test_bpe.cpp — BpeTokenizer: merges worked out by hand (counts, ties, the vocabulary
// limit, chunks no merge crosses), lossless round trips, compression of the fortunes corpus,
// the text form and every error of a malformed one.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "multigrad/data/data.h"
#include "test_util.h"

using namespace mg;
using mg::test::require_error;

namespace {

using Ids = std::vector<int64_t>;

// The merges of a tokenizer, read back from its text form.
std::vector<std::pair<int64_t, int64_t>> merges_of(const data::BpeTokenizer& tok) {
  std::vector<std::pair<int64_t, int64_t>> merges;
  const std::string text = tok.to_text();
  size_t at = text.find('\n') + 1;
  while (at < text.size()) {
    const size_t space = text.find(' ', at), end = text.find('\n', at);
    merges.emplace_back(std::stoll(text.substr(at, space - at)), std::stoll(text.substr(space + 1, end - space - 1)));
    at = end + 1;
  }
  return merges;
}

}  // namespace

TEST_CASE("BpeTokenizer: the most frequent pair first, until no pair occurs twice", "[data]") {
  // Chunks "ab", " ab", " ab", " cd": (a, b) occurs 3 times, then (' ', ab) twice, then nothing twice.
  const data::BpeTokenizer tok = data::BpeTokenizer::train("ab ab ab cd", 1000);
  CHECK(merges_of(tok) == std::vector<std::pair<int64_t, int64_t>>{{'a', 'b'}, {' ', 256}});
  CHECK(tok.vocab_size() == 258);
  CHECK(tok.encode("ab ab ab cd") == Ids{256, 257, 257, ' ', 'c', 'd'});
  CHECK(tok.bytes_of(257) == " ab");
  CHECK(tok.decode({257, 256, 'x'}) == " ababx");
}

TEST_CASE("BpeTokenizer: ties go to the smallest pair of ids, and vocab_size caps the merges", "[data]") {
  // "ab", " cd", " ab", " cd": (a, b), (' ', c) and (c, d) twice each; (' ', c) = (32, 99) is smallest.
  const std::string text = "ab cd ab cd";
  CHECK(merges_of(data::BpeTokenizer::train(text, 1000)) ==
        std::vector<std::pair<int64_t, int64_t>>{{' ', 'c'}, {'a', 'b'}, {256, 'd'}});
  const data::BpeTokenizer one = data::BpeTokenizer::train(text, 257);
  CHECK(one.vocab_size() == 257);
  CHECK(one.encode(text) == Ids{'a', 'b', 256, 'd', ' ', 'a', 'b', 256, 'd'});
  CHECK(data::BpeTokenizer::train(text, 256).vocab_size() == 256);  // bytes only
  require_error([] { data::BpeTokenizer::train("ab", 255); }, {"vocab_size 255", "at least 256"});
}

TEST_CASE("BpeTokenizer: no merge crosses a chunk (letters, digits, other bytes, whitespace)", "[data]") {
  // Every pair here straddles two chunks, however often it occurs.
  CHECK(data::BpeTokenizer::train("a.a.a.a.1x1x1x", 1000).vocab_size() == 256);
  // A whitespace run leaves its last space to the word after it: "  \n" then " go", twice.
  const data::BpeTokenizer tok = data::BpeTokenizer::train("  \n go  \n go", 1000);
  CHECK(tok.encode("  \n go").size() == 2);
  CHECK(tok.decode({tok.encode("  \n go")[1]}) == " go");
}

TEST_CASE("BpeTokenizer: decode(encode(text)) is the text, and the fortunes shrink", "[data]") {
  const std::string corpus = data::read_text(data::kFortunesRoot).substr(0, 300'000);
  const std::string train = corpus.substr(0, 250'000), held_out = corpus.substr(250'000);
  const data::BpeTokenizer tok = data::BpeTokenizer::train(train, 512);
  REQUIRE(tok.vocab_size() == 512);
  for (const std::string& text : {train, held_out, std::string("Caf\xc3\xa9 \t\n\n  x  y\xff  "), std::string()}) {
    const Ids ids = tok.encode(text);
    CHECK(tok.decode(ids) == text);
    CHECK(std::all_of(ids.begin(), ids.end(), [](int64_t id) { return id >= 0 && id < 512; }));
  }
  // 512 ids give 0.52 tokens per byte on the 50 kB it did not learn from (the same on any machine:
  // training counts integers); GPT-2's 50,257 ids see about 0.25 on English.
  CHECK(double(tok.encode(held_out).size()) < 0.6 * double(held_out.size()));
  // Its text form gives back the same tokenizer.
  const data::BpeTokenizer again = data::BpeTokenizer::from_text(tok.to_text(), "saved");
  CHECK(again.vocab_size() == 512);
  CHECK(again.encode(held_out) == tok.encode(held_out));
}

TEST_CASE("BpeTokenizer: a malformed text form is an error naming the source and the line", "[data]") {
  using data::BpeTokenizer;
  require_error([] { BpeTokenizer::from_text("", "t.bpe"); }, {"t.bpe", "not a multigrad BPE tokenizer"});
  require_error([] { BpeTokenizer::from_text("gpt2 merges\n97 98\n", "t.bpe"); }, {"first line is 'gpt2 merges'"});
  require_error([] { BpeTokenizer::from_text("multigrad-bpe 1\n97 98\n97\n", "t.bpe"); },
                {"t.bpe", "line 3 '97'", "not a merge"});
  require_error([] { BpeTokenizer::from_text("multigrad-bpe 1\n97 x\n", "t.bpe"); }, {"line 2 '97 x'"});
  require_error([] { BpeTokenizer::from_text("multigrad-bpe 1\n97 98 \n", "t.bpe"); }, {"line 2", "not a merge"});
  require_error([] { BpeTokenizer::from_text("multigrad-bpe 1\n97 98\n256 257\n", "t.bpe"); },
                {"line 3", "merge 256 257 makes id 257", "outside [0, 257)"});
  require_error([] { BpeTokenizer::from_text("multigrad-bpe 1\n-1 98\n", "t.bpe"); }, {"line 2", "merge -1 98"});
  require_error([] { BpeTokenizer::from_text("multigrad-bpe 1\n97 98\n32 256\n97 98\n", "t.bpe"); },
                {"line 4", "merge 97 98 repeats the merge of line 2"});
  const BpeTokenizer tok = BpeTokenizer::from_text("multigrad-bpe 1\n97 98\n", "t.bpe");
  require_error([&] { tok.decode({97, 257}); }, {"id 257", "outside the vocabulary [0, 257)"});
  require_error([&] { tok.decode({-3}); }, {"id -3"});
}
