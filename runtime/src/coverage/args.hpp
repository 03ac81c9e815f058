// The arguments of `aotinfer coverage PACKAGE --model config.json [options]`.
#pragma once
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "aotinfer/arch.hpp"
#include "coverage/needs.hpp"

namespace aotinfer::coverage {

// A flag or argument the command cannot take; the message says what is allowed.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::filesystem::path package;
  std::filesystem::path model;  // --model: the model's config.json
  Options options;
  std::optional<Arch> arch;     // --arch; nullopt: the current GPU's
  bool json = false;
};

// `args` follow the command name. Throws UsageError.
Args parse_args(const std::vector<std::string>& args);

}  // namespace aotinfer::coverage
