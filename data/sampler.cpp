// data/sampler.cpp — the order of dataset indices per epoch: sequential, a seeded permutation,
// and PyTorch's DistributedSampler split.
//
// The permutation of epoch e is a Fisher–Yates shuffle whose swap at position i draws one
// Philox block, philox4x32_10(key = seed, counter = (i, e)): it depends on (seed, e, n) alone,
// so every rank, thread and run computes the same order without sharing a generator. Two
// 32-bit words make a 64-bit draw reduced modulo i + 1; the bias of that (i / 2^64) is far
// below anything a dataset's size can show.
//
// DistributedSampler follows torch.utils.data.DistributedSampler exactly in how it pads,
// cuts and strides; only its permutation is ours (PyTorch seeds a generator with seed + epoch),
// and it is RandomSampler's, so one replica with shuffle sees RandomSampler's order.
#include "multigrad/core/random.h"
#include "multigrad/data/data.h"

namespace mg::data {
namespace {

std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  return order;
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order = identity(n);
  for (int64_t i = n - 1; i > 0; --i) {
    Philox4 r = philox4x32_10(seed, uint64_t(i), uint64_t(epoch));
    uint64_t draw = (uint64_t(r.x[0]) << 32) | r.x[1];
    std::swap(order[size_t(i)], order[size_t(draw % uint64_t(i + 1))]);
  }
  return order;
}

void check_epoch_and_size(const char* sampler, int64_t n, int64_t epoch) {
  MG_CHECK(n >= 0, sampler, ": dataset size must be >= 0, got ", n);
  MG_CHECK(epoch >= 0, sampler, ": epoch must be >= 0, got ", epoch);
}

}  // namespace

std::vector<int64_t> SequentialSampler::indices(int64_t epoch) const {
  check_epoch_and_size("SequentialSampler", n_, epoch);
  return identity(n_);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  check_epoch_and_size("RandomSampler", n_, epoch);
  return permutation(n_, seed_, epoch);
}

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(n), replicas_(num_replicas), rank_(rank), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  MG_CHECK(n >= 0, "DistributedSampler: dataset size must be >= 0, got ", n);
  MG_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ", num_replicas);
  MG_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank, " out of range for num_replicas ",
           num_replicas);
}

int64_t DistributedSampler::num_samples() const {
  // PyTorch: with drop_last and an uneven split, ceil((n - R) / R), which is floor(n / R).
  if (drop_last_ && n_ % replicas_ != 0) return n_ / replicas_;
  return (n_ + replicas_ - 1) / replicas_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  check_epoch_and_size("DistributedSampler", n_, epoch);
  std::vector<int64_t> order = shuffle_ ? permutation(n_, seed_, epoch) : identity(n_);
  size_t total = size_t(num_samples() * replicas_);
  // Padding repeats the order from its start, as often as needed when n < total - n.
  for (size_t i = 0; order.size() < total; ++i) {
    int64_t repeated = order[i];
    order.push_back(repeated);
  }
  order.resize(total);
  std::vector<int64_t> mine;
  for (size_t i = size_t(rank_); i < total; i += size_t(replicas_)) mine.push_back(order[i]);
  return mine;
}

}  // namespace mg::data
