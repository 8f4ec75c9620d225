// tests/io/test_sha256.cpp — io/sha256: the FIPS 180-2 appendix / NIST example vectors, and
// incremental feeding split at every block boundary case.
#include <string>

#include "multigrad/io/sha256.h"
#include "test_util.h"

namespace {

std::string hash_of(const std::string& text) { return mg::io::sha256_hex(text.data(), text.size()); }

}  // namespace

TEST_CASE("sha256: the standard vectors", "[io][sha256]") {
  CHECK(hash_of("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hash_of("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hash_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("sha256: one million a, fed in uneven pieces", "[io][sha256]") {
  const std::string million(1000000, 'a');
  const std::string want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  CHECK(hash_of(million) == want);
  mg::io::Sha256 hash;
  size_t done = 0;
  for (size_t piece = 1; done < million.size(); piece = piece * 3 + 1) {
    const size_t take = std::min(piece % 1000 + 1, million.size() - done);
    hash.update(million.data() + done, take);
    done += take;
  }
  CHECK(hash.hex_digest() == want);
}

TEST_CASE("sha256: the 896-bit vector fed byte by byte, and no update after the digest", "[io][sha256]") {
  // 112 bytes: the padding needs a second block, and every byte crosses the buffer on its own.
  const std::string text =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  mg::io::Sha256 bytewise;
  for (char c : text) bytewise.update(&c, 1);
  CHECK(bytewise.hex_digest() == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  CHECK_THROWS_WITH(bytewise.update("a", 1), Catch::Contains("already taken"));
}
