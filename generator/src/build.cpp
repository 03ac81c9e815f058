#include "build.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
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
                                const NinjaOptions& ninja, const std::vector<std::pair<std::string, std::string>>& extra_files) {
  GenerateResult result;
  result.plan = package_plan(spec, families);

  // Everything this run writes, and everything its build will write.
  std::vector<std::pair<std::string, std::string>> files;  // relative path, content
  for (const auto& v : result.plan.variants)
    files.emplace_back("src/" + v.key.uri() + ".cu", variant_source(family_of(families, v.key.family), v.key));
  files.emplace_back("build.ninja", build_ninja(result.plan, ninja));
  files.emplace_back("nvcc-flags.txt", nvcc_flags(result.plan) + "\n");
  files.emplace_back("variants.json", result.plan.dump());
  files.insert(files.end(), extra_files.begin(), extra_files.end());

  std::set<std::string> outputs;
  for (const auto& [rel, _] : files) outputs.insert(rel);
  for (const auto& v : result.plan.variants) {
    outputs.insert("package/" + v.file);
    outputs.insert("package/" + v.file + ".d");
  }
  outputs.insert("package/manifest.json");
  outputs.insert("build-report.json");

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

namespace {

// Compile seconds of each output, from ninja's log (format 5: start, end, mtime, path, hash;
// the last line of a path wins).
std::map<std::string, double> ninja_seconds(const fs::path& out_dir) {
  std::map<std::string, double> seconds;
  std::ifstream log(out_dir / ".ninja_log");
  for (std::string line; std::getline(log, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    long start = 0, end = 0, mtime = 0;
    std::string path;
    if (fields >> start >> end >> mtime >> path) seconds[path] = (end - start) / 1000.0;
  }
  return seconds;
}

}  // namespace

void write_build_report(const fs::path& out_dir, const Manifest& m) {
  const auto seconds = ninja_seconds(out_dir);
  struct Row {
    std::string uri;
    double seconds;
    std::uint64_t bytes;
  };
  std::vector<Row> rows;
  double total_seconds = 0;
  std::uint64_t total_bytes = 0;
  for (const auto& v : m.variants) {
    auto it = seconds.find("package/" + v.file);
    rows.push_back({v.key.uri(), it == seconds.end() ? 0.0 : it->second, v.size});
    total_seconds += rows.back().seconds;
    total_bytes += v.size;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  nlohmann::ordered_json j = {{"package", m.package_name},
                              {"archs", m.archs},
                              {"variants", rows.size()},
                              {"compile_seconds", total_seconds},
                              {"bytes", total_bytes},
                              {"largest_first", nlohmann::ordered_json::array()}};
  for (const auto& r : rows)
    j["largest_first"].push_back({{"uri", r.uri}, {"compile_seconds", r.seconds}, {"bytes", r.bytes}});
  write_file_atomic(out_dir / "build-report.json", j.dump(2) + "\n");
  std::printf("aotinfer-gen: build report %s: %zu variants, %.1f s of compiles, %.2f MiB", (out_dir / "build-report.json").c_str(),
              rows.size(), total_seconds, double(total_bytes) / (1 << 20));
  if (!rows.empty()) std::printf("; slowest %s (%.1f s)", rows.front().uri.c_str(), rows.front().seconds);
  std::printf("\n");
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
  write_build_report(out_dir, m);
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
  // ninja prints "[done/total elapsed] ..." per step; an ETA from the rate so far is added.
  std::string command = "NINJA_STATUS='[%f/%t %es] ' ninja -C '" + out_dir.string() + "' -j " + std::to_string(jobs) + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return 127;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) {
    std::string line = buffer;
    int done = 0, total = 0;
    double elapsed = 0;
    if (std::sscanf(line.c_str(), "[%d/%d %lfs]", &done, &total, &elapsed) == 3 && done > 0 && done < total) {
      const auto close = line.find(']');
      const double eta = elapsed / done * (total - done);
      char note[32];
      std::snprintf(note, sizeof note, " ETA %.0fs", eta);
      line.insert(close, note);
    }
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  }
  const int status = ::pclose(pipe);
  if (status == -1) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace aotinfer::gen
