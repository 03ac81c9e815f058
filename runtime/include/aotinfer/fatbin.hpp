// Reads the table of contents of a CUDA fatbin: which archs it holds code for, and where.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace aotinfer {

struct FatbinEntry {
  enum class Kind { sass, ptx } kind;
  std::string arch;  // "sm_90a" / "sm_100f" for SASS; "compute_90" for PTX
  bool compressed = false;
  std::string_view payload;             // the image (an ELF cubin or PTX text), zstd-compressed when `compressed`
  std::uint64_t uncompressed_size = 0;  // of the image, as the entry header records it
};

// Throws Error(corrupt_package) when the bytes are not a fatbin.
std::vector<FatbinEntry> read_fatbin_entries(std::string_view bytes);

// The SASS archs (sorted, unique), e.g. {"sm_80", "sm_90a"}.
std::vector<std::string> fatbin_sass_archs(std::string_view bytes);

// The PTX archs (sorted, unique), e.g. {"compute_80"}.
std::vector<std::string> fatbin_ptx_archs(std::string_view bytes);

}  // namespace aotinfer
