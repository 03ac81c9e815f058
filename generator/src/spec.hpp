// Spec files (docs/SPEC.md): read, validate against the family schemas, expand into variants.
#pragma once
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "aotinfer/variant.hpp"
#include "schema.hpp"

namespace aotinfer::gen {

inline constexpr int kSpecFormat = 1;

// A spec the generator refuses. The message reads "<file>:<line>:<col>: ..." for malformed
// JSON and "<file>: <JSON pointer>: ..." otherwise, and says what is allowed.
struct SpecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Spec {
  std::string file;  // as given; messages and the manifest use it
  std::string package_name;
  std::string package_version;
  std::vector<std::string> archs;   // in spec order
  std::string ptx;                  // PTX arch embedded as a forward-compatible fallback, "" for none
  std::vector<std::string> sass_from_ptx;  // archs whose SASS ptxas builds from `ptx` (no front-end pass of their own)
  std::map<std::string, std::vector<std::string>> family_sass_from_ptx;  // a family's own list, replacing the above
  const std::vector<std::string>& sass_from_ptx_of(const std::string& family) const {
    auto it = family_sass_from_ptx.find(family);
    return it == family_sass_from_ptx.end() ? sass_from_ptx : it->second;
  }
  std::string sha256;               // of the canonical (sorted, compact) JSON
  // Not a spec field: aotinfer-gen --lineinfo. Every compile adds -lineinfo, so that
  // compute-sanitizer and ncu name source lines; the code is optimised as without it.
  bool lineinfo = false;
  std::vector<VariantKey> variants; // every axis filled in, template-parameter order
};

Spec parse_spec(std::string_view text, const std::string& file, const std::vector<FamilySchema>& families);
Spec load_spec(const std::filesystem::path& file, const std::vector<FamilySchema>& families);

}  // namespace aotinfer::gen
