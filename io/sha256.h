// io/sha256.h — SHA-256 (FIPS 180-4), written out so that run fingerprints need no library:
// `multigrad train` prints params_sha256, the digest of every parameter's bytes, and users
// compare runs with it. Incremental: feed any number of byte ranges, then take the digest.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mg::io {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  // The 32-byte digest of everything fed so far; the object may not be updated afterwards.
  std::array<uint8_t, 32> digest();
  // The digest as 64 lowercase hex digits.
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);  // one 64-byte block into state_

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};  // the unprocessed tail, buffered_ bytes of it
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

// The hex digest of one byte range.
std::string sha256_hex(const void* data, size_t size);

}  // namespace mg::io
