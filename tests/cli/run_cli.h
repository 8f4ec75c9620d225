// tests/cli/run_cli.h — runs the built `multigrad` (MG_CLI_PATH) through the shell, as a user
// would, and captures its exit status, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace mg::test {

struct CliResult {
  int status = -1;  // exit status, or -1 when the process did not exit normally
  std::string out;
  std::string err;
};

// Runs `multigrad <args>` with `env` (e.g. "MG_CPU_DEVICES=3") on top of an environment
// cleared of the variables that change which devices exist.
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  static std::atomic<int> counter{0};
  const auto err_path = std::filesystem::temp_directory_path() /
                        ("mg_cli_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  const std::string command = "env -u MG_CPU_DEVICES -u MG_CUDA_LOGICAL_DEVICES " + env + " '" +
                              MG_CLI_PATH + "' " + args + " 2>'" + err_path.string() + "'";
  CliResult r;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
  const int wait_status = pclose(pipe);
  if (WIFEXITED(wait_status)) r.status = WEXITSTATUS(wait_status);
  std::ifstream err_file(err_path);
  r.err.assign(std::istreambuf_iterator<char>(err_file), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_path);
  return r;
}

inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A run of `multigrad train` or `eval` with its "key: value" summary lines parsed.
struct RunSummary {
  int status = -1;  // exit status, or -1 when the process did not exit normally
  std::string out;
  std::string err;
  std::map<std::string, std::string> summary;  // the final "key: value" lines
};

inline RunSummary parse_summary(CliResult result) {
  RunSummary r{result.status, std::move(result.out), std::move(result.err), {}};
  for (const std::string& line : lines(r.out)) {
    const size_t colon = line.find(": ");
    if (colon != std::string::npos && line.find(' ') == colon + 1) r.summary[line.substr(0, colon)] = line.substr(colon + 2);
  }
  return r;
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// stderr less the warning a run prints at its first GEMM when OpenBLAS runs kernels below the
// CPU's level (kernels/cpu/gemm_kernel.h): the environment of some machines forces them
// (OPENBLAS_CORETYPE), and the tests leave it as it is.
inline std::string without_gemm_warning(const std::string& err) {
  std::string kept;
  for (const std::string& line : lines(err))
    if (!(line.rfind("multigrad: warning: ", 0) == 0 && contains(line, "OpenBLAS runs its"))) kept += line + "\n";
  return kept;
}

// A failed run (a CliResult, or anything with its status, out and err): non-zero exit, one line
// on stderr (besides the slow-GEMM warning) containing every part.
template <class Result>
void require_one_line_error(const Result& r, const std::vector<std::string>& parts) {
  INFO("status " << r.status << "\nstdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.status > 0);
  REQUIRE(lines(without_gemm_warning(r.err)).size() == 1);
  for (const std::string& part : parts) {
    INFO("expected stderr to contain: " << part);
    CHECK(contains(r.err, part));
  }
}

// Writes `bytes` bytes of one sentence over and over to `path` (a text a tiny GPT learns quickly)
// and returns the path.
inline std::string write_sentences(const std::string& path, size_t bytes) {
  const std::string sentence = "the quick brown fox jumps over the lazy dog. ";
  std::string text;
  while (text.size() < bytes) text += sentence;
  text.resize(bytes);
  std::ofstream(path) << text;
  return path;
}

}  // namespace mg::test
