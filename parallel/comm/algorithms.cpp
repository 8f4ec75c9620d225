// parallel/comm/algorithms.cpp — the ring and rank-ordered all-reduces (algorithms.h).
#include "multigrad/parallel/comm/algorithms.h"

#include "multigrad/kernels/kernels.h"
#include "multigrad/parallel/comm/backend_common.h"

namespace mg::parallel::algorithms {

void transfer(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  if (src.device() == dst.device()) {
    kernels::copy(src, dst);
  } else {
    kernels::copy_across_devices(src, dst);
  }
}

void ring_all_reduce(const Tensor& flat, ReduceOp op, const Ranks& ranks) {
  const int n = ranks.size, r = ranks.rank;
  const int64_t numel = flat.numel();
  auto chunk = [&](const Tensor& x, int i) {
    i = ((i % n) + n) % n;
    return x.slice(0, numel * i / n, numel * (i + 1) / n);
  };
  const Tensor& prev = ranks.published((r - 1 + n) % n);              // (numel,) on rank r-1's device
  Tensor incoming = Tensor::empty({numel / n + 1}, flat.options());  // one chunk, at most

  for (int s = 0; s < n - 1; ++s) {  // reduce-scatter
    const int c = r - 1 - s;          // the chunk rank r - 1 sends at this step
    Tensor mine = chunk(flat, c);
    Tensor in = incoming.slice(0, 0, mine.numel());
    transfer(chunk(prev, c), in);
    backend::fold(op, mine, in);
    ranks.meet();
  }
  for (int s = 0; s < n - 1; ++s) {  // all-gather
    const int c = r - s;              // rank r - 1 completed this chunk and now passes it on
    transfer(chunk(prev, c), chunk(flat, c));
    ranks.meet();
  }
}

void rank_ordered_all_reduce(const Tensor& flat, ReduceOp op, const Ranks& ranks) {
  Tensor acc = Tensor::empty(flat.shape(), flat.options());
  Tensor incoming = Tensor::empty(flat.shape(), flat.options());
  transfer(ranks.published(0), acc);
  for (int k = 1; k < ranks.size; ++k) {
    transfer(ranks.published(k), incoming);
    backend::fold(op, acc, incoming);
  }
  ranks.meet();  // every rank has read every t before any t is overwritten
  transfer(acc, flat);
}

}  // namespace mg::parallel::algorithms
