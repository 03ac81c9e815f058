// A kernel package made in a temp dir without nvcc: manifest.json plus one small fake fatbin per
// variant, with the sizes and checksums the generator would record. Package::open, queries,
// verify() and the file checks of kernel() never need more; loading stops at the driver.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "aotinfer/files.hpp"
#include "aotinfer/json.hpp"
#include "aotinfer/manifest.hpp"
#include "aotinfer/sha256.hpp"
#include "test_util.hpp"

namespace aotinfer::test {

struct FakePackage {
  TempDir tmp;
  std::filesystem::path dir = tmp.path / "package";
  Manifest manifest;

  FakePackage() {
    manifest.generator = "aotinfer-gen 0.1.0";
    manifest.package_name = "fake-kernels";
    manifest.package_version = "0.0.1";
    manifest.spec_file = "fake.aotinfer.json";
    manifest.spec_sha256 = sha256_hex("spec");
    manifest.archs = {"sm_80", "sm_90a"};
    add({"merge_state", {{"dtype", "bf16"}, {"head_dim", "64"}}});
    add({"merge_state", {{"dtype", "bf16"}, {"head_dim", "128"}}});
    add({"merge_state", {{"dtype", "f16"}, {"head_dim", "64"}}});
    add({"merge_state", {{"dtype", "f16"}, {"head_dim", "256"}}});
    add({"rms_norm", {{"dtype", "bf16"}, {"hidden", "4096"}}}, "norm");
    write();
  }

  void add(VariantKey key, const std::string& entry = "merge") {
    ManifestVariant v;
    v.entries = {{entry, entry_symbol(key, entry), launch_symbol(key, entry)}};
    v.file = "kernels/" + key.uri() + ".fatbin";
    const std::string content = "not really a fatbin: " + key.uri() + "\n";
    write_file_atomic(dir / v.file, content);
    v.size = content.size();
    v.sha256 = sha256_hex(content);
    v.archs = {"sm_80"};
    v.key = std::move(key);
    manifest.variants.push_back(std::move(v));
  }

  // Records the families as a generator does (the manifest's "families"): the axes of
  // merge_state and rms_norm, which allow values no variant here has (head_dim 128 with f16).
  void record_families() {
    auto axis = [](std::string name, std::string kind, std::vector<std::string> allowed) {
      ManifestAxis a;
      a.name = std::move(name);
      a.kind = std::move(kind);
      a.allowed = std::move(allowed);
      return a;
    };
    manifest.families = {{"merge_state", {axis("dtype", "dtype", {"f16", "bf16"}), axis("head_dim", "int", {"64", "128", "256"})}},
                         {"rms_norm", {axis("dtype", "dtype", {"f16", "bf16"}), axis("hidden", "int", {"4096"})}}};
    write();
  }

  std::filesystem::path manifest_path() const { return dir / "manifest.json"; }
  std::filesystem::path file(const std::string& uri) const { return dir / ("kernels/" + uri + ".fatbin"); }

  void write() const { write_file_atomic(manifest_path(), manifest.dump()); }
  nlohmann::ordered_json json() const { return manifest_to_json(manifest); }
  void write(const nlohmann::ordered_json& j) const { write_text(j.dump(2)); }
  void write_text(const std::string& text) const {
    std::ofstream(manifest_path(), std::ios::binary | std::ios::trunc) << text;
  }
};

}  // namespace aotinfer::test
