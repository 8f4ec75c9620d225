// tests/data/data_test_util.h — helpers for the data tests: IDX files built byte by byte, written
// raw or gzip-compressed (with zlib, independently of the reader under test).
#pragma once

#include <zlib.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mg::test {

inline std::string u32_be(uint32_t n) {
  return {char(n >> 24), char((n >> 16) & 0xff), char((n >> 8) & 0xff), char(n & 0xff)};
}

// An IDX file: magic 0x00 0x00 <type> <ndim>, then the dims big-endian, then `data`.
inline std::string idx_bytes(const std::vector<uint32_t>& dims, const std::string& data, uint8_t type = 0x08) {
  std::string out{char(0), char(0), char(type), char(dims.size())};
  for (uint32_t d : dims) out += u32_be(d);
  return out + data;
}

// n bytes 0, 1, 2, ... (mod 256).
inline std::string counting_bytes(size_t n) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = char(i & 0xff);
  return out;
}

inline void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

inline std::string read_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  REQUIRE(n == 0);
  gzclose(f);
  return out;
}

}  // namespace mg::test
