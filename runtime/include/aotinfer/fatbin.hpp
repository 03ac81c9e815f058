// Reads the table of contents of a CUDA fatbin: which archs it holds code for.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace aotinfer {

struct FatbinEntry {
  enum class Kind { sass, ptx } kind;
  std::string arch;  // "sm_90a" for SASS; "compute_90" for PTX
  bool compressed = false;
};

// Throws Error(corrupt_package) when the bytes are not a fatbin.
std::vector<FatbinEntry> read_fatbin_entries(std::string_view bytes);

// The SASS archs (sorted, unique), e.g. {"sm_80", "sm_90a"}.
std::vector<std::string> fatbin_sass_archs(std::string_view bytes);

}  // namespace aotinfer
