// What the coverage tests share: the fixture models (tests/fixtures/models) and the families
// of the real templates, as the generator records them in a manifest.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "aotinfer/manifest.hpp"
#include "coverage/model_config.hpp"
#include "fake_package.hpp"
#include "scanner.hpp"

namespace aotinfer::test {

inline std::filesystem::path fixture_config(const std::string& model) {
  return std::filesystem::path(AOTINFER_TEST_FIXTURES) / "models" / model / "config.json";
}

inline coverage::ModelConfig fixture_model(const std::string& model) { return coverage::load_model_config(fixture_config(model)); }

// Scanned once: a scan parses every template with Clang.
inline const std::vector<gen::FamilySchema>& scanned_templates() {
  static const std::vector<gen::FamilySchema> families =
      gen::scan_templates({.templates_dir = AOTINFER_SOURCE_DIR "/templates", .cuda_home = AOTINFER_CUDA_HOME, .include_dirs = {}});
  return families;
}

inline const std::vector<ManifestFamily>& template_families() {
  static const std::vector<ManifestFamily> families = [] {
    std::vector<ManifestFamily> out;
    for (const auto& f : scanned_templates()) out.push_back(gen::manifest_family(f));
    return out;
  }();
  return families;
}

// Makes `fake` a package of the real templates' families holding exactly `keys`, each with code
// for `archs`.
inline void hold_variants(FakePackage& fake, const std::vector<VariantKey>& keys, const std::vector<std::string>& archs) {
  fake.manifest.variants.clear();
  fake.manifest.archs = archs;
  for (const auto& key : keys) {
    fake.add(key);
    fake.manifest.variants.back().archs = archs;
  }
  fake.manifest.families = template_families();
  fake.write();
}

}  // namespace aotinfer::test
