#include "build.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unistd.h>

#include "aotinfer/error.hpp"
#include "aotinfer/fatbin.hpp"
#include "aotinfer/files.hpp"
#include "aotinfer/sha256.hpp"

namespace aotinfer::gen {

namespace fs = std::filesystem;

namespace {

constexpr const char* kOutputsList = ".aotinfer-outputs";

const FamilySchema& family_of(const std::vector<FamilySchema>& families, const std::string& name) {
  for (const auto& f : families)
    if (f.name == name) return f;
  throw std::logic_error("no schema for family " + name);
}

std::set<std::string> read_outputs(const fs::path& out_dir) {
  fs::path list = out_dir / kOutputsList;
  if (!fs::exists(list)) return {};
  auto j = nlohmann::json::parse(read_file(list), nullptr, false);
  if (!j.is_array()) throw Error(ErrorCode::io_error, list.string() + " is damaged; delete " + out_dir.string() + " and generate again");
  return j.get<std::set<std::string>>();
}

// A path from the outputs list is only ever a plain relative path inside out_dir.
bool is_inside(const std::string& rel) {
  fs::path p(rel);
  return !rel.empty() && p.is_relative() && std::none_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".."; });
}

}  // namespace

GenerateResult generate_package(const Spec& spec, const std::vector<FamilySchema>& families, const fs::path& out_dir,
                                const NinjaOptions& ninja) {
  GenerateResult result;
  result.plan = package_plan(spec, families);

  // Everything this run writes, and everything its build will write.
  std::vector<std::pair<std::string, std::string>> files;  // relative path, content
  for (const auto& v : result.plan.variants)
    files.emplace_back("src/" + v.key.uri() + ".cu", variant_source(family_of(families, v.key.family), v.key));
  files.emplace_back("build.ninja", build_ninja(result.plan, ninja));
  files.emplace_back("variants.json", result.plan.dump());

  std::set<std::string> outputs;
  for (const auto& [rel, _] : files) outputs.insert(rel);
  for (const auto& v : result.plan.variants) {
    outputs.insert("package/" + v.file);
    outputs.insert("package/" + v.file + ".d");
  }
  outputs.insert("package/manifest.json");

  // Stale outputs first: a variant that left the spec must not linger in the package.
  for (const auto& rel : read_outputs(out_dir)) {
    if (outputs.count(rel) || !is_inside(rel)) continue;
    std::error_code ec;
    if (fs::remove(out_dir / rel, ec)) ++result.removed;
  }
  for (const auto& [rel, content] : files) {
    if (write_if_different(out_dir / rel, content)) ++result.written;
    else ++result.unchanged;
  }
  nlohmann::json list(outputs);
  write_if_different(out_dir / kOutputsList, list.dump(1) + "\n");
  return result;
}

Manifest seal_package(const fs::path& out_dir) {
  fs::path plan_path = out_dir / "variants.json";
  Manifest m = Manifest::load(plan_path);
  for (auto& v : m.variants) {
    fs::path file = out_dir / "package" / v.file;
    std::string bytes = read_file(file);
    v.size = bytes.size();
    v.sha256 = sha256_hex(bytes);
    try {
      v.archs = fatbin_sass_archs(bytes);
    } catch (const Error& e) {
      throw Error(ErrorCode::corrupt_package, file.string() + ": " + e.what());
    }
    if (v.archs != m.archs)
      throw Error(ErrorCode::corrupt_package, file.string() + " holds code for [" + nlohmann::json(v.archs).dump() +
                                                  "] but the spec asks for " + nlohmann::json(m.archs).dump());
  }
  write_if_different(out_dir / "package" / "manifest.json", m.dump());
  return m;
}

int default_jobs() {
  long cores = std::max(1u, std::thread::hardware_concurrency());
  long available_kib = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    long value = 0;
    std::string unit;
    meminfo >> value >> unit;
    if (key == "MemAvailable:") available_kib = value;
  }
  constexpr long kPerJobKib = 1536L * 1024;  // an nvcc of a large attention kernel, several archs
  long by_memory = available_kib > 0 ? std::max(1L, available_kib / kPerJobKib) : cores;
  return int(std::min(cores, by_memory));
}

int run_ninja(const fs::path& out_dir, int jobs) {
  // NINJA_STATUS gives a progress line with done/total and elapsed seconds.
  std::string command = "NINJA_STATUS='[%f/%t %es] ' ninja -C '" + out_dir.string() + "' -j " + std::to_string(jobs);
  int status = std::system(command.c_str());
  if (status == -1) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace aotinfer::gen
