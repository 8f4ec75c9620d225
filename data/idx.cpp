// data/idx.cpp — read_idx: one IDX file (gzip-compressed or raw) into dims and bytes.
//
// zlib's gzread reads a gzip stream and passes a raw file through unchanged, so one path reads
// both; the gzip magic (0x1f 0x8b) can never start a raw IDX file, whose magic opens 0x00 0x00.
// The whole decompressed file is held in memory (Fashion-MNIST's largest is 47 MB) and then
// validated field by field, so truncation and trailing bytes are told apart by byte counts.
#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "multigrad/data/data.h"

namespace mg::data {
namespace {

constexpr uint8_t kTypeUnsignedByte = 0x08;  // the only IDX element type Fashion-MNIST uses
constexpr int kMaxIdxDims = 4;               // images are 3-d, labels 1-d; 4 leaves room for colour
constexpr unsigned kReadChunk = 1u << 20;    // gzread takes an unsigned count; 1 MiB per call

std::string hex_byte(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", unsigned(b));
  return buf;
}

// Every byte of the file, decompressed when it is gzip.
std::vector<uint8_t> read_all(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  MG_CHECK(file != nullptr, "read_idx: cannot open ", path, " (", std::strerror(errno), ")");
  std::vector<uint8_t> bytes;
  int n = 0, read_errno = 0;
  do {
    size_t used = bytes.size();
    bytes.resize(used + kReadChunk);
    n = gzread(file, bytes.data() + used, kReadChunk);
    read_errno = errno;
    bytes.resize(used + size_t(n > 0 ? n : 0));
  } while (n > 0);
  int errnum = Z_OK;
  std::string zlib_message = gzerror(file, &errnum);
  gzclose(file);
  MG_CHECK(errnum != Z_ERRNO, "read_idx: cannot read ", path, " (", std::strerror(read_errno), ")");
  // Z_BUF_ERROR after the last read: the gzip stream ended before its trailer (a cut file).
  MG_CHECK(n == 0 && errnum == Z_OK, "read_idx: ", path, ": corrupt or truncated gzip stream (zlib: ",
           zlib_message, ")");
  return bytes;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  std::vector<uint8_t> bytes = read_all(path);
  constexpr size_t kMagicBytes = 4;
  MG_CHECK(bytes.size() >= kMagicBytes, "read_idx: ", path, ": truncated header: the magic needs ", kMagicBytes,
           " bytes, the file has ", bytes.size());
  MG_CHECK(bytes[0] == 0 && bytes[1] == 0, "read_idx: ", path, ": bad magic: expected 0x00 0x00, got ",
           hex_byte(bytes[0]), " ", hex_byte(bytes[1]));
  MG_CHECK(bytes[2] == kTypeUnsignedByte, "read_idx: ", path, ": type code: expected ", hex_byte(kTypeUnsignedByte),
           " (unsigned byte), got ", hex_byte(bytes[2]));
  int ndim = bytes[3];
  MG_CHECK(ndim >= 1 && ndim <= kMaxIdxDims, "read_idx: ", path, ": ndim: expected 1 to ", kMaxIdxDims, ", got ",
           ndim);
  size_t header = kMagicBytes + 4 * size_t(ndim);
  MG_CHECK(bytes.size() >= header, "read_idx: ", path, ": truncated header: ", ndim, " dims need ", header,
           " bytes, the file has ", bytes.size());

  IdxArray out;
  size_t available = bytes.size() - header;
  size_t needed = 1;
  bool overflow = false;  // four u32 dims can need more bytes than a size_t counts
  for (int d = 0; d < ndim; ++d) {
    uint32_t size = big_endian_u32(bytes.data() + kMagicBytes + 4 * size_t(d));
    out.dims.push_back(int64_t(size));
    // A zero dim makes the product 0, whatever overflowed before it.
    overflow = size != 0 && (overflow || needed > SIZE_MAX / size);
    needed *= size;
  }
  MG_CHECK(!overflow, "read_idx: ", path, ": truncated data: dims ", out.dims,
           " need more bytes than a size_t counts, the file has ", available);
  MG_CHECK(needed <= available, "read_idx: ", path, ": truncated data: dims ", out.dims, " need ", needed,
           " data bytes, the file has ", available);
  MG_CHECK(needed == available, "read_idx: ", path, ": trailing bytes: dims ", out.dims, " need ", needed,
           " data bytes, the file has ", available);
  out.data.assign(bytes.begin() + std::ptrdiff_t(header), bytes.end());
  return out;
}

}  // namespace mg::data
