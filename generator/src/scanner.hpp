// The template scanner: parses the kernel templates with Clang (as CUDA, host side) and returns
// the schema of every family whose entry template carries AOTINFER_FAMILY.
#pragma once
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "schema.hpp"

namespace aotinfer::gen {

struct ScanOptions {
  std::filesystem::path templates_dir;  // scanned: every *.cuh directly inside it
  std::filesystem::path cuda_home = "/usr/local/cuda";
  // Searched after templates_dir for #include "..." (tests scan fixtures that include the real
  // templates' aotinfer/annotate.h).
  std::vector<std::filesystem::path> include_dirs;
};

// A template the scanner cannot accept; the message starts with file:line.
struct ScanError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Families sorted by name. Throws ScanError.
std::vector<FamilySchema> scan_templates(const ScanOptions& options);

}  // namespace aotinfer::gen
