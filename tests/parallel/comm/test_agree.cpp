// tests/parallel/comm/test_agree.cpp — check_ranks_agree (parallel/comm/agree.h) over the local backend:
// ranks started alike pass, and a setting that differs, or that only some ranks have, is the
// same error on every rank, naming it and each rank's value.
#include <mutex>
#include <string>
#include <vector>

#include "core/cpu_devices_guard.h"
#include "multigrad/parallel/comm/agree.h"
#include "multigrad/parallel/comm/local.h"
#include "parallel/parallel_test_util.h"
#include "test_util.h"

using mg::parallel::Communicator;
using mg::parallel::Settings;

namespace {

// What check_ranks_agree said on each rank ("" when it returned), with rank r's settings from
// settings_of(r).
template <class SettingsOf>
std::vector<std::string> errors_on_ranks(int ranks, SettingsOf settings_of) {
  std::vector<std::string> errors(size_t(ranks), "not run");
  std::mutex mutex;
  mg::parallel::run_ranks(mg::test::cpu_devices(ranks), [&](Communicator& comm) {
    std::string error;
    try {
      mg::parallel::check_ranks_agree(comm, settings_of(comm.rank()));
    } catch (const mg::Error& e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> lock(mutex);
    errors[size_t(comm.rank())] = error;
  });
  return errors;
}

}  // namespace

TEST_CASE("check_ranks_agree returns on every rank when the settings agree", "[parallel][agree]") {
  mg::test::CpuDevicesGuard guard(3);
  const Settings same = {{"--batch-size", "64"}, {"--data", "/a folder/with spaces"}, {"--lr", ""}};
  CHECK(errors_on_ranks(3, [&](int) { return same; }) == std::vector<std::string>(3, ""));
  CHECK(errors_on_ranks(2, [](int) { return Settings{}; }) == std::vector<std::string>(2, ""));
}

TEST_CASE("check_ranks_agree names the first setting that differs and every rank's value, on every rank",
          "[parallel][agree]") {
  mg::test::CpuDevicesGuard guard(3);
  const auto errors = errors_on_ranks(3, [](int rank) {
    return Settings{{"--seed", "1"}, {"--batch-size", rank == 1 ? "32" : "64"}, {"--lr", rank == 2 ? "0.5" : "0.1"}};
  });
  for (const std::string& e : errors)
    CHECK(e == "the ranks disagree on --batch-size: rank 0 has '64', rank 1 has '32', rank 2 has '64' "
               "(start every rank with the same settings)");
  // A long value on one rank only (the texts differ in length).
  const auto longer = errors_on_ranks(2, [](int rank) {
    return Settings{{"--data", rank == 0 ? "d" : std::string(1000, 'x')}};
  });
  for (const std::string& e : longer)
    mg::test::require_contains(e, {"the ranks disagree on --data: rank 0 has 'd', rank 1 has 'xxx"});
}

TEST_CASE("check_ranks_agree names a setting that only some ranks have", "[parallel][agree]") {
  mg::test::CpuDevicesGuard guard(2);
  const auto errors = errors_on_ranks(2, [](int rank) {
    Settings s = {{"--optimizer", "sgd"}};
    if (rank == 1) s.emplace_back("--momentum", "0.9");
    return s;
  });
  for (const std::string& e : errors)
    CHECK(e == "the ranks disagree on --momentum: rank 0 has none, rank 1 has '0.9' (start every rank with the same "
               "settings)");
}
