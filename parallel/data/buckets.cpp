// parallel/data/buckets.cpp — reverse_buckets and flat_layout (see buckets.h).
#include "multigrad/parallel/data/buckets.h"

#include <algorithm>

namespace mg::parallel {

std::vector<std::vector<size_t>> reverse_buckets(const std::vector<Tensor>& params, double first_cap_mb,
                                                 double cap_mb) {
  constexpr double kBytesPerMiB = 1024.0 * 1024.0;
  std::vector<std::vector<size_t>> buckets;
  double filled = 0;  // bytes in the last group
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k];
    const double bytes = double(p.numel()) * double(p.element_size());
    const double cap = (buckets.size() <= 1 ? first_cap_mb : cap_mb) * kBytesPerMiB;
    const bool fits = !buckets.empty() && params[buckets.back().front()].dtype() == p.dtype() && filled + bytes <= cap;
    if (!fits) {
      buckets.emplace_back();
      filled = 0;
    }
    filled += bytes;
    buckets.back().push_back(k);
  }
  return buckets;
}

FlatLayout flat_layout(const std::vector<Tensor>& params, const std::vector<size_t>& group, int64_t align_bytes,
                       int64_t multiple) {
  const auto round_up = [](int64_t n, int64_t to) { return (n + to - 1) / to * to; };
  FlatLayout layout;
  for (size_t k : group) {
    const Tensor& p = params[k];
    const int64_t align = std::max<int64_t>(1, align_bytes / int64_t(p.element_size()));
    layout.params.push_back(k);
    layout.offsets.push_back(layout.numel);
    layout.numel += round_up(p.numel(), align);  // the next member starts aligned
  }
  layout.numel = round_up(layout.numel, multiple);
  return layout;
}

}  // namespace mg::parallel
