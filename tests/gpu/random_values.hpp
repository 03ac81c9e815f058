// Random test data on the host: elements of every dtype the kernels read (16-bit and fp8),
// drawn uniformly and kept with their encodings, and small sampling helpers.
#pragma once
#include <cuda_fp8.h>

#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "gpu_test_util.hpp"

namespace gpu_test {

using aotinfer::DType;

inline void encode(double x, DType t, std::uint8_t* dst) {
  if (t == DType::f16 || t == DType::bf16) {
    const std::uint16_t bits = to_bits(x, t);
    std::memcpy(dst, &bits, 2);
  } else if (t == DType::e4m3) {
    *dst = __nv_fp8_e4m3(float(x)).__x;
  } else if (t == DType::e5m2) {
    *dst = __nv_fp8_e5m2(float(x)).__x;
  } else {
    FAIL("no host encoding for " << aotinfer::dtype_name(t));
  }
}

inline double decode_element(const std::uint8_t* src, DType t) {
  if (t == DType::f16 || t == DType::bf16) {
    std::uint16_t bits;
    std::memcpy(&bits, src, 2);
    return from_bits(bits, t);
  }
  if (t == DType::e4m3) {
    __nv_fp8_e4m3 v;
    v.__x = *src;
    return float(v);
  }
  if (t == DType::e5m2) {
    __nv_fp8_e5m2 v;
    v.__x = *src;
    return float(v);
  }
  FAIL("no host decoding for " << aotinfer::dtype_name(t));
  return 0;
}

inline bool is_fp8(DType t) { return t == DType::e4m3 || t == DType::e5m2; }

// Values of a dtype drawn uniformly from [-range, range] and rounded to it, kept with their
// encodings in a table: filling the millions of elements of a case then costs a table lookup.
class Values {
 public:
  Values(std::mt19937_64& rng, DType dtype, double range = 2)
      : dtype_(dtype), size_(aotinfer::dtype_size(dtype)), state_(rng()), bytes_(kTable * size_), values_(kTable) {
    std::uniform_real_distribution<double> u(-range, range);
    for (int i = 0; i < kTable; ++i) {
      encode(u(rng), dtype, &bytes_[i * size_]);
      values_[i] = decode_element(&bytes_[i * size_], dtype);
    }
  }
  // n elements: encodings to bytes (n * element size), values to `values` (may be null).
  void fill(std::uint8_t* bytes, double* values, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::size_t j = next() & (kTable - 1);
      std::memcpy(bytes + i * size_, &bytes_[j * size_], size_);
      if (values) values[i] = values_[j];
    }
  }
  DType dtype() const { return dtype_; }

 private:
  static constexpr int kTable = 4096;
  std::uint64_t next() {  // splitmix64
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  DType dtype_;
  std::size_t size_;
  std::uint64_t state_;
  std::vector<std::uint8_t> bytes_;
  std::vector<double> values_;
};

template <typename T>
T uniform(std::mt19937_64& rng, T lo, T hi) {
  if constexpr (std::is_integral_v<T>) return std::uniform_int_distribution<T>(lo, hi)(rng);
  else return std::uniform_real_distribution<T>(lo, hi)(rng);
}

template <typename T>
T pick(std::mt19937_64& rng, const std::vector<T>& options) {
  return options[uniform<std::size_t>(rng, 0, options.size() - 1)];
}

}  // namespace gpu_test
