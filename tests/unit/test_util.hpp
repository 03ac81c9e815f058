// Helpers shared by the CPU tests.
#pragma once
#include "catch.hpp"
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <sys/wait.h>

#include "aotinfer/error.hpp"

namespace aotinfer::test {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("aotinfer-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// Runs `f`, which must throw aotinfer::Error, and returns that error.
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no aotinfer::Error was thrown");
  return Error(ErrorCode::invalid_argument, "");
}

// Runs `f`, which must throw Error(invalid_argument), and returns its message.
template <typename F>
std::string invalid_argument_message(F&& f) {
  const Error e = error_of(f);
  INFO(e.what());
  CHECK(e.code() == ErrorCode::invalid_argument);
  return e.what();
}

using aotinfer_test::NamesNumber;

#ifdef AOTINFER_CLI_EXE
struct Run {
  int status = -1;
  std::string output;  // stdout and stderr
};

// Runs the aotinfer CLI with `args` (shell words) and collects what it printed.
inline Run cli(const std::string& args) {
  Run r;
  if (FILE* p = ::popen((std::string(AOTINFER_CLI_EXE) + " " + args + " 2>&1").c_str(), "r")) {
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
    const int status = ::pclose(p);
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return r;
}
#endif

}  // namespace aotinfer::test
