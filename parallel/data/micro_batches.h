// parallel/data/micro_batches.h — how a global batch is cut into micro-batches, defined once.
//
// A batch of b examples split K ways becomes k = min(K, b) contiguous chunks in batch order;
// chunk i has floor(b / k) examples, plus one for the first (b mod k) chunks. Example:
// b = 10, K = 3 -> [0, 4), [4, 7), [7, 10). Each chunk's mean loss is scaled by
// (its size / b) before backward, so the accumulated gradient is the mean over the whole batch.
// `--grad-accum K` runs the chunks one after another on one device; data parallelism over K
// devices and the pipeline's micro-batches use exactly this split, which is what lets a
// deterministic K-device run equal `--grad-accum K` bit for bit. The last batch of an epoch
// may hold fewer than K examples: it then has one chunk per example.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "multigrad/core/error.h"

namespace mg::parallel {

struct MicroBatch {
  int64_t begin = 0, end = 0;  // positions within the global batch, [begin, end)
  int64_t size() const { return end - begin; }
};

inline std::vector<MicroBatch> split_batch(int64_t batch_size, int64_t parts) {
  MG_CHECK(batch_size > 0 && parts > 0, "split_batch: batch size ", batch_size, " and part count ", parts,
           " must both be positive");
  const int64_t k = std::min(parts, batch_size);
  const int64_t base = batch_size / k, larger = batch_size % k;
  std::vector<MicroBatch> chunks;
  int64_t begin = 0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t end = begin + base + (i < larger ? 1 : 0);
    chunks.push_back({begin, end});
    begin = end;
  }
  return chunks;
}

}  // namespace mg::parallel
