// A consumer of the installed package: multiplies two small matrices and checks the result.
#include <cmath>
#include <cstdio>
#include <vector>

#include "multigrad.h"

int main() {
  // (2, 3) @ (3, 2), plus a scalar
  mg::Tensor a = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  mg::Tensor b = mg::tensor({7.f, 8.f, 9.f, 10.f, 11.f, 12.f}, {3, 2});
  const std::vector<float> got = (mg::matmul(a, b) + 1.0).to_vector<float>();
  const std::vector<float> want = {59.f, 65.f, 140.f, 155.f};
  if (got.size() != want.size()) {
    std::fprintf(stderr, "consumer: %zu elements, expected %zu\n", got.size(), want.size());
    return 1;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > 1e-5f) {
      std::fprintf(stderr, "consumer: element %zu is %g, expected %g\n", i, double(got[i]),
                   double(want[i]));
      return 1;
    }
  }
  std::printf("consumer: matmul(a, b) + 1 = [[%g, %g], [%g, %g]] as expected\n", got[0], got[1],
              got[2], got[3]);
  return 0;
}
