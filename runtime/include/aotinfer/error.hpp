// Errors raised by aotinfer. Every message says what was wrong and what to do next; the code
// lets C and Python callers branch without parsing text.
#pragma once
#include <stdexcept>
#include <string>

namespace aotinfer {

enum class ErrorCode {
  invalid_argument = 1,  // a caller passed something the contract forbids
  not_found = 2,         // no such variant / file / entry point
  corrupt_package = 3,   // checksum mismatch, unreadable manifest, bad fatbin
  no_driver = 4,         // libcuda could not be opened or initialised
  no_device = 5,         // no GPU, or no current context and none could be made
  unsupported_arch = 6,  // the package holds no code for this GPU
  cuda_error = 7,        // a driver call failed
  io_error = 8,          // reading or writing a file failed
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace aotinfer
