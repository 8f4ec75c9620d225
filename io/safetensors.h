// io/safetensors.h — reading and writing the safetensors format, exactly as the Python
// `safetensors` package does, so files move between multigrad, PyTorch and NumPy.
//
// Layout of a file:
//   [8 bytes]  N, the header length, an unsigned 64-bit little-endian integer
//   [N bytes]  a JSON object, padded with spaces to a multiple of 8 bytes:
//                {"__metadata__": {"key": "value", ...},
//                 "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   [rest]     the data: each tensor's elements, row-major, little-endian, at
//              [begin, end) counted from the start of the data section.
// dtypes: F32, F64, I64, BF16, F16 and BOOL (one byte, 0 or 1), the six of multigrad.
//
// Writing is deterministic: tensors are laid out in name order and the header is compact JSON
// (keys __metadata__ first, then the tensors in name order; each as dtype, shape, data_offsets),
// so saving the same tensors twice gives the same bytes. A tensor on a CUDA device or not
// contiguous is copied to contiguous host memory first, one tensor at a time.
//
// Writing is atomic: the bytes go to `<path>.tmp.<pid>` in the same folder, which is fsynced and
// renamed over `path`; then the folder is fsynced. A crash leaves either the old file or the new
// one at `path`, never a mix; at worst a stale `<path>.tmp.<pid>` (a killed writer's, or one
// stopped by a file-size limit's signal), which nothing reads and remove_stale_temp_files removes.
//
// Test hook: when the environment variable MG_TEST_PAUSE_WRITE names a path, the writer, after
// writing half of the data section to the temp file, creates that path and sleeps
// (kTestPauseSeconds, io/safetensors.cpp) before going on, so a test can kill it mid-write.
//
// Reading validates every field and throws mg::Error naming the file, the field and its values:
// header length (vs the file size, and against overflow), the JSON (syntax, duplicate keys,
// entries that are not objects, unknown keys), dtypes, shapes (non-negative integers, numel
// without overflow), data_offsets (two integers, begin <= end <= data size, end - begin equal
// to numel x dtype size), the tensors tiling the data section exactly (no overlap, no gap, no
// trailing bytes), Bool bytes (0 or 1) and metadata values (strings).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "multigrad/core/device.h"
#include "multigrad/core/tensor.h"

namespace mg::io {

using TensorMap = std::map<std::string, Tensor>;
using Metadata = std::map<std::string, std::string>;

struct SafetensorsFile {
  TensorMap tensors;
  Metadata metadata;  // the "__metadata__" object; empty when the file has none
};

// Writes `tensors` (names non-empty and not "__metadata__") and `metadata` to `path`, atomically.
void save_safetensors(const std::string& path, const TensorMap& tensors, const Metadata& metadata = {});

// Removes the temp files in `folder` that writers no longer running left (`<name>.tmp.<pid>`
// whose process is gone, or is this one: call it while this process writes nothing there) and
// returns their paths; a live writer's temp file stays.
std::vector<std::string> remove_stale_temp_files(const std::string& folder);

// Reads and validates a safetensors file; the tensors are made contiguous on `device`.
SafetensorsFile load_safetensors(const std::string& path, const Device& device = Device("cpu"));
// A file's metadata alone (its header read and validated as load_safetensors does; no tensor
// read): what a checkpoint records, without reading its tensors.
Metadata read_safetensors_metadata(const std::string& path);

}  // namespace mg::io
