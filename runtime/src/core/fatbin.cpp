#include "aotinfer/fatbin.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "aotinfer/arch.hpp"
#include "aotinfer/error.hpp"

namespace aotinfer {
namespace {

// Layout as nvcc 13 writes it (little-endian): a 16-byte container header, then entries, each
// a header (its own size at +4) followed by its payload (size at +8).
constexpr std::uint32_t kMagic = 0xBA55ED50;
constexpr std::uint16_t kKindPtx = 1, kKindElf = 2;
constexpr std::uint64_t kFlagCompressed = 0x8000, kFlagArchSpecific = 0x100000, kFlagFamily = 0x200000;

template <typename T>
T load(std::string_view bytes, std::size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

[[noreturn]] void corrupt(const std::string& why) {
  throw Error(ErrorCode::corrupt_package, "not a valid CUDA fatbin: " + why);
}

}  // namespace

std::vector<FatbinEntry> read_fatbin_entries(std::string_view bytes) {
  std::vector<FatbinEntry> entries;
  std::size_t container = 0;
  while (container < bytes.size()) {
    if (bytes.size() - container < 16) corrupt("truncated container header");
    if (load<std::uint32_t>(bytes, container) != kMagic) corrupt("bad magic number");
    std::uint16_t header_size = load<std::uint16_t>(bytes, container + 6);
    std::uint64_t body_size = load<std::uint64_t>(bytes, container + 8);
    // Compared without adding first: a garbage body size must not wrap around (and loop forever).
    const std::size_t left = bytes.size() - container;
    if (header_size < 16 || header_size > left || body_size > left - header_size)
      corrupt("container size exceeds the file");
    std::size_t end = container + header_size + body_size;
    for (std::size_t e = container + header_size; e < end;) {
      if (end - e < 64) corrupt("truncated entry header");
      std::uint16_t kind = load<std::uint16_t>(bytes, e);
      std::uint32_t entry_header = load<std::uint32_t>(bytes, e + 4);
      std::uint64_t payload = load<std::uint64_t>(bytes, e + 8);
      std::uint32_t arch = load<std::uint32_t>(bytes, e + 28);
      std::uint64_t flags = load<std::uint64_t>(bytes, e + 40);
      if (entry_header < 64 || entry_header > end - e || payload > end - e - entry_header)
        corrupt("entry size exceeds its container");
      const std::uint64_t uncompressed = load<std::uint64_t>(bytes, e + 56);
      const std::string suffix =
          std::to_string(arch) + ((flags & kFlagArchSpecific) ? "a" : (flags & kFlagFamily) ? "f" : "");
      const std::string_view image = bytes.substr(e + entry_header, payload);
      const bool compressed = flags & kFlagCompressed;
      if (kind == kKindElf)
        entries.push_back({FatbinEntry::Kind::sass, "sm_" + suffix, compressed, image, uncompressed});
      else if (kind == kKindPtx)
        entries.push_back({FatbinEntry::Kind::ptx, "compute_" + suffix, compressed, image, uncompressed});
      e += entry_header + payload;
    }
    container = end;
  }
  if (entries.empty()) corrupt("no code entries");
  return entries;
}

namespace {

std::vector<std::string> archs_of_kind(std::string_view bytes, FatbinEntry::Kind kind) {
  std::vector<std::string> archs;
  for (const auto& e : read_fatbin_entries(bytes))
    if (e.kind == kind) archs.push_back(e.arch);
  std::sort(archs.begin(), archs.end());
  archs.erase(std::unique(archs.begin(), archs.end()), archs.end());
  return archs;
}

}  // namespace

std::vector<std::string> fatbin_sass_archs(std::string_view bytes) {
  std::vector<std::string> archs = archs_of_kind(bytes, FatbinEntry::Kind::sass);
  sort_arch_names(archs);
  return archs;
}

std::vector<std::string> fatbin_ptx_archs(std::string_view bytes) {
  std::vector<std::string> archs = archs_of_kind(bytes, FatbinEntry::Kind::ptx);
  const auto& known = known_ptx_names();
  auto rank = [&](const std::string& n) { return std::find(known.begin(), known.end(), n) - known.begin(); };
  std::stable_sort(archs.begin(), archs.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return archs;
}

}  // namespace aotinfer
