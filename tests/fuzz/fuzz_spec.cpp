// Fuzz target: the spec reader, validation and expansion (generator/src/spec.cpp). The input is
// a spec file's text. The family schemas come from scanning templates/ once at start-up (Clang,
// ~0.6 s), plus the hand-built toy families of tests/unit/toy_families.hpp (a follower restricted
// to fewer values than its leader), and are reused for every input.
//
// parse_spec must either throw SpecError (whose message names the file) or return a spec whose
// every variant is a complete key of a known family with allowed values, in template order,
// whose URI parses back into the key, with no URI twice.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "aotinfer/arch.hpp"
#include "aotinfer/error.hpp"
#include "fuzz/fuzz_input.hpp"
#include "scanner.hpp"
#include "spec.hpp"
#include "unit/toy_families.hpp"

using namespace aotinfer;
using namespace aotinfer::gen;
using fuzz::finding;

namespace {

std::vector<FamilySchema> families;
constexpr const char* kFile = "specs/fuzz.json";

// The spec tests' toy families, with a head_dim value (-1) that checks negative integers.
std::vector<FamilySchema> toy_families() { return test::toy_families({"64", "128", "256", "-1"}); }

const FamilySchema* family_named(const std::string& name) {
  for (const auto& f : families)
    if (f.name == name) return &f;
  return nullptr;
}

void check(const Spec& spec) {
  if (spec.file != kFile) finding("the spec's file is '" + spec.file + "'");
  if (spec.package_name.empty() || spec.package_version.empty()) finding("an empty package name or version was accepted");
  if (spec.archs.empty()) finding("a spec without archs was accepted");
  std::set<std::string> archs(spec.archs.begin(), spec.archs.end());
  if (archs.size() != spec.archs.size()) finding("a duplicate arch was accepted");
  for (const auto& a : spec.archs)
    if (!Arch::parse(a)) finding("unknown arch '" + a + "' was accepted");
  if (spec.sha256.size() != 64 || spec.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
    finding("the spec's sha256 is '" + spec.sha256 + "'");
  if (spec.variants.empty()) finding("a spec without variants was accepted");

  std::set<std::string> uris;
  for (const auto& key : spec.variants) {
    const std::string uri = key.uri();
    const FamilySchema* f = family_named(key.family);
    if (!f) finding(uri + ": unknown family");
    if (key.axes.size() != f->axes.size()) finding(uri + ": not every axis of the family is set");
    for (std::size_t i = 0; i < key.axes.size(); ++i) {
      if (key.axes[i].name != f->axes[i].name) finding(uri + ": axes out of template order");
      if (!f->axes[i].allows(key.axes[i].value)) finding(uri + ": value '" + key.axes[i].value + "' is not allowed");
    }
    try {
      if (VariantKey::from_uri(uri) != key) finding(uri + ": the URI does not parse back into the key");
    } catch (const Error& e) {
      finding(uri + ": the URI of an accepted variant does not parse: " + e.what());
    }
    if (!uris.insert(uri).second) finding(uri + ": produced twice");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  try {
    families = scan_templates({.templates_dir = AOTINFER_SOURCE_DIR "/templates", .cuda_home = AOTINFER_CUDA_HOME, .include_dirs = {}});
  } catch (const std::exception& e) {
    finding(std::string("scanning the templates failed: ") + e.what());
  }
  if (families.empty()) finding("the scanner found no families in " AOTINFER_SOURCE_DIR "/templates");
  for (auto& f : toy_families()) families.push_back(std::move(f));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check(parse_spec(text, kFile, families));
  } catch (const SpecError& e) {
    if (fuzz::verbose()) std::fprintf(stderr, "SpecError: %s\n", e.what());
    if (std::string_view(e.what()).substr(0, std::string_view(kFile).size()) != kFile)
      finding(std::string("a SpecError does not start with the file name: ") + e.what());
  } catch (const std::exception& e) {
    finding(std::string("parse_spec threw ") + typeid(e).name() + ", not SpecError: " + e.what());
  }
  return 0;
}
