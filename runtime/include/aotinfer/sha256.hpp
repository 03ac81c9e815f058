// SHA-256 (FIPS 180-4), used for package checksums and spec hashes.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace aotinfer {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex_digest();  // finishes the hash; the object must not be updated afterwards

 private:
  void compress(const std::uint8_t* block);
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view data);

}  // namespace aotinfer
