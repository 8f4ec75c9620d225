// parallel/data/buckets.cpp — reverse_buckets (see buckets.h).
#include "multigrad/parallel/data/buckets.h"

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

}  // namespace mg::parallel
