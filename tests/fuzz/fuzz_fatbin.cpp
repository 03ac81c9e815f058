// Fuzz target: the fatbin table-of-contents reader (runtime/src/core/fatbin.cpp) on arbitrary
// bytes. read_fatbin_entries must either throw Error(corrupt_package) or return at least one
// entry, each a SASS "sm_<n>[a|f]" or PTX "compute_<n>[a|f]" arch whose payload lies inside the
// input; fatbin_sass_archs / fatbin_ptx_archs must agree with it (the archs of each kind, without
// duplicates, SASS sorted like sort_arch_names).
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
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.remove_suffix(1);
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
  std::set<std::string> sass, ptx;
  for (const auto& e : entries) {
    const bool ok = e.kind == FatbinEntry::Kind::sass ? arch_text(e.arch, "sm_") : arch_text(e.arch, "compute_");
    if (!ok) finding("entry arch '" + e.arch + "' is not sm_<n>[a|f] / compute_<n>[a|f]");
    (e.kind == FatbinEntry::Kind::sass ? sass : ptx).insert(e.arch);
    const char* begin = e.payload.data();
    if (begin < bytes.data() || begin + e.payload.size() > bytes.data() + bytes.size())
      finding("entry " + e.arch + "'s payload lies outside the input");
  }
  std::vector<std::string> ptx_archs;
  try {
    ptx_archs = fatbin_ptx_archs(bytes);
  } catch (const std::exception& e) {
    finding(std::string("fatbin_ptx_archs refused bytes read_fatbin_entries read: ") + e.what());
  }
  if (std::set<std::string>(ptx_archs.begin(), ptx_archs.end()) != ptx || ptx_archs.size() != ptx.size())
    finding("fatbin_ptx_archs is not the set of PTX entry archs");
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
