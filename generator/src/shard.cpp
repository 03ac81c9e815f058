#include "shard.hpp"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>

#include "aotinfer/error.hpp"
#include "aotinfer/files.hpp"
#include "build.hpp"

namespace aotinfer::gen {

namespace fs = std::filesystem;

Shard Shard::parse(const std::string& text) {
  Shard s;
  char slash = 0;
  std::size_t used = 0;
  try {
    s.index = std::stoi(text, &used);
    slash = used < text.size() ? text[used] : 0;
    s.count = std::stoi(text.substr(used + 1));
  } catch (const std::exception&) {
    slash = 0;
  }
  if (slash != '/' || s.count < 1 || s.index < 1 || s.index > s.count)
    throw std::invalid_argument("--shard takes I/N with 1 <= I <= N, e.g. 2/5; got '" + text + "'");
  return s;
}

double estimated_compile_cost(const VariantKey& key) {
  double cost = key.family == "batch_decode" ? 4.0 : key.family == "merge_state" || key.family == "append_paged_kv" ? 1.0 : 3.0;
  if (const std::string* d = key.find("head_dim")) cost *= std::max(0.5, std::stod(*d) / 128.0);
  if (const std::string* p = key.find("pos_encoding"); p && *p == "rope_llama") cost *= 1.5;
  return cost;
}

std::vector<VariantKey> shard_variants(const std::vector<VariantKey>& variants, Shard s) {
  std::vector<std::size_t> order(variants.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> cost(variants.size());
  std::vector<std::string> uri(variants.size());
  for (std::size_t i = 0; i < variants.size(); ++i) {
    cost[i] = estimated_compile_cost(variants[i]);
    uri[i] = variants[i].uri();
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return cost[a] != cost[b] ? cost[a] > cost[b] : uri[a] < uri[b];
  });
  std::vector<double> load(s.count, 0.0);
  std::vector<bool> mine(variants.size(), false);
  for (std::size_t i : order) {
    const int least = int(std::min_element(load.begin(), load.end()) - load.begin());  // first of equals
    load[least] += cost[i];
    mine[i] = least == s.index - 1;
  }
  std::vector<VariantKey> out;
  for (std::size_t i = 0; i < variants.size(); ++i)
    if (mine[i]) out.push_back(variants[i]);
  return out;
}

std::string shard_info_json(const ShardInfo& info) {
  nlohmann::ordered_json j = {{"shard", info.shard.index},
                              {"of", info.shard.count},
                              {"spec_sha256", info.spec_sha256},
                              {"generator", info.generator},
                              {"variants", info.all_uris}};
  return j.dump(2) + "\n";
}

namespace {

[[noreturn]] void refuse(const std::string& why) { throw Error(ErrorCode::invalid_argument, "merge: " + why); }

ShardInfo read_shard_info(const fs::path& dir) {
  const fs::path file = dir / "shard.json";
  if (!fs::exists(file)) refuse(dir.string() + " is not a shard build (no shard.json; build it with --shard I/N)");
  auto j = nlohmann::json::parse(read_file(file), nullptr, false);
  if (j.is_discarded() || !j.is_object()) refuse(file.string() + " is not valid JSON");
  try {
    return ShardInfo{{j.at("shard").get<int>(), j.at("of").get<int>()},
                     j.at("spec_sha256").get<std::string>(),
                     j.at("generator").get<std::string>(),
                     j.at("variants").get<std::vector<std::string>>()};
  } catch (const nlohmann::json::exception& e) {
    refuse(file.string() + ": " + e.what());
  }
}

}  // namespace

Manifest merge_shards(const std::vector<fs::path>& shard_dirs, const fs::path& out_dir) {
  if (shard_dirs.empty()) refuse("no shard folders given");
  // No build writes the output or a shard while they are merged (a missing shard folder is
  // refused below, not created).
  lock_output_dir(out_dir);
  for (const auto& dir : shard_dirs)
    if (fs::is_directory(dir)) lock_output_dir(dir);
  const ShardInfo first = read_shard_info(shard_dirs.front());
  std::map<int, fs::path> seen;
  std::map<std::string, std::pair<ManifestVariant, fs::path>> found;  // uri -> variant, its package dir
  Manifest merged;
  for (const auto& dir : shard_dirs) {
    const ShardInfo info = read_shard_info(dir);
    if (info.spec_sha256 != first.spec_sha256 || info.all_uris != first.all_uris)
      refuse(dir.string() + " was built from a different spec than " + shard_dirs.front().string());
    if (info.generator != first.generator)
      refuse(dir.string() + " was built by " + info.generator + ", " + shard_dirs.front().string() + " by " + first.generator);
    if (info.shard.count != first.shard.count)
      refuse(dir.string() + " is a shard of " + std::to_string(info.shard.count) + ", not of " + std::to_string(first.shard.count));
    if (auto [it, fresh] = seen.emplace(info.shard.index, dir); !fresh)
      refuse("shard " + std::to_string(info.shard.index) + " given twice (" + it->second.string() + ", " + dir.string() + ")");
    const fs::path package = dir / "package";
    Manifest m = Manifest::load(package / "manifest.json");
    if (m.spec_sha256 != info.spec_sha256) refuse(package.string() + " does not match its shard.json (rebuild the shard)");
    merged = m;  // package name, version, archs, spec: equal across shards by the checks above
    for (auto& v : m.variants) {
      const std::string uri = v.key.uri();
      if (found.count(uri)) refuse(uri + " is in two shards");
      found.emplace(uri, std::make_pair(std::move(v), package));
    }
  }
  if (int(seen.size()) != first.shard.count) {
    std::string missing;
    for (int i = 1; i <= first.shard.count; ++i)
      if (!seen.count(i)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    refuse("shards missing: " + missing + " of " + std::to_string(first.shard.count));
  }

  merged.variants.clear();
  for (const auto& uri : first.all_uris) {
    auto it = found.find(uri);
    if (it == found.end()) refuse(uri + " is in no shard's package (was every shard built?)");
    const auto& [variant, package] = it->second;
    write_if_different(out_dir / "package" / variant.file, read_file(package / variant.file));
    merged.variants.push_back(variant);
  }
  if (found.size() != first.all_uris.size()) refuse("the shards hold variants the spec does not list");
  write_if_different(out_dir / "package" / "manifest.json", merged.dump());
  return merged;
}

}  // namespace aotinfer::gen
