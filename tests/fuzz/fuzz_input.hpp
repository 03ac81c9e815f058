// Decoding a fuzz input into numbers for the planner targets. Values are read front to back; an
// exhausted input reads as zeros. Integers use a small variable-length code that keeps common
// small values one byte long while still reaching every 32-bit value (tests/fuzz/seeds.py writes
// the same code):
//   0x00..0xBF             the value itself (0..191)
//   0xC0..0xDF  b1         ((tag & 0x1f) << 8) | b1            (0..8191)
//   0xE0..0xEF  b1 b2      ((tag & 0x0f) << 16) | b1 | b2 << 8 (0..1048575)
//   0xF0..0xFE  4 bytes    any int32, little-endian
//   0xFF        8 bytes    any int64, little-endian (num64 only; num reads its low 32 bits)
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "aotinfer/error.hpp"

namespace aotinfer::fuzz {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::size_t left() const { return size_ - at_; }
  bool empty() const { return at_ >= size_; }

  std::uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }

  std::int64_t num64() {
    const std::uint8_t tag = byte();
    if (tag < 0xC0) return tag;
    if (tag < 0xE0) return std::int64_t(tag & 0x1f) << 8 | byte();
    if (tag < 0xF0) {
      const std::int64_t lo = byte();
      const std::int64_t hi = byte();
      return std::int64_t(tag & 0x0f) << 16 | hi << 8 | lo;
    }
    std::uint64_t v = 0;
    const int n = tag == 0xFF ? 8 : 4;
    for (int i = 0; i < n; ++i) v |= std::uint64_t(byte()) << (8 * i);
    if (n == 4) return std::int32_t(std::uint32_t(v));
    std::int64_t s;
    std::memcpy(&s, &v, sizeof s);
    return s;
  }

  std::int32_t num() { return std::int32_t(std::uint32_t(std::uint64_t(num64()))); }

  // A value in [lo, hi], for quantities a real device or kernel fixes (SM counts, tile sizes):
  // the fuzzer explores them without reaching configurations no GPU has.
  std::int32_t in_range(std::int32_t lo, std::int32_t hi) {
    const std::uint32_t span = std::uint32_t(hi - lo) + 1;
    return lo + std::int32_t(std::uint32_t(num()) % span);
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

// A broken promise: print it and abort, which libFuzzer reports as a crash with this input.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "\n==aotinfer fuzz finding== %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// AOTINFER_FUZZ_VERBOSE=1, for running one input (fuzz_X INPUT): say where it ends and what it planned.
inline bool verbose() {
  static const bool on = std::getenv("AOTINFER_FUZZ_VERBOSE") != nullptr;
  return on;
}

// Where an input ends (when verbose); returns 0 for LLVMFuzzerTestOneInput to return.
inline int stop(const char* where) {
  if (verbose()) std::fprintf(stderr, "input ends: %s\n", where);
  return 0;
}

// Runs f; returns whether it threw aotinfer::Error (its message into *message when given). Any
// Error must be invalid_argument: the planners refuse bad input, nothing else.
template <typename F>
bool refused(const char* what, F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument)
      finding(std::string(what) + " threw error code " + std::to_string(int(e.code())) + ", not invalid_argument: " + e.what());
    if (message) *message = e.what();
    return true;
  }
  return false;
}

}  // namespace aotinfer::fuzz
