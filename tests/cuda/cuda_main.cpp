// tests/cuda/cuda_main.cpp — the main of mg_cuda_tests (CUDA against CPU, label `cuda`).
//
// Without a CUDA device the binary prints why and exits 77, which tests/CMakeLists.txt declares
// as ctest's SKIP_RETURN_CODE: ctest reports the tests skipped, not passed. So does a run whose
// every test case called skip_test (cuda_test_util.h): ctest runs one test case per process.
// Listing the tests (what catch_discover_tests does at test time) works everywhere.
//
// Unless the environment says otherwise, the tests run with MG_CUDA_LOGICAL_DEVICES=2 so that
// cross-device code (cuda:0 <-> cuda:1 copies, per-device streams and allocators) is exercised
// on a machine with a single GPU; every other test uses cuda:0 only.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cuda/cuda_test_util.h"
#include "multigrad/multigrad.h"

namespace mg::test {

std::vector<std::string>& skipped_tests() {
  static std::vector<std::string> skipped;
  return skipped;
}

void skip_test(const std::string& why) {
  skipped_tests().push_back(Catch::getResultCapture().getCurrentTestName() + ": " + why);
  WARN("skipped: " << why);
}

}  // namespace mg::test

namespace {

// Counts the test cases a run starts, to tell a run of skipped tests from one that passed.
struct TestCaseCounter : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  static inline int started = 0;
  void testCaseStarting(const Catch::TestCaseInfo&) override { ++started; }
};
CATCH_REGISTER_LISTENER(TestCaseCounter)

inline constexpr int kSkipReturnCode = 77;  // ctest SKIP_RETURN_CODE

bool only_listing(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--list", 0) == 0 || arg == "-l" || arg == "-t") return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (!only_listing(argc, argv)) {
    setenv("MG_CUDA_LOGICAL_DEVICES", "2", /*overwrite=*/0);
    if (mg::device_count(mg::DeviceType::CUDA) == 0) {
      std::printf("skipped: no CUDA device (%s)\n", mg::cuda_unavailable_reason().c_str());
      return kSkipReturnCode;
    }
  }
  const int failed = Catch::Session().run(argc, argv);
  const auto& skipped = mg::test::skipped_tests();
  for (const std::string& s : skipped) std::printf("skipped: %s\n", s.c_str());
  if (failed == 0 && !skipped.empty() && int(skipped.size()) == TestCaseCounter::started) return kSkipReturnCode;
  return failed;
}
