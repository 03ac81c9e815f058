// Fuzz target: the fatbin table-of-contents reader (runtime/src/core/fatbin.cpp) on arbitrary
// bytes. read_fatbin_entries must either throw Error(corrupt_package) or return at least one
// entry, each a SASS "sm_<n>[a]" or PTX "compute_<n>[a]" arch; fatbin_sass_archs must agree with
// it (the SASS archs, without duplicates, sorted like sort_arch_names).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "aotinfer/arch.hpp"
#include "aotinfer/error.hpp"
#include "aotinfer/fatbin.hpp"
#include "fuzz/fuzz_input.hpp"

using namespace aotinfer;
using fuzz::finding;

namespace {

bool arch_text(const std::string& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  std::string_view digits = std::string_view(s).substr(prefix.size());
  if (!digits.empty() && digits.back() == 'a') digits.remove_suffix(1);
  return !digits.empty() && digits.size() <= 10 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::vector<FatbinEntry> entries;
  try {
    entries = read_fatbin_entries(bytes);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::corrupt_package) finding(std::string("read_fatbin_entries threw ") + e.what());
    try {
      fatbin_sass_archs(bytes);
      finding("fatbin_sass_archs accepted bytes read_fatbin_entries refused");
    } catch (const Error&) {
    }
    return 0;
  } catch (const std::exception& e) {
    finding(std::string("read_fatbin_entries threw ") + typeid(e).name() + ", not aotinfer::Error: " + e.what());
  }
  if (entries.empty()) finding("read_fatbin_entries returned no entries");
  if (entries.size() > size / 64) finding("more entries than 64-byte entry headers fit in the input");
  std::set<std::string> sass;
  for (const auto& e : entries) {
    const bool ok = e.kind == FatbinEntry::Kind::sass ? arch_text(e.arch, "sm_") : arch_text(e.arch, "compute_");
    if (!ok) finding("entry arch '" + e.arch + "' is not sm_<n>[a] / compute_<n>[a]");
    if (e.kind == FatbinEntry::Kind::sass) sass.insert(e.arch);
  }
  std::vector<std::string> archs;
  try {
    archs = fatbin_sass_archs(bytes);
  } catch (const std::exception& e) {
    finding(std::string("fatbin_sass_archs refused bytes read_fatbin_entries read: ") + e.what());
  }
  if (std::set<std::string>(archs.begin(), archs.end()) != sass || archs.size() != sass.size())
    finding("fatbin_sass_archs is not the set of SASS entry archs");
  std::vector<std::string> sorted = archs;
  sort_arch_names(sorted);
  if (sorted != archs) finding("fatbin_sass_archs is not sorted by sort_arch_names");
  return 0;
}
