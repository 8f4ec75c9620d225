// A consumer of the installed package: multiplies two small matrices and checks the result. It
// has headers of its own named as multigrad's folders (include/core/error.h, include/data/data.h)
// on its include path, ahead of multigrad's: multigrad's headers, all spelled "multigrad/...",
// never reach them.
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "data/data.h"
#include "multigrad/multigrad.h"

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
  // Designated initializers naming some fields only, as research code writes options: with the
  // -Wextra above, a field without a default would be a -Wmissing-field-initializers error.
  const mg::data::DataLoaderOptions loader{.batch_size = 2, .shuffle = true};
  const mg::parallel::PipelineOptions pipeline{.schedule = "gpipe", .micro_batches = 2};
  const mg::io::Checkpoint checkpoint{.step = 3};
  const mg::optim::ParamGroup group{.params = {a}};
  const mg::optim::OptimizerState state{.options = {{"lr", 0.1}}};
  if (loader.batch_size != 2 || pipeline.micro_batches != 2 || checkpoint.step != 3 || group.params.size() != 1 ||
      state.options.size() != 1) {
    std::fprintf(stderr, "consumer: options lost a designated field\n");
    return 1;
  }
  // Every public header comes with multigrad.h: SHA-256 of "abc" (FIPS 180-4's example).
  mg::io::Sha256 sha;
  sha.update("abc", 3);
  if (sha.hex_digest() != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") {
    std::fprintf(stderr, "consumer: sha256(\"abc\") is %s\n", sha.hex_digest().c_str());
    return 1;
  }
  if (consumer::error_code() != 7 || consumer::batch_size() != 4) {
    std::fprintf(stderr, "consumer: its own core/error.h and data/data.h were not the ones included\n");
    return 1;
  }
  std::printf("consumer: matmul(a, b) + 1 = [[%g, %g], [%g, %g]] as expected\n", got[0], got[1],
              got[2], got[3]);
  return 0;
}
